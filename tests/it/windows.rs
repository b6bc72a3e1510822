//! Windows, aggregates and tie-breaks end to end through tansu and Redis,
//! with the clock moved instead of slept: a 3h/1m window that slides with no
//! new events (trim-on-read and the background trimmer), a rolling 7d/1d
//! board with local-midnight buckets, and one board per aggregate with its
//! tie-break, read through the HTTP API.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use serde_json::json;

const MIN: i64 = 60_000;
const DAY: i64 = 86_400_000;

const BOARDS: &str = r#"
[[board]]
name = "fans3h"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
windows = ["3h/1m"]
tie_break = "earliest"

[[board]]
name = "heat7d"
event = "play"
member = "game_id"
score = "duration_ms / 1000"
windows = ["7d/1d"]
timezone = "America/New_York"

[[board]]
name = "best"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
aggregate = "max"
tie_break = "earliest"

[[board]]
name = "worst"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
aggregate = "min"
tie_break = "latest"

[[board]]
name = "latest_score"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
aggregate = "last"

[[board]]
name = "total"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
tie_break = "latest"
"#;

/// (member, score) in rank order, from an API list; ranks must be
/// consecutive from the first entry's.
fn rows(list: &serde_json::Value) -> Vec<(String, i64)> {
    let entries = list["entries"].as_array().expect("entries");
    let first = entries
        .first()
        .map_or(1, |e| e["rank"].as_u64().unwrap_or(0) as usize);
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["rank"], first + i, "{list}");
            (
                e["member"].as_str().expect("member").to_string(),
                e["score"].as_i64().expect("integer score"),
            )
        })
        .collect()
}

fn owned(v: &[(&str, i64)]) -> Vec<(String, i64)> {
    v.iter().map(|(m, s)| (m.to_string(), *s)).collect()
}

async fn board(app: &InProcess, path: &str) -> Vec<(String, i64)> {
    let (status, body) = get_json(&app.url(path)).await;
    assert_eq!(status, 200, "{path}: {body}");
    rows(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_slide_with_the_clock_and_aggregates_keep_their_tie_breaks() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, BOARDS);
    broker.create_topic(&setup.topic, 2).await;
    // Half a minute past a minute boundary, so no event sits on a bucket edge.
    let real_now = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    let now = (real_now / MIN) * MIN + 30_000;
    let gift = |i: usize, sender: &str, count: i64, ago: i64| {
        json!({"type": "gift", "event_id": format!("g{i}"), "ts": now - ago, "sender_id": sender,
               "receiver_id": "s1", "gift_id": "rose", "count": count, "value": 1})
    };
    let play = |i: usize, game: &str, secs: i64, ago: i64| {
        json!({"type": "play", "event_id": format!("p{i}"), "ts": now - ago, "user_id": "u",
               "game_id": game, "duration_ms": secs * 1000})
    };
    let score = |i: usize, user: &str, points: i64, ago_min: i64| {
        json!({"type": "score", "event_id": format!("s{i}"), "ts": now - ago_min * MIN,
               "user_id": user, "game_id": "g", "points": points})
    };
    let events = vec![
        gift(0, "u1", 5, 170 * MIN),
        gift(1, "u2", 3, 100 * MIN),
        gift(2, "u3", 3, 10 * MIN),
        gift(3, "u1", 1, 5 * MIN),
        play(0, "g1", 70, 6 * DAY + 21 * 3_600_000), // 6.9 days ago
        play(1, "g2", 40, DAY / 2),
        // Score events at minutes ago: 60 (t0) .. 1 (t7).
        score(0, "u2", 9, 60),
        score(1, "u1", 5, 50),
        score(2, "u1", 9, 40),
        score(3, "u1", 9, 30),
        score(4, "u1", 2, 20),
        score(5, "u3", 1, 15),
        score(6, "u4", 2, 10),
        score(7, "u5", 25, 1),
    ];
    send_round_robin(&broker.producer(), &setup.topic, &events, 2).await;
    let clock = ManualClock::new(now);
    let shared: SharedClock = Arc::new(clock.clone());
    let app = InProcess::start(&setup, shared).await;
    let metrics = app.url("/metrics");
    // Applied once each, committed, and still so after a quiet spell: the
    // boards read below are final.
    let watch = GroupWatch::new(&setup.brokers, &setup.group, &setup.topic);
    wait_steady(
        Duration::from_secs(60),
        QUIET,
        "all events applied once, offsets committed to the end",
        || async {
            let applied = events_counted(&metrics, &setup.topic, "applied").await;
            let committed = watch.read().await.is_ok_and(|o| o.at_end());
            (applied == events.len() as f64 && committed).then_some(applied)
        },
    )
    .await;
    println!("injected: {} events; clock at {now}", events.len());

    // Aggregates and tie-breaks.
    assert_eq!(
        board(&app, "/v1/boards/best/all/top").await,
        owned(&[("u5", 25), ("u2", 9), ("u1", 9), ("u4", 2), ("u3", 1)]),
        "max: u2 reached 9 before u1 (earliest wins)"
    );
    assert_eq!(
        board(&app, "/v1/boards/worst/all/top").await,
        owned(&[("u3", 1), ("u4", 2), ("u1", 2), ("u2", 9), ("u5", 25)]),
        "min ranks ascending; u4 reached 2 after u1 (latest wins)"
    );
    assert_eq!(
        board(&app, "/v1/boards/latest_score/all/top").await,
        owned(&[("u5", 25), ("u2", 9), ("u4", 2), ("u1", 2), ("u3", 1)]),
        "last keeps the newest event's value"
    );
    assert_eq!(
        board(&app, "/v1/boards/total/all/top").await,
        owned(&[("u5", 25), ("u1", 25), ("u2", 9), ("u4", 2), ("u3", 1)]),
        "sum; u5 reached 25 after u1 (latest wins)"
    );
    let (status, around) = get_json(&app.url("/v1/boards/total/all/around/u2?radius=1")).await;
    assert_eq!(status, 200);
    assert_eq!(
        rows(&around)[..],
        owned(&[("u1", 25), ("u2", 9), ("u4", 2)])[..]
    );
    assert_eq!(around["entries"][0]["rank"], 2);
    let (status, page) = get_json(&app.url("/v1/boards/total/all/top?offset=2&limit=2")).await;
    assert_eq!(status, 200);
    assert_eq!(page["entries"][0]["rank"], 3);
    assert_eq!(page["total"], 5);

    // The windows at the start.
    let fans = "/v1/boards/fans3h/win:3h/top?scope=s1";
    assert_eq!(
        board(&app, fans).await,
        owned(&[("u1", 6), ("u2", 3), ("u3", 3)])
    );
    assert_eq!(
        board(&app, "/v1/boards/heat7d/win:7d/top").await,
        owned(&[("g1", 70), ("g2", 40)])
    );

    // 75 minutes later, with no new events: u1's 170-minute-old gift left.
    clock.advance(75 * MIN);
    assert_eq!(
        board(&app, fans).await,
        owned(&[("u2", 3), ("u3", 3), ("u1", 1)])
    );
    // 10 more: u2's left too. This time the background trimmer must do it
    // without a read.
    clock.advance(10 * MIN);
    let key = setup.key("fans3h:s1", "win:3h");
    let trimmed = wait_for(Duration::from_secs(15), "the background trim", || async {
        let z = redis.zset(&key).await;
        (z.len() == 2).then_some(z)
    })
    .await;
    assert!(trimmed.keys().all(|m| !m.ends_with("u2")), "{trimmed:?}");
    assert_eq!(board(&app, fans).await, owned(&[("u3", 3), ("u1", 1)]));
    let evicted = metric_sum(
        &get_text(&metrics).await.unwrap_or_default(),
        "rankflow_window_evictions_total",
        &[("board", "fans3h")],
    );
    assert!(evicted >= 2.0, "evictions counted: {evicted}");

    // A day and a half later the 6.9-day-old play has left the rolling board.
    clock.advance(DAY + DAY / 2);
    assert_eq!(
        board(&app, "/v1/boards/heat7d/win:7d/top").await,
        owned(&[("g2", 40)])
    );
    println!(
        "verified: windows slid by 75 min, 85 min and 1.5 days with no events; 4 aggregates with their tie-breaks"
    );
    app.stop().await;
}

/// The trimmer's registry of window instances (`<prefix>:windows`) is
/// written per new instance, not per batch: a batch whose instances this
/// consumer registered within the last minute sends no registration, and
/// one that brings a new instance registers only that one.
#[tokio::test]
async fn a_batch_with_no_new_window_instance_registers_nothing() {
    use common::direct::Direct;

    let redis = Redis::start();
    let prefix = unique("wr");
    let boards = r#"
[[board]]
name = "w"
event = "score"
member = "user_id"
scope = "game_id"
score = "points"
windows = ["10m/1m"]
"#;
    let t0 = 1_800_000_000_000i64;
    let mut d = Direct::new(&redis.url(), &prefix, boards, t0).await;
    let event = |i: usize, game: &str, at: i64| {
        json!({"type": "score", "event_id": format!("r{i}"), "ts": at - 1000,
               "user_id": format!("u{i}"), "game_id": game, "points": 5})
    };
    let registry = format!("{prefix}:windows");
    d.apply(&[event(1, "g1", t0), event(2, "g2", t0)]).await;
    let first = redis.zset(&registry).await;
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first.values().all(|&at| at == t0 as f64), "{first:?}");
    d.clock.set(t0 + 30_000);
    d.apply(&[event(3, "g1", t0 + 30_000), event(4, "g2", t0 + 30_000)])
        .await;
    assert_eq!(
        redis.zset(&registry).await,
        first,
        "no new instance: nothing registered"
    );
    d.apply(&[event(5, "g3", t0 + 30_000), event(6, "g1", t0 + 30_000)])
        .await;
    let third = redis.zset(&registry).await;
    let new: Vec<f64> = third
        .iter()
        .filter(|(tag, _)| !first.contains_key(*tag))
        .map(|(_, at)| *at)
        .collect();
    assert_eq!(
        new,
        [(t0 + 30_000) as f64],
        "only the new instance: {third:?}"
    );
    assert_eq!(third.len(), 3, "{third:?}");
    println!("registry: 2 instances, unchanged by a batch of the same ones, then 1 more");
}
