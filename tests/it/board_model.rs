//! Property tests of the whole board logic — rules, batching, the Lua apply
//! script and reads — against a straightforward in-memory reference. Random
//! event sequences (random order, repeated event times, ties, negative sums,
//! late events, redelivered batches, a clock that moves between batches) are
//! applied to a real `redis-server` through the same code the consumer uses
//! (minus Kafka), and every view — hour, day, all, and a 10-minute window —
//! is read back through the API's reader and compared entry by entry, in
//! rank order, with the reference.

use crate::common;

use std::collections::BTreeMap;

use chrono::TimeZone;
use common::direct::Direct;
use common::*;
use proptest::prelude::*;
use rankflow::reader::Query;

const AGGS: [&str; 4] = ["sum", "max", "min", "last"];
const TIES: [&str; 3] = ["none", "earliest", "latest"];
const ZONES: [&str; 3] = ["UTC", "Asia/Kolkata", "America/New_York"];
const MEMBERS: [&str; 4] = ["a", "b", "c", "d"];
const WINDOW_MS: i64 = 10 * 60_000;
const BUCKET_MS: i64 = 60_000;
const MAXT: i64 = (1 << 48) - 1;

#[derive(Debug, Clone)]
struct Ev {
    member: &'static str,
    value: i64,
    ts: i64,
}

#[derive(Debug, Clone)]
struct Case {
    agg: &'static str,
    tie: &'static str,
    zone: &'static str,
    /// Batches: events, and how far the clock moves before applying them.
    batches: Vec<(Vec<Ev>, i64)>,
    /// Batches applied twice (a redelivery).
    redeliver: Vec<bool>,
    /// Clock move after the last batch, before reading.
    final_advance: i64,
}

fn case() -> impl Strategy<Value = Case> {
    let ev = (
        0..MEMBERS.len(),
        -5i64..=5,
        0i64..40,
        prop::bool::weighted(0.3),
    );
    let batch = (prop::collection::vec(ev, 0..12), 0i64..4 * 60_000);
    (
        0..AGGS.len(),
        0..TIES.len(),
        0..ZONES.len(),
        prop::collection::vec(batch, 1..6),
        prop::collection::vec(any::<bool>(), 6),
        0i64..15 * 60_000,
        0i64..60_000,
    )
        .prop_map(|(a, t, z, batches, redeliver, final_advance, jitter)| {
            let agg = AGGS[a];
            let mut last_ts = 0;
            let batches = batches
                .into_iter()
                .map(|(evs, advance)| {
                    let evs = evs
                        .into_iter()
                        .map(|(m, v, minutes_ago, repeat)| {
                            // Often repeat the previous event time, for ties.
                            let ts = if repeat && last_ts != 0 {
                                last_ts
                            } else {
                                -(minutes_ago * 60_000 + jitter)
                            };
                            last_ts = ts;
                            let value = if agg == "sum" { v } else { v.abs() };
                            Ev {
                                member: MEMBERS[m],
                                value,
                                ts,
                            }
                        })
                        .collect();
                    (evs, advance)
                })
                .collect();
            Case {
                agg,
                tie: TIES[t],
                zone: ZONES[z],
                batches,
                redeliver,
                final_advance,
            }
        })
}

/// The aggregate rules as the docs state them: value, and the time the
/// member reached it.
fn fold(agg: &str, evs: &[&Ev]) -> Option<(i64, i64)> {
    let mut acc: Option<(i64, i64)> = None;
    for e in evs {
        acc = Some(match (acc, agg) {
            (None, _) => (e.value, e.ts),
            (Some((v, t)), "sum") => (v + e.value, t.max(e.ts)),
            (Some((v, t)), "max") => {
                if e.value > v || (e.value == v && e.ts < t) {
                    (e.value, e.ts)
                } else {
                    (v, t)
                }
            }
            (Some((v, t)), "min") => {
                if e.value < v || (e.value == v && e.ts < t) {
                    (e.value, e.ts)
                } else {
                    (v, t)
                }
            }
            (Some((v, t)), _) => {
                if e.ts > t || (e.ts == t && e.value > v) {
                    (e.value, e.ts)
                } else {
                    (v, t)
                }
            }
        });
    }
    acc
}

/// Expected entries of one view in rank order: score first, then the
/// documented tie key, then the member (Redis orders equal scores by bytes).
fn ranked(agg: &str, tie: &str, evs: &[&Ev]) -> Vec<(String, f64)> {
    let mut per_member: BTreeMap<&str, Vec<&Ev>> = BTreeMap::new();
    for e in evs {
        per_member.entry(e.member).or_default().push(e);
    }
    let asc = agg == "min";
    let mut rows: Vec<(String, i64, String)> = per_member
        .into_iter()
        .filter_map(|(m, es)| {
            let (v, t) = fold(agg, &es)?;
            let stored = match (tie, asc) {
                ("none", _) => m.to_string(),
                ("earliest", false) | ("latest", true) => format!("{:012x}{m}", MAXT - t),
                _ => format!("{t:012x}{m}"),
            };
            Some((m.to_string(), v, stored))
        })
        .collect();
    rows.sort_by(|a, b| (a.1, &a.2).cmp(&(b.1, &b.2)));
    if !asc {
        rows.reverse();
    }
    rows.into_iter().map(|(m, v, _)| (m, v as f64)).collect()
}

fn boards_toml(case: &Case) -> String {
    format!(
        r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day", "all"]
windows = ["10m/1m"]
aggregate = "{agg}"
tie_break = "{tie}"
timezone = "{zone}"
"#,
        agg = case.agg,
        tie = case.tie,
        zone = case.zone,
    )
}

async fn run_case(redis_url: &str, case: Case) -> Result<(), TestCaseError> {
    // Event times are relative to the real now: Redis expires keys by its
    // own clock, so period keys must belong to recent periods.
    let base = (now_ms() / BUCKET_MS) * BUCKET_MS;
    let mut d = Direct::new(redis_url, &unique("m"), &boards_toml(&case), base).await;
    let mut applied: Vec<Ev> = Vec::new();
    let mut window_kept: Vec<Ev> = Vec::new();
    for (i, (evs, advance)) in case.batches.iter().enumerate() {
        d.clock.advance(*advance);
        let now = d.now();
        let mut batch = Vec::new();
        for (j, e) in evs.iter().enumerate() {
            let ts = base + e.ts;
            batch.push(
                serde_json::json!({"type": "score", "event_id": format!("{i}-{j}"), "ts": ts,
                "user_id": e.member, "game_id": "g", "points": e.value}),
            );
            let absolute = Ev { ts, ..e.clone() };
            // The window takes an event only while its bucket is in it.
            let bucket_end = (ts.div_euclid(BUCKET_MS) + 1) * BUCKET_MS;
            if bucket_end > now - WINDOW_MS {
                window_kept.push(absolute.clone());
            }
            applied.push(absolute);
        }
        d.apply(&batch).await;
        if case.redeliver.get(i).copied().unwrap_or(false) {
            // The same offsets again: the fences must make it a no-op.
            let again = d.redeliver_last().await;
            prop_assert!(
                again.boards.iter().all(|c| c.applied == 0),
                "a redelivered batch changed a board: {:?}",
                again
            );
        }
    }
    d.clock.advance(case.final_advance);
    let now = d.now();
    let reader = d.reader();
    let tz: chrono_tz::Tz = case.zone.parse().expect("zone");
    let local = |ts: i64| {
        chrono::Utc
            .timestamp_millis_opt(ts)
            .single()
            .expect("ts")
            .with_timezone(&tz)
    };
    let mut views: BTreeMap<(String, Option<String>), Vec<&Ev>> = BTreeMap::new();
    for e in &applied {
        let t = local(e.ts);
        views
            .entry(("hour".into(), Some(t.format("%Y-%m-%dT%H").to_string())))
            .or_default()
            .push(e);
        views
            .entry(("day".into(), Some(t.format("%Y-%m-%d").to_string())))
            .or_default()
            .push(e);
        views.entry(("all".into(), None)).or_default().push(e);
    }
    let in_window: Vec<&Ev> = window_kept
        .iter()
        .filter(|e| (e.ts.div_euclid(BUCKET_MS) + 1) * BUCKET_MS > now - WINDOW_MS)
        .collect();
    views.insert(("win:10m".into(), None), in_window);
    for ((view, period), evs) in &views {
        let q = Query {
            period: period.clone(),
            ..query("b", view)
        };
        let got = reader
            .top(&q, 0, 100)
            .await
            .map_err(|e| TestCaseError::fail(format!("read {view} {period:?}: {e}")))?;
        let got_rows: Vec<(String, f64)> = got
            .entries
            .iter()
            .map(|e| (e.member.clone(), e.score))
            .collect();
        let want = ranked(case.agg, case.tie, evs);
        prop_assert_eq!(
            &got_rows,
            &want,
            "view {} {:?} ({} events)",
            view,
            period,
            evs.len()
        );
        prop_assert_eq!(got.total as usize, want.len());
        for (i, e) in got.entries.iter().enumerate() {
            prop_assert_eq!(e.rank as usize, i + 1);
            // A member's own rank agrees with the list.
            let one = reader
                .member(&q, &e.member)
                .await
                .map_err(|err| TestCaseError::fail(format!("member: {err}")))?;
            prop_assert_eq!(one.rank, e.rank);
            prop_assert_eq!(one.score, e.score);
        }
    }
    Ok(())
}

fn now_ms() -> i64 {
    rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock)
}

/// One Redis and runtime for all cases (each case has its own key prefix),
/// owned by the test so the server stops when it ends.
#[test]
fn every_view_equals_the_reference() {
    let redis = Redis::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let url = redis.url();
    if let Err(e) = runner.run(&case(), |c| runtime.block_on(run_case(&url, c))) {
        panic!("{e}");
    }
}
