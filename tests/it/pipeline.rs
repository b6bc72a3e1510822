//! End to end through real tansu and redis-server: events of all three
//! types reach the right boards with exact sums; periods split correctly
//! around ISO-week and month boundaries in a non-UTC zone; scoped boards
//! escape their scope values; bad messages are counted and skipped; a
//! consumer killed mid-stream and restarted ends exact; SIGTERM exits 0 fast.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::reference::*;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_three_event_types_reach_their_boards_with_exact_sums() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    broker.create_topic(&setup.topic, 4).await;
    // Redis expires keys by its own clock, so period keys are only kept for
    // event times near the real now.
    let now = now_ms();
    let (messages, expect) = mixed_events(3000, 7, 4, now);
    send_all(&broker.producer(), &setup.topic, &messages).await;
    println!("injected: 3000 events (gift/score/play) over 4 partitions");

    let clock: SharedClock = Arc::new(ManualClock::new(now));
    let app = InProcess::start(&setup, clock).await;
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    println!(
        "verified: {} board instances equal the reference exactly",
        expect.len()
    );

    // Every message counted once, all applied.
    let metrics = app.url("/metrics");
    let applied = wait_steady(Duration::from_secs(10), QUIET, "applied count", || async {
        let n = events_counted(&metrics, &setup.topic, "applied").await;
        (n == 3000.0).then_some(n)
    })
    .await;
    assert_eq!(applied, 3000.0);

    // The docs/metrics.md metrics that apply without faults, with histogram buckets.
    let text = get_text(&metrics).await.expect("metrics");
    for name in [
        "rankflow_events_total{",
        "rankflow_board_updates_total{board=\"star_coins\"}",
        "rankflow_batch_events_bucket{le=",
        "rankflow_batch_flush_seconds_bucket{le=",
        "rankflow_event_lag_seconds_bucket{le=",
        "rankflow_rebalances_total{kind=\"assign\"}",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}:\n{text}");
    }
    let lag = wait_for(
        Duration::from_secs(15),
        "consumer lag of 0 on every partition",
        || async {
            let t = get_text(&metrics).await.unwrap_or_default();
            let series: Vec<&str> = t
                .lines()
                .filter(|l| l.starts_with("rankflow_consumer_lag{") && l.contains(&setup.topic))
                .collect();
            (series.len() == 4 && series.iter().all(|l| l.ends_with(" 0"))).then_some(series.len())
        },
    )
    .await;
    assert_eq!(lag, 4);
    let (status, health) = get_json(&app.url("/healthz")).await;
    assert_eq!(status, 200, "{health}");
    let (status, list) = get_json(&app.url("/v1/boards")).await;
    assert_eq!(status, 200);
    let boards = list["boards"].as_array().expect("boards");
    assert_eq!(boards.len(), 5);
    assert_eq!(boards[0]["views"][0]["view"], "day");
    assert!(
        boards[0]["views"][0]["next_reset"]
            .as_str()
            .is_some_and(|r| r.ends_with("+00:00"))
    );

    // The read API ranks by true score.
    let (status, body) = get_json(&app.url("/v1/boards/star_coins/all/top?limit=100")).await;
    assert_eq!(status, 200, "{body}");
    let entries = body["entries"].as_array().expect("entries");
    let want = &expect["star_coins/all"];
    assert_eq!(body["total"], want.len());
    let mut ranked: Vec<(&String, &f64)> = want.iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(a.1).then(b.0.cmp(a.0)));
    for (i, (e, (m, s))) in entries.iter().zip(ranked).enumerate() {
        assert_eq!(e["rank"], i + 1);
        assert_eq!(e["member"], m.as_str());
        assert_eq!(e["score"].as_f64(), Some(*s));
    }
    let first = entries[0]["member"].as_str().expect("member");
    let (status, one) =
        get_json(&app.url(&format!("/v1/boards/star_coins/all/members/{first}"))).await;
    assert_eq!((status, one["rank"].clone()), (200, json!(1)));
    let (status, _) = get_json(&app.url("/v1/boards/star_coins/all/members/nobody")).await;
    assert_eq!(status, 404);
    let (name, members) = expect
        .iter()
        .find(|(k, _)| k.starts_with("star_coins/day:"))
        .expect("a day board");
    let id = name.trim_start_matches("star_coins/day:");
    let (status, day) = get_json(&app.url(&format!(
        "/v1/boards/star_coins/day/top?period={id}&limit=3"
    )))
    .await;
    assert_eq!(status, 200);
    assert_eq!(day["period"], id);
    assert_eq!(day["total"], members.len());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periods_split_at_iso_week_and_month_boundaries_in_shanghai() {
    let broker = Broker::start();
    let redis = Redis::start();
    let boards = r#"
[[board]]
name = "b"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["day", "week", "month", "year", "all"]
retention = { day = "400d", week = "60w", month = "24mo" }
"#;
    let mut setup = Setup::new(&broker, &redis, boards);
    setup.timezone = "Asia/Shanghai".into();
    broker.create_topic(&setup.topic, 1).await;
    // (UTC instant, points): each pair straddles a local boundary.
    let events = [
        ("2026-11-30T15:59:59.999Z", 1), // local Mon 11-30 23:59:59.999: W49, November
        ("2026-11-30T16:00:00.000Z", 10), // local Tue 12-01 00:00: W49, December
        ("2026-12-31T15:59:59.999Z", 100), // local Thu 12-31: 2026-W53, December, 2026
        ("2026-12-31T16:00:00.000Z", 1000), // local Fri 2027-01-01: still 2026-W53, January, 2027
        ("2027-01-03T15:59:59.999Z", 10000), // local Sun 01-03: 2026-W53
        ("2027-01-03T16:00:00.000Z", 100000), // local Mon 01-04: 2027-W01
    ];
    let messages: Vec<(i32, Vec<u8>)> = events
        .iter()
        .enumerate()
        .map(|(i, (at, points))| {
            let ts = chrono::DateTime::parse_from_rfc3339(at)
                .expect("time")
                .timestamp_millis();
            let e = json!({"type": "score", "event_id": format!("e{i}"), "ts": ts,
                           "user_id": "u", "game_id": "g", "points": points});
            (0, e.to_string().into_bytes())
        })
        .collect();
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let clock_at = chrono::DateTime::parse_from_rfc3339("2027-01-05T00:00:00Z").expect("time");
    let app = InProcess::start(
        &setup,
        Arc::new(ManualClock::new(clock_at.timestamp_millis())),
    )
    .await;
    let mut expect: Boards = BTreeMap::new();
    for (view, total) in [
        ("day:2026-11-30", 1.0),
        ("day:2026-12-01", 10.0),
        ("day:2026-12-31", 100.0),
        ("day:2027-01-01", 1000.0),
        ("day:2027-01-03", 10000.0),
        ("day:2027-01-04", 100000.0),
        ("week:2026-W49", 11.0),
        ("week:2026-W53", 11100.0),
        ("week:2027-W01", 100000.0),
        ("month:2026-11", 1.0),
        ("month:2026-12", 110.0),
        ("month:2027-01", 111000.0),
        ("year:2026", 111.0),
        ("year:2027", 111000.0),
        ("all", 111111.0),
    ] {
        expect.insert(
            format!("b/{view}"),
            BTreeMap::from([("u".to_string(), total)]),
        );
    }
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    // Nothing else was written for the board: exactly these 15 views, their
    // dense-rank indexes (K:v) and the fence (beside the partition positions).
    let keys = redis.keys(&format!("{}:{{b}}:*", setup.prefix)).await;
    assert_eq!(keys.len(), 31, "{keys:?}");
    assert_eq!(keys.iter().filter(|k| k.ends_with(":v")).count(), 15);
    println!("verified: 6 events around 3 boundaries landed in 15 views exactly");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_board_has_one_key_per_scope_value_even_with_delimiters() {
    let broker = Broker::start();
    let redis = Redis::start();
    let boards = r#"
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["all"]
"#;
    let setup = Setup::new(&broker, &redis, boards);
    broker.create_topic(&setup.topic, 2).await;
    let scopes = [
        "plain",
        "a{b}c",
        "x:y",
        "100%",
        "{}:%",
        "emoji 😀 and space",
    ];
    let mut messages = Vec::new();
    for (i, s) in scopes.iter().enumerate() {
        for j in 0..3 {
            let e = json!({"type": "gift", "event_id": format!("e{i}-{j}"), "ts": NOON, "sender_id": format!("u{j}"),
                           "receiver_id": s, "gift_id": "rose", "count": i + 1, "value": 1});
            messages.push(((i % 2) as i32, e.to_string().into_bytes()));
        }
    }
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let app = InProcess::start(&setup, Arc::new(ManualClock::new(NOON))).await;
    let mut expect: Boards = BTreeMap::new();
    for (i, s) in scopes.iter().enumerate() {
        let members = (0..3).map(|j| (format!("u{j}"), (i + 1) as f64)).collect();
        expect.insert(format!("fans:{s}/all"), members);
    }
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    // The board's scope registry (for scope=*) holds the raw values.
    let registry = format!("{}:{{fans}}:scopes:all", setup.prefix);
    let listed = redis.cli(&["ZRANGE", &registry, "0", "-1"]);
    let listed: BTreeSet<&str> = listed.lines().collect();
    assert_eq!(listed, scopes.iter().copied().collect::<BTreeSet<&str>>());
    let keys: BTreeSet<String> = redis
        .keys(&format!("{}:*", setup.prefix))
        .await
        .into_iter()
        .filter(|k| k.ends_with(":all") && *k != registry)
        .collect();
    let want: BTreeSet<String> = [
        "plain",
        "a%7Bb%7Dc",
        "x%3Ay",
        "100%25",
        "%7B%7D%3A%25",
        "emoji 😀 and space",
    ]
    .iter()
    .map(|e| setup.key(&format!("fans:{e}"), "all"))
    .collect();
    assert_eq!(keys, want);
    // The hash tag of every key is the whole board instance.
    for k in &keys {
        let open = k.find('{').expect("tag");
        let close = open + k[open..].find('}').expect("tag end");
        assert!(k[open + 1..close].starts_with("fans:"), "{k}");
        assert!(k[close..].starts_with("}:all"), "{k}");
    }
    // And the API finds a scope with every delimiter in it.
    let url = app.url("/v1/boards/fans/all/top?scope=%7B%7D%3A%25");
    let (status, body) = get_json(&url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scope"], "{}:%");
    assert_eq!(body["total"], 3);
    assert_eq!(body["entries"][0]["score"], 5);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_are_counted_invalid_and_their_neighbours_applied() {
    let broker = Broker::start();
    let redis = Redis::start();
    let boards = r#"
[[board]]
name = "coins"
event = "gift"
member = "receiver_id"
score = "count"
periods = ["all"]
"#;
    let setup = Setup::new(&broker, &redis, boards);
    broker.create_topic(&setup.topic, 1).await;
    let valid = |i: usize| {
        json!({"type": "gift", "event_id": format!("v{i}"), "ts": NOON, "sender_id": "a",
               "receiver_id": format!("r{}", i % 3), "gift_id": "rose", "count": i + 1, "value": 1})
        .to_string()
        .into_bytes()
    };
    let bad: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        b"[1, 2, 3]".to_vec(),
        br#"{"type": "gift", "event_id": "t""#.to_vec(),
        b"\xff\xfe\xfd".to_vec(),
        br#"{"type": "tip", "event_id": "x", "ts": 1}"#.to_vec(),
        json!({"type": "gift", "event_id": "c0", "ts": NOON, "sender_id": "a", "receiver_id": "r0",
               "gift_id": "rose", "count": 0, "value": 1})
        .to_string()
        .into_bytes(),
        json!({"type": "gift", "event_id": "ms", "ts": NOON, "receiver_id": "r0",
               "gift_id": "rose", "count": 1, "value": 1})
        .to_string()
        .into_bytes(),
        json!({"type": "gift", "event_id": "wt", "ts": NOON, "sender_id": "a", "receiver_id": "r0",
               "gift_id": "rose", "count": "3", "value": 1})
        .to_string()
        .into_bytes(),
        json!({"type": "gift", "event_id": "fut", "ts": NOON + 3_600_000, "sender_id": "a", "receiver_id": "r0",
               "gift_id": "rose", "count": 1, "value": 1})
        .to_string()
        .into_bytes(),
    ];
    let mut messages = Vec::new();
    let mut expect: BTreeMap<String, f64> = BTreeMap::new();
    for (i, b) in bad.iter().enumerate() {
        messages.push((0, valid(i)));
        *expect.entry(format!("r{}", i % 3)).or_insert(0.0) += (i + 1) as f64;
        messages.push((0, b.clone()));
    }
    let last = bad.len();
    messages.push((0, valid(last)));
    *expect.entry(format!("r{}", last % 3)).or_insert(0.0) += (last + 1) as f64;
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let app = InProcess::start(&setup, Arc::new(ManualClock::new(NOON))).await;
    let expect_boards: Boards = BTreeMap::from([("coins/all".to_string(), expect)]);
    wait_boards(&redis, &setup, &expect_boards, Duration::from_secs(60)).await;
    let metrics = app.url("/metrics");
    let invalid = wait_steady(Duration::from_secs(10), QUIET, "invalid count", || async {
        let n = events_counted(&metrics, &setup.topic, "invalid").await;
        (n == bad.len() as f64).then_some(n)
    })
    .await;
    assert_eq!(
        events_counted(&metrics, &setup.topic, "applied").await,
        (bad.len() + 1) as f64
    );
    println!(
        "injected: {} bad messages between {} valid ones; verified: {invalid} invalid, sums exact",
        bad.len(),
        bad.len() + 1
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_stream_and_restarted_applies_every_event_once() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    setup.batch = (200, 20);
    broker.create_topic(&setup.topic, 4).await;
    // A separate process runs on the real clock: events end "now".
    let (messages, expect) = mixed_events(30_000, 11, 4, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut first = Process::start(&setup);
    let metrics = first.url("/metrics");
    let seen = wait_for(Duration::from_secs(60), "some events applied", || async {
        let n = events_counted(&metrics, &setup.topic, "applied").await;
        (n >= 3000.0).then_some(n)
    })
    .await;
    first.kill9();
    println!("injected: kill -9 after {seen} of 30000 events were applied");
    let second = Process::start(&setup);
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(120), || {
        format!("first:\n{}\nsecond:\n{}", first.log(), second.log())
    })
    .await;
    println!(
        "verified: after the restart every board equals the reference (no loss, no double count)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_commits_and_exits_zero_within_ten_seconds() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    broker.create_topic(&setup.topic, 2).await;
    let (messages, _) = mixed_events(2000, 3, 2, now_ms());
    let producer = broker.producer();
    send_all(&producer, &setup.topic, &messages[..1000]).await;
    let mut p = Process::start(&setup);
    let metrics = p.url("/metrics");
    wait_for(Duration::from_secs(60), "consuming", || async {
        (events_counted(&metrics, &setup.topic, "applied").await > 0.0).then_some(())
    })
    .await;
    // Keep events flowing while the signal arrives.
    let topic = setup.topic.clone();
    let rest = messages[1000..].to_vec();
    let feeder = tokio::spawn(async move { send_all(&producer, &topic, &rest).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    p.sigterm();
    let status = loop {
        if let Some(s) = p.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = sent.elapsed();
    let _ = feeder.await;
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        p.log()
    );
    assert!(took < Duration::from_secs(10));
    assert!(
        p.log().contains("Offsets committed on shutdown"),
        "{}",
        p.log()
    );
    println!("injected: SIGTERM mid-stream; verified: exit 0 after {took:?}");
}
