//! A reference for end-to-end tests: random gift, score and play events
//! over a fixed set of boards, with the boards they must produce computed
//! the plain way (chrono's UTC date and ISO week per event), and the check
//! that boards equal them: it waits for a match with the consumer group's
//! committed offsets at the end of every partition, then keeps comparing
//! through a quiet spell, so a count that lands after the first match fails.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::{GroupOffsets, GroupWatch, QUIET, Setup, Zsets};

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

/// Reads every expected board from Redis (`tag/view` → key), once. To wait
/// for boards, use [`wait_boards`]: a single read proves nothing lasting.
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

/// What [`check_boards`] verified.
#[derive(Debug, Clone)]
pub struct Verified {
    /// Board instances compared.
    pub boards: usize,
    /// Messages in the topic when verified (all partitions).
    pub messages: i64,
    pub partitions: usize,
    /// How long the boards then stayed exact.
    pub quiet: Duration,
}

/// Where a check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// The boards never equalled the reference with the offsets at the end.
    Reaching,
    /// They did, then something changed during the quiet spell.
    Quiet,
}

/// Why boards were not verified, with what differed.
#[derive(Debug, Clone)]
pub struct Mismatch {
    pub stage: Stage,
    /// One line per differing board: which members want what and have what.
    pub diff: Vec<String>,
    /// The group's offsets at the last look (or why Kafka could not say).
    pub offsets: String,
    /// How long after the start (or after the match, when `Quiet`).
    pub after: Duration,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.stage {
            Stage::Reaching => write!(
                f,
                "boards did not equal the reference with committed offsets at the end within {:?}",
                self.after
            )?,
            Stage::Quiet => write!(
                f,
                "boards equalled the reference with committed offsets at the end, then changed {:?} into the quiet spell",
                self.after
            )?,
        }
        write!(f, "; offsets {}", self.offsets)?;
        for d in &self.diff {
            write!(f, "\n  {d}")?;
        }
        Ok(())
    }
}

/// The differences between `want` and `got`, one line per board, the first
/// five members of each.
pub fn diff_boards(want: &Boards, got: &Boards) -> Vec<String> {
    let empty = BTreeMap::new();
    let mut out = Vec::new();
    for (k, v) in want {
        let g = got.get(k).unwrap_or(&empty);
        if g == v {
            continue;
        }
        let wrong = v
            .iter()
            .filter(|(m, s)| g.get(*m) != Some(s))
            .map(|(m, s)| format!("{m}: want {s}, got {:?}", g.get(m)));
        let extra = g
            .iter()
            .filter(|(m, _)| !v.contains_key(*m))
            .map(|(m, s)| format!("{m}: want none, got {s}"));
        let shown: Vec<String> = wrong.chain(extra).take(5).collect();
        out.push(format!(
            "board {k} differs ({} vs {} members): {shown:?}",
            v.len(),
            g.len()
        ));
    }
    out
}

/// Waits until every board in `expect` equals it exactly *and* the
/// consumer group has committed the end of every partition of the topic
/// (and the positions rankflow recorded in Redis add up to that end);
/// then keeps comparing for [`QUIET`] while nothing is produced, so a
/// double count that lands after the first match still fails. `matched`, if
/// given, is told the moment the boards first matched (for tests of this
/// check itself).
pub async fn check_boards(
    redis: &impl Zsets,
    setup: &Setup,
    expect: &Boards,
    timeout: Duration,
    matched: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Verified, Mismatch> {
    let watch = GroupWatch::new(&setup.brokers, &setup.group, &setup.topic);
    let start = Instant::now();
    let matched_at = loop {
        let look = Look::take(&watch, redis, setup, expect).await;
        if let Some(o) = look.exact(expect) {
            break o.clone();
        }
        if start.elapsed() > timeout {
            return Err(look.mismatch(Stage::Reaching, expect, timeout, None));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if let Some(tx) = matched {
        let _ = tx.send(());
    }
    let since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let look = Look::take(&watch, redis, setup, expect).await;
        let same_log = look.exact(expect).map(GroupOffsets::ends) == Some(matched_at.ends());
        if !same_log {
            return Err(look.mismatch(Stage::Quiet, expect, since.elapsed(), Some(&matched_at)));
        }
        if since.elapsed() >= QUIET {
            return Ok(Verified {
                boards: expect.len(),
                messages: matched_at.messages(),
                partitions: matched_at.partitions.len(),
                quiet: since.elapsed(),
            });
        }
    }
}

/// One look at Kafka and Redis: the group's offsets, the partition
/// positions Redis recorded, and the boards.
struct Look {
    offsets: Result<GroupOffsets, String>,
    positions: i64,
    boards: Boards,
}

impl Look {
    async fn take(watch: &GroupWatch, redis: &impl Zsets, setup: &Setup, expect: &Boards) -> Look {
        // Offsets first: what is read from Redis after them already holds
        // whatever the committed offsets claim.
        let offsets = watch.read().await;
        let positions = redis.positions_sum(&setup.prefix).await;
        let boards = read_boards(redis, setup, expect).await;
        Look {
            offsets,
            positions,
            boards,
        }
    }

    /// The offsets, if the boards equal `expect`, the group committed the
    /// end of every partition and Redis's positions are at the end too.
    fn exact(&self, expect: &Boards) -> Option<&GroupOffsets> {
        let o = self.offsets.as_ref().ok()?;
        (o.at_end() && self.positions == o.messages() && &self.boards == expect).then_some(o)
    }

    fn mismatch(
        &self,
        stage: Stage,
        expect: &Boards,
        after: Duration,
        matched_at: Option<&GroupOffsets>,
    ) -> Mismatch {
        let mut offsets = match &self.offsets {
            Ok(o) => o.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        offsets.push_str(&format!("; Redis positions sum to {}", self.positions));
        if let Some(m) = matched_at {
            offsets.push_str(&format!(" (at the match: {m})"));
        }
        Mismatch {
            stage,
            diff: diff_boards(expect, &self.boards),
            offsets,
            after,
        }
    }
}

/// The one way tests wait for boards: [`check_boards`], panicking with the
/// differences if it fails, printing what it verified if not.
pub async fn wait_boards(
    redis: &impl Zsets,
    setup: &Setup,
    expect: &Boards,
    timeout: Duration,
) -> Verified {
    wait_boards_or_show(redis, setup, expect, timeout, String::new).await
}

/// [`wait_boards`], adding `show()` (the consumers' logs, say) to the
/// panic message if the boards are not verified.
pub async fn wait_boards_or_show(
    redis: &impl Zsets,
    setup: &Setup,
    expect: &Boards,
    timeout: Duration,
    show: impl FnOnce() -> String,
) -> Verified {
    match check_boards(redis, setup, expect, timeout, None).await {
        Ok(v) => {
            println!(
                "verified: {} board instances exact; still exact after {:.1} s quiet with committed offsets and Redis positions at the end ({} events in {} partitions)",
                v.boards,
                v.quiet.as_secs_f64(),
                v.messages,
                v.partitions
            );
            v
        }
        Err(m) => panic!("{m}\n{}", show()),
    }
}

pub fn now_ms() -> i64 {
    rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock)
}
