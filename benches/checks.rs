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
//! a profile, and `BENCH_PERF_CTL` names a `perf record --control` FIFO
//! that samples only while events are consumed). Prints events/s, CPU-µs
//! per event of rankflow and of Redis, Redis commands per event and each
//! run's ratio to the run without checks of its round; then the memory of
//! the rate state per member (`MEMORY USAGE` of its keys).
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
            support::perf_control("enable");
            let run = consume_with(&broker, &redis, &topic, boards, events, batch, &|s| {
                if checked {
                    s.quarantine = Some(unique("quarantine"));
                }
                *prefix.lock().expect("prefix") = s.prefix.clone();
            })
            .await;
            support::perf_control("disable");
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
