//! What the tests of union views (`tests/it/unions.rs`, `tests/it/scope_unions.rs`)
//! share: their reference model of a union ([`union_reference`], with
//! ranks by counting), Tokyo calendar helpers for it, a reader and HTTP
//! server over a [`Direct`] harness with a chosen union cache, and rows and
//! ranks of a list answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use chrono::{Datelike, NaiveDate, TimeZone};
use chrono_tz::Tz;
use rankflow::clock::SharedClock;
use rankflow::reader::{List, Reader, Unions};
use serde_json::Value;

use super::direct::Direct;

pub const TOKYO: Tz = chrono_tz::Asia::Tokyo;

/// A `[[board]]` of score events ranking `user_id` by `points`, with
/// `settings` (TOML lines) for what sets it apart.
pub fn score_board(name: &str, settings: &str) -> String {
    format!(
        r#"[[board]]
name = "{name}"
event = "score"
member = "user_id"
score = "points"
{settings}

"#
    )
}

/// Settings of a board of Tokyo days kept for long (past days are read).
pub const TOKYO_DAYS: &str = r#"periods = ["day"]
timezone = "Asia/Tokyo"
retention = { day = "800d" }"#;

/// Tokyo wall-clock time as epoch ms.
pub fn tokyo(y: i32, m: u32, d: u32, h: u32, min: u32) -> i64 {
    TOKYO
        .with_ymd_and_hms(y, m, d, h, min, 0)
        .single()
        .expect("unambiguous")
        .timestamp_millis()
}

/// The Tokyo date of an instant.
pub fn local_date(ts: i64) -> NaiveDate {
    chrono::DateTime::from_timestamp_millis(ts)
        .expect("ts")
        .with_timezone(&TOKYO)
        .date_naive()
}

pub fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("date")
}

/// A fixed pseudo-random sequence (a 64-bit LCG) from `seed`.
pub fn lcg(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        seed >> 33
    }
}

/// The times of the events of these tests: on each of the 10 Tokyo days
/// 2026-10-27 ..= 2026-11-05 (across a month boundary), at each local
/// `(hour, minute)` of `times`, `per_time` events a second apart; in that
/// order.
pub fn tokyo_times(times: &[(u32, u32)], per_time: i64) -> Vec<i64> {
    let mut out = Vec::new();
    for day in 0..10 {
        let d = date(2026, 10, 27) + chrono::Days::new(day);
        for &(h, min) in times {
            for k in 0..per_time {
                out.push(tokyo(d.year(), d.month(), d.day(), h, min) + k * 1_000);
            }
        }
    }
    out
}

/// Now in these tests: 2026-11-05 20:00 in Tokyo (11:00 UTC).
pub fn now() -> i64 {
    tokyo(2026, 11, 5, 20, 0)
}

/// The reference model of a union view: an independent reference written
/// here from the documented rules (docs/http-api.md), not from rankflow's
/// code. Its entries over the events `(member, time in ms, points)` whose
/// Tokyo date is in `from ..= to`, in rank order: (member, value). `agg`
/// "sum" (the total, reached at its latest event in the range) or "max"
/// (the largest, reached the first time it was seen); `tie` None (ties by
/// member bytes descending, as ZREVRANGE lists them) or "earliest" (by that
/// time, then member bytes descending).
pub fn union_reference<'a>(
    evs: impl IntoIterator<Item = (&'a str, i64, i64)>,
    (from, to): (NaiveDate, NaiveDate),
    agg: &str,
    tie: Option<&str>,
) -> Vec<(String, i64)> {
    // member -> (value, tie time)
    let mut acc: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (m, ts, p) in evs {
        let d = local_date(ts);
        if d < from || d > to {
            continue;
        }
        let e = acc.entry(m.to_string()).or_insert((0, i64::MIN));
        match agg {
            "sum" => *e = (e.0 + p, e.1.max(ts)),
            _ => {
                if e.1 == i64::MIN || p > e.0 {
                    *e = (p, ts);
                }
            }
        }
    }
    let mut rows: Vec<(String, i64, i64)> = acc.into_iter().map(|(m, (v, t))| (m, v, t)).collect();
    rows.sort_by(|a, b| {
        b.1.cmp(&a.1).then_with(|| match tie {
            Some(_) => a.2.cmp(&b.2).then_with(|| b.0.cmp(&a.0)),
            None => b.0.cmp(&a.0),
        })
    });
    rows.into_iter().map(|(m, v, _)| (m, v)).collect()
}

/// The competition rank of value `v` among the reference's entries, by
/// counting: 1 + the members strictly better.
pub fn competition_rank(want: &[(String, i64)], v: i64) -> u64 {
    1 + want.iter().filter(|(_, x)| *x > v).count() as u64
}

/// The dense rank of value `v` among the reference's entries, by counting:
/// 1 + the distinct values strictly better.
pub fn dense_rank(want: &[(String, i64)], v: i64) -> u64 {
    1 + want
        .iter()
        .map(|(_, x)| *x)
        .filter(|x| *x > v)
        .collect::<BTreeSet<_>>()
        .len() as u64
}

/// The rank of each entry of a list answer, in order.
pub fn ranks(body: &Value) -> Vec<u64> {
    body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries in {body}"))
        .iter()
        .map(|e| e["rank"].as_u64().expect("rank"))
        .collect()
}

/// (member, score) of each entry of a list answer, in order.
pub fn rows(body: &Value) -> Vec<(String, i64)> {
    body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries in {body}"))
        .iter()
        .map(|e| {
            (
                e["member"].as_str().expect("member").to_string(),
                e["score"].as_i64().expect("score"),
            )
        })
        .collect()
}

/// (member, score) of each entry of a list the reader answered, in order.
pub fn list_rows(list: &List) -> Vec<(String, i64)> {
    list.entries
        .iter()
        .map(|e| (e.member.clone(), e.score as i64))
        .collect()
}

/// A reader of `d`'s boards on its clock, unions cached `ttl_ms`.
pub fn reader(d: &Direct, ttl_ms: i64) -> Reader {
    let clock: SharedClock = Arc::new(d.clock.clone());
    Reader::new(d.boards.clone(), d.store.clone(), clock, None).with_unions(Unions::new(ttl_ms))
}

/// The HTTP API over `d`'s boards, unions cached `ttl_ms`; its base URL.
pub async fn serve(d: &Direct, ttl_ms: i64) -> String {
    serve_with(d, Unions::new(ttl_ms)).await
}

/// The same with `unions` as given (e.g. always built in slices).
pub async fn serve_with(d: &Direct, unions: Unions) -> String {
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(reader(d, 1_000).with_unions(unions));
    d.serve(slot).await
}
