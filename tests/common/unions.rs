//! What the tests of union views (`tests/unions.rs`, `tests/scope_unions.rs`)
//! share: Tokyo calendar helpers for their references, a reader and HTTP
//! server over a [`Direct`] harness with a chosen union cache, rows of a
//! list answer, and command counts from `INFO commandstats`.

use std::sync::{Arc, OnceLock};

use chrono::{NaiveDate, TimeZone};
use chrono_tz::Tz;
use rankflow::clock::SharedClock;
use rankflow::reader::{Reader, Unions};
use serde_json::Value;

use super::Redis;
use super::direct::Direct;

pub const TOKYO: Tz = chrono_tz::Asia::Tokyo;

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

/// Now in these tests: 2026-11-05 20:00 in Tokyo (11:00 UTC).
pub fn now() -> i64 {
    tokyo(2026, 11, 5, 20, 0)
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

/// A reader of `d`'s boards on its clock, unions cached `ttl_ms`.
pub fn reader(d: &Direct, ttl_ms: i64) -> Reader {
    let clock: SharedClock = Arc::new(d.clock.clone());
    Reader {
        boards: d.boards.clone(),
        store: d.store.clone(),
        clock,
        archive: None,
        unions: Unions::new(ttl_ms),
    }
}

/// The HTTP API over `d`'s boards, unions cached `ttl_ms`; its base URL.
pub async fn serve(d: &Direct, ttl_ms: i64) -> String {
    serve_with(d, Unions::new(ttl_ms)).await
}

/// The same with `unions` as given (e.g. always built in slices).
pub async fn serve_with(d: &Direct, unions: Unions) -> String {
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(Reader {
        unions,
        ..reader(d, 1_000)
    });
    d.serve(slot).await
}

/// `calls=` of one command in `INFO commandstats` (0 if never called).
pub fn calls(redis: &Redis, command: &str) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
