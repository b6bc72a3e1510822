//! A batch's round trips on a Redis Cluster (issue 32 point 6), on the
//! 3-primary cluster of the tests: the plain boards of the pipeline
//! benchmark (`star_fans` has an instance, so a slot and an apply call, per
//! receiver: about 1,000 small calls per batch) at the default batch
//! settings and at 2,000-event batches. Prints events/s, apply calls and
//! pipelined round trips per batch (every pipeline of the process: the
//! apply calls with what rides with them, and the positions), and the
//! round trips the calls would take cut 32 to a trip, as before round
//! trips were cut by work; and the same run on one Redis as the baseline,
//! with its ratio.
//!
//! `cargo bench --bench cluster`; `BENCH_EVENTS` (default 300,000) sets
//! the load, `BENCH_BATCHES` the settings (`default,2000/20`).

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use common::*;
use rankflow::event::EventType;
use support::{PLAIN, Run, consume_with, env_u64};

/// Apply calls per round trip before they were cut by work.
const OLD_CALLS_PER_TRIP: f64 = 32.0;

/// What one run measured on one Redis or the cluster.
struct Measured {
    run: Run,
    /// Apply calls (EVALSHA) the nodes ran.
    calls: f64,
    /// Redis CPU seconds over every node.
    redis_cpu_s: f64,
    round_trips: f64,
}

/// The nodes' CPU seconds and EVALSHA calls so far, summed.
async fn usage(nodes: &[&Redis]) -> (f64, f64) {
    let mut cpu = 0.0;
    let mut calls = 0.0;
    for n in nodes {
        cpu += support::redis_usage(n).await.0;
        calls += support::command_stats(n)
            .await
            .get("evalsha")
            .map_or(0.0, |s| s.0);
    }
    (cpu, calls)
}

/// Consumes `events` of `topic` into the plain boards on `nodes` (a
/// cluster when `cluster_urls` is set).
async fn measure(
    broker: &Broker,
    nodes: &[&Redis],
    cluster_urls: Option<&str>,
    topic: &str,
    events: u64,
    batch: (usize, u64),
) -> Measured {
    let (cpu0, calls0) = usage(nodes).await;
    let trips0 = rankflow::sink::store::round_trips();
    let prepare = |s: &mut Setup| {
        if let Some(urls) = cluster_urls {
            s.redis_url = urls.to_string();
        }
    };
    let run = consume_with(broker, nodes[0], topic, PLAIN, events, batch, &prepare).await;
    let (cpu1, calls1) = usage(nodes).await;
    Measured {
        run,
        calls: calls1 - calls0,
        redis_cpu_s: cpu1 - cpu0,
        round_trips: (rankflow::sink::store::round_trips() - trips0) as f64,
    }
}

fn batches() -> Vec<(usize, u64)> {
    let d = rankflow::config::BatchConfig::default();
    let spec = std::env::var("BENCH_BATCHES").unwrap_or_else(|_| "default,2000/20".into());
    spec.split(',')
        .map(str::trim)
        .filter_map(|s| match s {
            "default" => Some((d.max_events.get(), d.max_delay_ms.get())),
            _ => {
                let (n, ms) = s.split_once('/')?;
                Some((n.parse().ok()?, ms.parse().ok()?))
            }
        })
        .collect()
}

fn print_row(name: &str, batch: (usize, u64), m: &Measured, one: Option<&Measured>) {
    let per_batch = |v: f64| v / m.run.batches.max(1.0);
    let ratio = one.map_or("-".to_string(), |o| {
        format!("{:.2}x", m.run.events_per_s / o.run.events_per_s.max(1e-9))
    });
    println!(
        "  {name:<16} {:>10} {:>10.0} {:>8} {:>8.0} {:>12.1} {:>14.1} {:>16.1} {:>10.2}",
        format!("{}/{}", batch.0, batch.1),
        m.run.events_per_s,
        ratio,
        m.run.batches,
        per_batch(m.calls),
        per_batch(m.round_trips),
        (per_batch(m.calls) / OLD_CALLS_PER_TRIP).ceil() + 1.0,
        1e6 * m.redis_cpu_s / m.run.events.max(1.0),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 300_000);
    let broker = Broker::start();
    let single = Redis::start();
    let cluster = RedisCluster::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    let options = support::zipf_options(&broker, &topic, events, EventType::Gift, 42);
    let sent = support::produce(options).await;
    eprintln!("produced {sent} gift events into 8 partitions");
    let nodes: Vec<&Redis> = cluster.nodes.iter().collect();
    let urls = cluster.toml_urls();
    println!("cluster benchmark ({events} gift events, plain boards, 8 partitions; one consumer)");
    println!(
        "  {:<16} {:>10} {:>10} {:>8} {:>8} {:>12} {:>14} {:>16} {:>10}",
        "redis",
        "batch",
        "events/s",
        "x one",
        "batches",
        "calls/batch",
        "trips/batch",
        "trips if 32/trip",
        "Redis µs/ev"
    );
    for batch in batches() {
        let one = measure(&broker, &[&single], None, &topic, events, batch).await;
        print_row("one Redis", batch, &one, None);
        let three = measure(&broker, &nodes, Some(&urls), &topic, events, batch).await;
        print_row("3 primaries", batch, &three, Some(&one));
    }
    println!(
        "  (trips/batch: every pipelined round trip of the process per batch, the apply calls' and the positions'; \"trips if 32/trip\": the calls cut 32 to a trip, plus the positions)"
    );
}
