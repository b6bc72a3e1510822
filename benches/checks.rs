//! What checks (docs/checks.md) cost on the write path, in one run against
//! the same servers: the plain workload of `benches/pipeline.rs` (300,000
//! gift events by default, `BENCH_EVENTS`; 100,000 senders, 1,000
//! receivers, Zipf 1.1, 8 partitions) consumed at the default batch
//! settings
//! - without checks,
//! - with one rule check (`count * value <= 100000`) and one rate check
//!   (at most 500 gifts of one sender per minute of event time), which few
//!   events fail: the cost of checking, not of quarantining (the events'
//!   times are 20 ms apart, as a live stream's would be),
//!
//! alternating `BENCH_ROUNDS` times (default 3; every other round starts
//! with checks; `BENCH_ONLY=with` or `without` runs only one of the two, for
//! a profile; `BENCH_STATS=1` prints each run's `INFO commandstats` per
//! event, and `BENCH_PERF_CTL` names a `perf record --control` FIFO
//! that samples only while events are consumed). Prints events/s, CPU-µs
//! per event of rankflow and of Redis, Redis commands per event and each
//! run's ratio to the run without checks of its round; then the memory of
//! the rate state per member (`MEMORY USAGE` of its keys); then, unless
//! `BENCH_WRITES=0`, what writing one member's state costs Redis in
//! isolation (20,000 states of 250 bytes, 1,000 per command, each written
//! 5 times): by the rates script's compare-and-set, by a script that only
//! sets, by `WATCH`, `MGET` and `MULTI`/`SET`/`EXEC` (a compare-and-set of
//! native commands, 100 keys per transaction), by pipelined native `SET`s (the floor, which a native
//! compare-and-set such as `SET ... IFEQ` of Redis 8.4 would approach), and
//! as fields of 256 bucket hashes compared and set by one script call per
//! bucket (a layout change).
//!
//! Run with `cargo bench --bench checks`.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use common::*;
use rankflow::event::EventType;
use support::{CHECKS, PLAIN, Run, consume_with, env_u64};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 300_000);
    let rounds = env_u64("BENCH_ROUNDS", 3);
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    eprintln!(
        "producing {events} gift events (100000 senders, 1000 receivers, Zipf 1.1) into 8 partitions..."
    );
    let options = support::zipf_options(&broker, &topic, events, EventType::Gift, 7);
    // Event times 20 ms apart (100 minutes for 300,000 events), so that a
    // per-minute rate sees the senders' pace of a live stream.
    let sent = support::produce_spread(options, 20).await;
    eprintln!("produced {sent} events");
    let defaults = rankflow::config::BatchConfig::default();
    let batch = (defaults.max_events.get(), defaults.max_delay_ms.get());
    let with_checks = format!("{PLAIN}{CHECKS}");
    let mut runs: Vec<(&str, Run)> = Vec::new();
    let mut state = (0.0, 0.0, 0usize);
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    for round in 0..rounds {
        // Every other round starts with checks, so that a machine getting
        // busier or quieter during the run favours neither.
        let mut order = [("without checks", false), ("rule + rate check", true)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (name, checked) in order {
            if (only == "with" && !checked) || (only == "without" && checked) {
                continue;
            }
            eprintln!("round {}, {name}:", round + 1);
            let prefix = std::sync::Mutex::new(String::new());
            let boards = if checked { &with_checks } else { PLAIN };
            let stats = env_u64("BENCH_STATS", 0) != 0;
            let before = match stats {
                true => Some(support::command_stats(&redis).await),
                false => None,
            };
            support::perf_control("enable");
            let run = consume_with(&broker, &redis, &topic, boards, events, batch, &|s| {
                if checked {
                    s.quarantine = Some(unique("quarantine"));
                }
                *prefix.lock().expect("prefix") = s.prefix.clone();
            })
            .await;
            support::perf_control("disable");
            if let Some(before) = before {
                let delta = support::command_delta(&before, &support::command_stats(&redis).await);
                for (command, (calls, usec)) in delta {
                    eprintln!(
                        "  {name}: {command:<10} {:>7.3} calls/ev {:>7.3} µs/ev",
                        calls / events as f64,
                        usec / events as f64
                    );
                }
            }
            if checked {
                let prefix = prefix.lock().expect("prefix").clone();
                state = rate_state(&redis, &prefix).await;
            }
            runs.push((name, run));
        }
        // Listed without checks first in every round.
        if round % 2 == 1 && only.is_empty() {
            let n = runs.len();
            runs.swap(n - 2, n - 1);
        }
    }
    println!(
        "checks, write path ({events} gift events, 8 partitions, the plain boards; batch {} events / {} ms)",
        batch.0, batch.1
    );
    println!(
        "  {:<22} {:>10} {:>9} {:>15} {:>12} {:>14} {:>12}",
        "run",
        "events/s",
        "vs first",
        "rankflow µs/ev",
        "Redis µs/ev",
        "Redis cmds/ev",
        "quarantined"
    );
    let mut ratios = Vec::new();
    for (i, (name, r)) in runs.iter().enumerate() {
        let first = runs[i - i % 2].1;
        let ratio = r.events_per_s / first.events_per_s.max(1e-9);
        if i % 2 == 1 {
            ratios.push(ratio);
        }
        println!(
            "  {name:<22} {:>10.0} {:>8.2}x {:>15.2} {:>12.2} {:>14.2} {:>12.0}",
            r.events_per_s,
            ratio,
            r.rankflow_us(),
            r.redis_us(),
            r.commands_per_event(),
            r.quarantined
        );
    }
    let median = support::median(&mut ratios);
    println!(
        "  with checks / without, per round: {:?}; median {median:.3}",
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>(),
    );
    let (bytes, entries, keys) = state;
    println!(
        "  rate state: {keys} members, {:.0} bytes per member (MEMORY USAGE), {:.1} passed events kept per member",
        bytes / keys.max(1) as f64,
        entries / keys.max(1) as f64
    );
    if env_u64("BENCH_WRITES", 1) != 0 {
        state_writes(&redis).await;
    }
}

/// States in the isolated measurement of writes, and bytes in each (by
/// default; `BENCH_STATE_BYTES`).
const STATES: usize = 20_000;
const STATE_BYTES: u64 = 250;

/// How a state is written in [`state_writes`].
#[derive(Clone, Copy, PartialEq)]
enum Write {
    /// The write path's compare-and-set (src/sink/lua/rates.lua).
    Compared,
    /// A script that sets each state, comparing nothing.
    ScriptSet,
    /// `WATCH` and `MGET` of the states, compared here, then `MULTI`, a
    /// `SET ... PX` each and `EXEC`: a compare-and-set of native commands
    /// (on a connection that nothing else uses meanwhile).
    Watched,
    /// `SET ... PX`, pipelined.
    Native,
    /// The states of a bucket as fields of one hash, compared and set by
    /// one script call per bucket (`HMGET`, then one `HSET`): a layout
    /// change, measured for the decision it needs.
    Bucketed,
}

/// Compare-and-set of a bucket hash's fields (KEYS[1]; ARGV: field,
/// state read, state to store, per state): the indices of the fields
/// that had changed, none written then.
const BUCKETED: &str = r#"
local n = #ARGV / 3
local fields = {}
for i = 1, n do fields[i] = ARGV[3 * i - 2] end
local got = redis.call('HMGET', KEYS[1], unpack(fields))
local changed, pairs = {}, {}
for i = 1, n do
  if (got[i] or '') ~= ARGV[3 * i - 1] then
    changed[#changed + 1] = i
  else
    pairs[#pairs + 1] = fields[i]
    pairs[#pairs + 1] = ARGV[3 * i]
  end
end
if #pairs > 0 then redis.call('HSET', KEYS[1], unpack(pairs)) end
return changed
"#;

/// Redis CPU-µs per state written, for each way of writing (see the
/// header), each measured twice, alternating.
async fn state_writes(redis: &Redis) {
    let mut c = redis.conn().await;
    let compared: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(include_str!("../src/sink/lua/rates.lua"))
        .query_async(&mut c)
        .await
        .expect("load rates.lua");
    let set_only: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[3 * i - 1], 'PX', ARGV[3 * i]) end return {}")
        .query_async(&mut c)
        .await
        .expect("load the set-only script");
    let bucketed: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(BUCKETED)
        .query_async(&mut c)
        .await
        .expect("load the bucket script");
    let state_bytes = env_u64("BENCH_STATE_BYTES", STATE_BYTES) as usize;
    let prefix = unique("writes");
    let keys: Vec<String> = (0..STATES)
        .map(|i| format!("{prefix}:rate:{{{:02x}}}:gift:m{i}", i % 256))
        .collect();
    // A state of the given generation: differs from every other one.
    let state = |i: usize, generation: usize| {
        let mut v = format!("{generation}:{i}:").into_bytes();
        v.resize(state_bytes, b'.');
        v
    };
    let mut generation = 0;
    let mut pipe = redis::pipe();
    for (i, k) in keys.iter().enumerate() {
        pipe.cmd("SET")
            .arg(k)
            .arg(state(i, 0))
            .arg("PX")
            .arg(3_660_000)
            .ignore();
    }
    let () = pipe.query_async(&mut c).await.expect("first states");
    // The same states as fields of 256 bucket hashes.
    let bucket_key = |b: usize| format!("{prefix}:rates:{{{b:02x}}}:gift");
    let mut by_bucket: Vec<Vec<usize>> = vec![Vec::new(); 256];
    for i in 0..STATES {
        by_bucket[i % 256].push(i);
    }
    let mut pipe = redis::pipe();
    for (b, members) in by_bucket.iter().enumerate() {
        for &i in members {
            pipe.cmd("HSET")
                .arg(bucket_key(b))
                .arg(format!("m{i}"))
                .arg(state(i, 0))
                .ignore();
        }
    }
    let () = pipe.query_async(&mut c).await.expect("first bucket states");
    let mut bucket_generation = 0;
    let ways = [
        (Write::Compared, "rates.lua compare-and-set"),
        (Write::ScriptSet, "a script that only sets"),
        (Write::Watched, "WATCH + MGET, MULTI SET EXEC"),
        (Write::Native, "native SET, pipelined"),
        (Write::Bucketed, "per-bucket hash (layout change)"),
    ];
    println!(
        "  writing one member's state in isolation ({STATES} states of {state_bytes} bytes, 1,000 per command):"
    );
    for round in 0..2 {
        for (way, name) in ways {
            let (cpu0, _) = support::redis_usage(redis).await;
            for _ in 0..5 {
                if way == Write::Watched {
                    generation += 1;
                    watched_writes(&mut c, &keys, &|i| state(i, generation - 1), &|i| {
                        state(i, generation)
                    })
                    .await;
                    continue;
                }
                let pipe = if way == Write::Bucketed {
                    bucket_generation += 1;
                    let mut pipe = redis::pipe();
                    for (b, members) in by_bucket.iter().enumerate() {
                        let mut call = redis::cmd("EVALSHA");
                        call.arg(&bucketed).arg(1).arg(bucket_key(b));
                        for &i in members {
                            call.arg(format!("m{i}"))
                                .arg(state(i, bucket_generation - 1))
                                .arg(state(i, bucket_generation));
                        }
                        pipe.add_command(call);
                    }
                    pipe
                } else {
                    generation += 1;
                    let sha = if way == Write::Compared {
                        &compared
                    } else {
                        &set_only
                    };
                    per_key(way, sha, &keys, &|i| state(i, generation - 1), &|i| {
                        state(i, generation)
                    })
                };
                let replies: Vec<redis::Value> =
                    pipe.query_async(&mut c).await.expect("write states");
                for reply in replies {
                    let changed: Vec<i64> = redis::from_redis_value(reply).expect("indices");
                    assert!(changed.is_empty(), "no state changed under the writes");
                }
            }
            let (cpu1, _) = support::redis_usage(redis).await;
            let per_state = (cpu1 - cpu0) * 1e6 / (5 * STATES) as f64;
            println!(
                "    round {}: {name:<32} {per_state:>6.2} Redis CPU-µs per state",
                round + 1
            );
        }
    }
    let mut check = redis::cmd("GET");
    let stored: Vec<u8> = check
        .arg(&keys[7])
        .query_async(&mut c)
        .await
        .expect("a state");
    assert_eq!(stored, state(7, generation), "the last write is stored");
}

/// The commands that write every state of `keys` once, one key per state:
/// `before(i)` is the state stored, `after(i)` the one to store.
fn per_key(
    way: Write,
    sha: &str,
    keys: &[String],
    before: &dyn Fn(usize) -> Vec<u8>,
    after: &dyn Fn(usize) -> Vec<u8>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for (n, chunk) in keys.chunks(1_000).enumerate() {
        let at = n * 1_000;
        if way == Write::Native {
            for (j, k) in chunk.iter().enumerate() {
                pipe.cmd("SET")
                    .arg(k)
                    .arg(after(at + j))
                    .arg("PX")
                    .arg(3_660_000)
                    .ignore();
            }
            continue;
        }
        let mut call = redis::cmd("EVALSHA");
        call.arg(sha).arg(chunk.len()).arg(chunk);
        for j in 0..chunk.len() {
            call.arg(before(at + j)).arg(after(at + j)).arg(3_660_000);
        }
        pipe.add_command(call);
    }
    pipe
}

/// Keys per transaction in [`watched_writes`]: Redis 7.0 checks each
/// `WATCH`ed key against every key the connection already watches, so
/// 1,000 keys per `WATCH` cost about 150 µs per state (measured).
const WATCHED_PER_CALL: usize = 100;

/// Writes every state of `keys` in transactions of [`WATCHED_PER_CALL`]
/// keys: `WATCH` and `MGET` (one round trip), a comparison with `before`
/// here, then `MULTI`, `SET`s and `EXEC` (a second).
async fn watched_writes(
    c: &mut redis::aio::MultiplexedConnection,
    keys: &[String],
    before: &dyn Fn(usize) -> Vec<u8>,
    after: &dyn Fn(usize) -> Vec<u8>,
) {
    for (n, chunk) in keys.chunks(WATCHED_PER_CALL).enumerate() {
        let at = n * WATCHED_PER_CALL;
        let mut read = redis::pipe();
        read.cmd("WATCH").arg(chunk).ignore();
        read.cmd("MGET").arg(chunk);
        let (got,): (Vec<Vec<u8>>,) = read.query_async(c).await.expect("watch and read");
        for (j, g) in got.iter().enumerate() {
            assert_eq!(*g, before(at + j), "the state read is the one expected");
        }
        let mut write = redis::pipe();
        write.atomic();
        for (j, k) in chunk.iter().enumerate() {
            write
                .cmd("SET")
                .arg(k)
                .arg(after(at + j))
                .arg("PX")
                .arg(3_660_000)
                .ignore();
        }
        let done: Option<()> = write.query_async(c).await.expect("multi/exec");
        assert!(done.is_some(), "no state changed under the writes");
    }
}

/// The rate states of `prefix`: total `MEMORY USAGE`, total passed events
/// kept, and how many.
async fn rate_state(redis: &Redis, prefix: &str) -> (f64, f64, usize) {
    let mut c = redis.conn().await;
    let keys = redis.keys(&format!("{prefix}:rate:*")).await;
    let (mut bytes, mut entries) = (0.0, 0.0);
    for k in &keys {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .query_async(&mut c)
            .await
            .unwrap_or(None);
        bytes += used.unwrap_or(0) as f64;
        let value: Vec<u8> = redis::cmd("GET")
            .arg(k)
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        let kept = passed_events(&value);
        entries += kept as f64;
    }
    (bytes, entries, keys.len())
}

/// The number of passed events a stored state keeps, read as
/// docs/redis-layout.md describes the encoding: a version byte, the newest
/// time (8 bytes), a u16 count of partitions each with a u16 name length,
/// the name and two offsets (16 bytes), then the u32 count of passed
/// events.
fn passed_events(state: &[u8]) -> u32 {
    let le16 = |at: usize| {
        state
            .get(at..at + 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
    };
    let mut at = 9;
    let parts = le16(at);
    at += 2;
    for _ in 0..parts {
        at += 2 + usize::from(le16(at)) + 16;
    }
    state
        .get(at..at + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}
