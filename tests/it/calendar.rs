//! Calendar edge cases through the real apply path (rules, batch, Lua,
//! Redis): both DST transitions of America/New_York, ISO week 53, month
//! ends and a leap day in a non-UTC zone, and late events. Each event carries
//! a distinct power of ten, so a lost or double-counted event shows in the sum.

use crate::common;

use common::direct::Direct;
use common::*;
use rankflow::reader::{Query, ReadError};
use rankflow::telemetry::Outcome;
use serde_json::json;

fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("time")
        .timestamp_millis()
}

fn score(i: usize, ts: i64, points: i64) -> serde_json::Value {
    json!({"type": "score", "event_id": format!("e{i}"), "ts": ts, "user_id": "u", "game_id": "g", "points": points})
}

async fn total(d: &Direct, view: &str, period: Option<&str>) -> Option<f64> {
    let q = Query {
        period: period.map(str::to_string),
        ..query("b", view)
    };
    d.reader().member(&q, "u").await.ok().map(|e| e.score)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dst_transitions_in_new_york_neither_lose_nor_double_count() {
    let redis = Redis::start();
    let prefix = unique("dst");
    let boards = r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day"]
timezone = "America/New_York"
retention = { hour = "800d", day = "800d" }
dense_ranks = true
"#;
    // Spring forward 2026-03-08 02:00 EST -> 03:00 EDT; fall back
    // 2026-11-01 02:00 EDT -> 01:00 EST.
    let events = [
        ("2026-03-08T06:30:00Z", 1),       // 01:30 EST
        ("2026-03-08T06:59:59.999Z", 10),  // 01:59:59.999 EST
        ("2026-03-08T07:00:00Z", 100),     // 03:00 EDT (02:xx never happens)
        ("2026-03-08T07:30:00Z", 1000),    // 03:30 EDT
        ("2026-11-01T05:30:00Z", 10000),   // 01:30 EDT
        ("2026-11-01T06:30:00Z", 100000),  // 01:30 EST, the repeated hour
        ("2026-11-01T07:00:00Z", 1000000), // 02:00 EST
    ];
    let now = ms("2026-11-22T00:00:00Z").max(rankflow::clock::Clock::now_ms(
        &rankflow::clock::SystemClock,
    ));
    let mut d = Direct::new(&redis.url(), &prefix, boards, now).await;
    let batch: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, (t, p))| score(i, ms(t), *p))
        .collect();
    let (outcomes, _) = d.apply(&batch).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Applied),
        "{outcomes:?}"
    );
    for (period, want) in [
        ("2026-03-08T01", 11.0),
        ("2026-03-08T03", 1100.0),
        ("2026-11-01T01", 110000.0),
        ("2026-11-01T02", 1000000.0),
    ] {
        assert_eq!(
            total(&d, "hour", Some(period)).await,
            Some(want),
            "hour {period}"
        );
    }
    assert_eq!(
        total(&d, "day", Some("2026-03-08")).await,
        Some(1111.0),
        "the 23-hour day"
    );
    assert_eq!(
        total(&d, "day", Some("2026-11-01")).await,
        Some(1110000.0),
        "the 25-hour day"
    );
    // No key for the hour that did not exist, and it cannot be asked for.
    let hours = redis.keys(&format!("{prefix}:{{b}}:hour:*")).await;
    // Each hour view beside its dense-rank index (K:v).
    let views: Vec<&String> = hours.iter().filter(|k| !k.ends_with(":v")).collect();
    assert_eq!(views.len(), 4, "{hours:?}");
    assert_eq!(hours.len(), 8, "{hours:?}");
    let q = Query {
        period: Some("2026-03-08T02".into()),
        ..query("b", "hour")
    };
    assert!(matches!(
        d.reader().top(&q, 0, 10).await,
        Err(ReadError::BadRequest(_))
    ));
    println!(
        "verified: 7 events across both 2026 New York DST transitions landed in 4 hours and 2 days exactly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iso_week_53_month_ends_and_leap_day_in_tokyo() {
    let redis = Redis::start();
    let prefix = unique("cal");
    let boards = r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["day", "week", "month", "year"]
timezone = "Asia/Tokyo"
retention = { day = "1000d", week = "300w", month = "60mo", year = "10y" }
"#;
    let events = [
        ("2026-12-28T00:00:00+09:00", 1),      // Mon: first day of 2026-W53
        ("2027-01-03T23:59:59.999+09:00", 10), // Sun: last instant of 2026-W53
        ("2027-01-04T00:00:00+09:00", 100),    // 2027-W01
        ("2027-01-31T23:59:59.999+09:00", 1000), // month end
        ("2027-02-01T00:00:00+09:00", 10000),
        ("2028-02-28T23:59:59.999+09:00", 100000),
        ("2028-02-29T12:00:00+09:00", 1000000), // leap day
        ("2028-03-01T00:00:00+09:00", 10000000),
    ];
    let mut d = Direct::new(&redis.url(), &prefix, boards, ms("2028-03-02T00:00:00Z")).await;
    let batch: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, (t, p))| score(i, ms(t), *p))
        .collect();
    let (outcomes, _) = d.apply(&batch).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Applied),
        "{outcomes:?}"
    );
    for (view, period, want) in [
        ("week", "2026-W53", 11.0),
        ("week", "2027-W01", 100.0),
        ("month", "2026-12", 1.0),
        ("month", "2027-01", 1110.0),
        ("month", "2027-02", 10000.0),
        ("month", "2028-02", 1100000.0),
        ("month", "2028-03", 10000000.0),
        ("year", "2026", 1.0),
        ("year", "2027", 11110.0),
        ("year", "2028", 11100000.0),
        ("day", "2028-02-28", 100000.0),
        ("day", "2028-02-29", 1000000.0),
        ("day", "2028-03-01", 10000000.0),
    ] {
        assert_eq!(
            total(&d, view, Some(period)).await,
            Some(want),
            "{view} {period}"
        );
    }
    println!("verified: week 53, two month ends and 2028-02-29 in Asia/Tokyo, every event once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_past_retention_or_the_window_are_late_and_skipped() {
    let redis = Redis::start();
    let prefix = unique("late");
    let boards = r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["hour"]
windows = ["30m/1m"]
retention = { hour = "1h" }
"#;
    // The real now: Redis expires the window's keys by its own clock.
    let now = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    let mut d = Direct::new(&redis.url(), &prefix, boards, now).await;
    let (outcomes, report) = d
        .apply(&[
            score(0, now - 10 * 60_000, 1),     // in its hour and the window
            score(1, now - 45 * 60_000, 10),    // hour still kept, window left
            score(2, now - 3 * 3_600_000, 100), // hour past retention, window left
        ])
        .await;
    assert_eq!(
        outcomes,
        vec![Outcome::Applied, Outcome::Applied, Outcome::Late]
    );
    assert_eq!(total(&d, "win:30m", None).await, Some(1.0));
    // The two applied events in their hours (maybe the same one).
    let hour = |ts: i64| {
        chrono::DateTime::from_timestamp_millis(ts)
            .expect("ts")
            .format("%Y-%m-%dT%H")
            .to_string()
    };
    let (h0, h1) = (hour(now - 10 * 60_000), hour(now - 45 * 60_000));
    // Updates are merged per member and key: one per hour key, one window.
    let hour_keys = if h0 == h1 { 1 } else { 2 };
    assert_eq!(report.boards[0].applied, hour_keys + 1);
    if h0 == h1 {
        assert_eq!(total(&d, "hour", Some(&h0)).await, Some(11.0));
    } else {
        assert_eq!(total(&d, "hour", Some(&h0)).await, Some(1.0));
        assert_eq!(total(&d, "hour", Some(&h1)).await, Some(10.0));
    }
    let old = hour(now - 3 * 3_600_000);
    assert_eq!(
        total(&d, "hour", Some(&old)).await,
        None,
        "the late event made no key"
    );
}
