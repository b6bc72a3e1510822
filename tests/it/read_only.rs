//! Reads write nothing lasting (docs/http-api.md, "Errors and limits"):
//! whatever an anonymous client asks — windows of scopes never written,
//! unknown members, a union of a thousand listed scopes, `last:` unions,
//! `scope=*` — every key the reads cause has an expiry, and after
//! `[http] union_cache` nothing they caused is left (checked with `SCAN`
//! over the whole keyspace, not only the board's keys).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common;
use common::direct::Direct;
use common::reference::now_ms;
use common::unions::serve;
use common::*;
use serde_json::json;

/// How long a union's result is reused in this test.
const UNION_CACHE_MS: i64 = 400;

const BOARDS: &str = r#"
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "room_id"
scope_slot = "board"
periods = ["day"]
windows = ["1h/1m"]

[[board]]
name = "firsts"
event = "gift"
member = "sender_id"
score = "count"
scope = "room_id"
scope_slot = "board"
tie_break = "earliest"
periods = ["day"]
windows = ["10m/1m"]
"#;

/// Every key in the server with its remaining time to live (ms; -1 for
/// none), found with `SCAN`.
async fn all_keys(redis: &Redis) -> BTreeMap<String, i64> {
    let mut c = redis.conn().await;
    let mut out = BTreeMap::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .expect("SCAN");
        for k in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&k)
                .query_async(&mut c)
                .await
                .expect("PTTL");
            out.insert(k, ttl);
        }
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

/// Keys of `after` that `before` did not have.
fn caused(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    after
        .iter()
        .filter(|(k, _)| !before.contains_key(*k))
        .map(|(k, t)| (k.clone(), *t))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_never_seen_scopes_and_unions_leave_nothing_lasting() {
    let redis = Redis::start();
    let prefix = unique("ro");
    // The wall clock: window keys expire by it, so they must be current.
    let now = now_ms();
    let mut d = Direct::new(&redis.url(), &prefix, BOARDS, now).await;
    // Two rooms with data, so the windows, unions and `scope=*` have
    // something real beside what the client invents.
    let gifts: Vec<_> = (0..20)
        .map(|i| {
            json!({"type": "gift", "event_id": format!("e{i}"), "ts": now - 60_000 * (i % 5),
                   "sender_id": format!("s{}", i % 7), "receiver_id": "r", "gift_id": "g",
                   "count": 1 + i % 3, "value": 1, "room_id": format!("room{}", i % 2)})
        })
        .collect();
    d.apply(&gifts).await;
    let base = serve(&d, UNION_CACHE_MS).await;
    let before = all_keys(&redis).await;
    assert!(!before.is_empty(), "the rooms' boards exist");

    let mut reads = 0;
    for i in 0..2_000 {
        for (board, view) in [("fans", "win:1h"), ("firsts", "win:10m"), ("fans", "day")] {
            let (status, body) = get_json(&format!(
                "{base}/v1/boards/{board}/{view}/top?scope=never{i}"
            ))
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["total"], 0, "{body}");
            reads += 1;
        }
        if i % 100 == 0 {
            for path in [
                format!("fans/win:1h/members/nobody{i}?scope=never{i}"),
                format!("firsts/win:10m/around/nobody{i}?scope=never{i}"),
            ] {
                let (status, body) = get_json(&format!("{base}/v1/boards/{path}")).await;
                assert_eq!(status, 404, "{body}");
                reads += 1;
            }
        }
    }
    // A thousand listed scopes at once, on a window and on a period; the
    // rooms with data among them.
    let listed: String = (0..998)
        .map(|i| format!("&scope=listed{i}"))
        .chain(["&scope=room0".to_string(), "&scope=room1".to_string()])
        .collect();
    for (board, view) in [("fans", "win:1h"), ("firsts", "win:10m"), ("fans", "day")] {
        let (status, body) = get_json(&format!(
            "{base}/v1/boards/{board}/{view}/top?limit=5{listed}"
        ))
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body["total"].as_u64() > Some(0), "{body}");
        reads += 1;
    }
    for path in [
        "fans/last:3d/top?scope=never1",
        "fans/last:3d/top?scope=room0",
        "fans/win:1h/top?scope=*",
        "firsts/day/top?scope=*",
    ] {
        let (status, body) = get_json(&format!("{base}/v1/boards/{path}")).await;
        assert_eq!(status, 200, "{path}: {body}");
        reads += 1;
    }

    let after = all_keys(&redis).await;
    let new = caused(&before, &after);
    // -1: no expiry (-2: gone between SCAN and PTTL).
    let lasting: Vec<_> = new.iter().filter(|(_, ttl)| **ttl == -1).collect();
    assert!(
        lasting.is_empty(),
        "{} of {} keys caused by {reads} reads have no expiry, e.g. {:?}",
        lasting.len(),
        new.len(),
        lasting.iter().take(5).collect::<Vec<_>>()
    );
    // None was set to outlive the union cache (a PTTL read after the
    // reads can only be lower than what was set).
    let longest = new.iter().max_by_key(|(_, ttl)| **ttl);
    assert!(
        longest.is_none_or(|(_, ttl)| *ttl <= UNION_CACHE_MS),
        "a key caused by a read outlives the {UNION_CACHE_MS} ms union cache: {longest:?}"
    );
    // Then nothing is left.
    let deadline = Instant::now() + Duration::from_millis(UNION_CACHE_MS as u64 + 2_000);
    let left = loop {
        let left = caused(&before, &all_keys(&redis).await);
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(left.is_empty(), "left after the union cache: {left:?}");
    // And it stays so.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(caused(&before, &all_keys(&redis).await).is_empty());
    // The boards the events wrote are all still there.
    let now = all_keys(&redis).await;
    assert!(
        before.keys().all(|k| now.contains_key(k)),
        "a read removed a key"
    );
    println!(
        "verified: {reads} reads caused {} keys, each with an expiry, none left after {UNION_CACHE_MS} ms of union cache",
        new.len()
    );
}
