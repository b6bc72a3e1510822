//! Honest counts, end to end through tansu and Redis: `rankflow_events_total`
//! counts every event exactly once across the consumers of a group, even
//! when a partition is revoked while its events sit in an unflushed batch,
//! and an event whose window bucket left the window between decoding and
//! applying is counted `late`, not `applied`, and is on no board.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::reference::now_ms;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use serde_json::json;

const MIN: i64 = 60_000;

const GIFT_BOARD: &str = r#"
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
periods = ["all"]
"#;

/// `assigned_partitions` of a rankflow's `/healthz`.
/// (0 while it does not answer yet).
async fn assigned(url: &str) -> u64 {
    let text = get_text(url).await.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|body| body["assigned_partitions"].as_u64())
        .unwrap_or(0)
}

async fn metric(url: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_sum(&get_text(url).await.unwrap_or_default(), name, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_while_a_batch_waits_counts_every_event_once_across_the_group() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, GIFT_BOARD);
    // A batch that waits long: the revoke comes while it is unflushed.
    setup.batch = (100_000, 20_000);
    broker.create_topic(&setup.topic, 4).await;
    let a = Process::start(&setup);
    wait_for(
        Duration::from_secs(60),
        "A holds all 4 partitions",
        || async { (assigned(&a.url("/healthz")).await == 4).then_some(()) },
    )
    .await;
    let total = 400usize;
    let messages: Vec<(i32, Vec<u8>)> = (0..total)
        .map(|i| {
            let e = json!({"type": "gift", "event_id": format!("g{i}"), "ts": now_ms(),
                "sender_id": format!("u{}", i % 10), "receiver_id": "r", "gift_id": "rose",
                "count": 1, "value": 1});
            ((i % 4) as i32, e.to_string().into_bytes())
        })
        .collect();
    send_all(&broker.producer(), &setup.topic, &messages).await;
    // Let A take them into its batch (a fetch is well under a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = Process::start(&setup);
    let a_metrics = a.url("/metrics");
    wait_for(
        Duration::from_secs(60),
        "A's partitions revoked",
        || async {
            let revokes = metric(
                &a_metrics,
                "rankflow_rebalances_total",
                &[("kind", "revoke")],
            )
            .await;
            (revokes >= 1.0).then_some(())
        },
    )
    .await;
    let flushed_before = metric(&a_metrics, "rankflow_batch_events_count", &[]).await;
    assert_eq!(
        flushed_before, 0.0,
        "the revoke came after A flushed: the test did not reach its case"
    );
    println!(
        "injected: {total} events held in A's unflushed batch when B joined and A was revoked"
    );
    wait_for(Duration::from_secs(120), "every event applied", || async {
        (redis.positions_sum(&setup.prefix).await == total as i64).then_some(())
    })
    .await;
    let applied = || async {
        let mut sum = 0.0;
        for p in [&a, &b] {
            sum += events_counted(&p.url("/metrics"), &setup.topic, "applied").await;
        }
        sum
    };
    wait_for(Duration::from_secs(60), "the counts reported", || async {
        (applied().await >= total as f64).then_some(())
    })
    .await;
    // A quiet spell: a count arriving late (twice) would show now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let per: Vec<f64> = [
        events_counted(&a_metrics, &setup.topic, "applied").await,
        events_counted(&b.url("/metrics"), &setup.topic, "applied").await,
    ]
    .to_vec();
    assert_eq!(
        per.iter().sum::<f64>(),
        total as f64,
        "applied over A and B: {per:?}"
    );
    let board: f64 = redis.zset(&setup.key("fans", "all")).await.values().sum();
    assert_eq!(board, total as f64, "the board holds each event once");
    println!("verified: applied counted {per:?} by A and B = {total}, board total {board}");
}

const WINDOW_BOARDS: &str = r#"
[[board]]
name = "recent"
event = "gift"
member = "sender_id"
score = "count"
windows = ["10m/1m"]

[[board]]
name = "mixed"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
windows = ["10m/1m"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_bucket_leaves_the_window_before_apply_is_counted_late() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, WINDOW_BOARDS);
    // Decoded at once, applied 8 s later: the clock moves in between.
    setup.batch = (1000, 8000);
    broker.create_topic(&setup.topic, 2).await;
    // Half a minute past a minute boundary, so no event sits on a bucket edge.
    let now = (now_ms() / MIN) * MIN + 30_000;
    let clock = ManualClock::new(now);
    let shared: SharedClock = Arc::new(clock.clone());
    let app = InProcess::start(&setup, shared).await;
    wait_for(
        Duration::from_secs(60),
        "both partitions assigned",
        || async { (assigned(&app.url("/healthz")).await == 2).then_some(()) },
    )
    .await;
    // Buckets end 8.5 min ago (in the 10 min window now, out of it once the
    // clock moved 5 min) and 30 s ago (in it either way).
    let old = now - 9 * MIN - 10_000;
    let events = [
        json!({"type": "gift", "event_id": "g-old", "ts": old, "sender_id": "early",
               "receiver_id": "r", "gift_id": "rose", "count": 1, "value": 1}),
        json!({"type": "gift", "event_id": "g-new", "ts": now - MIN, "sender_id": "fresh",
               "receiver_id": "r", "gift_id": "rose", "count": 2, "value": 1}),
        // Late on its window, applied on its all-time view: applied.
        json!({"type": "score", "event_id": "s-old", "ts": old, "user_id": "player",
               "game_id": "g", "points": 7}),
    ];
    send_round_robin(&broker.producer(), &setup.topic, &events, 2).await;
    // Taken into the batch within a fetch; then five minutes pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    clock.advance(5 * MIN);
    println!(
        "injected: 3 events decoded at {now}, clock moved 5 min before their batch was applied"
    );
    let metrics = app.url("/metrics");
    let counted = |kind: &'static str, outcome: &'static str| {
        let metrics = metrics.clone();
        let topic = setup.topic.clone();
        async move {
            let text = get_text(&metrics).await.unwrap_or_default();
            metric_sum(
                &text,
                "rankflow_events_total",
                &[("topic", &topic), ("type", kind), ("outcome", outcome)],
            )
        }
    };
    wait_for(Duration::from_secs(60), "the batch counted", || async {
        let n = counted("gift", "applied").await
            + counted("gift", "late").await
            + counted("score", "applied").await
            + counted("score", "late").await;
        (n >= 3.0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(counted("gift", "late").await, 1.0, "the old gift is late");
    assert_eq!(counted("gift", "applied").await, 1.0, "the fresh gift");
    assert_eq!(
        counted("score", "applied").await,
        1.0,
        "late on one view, applied on another"
    );
    assert_eq!(counted("score", "late").await, 0.0);
    let recent = redis.zset(&setup.key("recent", "win:10m")).await;
    assert_eq!(
        recent.keys().cloned().collect::<Vec<_>>(),
        vec!["fresh".to_string()],
        "the late gift is on no board"
    );
    let all = redis.zset(&setup.key("mixed", "all")).await;
    assert_eq!(all.get("player"), Some(&7.0));
    assert!(redis.zset(&setup.key("mixed", "win:10m")).await.is_empty());
    println!("verified: gift late 1, applied 1; score applied 1 (window late, period taken)");
    app.stop().await;
}
