//! Model test of the Lua apply script's raw writes (issue 14): random
//! batches of plain and tie-break sums and a 10-minute sum window (several
//! buckets per call, late events, evictions as the clock moves), with
//! repeated members in one call and values up to the schema's 10^12 cap,
//! go through the consumer's own batch and script code
//! (`common::direct::Direct`, minus Kafka) into a real redis-server. After
//! every call the raw keys — K's scores, K:t, the dense index K:v holding
//! exactly the distinct values held, and the window's K:n, K:log and bucket
//! values — are compared with plain Rust maps kept by the test, so a
//! rewrite of the script's hot paths (variadic commands) must leave the
//! same data as today's.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::direct::Direct;
use serde_json::{Value, json};

/// Sums stay below this in magnitude (Lua and Redis doubles are exact there).
const EXACT: i64 = 1 << 53;
const WINDOW_MS: i64 = 10 * 60_000;
const BUCKET_MS: i64 = 60_000;

const BOARDS: &str = r#"
[[board]]
name = "msum"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
windows = ["10m/1m"]

[[board]]
name = "mtie"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
windows = ["10m/1m"]
tie_break = "latest"
"#;

/// xorshift64, so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Reference state of one member: the sum and the latest event time.
#[derive(Default, Clone, Copy)]
struct Held {
    sum: i64,
    ts: i64,
}

/// A value for the next event of a member holding `sum`: mostly small (so
/// members share values and leave them), sometimes near the schema's
/// 10^12 cap; never one that would take the sum out of the exact range.
fn value(rng: &mut Rng, sum: i64) -> i64 {
    let v = if rng.next(10) == 0 {
        // The event schema caps a value at 10^12.
        let big = 1_000_000_000_000 - rng.next(1000) as i64;
        if rng.next(2) == 0 { big } else { -big }
    } else {
        rng.next(9) as i64 - 3
    };
    if (sum + v).abs() >= EXACT {
        -v.signum()
    } else {
        v
    }
}

async fn zrange(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(c)
        .await
        .expect("ZRANGE")
}

/// Compares one view's raw keys with the model after `round`.
async fn check_view(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    tie: bool,
    model: &BTreeMap<String, Held>,
    round: usize,
) {
    let raw = zrange(c, key).await;
    let index = zrange(c, &format!("{key}:v")).await;
    let mut want_scores: Vec<f64> = model.values().map(|h| h.sum as f64).collect();
    want_scores.sort_by(f64::total_cmp);
    let mut got_scores: Vec<f64> = raw.iter().map(|r| r.1).collect();
    got_scores.sort_by(f64::total_cmp);
    assert_eq!(got_scores, want_scores, "{key} round {round}: the scores");
    if !tie {
        let got: BTreeMap<String, f64> = raw.into_iter().collect();
        let want: BTreeMap<String, f64> = model
            .iter()
            .map(|(m, h)| (m.clone(), h.sum as f64))
            .collect();
        assert_eq!(got, want, "{key} round {round}: member -> sum");
    } else {
        let times: BTreeMap<String, i64> = redis::cmd("HGETALL")
            .arg(format!("{key}:t"))
            .query_async(c)
            .await
            .expect("HGETALL K:t");
        let want: BTreeMap<String, i64> = model.iter().map(|(m, h)| (m.clone(), h.ts)).collect();
        assert_eq!(
            times, want,
            "{key} round {round}: K:t holds each member's latest time"
        );
    }
    let distinct: BTreeSet<i64> = model.values().map(|h| h.sum).collect();
    let want_index: Vec<f64> = distinct.into_iter().map(|v| v as f64).collect();
    let got_index: Vec<f64> = index.iter().map(|e| e.1).collect();
    assert_eq!(
        got_index, want_index,
        "{key} round {round}: K:v holds each value once"
    );
}

/// Reference window: (bucket end, member) -> that bucket's sum and latest time.
type Buckets = BTreeMap<(i64, String), Held>;

/// Compares the window view's raw keys — K, K:v, K:n, K:log and every
/// bucket hash — with the live buckets of the model at `now`. `times`:
/// for a tie-break window, each member's tie time (K:t).
async fn check_window(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    buckets: &Buckets,
    times: Option<&BTreeMap<String, i64>>,
    now: i64,
    round: usize,
) {
    let live: Vec<(&(i64, String), &Held)> = buckets
        .iter()
        .filter(|((end, _), _)| *end > now - WINDOW_MS)
        .collect();
    let mut sums: BTreeMap<String, Held> = BTreeMap::new();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut ends: BTreeSet<i64> = BTreeSet::new();
    for ((end, m), h) in &live {
        let e = sums.entry(m.clone()).or_default();
        e.sum += h.sum;
        *counts.entry(m.clone()).or_insert(0) += 1;
        ends.insert(*end);
    }
    if let Some(times) = times {
        for (m, h) in sums.iter_mut() {
            h.ts = times.get(m).copied().unwrap_or(-1);
        }
    }
    check_view(c, key, times.is_some(), &sums, round).await;
    let n: BTreeMap<String, i64> = redis::cmd("HGETALL")
        .arg(format!("{key}:n"))
        .query_async(c)
        .await
        .expect("HGETALL K:n");
    assert_eq!(n, counts, "{key} round {round}: K:n counts live buckets");
    let log = zrange(c, &format!("{key}:log")).await;
    let got_ends: BTreeSet<i64> = log.iter().map(|e| e.1 as i64).collect();
    assert_eq!(
        got_ends, ends,
        "{key} round {round}: K:log holds the live buckets"
    );
    for end in &ends {
        let raw: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("{key}:b:{end}"))
            .query_async(c)
            .await
            .expect("HGETALL bucket");
        // A plain sum's bucket keeps the value alone (no tie-break, so no
        // time); "value,time" would carry the latest event's time.
        let got: BTreeMap<String, f64> = raw
            .into_iter()
            .map(|(m, vt)| {
                let v = vt.split_once(',').map_or(vt.as_str(), |(v, _)| v);
                (m, v.parse().expect("value"))
            })
            .collect();
        let want: BTreeMap<String, f64> = live
            .iter()
            .filter(|((e, _), _)| e == end)
            .map(|((_, m), h)| (m.clone(), h.sum as f64))
            .collect();
        assert_eq!(got, want, "{key} round {round}: bucket {end}");
    }
}

#[tokio::test]
async fn the_apply_script_writes_what_a_plain_model_computes() {
    let redis = common::Redis::start();
    let mut c = redis.conn().await;
    // The real time: window keys expire by Redis's clock, not the test's.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    // Start on a minute boundary, so each round's clock lands on one.
    let start = now_ms / BUCKET_MS * BUCKET_MS;
    for seed in 1..=24u64 {
        let prefix = common::unique("am");
        let mut direct = Direct::new(&redis.url(), &prefix, BOARDS, start).await;
        let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut model: BTreeMap<String, Held> = BTreeMap::new();
        let mut buckets = Buckets::new();
        // Tie-break window: a member's tie time is its latest event's
        // since it last entered the window (an eviction leaves it alone;
        // leaving the window forgets it).
        let mut wtimes: BTreeMap<String, i64> = BTreeMap::new();
        for round in 0..20usize {
            direct.clock.set(start + round as i64 * 60_000);
            let now = direct.now();
            wtimes.retain(|m, _| {
                buckets
                    .keys()
                    .any(|(end, bm)| bm == m && *end > now - WINDOW_MS)
            });
            // Few members and many events: most members appear several
            // times in one call, and share values with others.
            let n = 1 + rng.next(80) as usize;
            let mut events: Vec<Value> = Vec::with_capacity(n);
            for k in 0..n {
                let member = format!("u{}", rng.next(20));
                // Up to 12 minutes back: several buckets per call, and some
                // events too late for the window (still counted in "all").
                // The first event is recent: a view with no update in a
                // call is not trimmed by it (the trimmer's job), and the
                // model evicts on every call.
                let back = if k == 0 { 30 } else { 12 * 60 };
                let ts = now - rng.next(back) as i64 * 1000;
                let held = model.entry(member.clone()).or_default();
                let v = value(&mut rng, held.sum);
                held.sum += v;
                held.ts = held.ts.max(ts);
                let end = (ts.div_euclid(BUCKET_MS) + 1) * BUCKET_MS;
                if end > now - WINDOW_MS {
                    let b = buckets.entry((end, member.clone())).or_default();
                    b.sum += v;
                    b.ts = b.ts.max(ts);
                    let w = wtimes.entry(member.clone()).or_insert(ts);
                    *w = (*w).max(ts);
                }
                events.push(
                    json!({"type": "score", "event_id": format!("s{seed}r{round}e{k}"),
                                   "ts": ts, "user_id": member, "game_id": "g1", "points": v}),
                );
            }
            direct.apply(&events).await;
            check_view(
                &mut c,
                &format!("{prefix}:{{msum}}:all"),
                false,
                &model,
                round,
            )
            .await;
            check_view(
                &mut c,
                &format!("{prefix}:{{mtie}}:all"),
                true,
                &model,
                round,
            )
            .await;
            let window = format!("{prefix}:{{msum}}:win:10m");
            check_window(&mut c, &window, &buckets, None, now, round).await;
            let window = format!("{prefix}:{{mtie}}:win:10m");
            check_window(&mut c, &window, &buckets, Some(&wtimes), now, round).await;
        }
    }
}

/// A plain sum without the dense-rank index, written one or two members
/// per call (an instance of a scoped board at small batches): the script
/// then adds with `ZADD … INCR` instead of reading the totals back
/// (`ZMSCORE`) and writing them, and must hold what the model sums, zero and negative totals and
/// values up to the schema's cap included.
#[tokio::test]
async fn one_or_two_members_per_call_are_added_as_the_model_sums() {
    let redis = common::Redis::start();
    let boards = r#"
[[board]]
name = "mfew"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
"#;
    let prefix = common::unique("af");
    let mut direct = Direct::new(&redis.url(), &prefix, boards, 1_800_000_000_000).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut model: BTreeMap<String, i64> = BTreeMap::new();
    let before = redis.commandstats();
    for call in 0..300usize {
        let n = 1 + rng.next(2) as usize;
        let events: Vec<Value> = (0..n)
            .map(|k| {
                let member = format!("u{}", rng.next(6));
                let sum = model.entry(member.clone()).or_default();
                let v = value(&mut rng, *sum);
                *sum += v;
                json!({"type": "score", "event_id": format!("f{call}e{k}"),
                       "ts": 1_800_000_000_000i64 - 1000, "user_id": member, "game_id": "g1", "points": v})
            })
            .collect();
        direct.apply(&events).await;
        let got = redis.zset(&format!("{prefix}:{{mfew}}:all")).await;
        let want: BTreeMap<String, f64> =
            model.iter().map(|(m, s)| (m.clone(), *s as f64)).collect();
        assert_eq!(got, want, "call {call}");
    }
    let after = redis.commandstats();
    let read = |stats: &BTreeMap<String, u64>| stats.get("zmscore").copied().unwrap_or(0);
    let reads = read(&after) - read(&before);
    assert_eq!(reads, 0, "no call read the totals back");
    println!("300 calls of one or two members held the model's sums, none read a total back");
}
