//! A reference for end-to-end tests: random gift, score and play events
//! over a fixed set of boards, with the boards they must produce computed
//! the plain way (chrono's UTC date and ISO week per event), and helpers
//! that read those boards back from Redis and wait until they match.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::{Setup, Zsets};

pub type Boards = BTreeMap<String, BTreeMap<String, f64>>;

pub const MIXED_BOARDS: &str = r#"
[[board]]
name = "star_coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["day", "all"]

[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["all"]

[[board]]
name = "flowers"
event = "gift"
filter = 'gift_id == "flower"'
member = "receiver_id"
score = "count"
periods = ["week"]

[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["week"]

[[board]]
name = "heat"
event = "play"
member = "game_id"
score = "duration_ms"
periods = ["day"]
"#;

/// 2026-06-10T12:00:00Z, a Wednesday in 2026-W24.
pub const NOON: i64 = 1_781_092_800_000;

/// Random events of all three types in the two hours before `base`, and
/// the boards they must produce, computed the plain way (chrono's UTC date
/// and ISO week per event).
pub fn mixed_events(
    n: usize,
    seed: u64,
    partitions: i32,
    base: i64,
) -> (Vec<(i32, Vec<u8>)>, Boards) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut expect: Boards = BTreeMap::new();
    let mut add = |key: String, member: String, v: f64| {
        *expect.entry(key).or_default().entry(member).or_insert(0.0) += v;
    };
    for i in 0..n {
        let ts = base - rng.random_range(0..7_200_000i64);
        let p = rng.random_range(0..partitions);
        let t = chrono::DateTime::from_timestamp_millis(ts)
            .expect("ts")
            .date_naive();
        let day = format!("day:{}", t.format("%Y-%m-%d"));
        let iso = chrono::Datelike::iso_week(&t);
        let week = format!("week:{}-W{:02}", iso.year(), iso.week());
        let event = match i % 3 {
            0 => {
                let sender = format!("u{}", rng.random_range(0..50));
                let receiver = format!("s{}", rng.random_range(0..8));
                let gift = ["flower", "rose", "rocket"][rng.random_range(0..3)];
                let count = rng.random_range(1..20i64);
                let value = [0.5, 1.0, 5.0, 100.0][rng.random_range(0..4)];
                add(
                    format!("star_coins/{day}"),
                    receiver.clone(),
                    count as f64 * value,
                );
                add(
                    "star_coins/all".into(),
                    receiver.clone(),
                    count as f64 * value,
                );
                add(format!("fans:{receiver}/all"), sender.clone(), count as f64);
                if gift == "flower" {
                    add(format!("flowers/{week}"), receiver.clone(), count as f64);
                }
                json!({"type": "gift", "event_id": format!("g{i}"), "ts": ts, "sender_id": sender,
                       "receiver_id": receiver, "gift_id": gift, "count": count, "value": value})
            }
            1 => {
                let user = format!("u{}", rng.random_range(0..50));
                let points = rng.random_range(-100..1000i64);
                add(format!("points/{week}"), user.clone(), points as f64);
                json!({"type": "score", "event_id": format!("s{i}"), "ts": ts, "user_id": user,
                       "game_id": "g1", "points": points})
            }
            _ => {
                let game = format!("g{}", rng.random_range(0..5));
                let d = rng.random_range(0..100_000i64);
                add(format!("heat/{day}"), game.clone(), d as f64);
                json!({"type": "play", "event_id": format!("p{i}"), "ts": ts, "user_id": "u1",
                       "game_id": game, "duration_ms": d})
            }
        };
        out.push((p, event.to_string().into_bytes()));
    }
    (out, expect)
}

/// Reads every expected board from Redis (`tag/view` → key).
pub async fn read_boards(redis: &impl Zsets, setup: &Setup, expect: &Boards) -> Boards {
    let mut got = BTreeMap::new();
    for name in expect.keys() {
        let (tag, view) = name.split_once('/').expect("tag/view");
        let tag = match tag.split_once(':') {
            Some((b, scope)) => format!("{b}:{}", rankflow::board::keys::escape_scope(scope)),
            None => tag.to_string(),
        };
        got.insert(name.clone(), redis.zset(&setup.key(&tag, view)).await);
    }
    got
}

pub async fn wait_boards(redis: &impl Zsets, setup: &Setup, expect: &Boards, timeout: Duration) {
    let mut last = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        last = read_boards(redis, setup, expect).await;
        if &last == expect {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (k, v) in expect {
        let g = last.get(k).cloned().unwrap_or_default();
        if &g != v {
            let diff: Vec<_> = v
                .iter()
                .filter(|(m, s)| g.get(*m) != Some(s))
                .take(5)
                .map(|(m, s)| format!("{m}: want {s}, got {:?}", g.get(m)))
                .collect();
            eprintln!(
                "board {k} differs ({} vs {} members): {diff:?}",
                v.len(),
                g.len()
            );
        }
    }
    panic!("boards did not reach the reference within {timeout:?}");
}

pub fn now_ms() -> i64 {
    rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock)
}
