//! End-to-end throughput: 1,000,000 gift events (100,000 senders, 1,000
//! receivers, Zipf) in an 8-partition topic, consumed into the example
//! config's gift boards (at least 5 sorted sets per gift), once with the
//! default batch settings and once with `batch.max_events = 1` (one round
//! trip per event, the naive approach), in the same run against the same
//! servers. Prints events/s for both and their ratio, and per event the CPU
//! time of rankflow and of Redis and the commands Redis ran.
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench pipeline`).
//! `BENCH_EVENTS` and `BENCH_NAIVE_EVENTS` shrink the loads for a quick look.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::event::EventType;
use support::{consume, env_u64};

const BOARDS: &str = r#"
[[board]]
name = "star_coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["day", "week", "month", "all"]

[[board]]
name = "star_flowers"
event = "gift"
filter = 'gift_id == "flower"'
member = "receiver_id"
score = "count"
periods = ["week"]

[[board]]
name = "star_fans"
event = "gift"
member = "sender_id"
score = "count * value"
scope = "receiver_id"
periods = ["day"]
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 1_000_000);
    let naive_events = env_u64("BENCH_NAIVE_EVENTS", events).min(events);
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;

    eprintln!(
        "producing {events} gift events (100000 senders, 1000 receivers, Zipf 1.1) into 8 partitions..."
    );
    let options = rankflow::produce::Options {
        brokers: broker.brokers(),
        topic: topic.clone(),
        events,
        rate: 0,
        members: 100_000,
        receivers: 1_000,
        games: 20,
        types: vec![EventType::Gift],
        skew: 1.1,
        seed: 42,
        client: Vec::new(),
    };
    let produced = Instant::now();
    let sent = tokio::task::spawn_blocking(move || {
        let clock: SharedClock = Arc::new(SystemClock);
        rankflow::produce::run(&options, clock, &|| false)
    })
    .await
    .expect("producer thread")
    .expect("produce");
    eprintln!(
        "produced {sent} events in {:.1}s",
        produced.elapsed().as_secs_f64()
    );

    let defaults = rankflow::config::BatchConfig::default();
    let max_events = env_u64("BENCH_MAX_EVENTS", defaults.max_events.get() as u64) as usize;
    eprintln!(
        "batched: max_events = {max_events}, max_delay_ms = {}",
        defaults.max_delay_ms.get()
    );
    let delay = defaults.max_delay_ms.get();
    let batched = consume(&broker, &redis, &topic, BOARDS, events, (max_events, delay)).await;
    eprintln!("naive: max_events = 1 over the first {naive_events} events");
    let naive = consume(&broker, &redis, &topic, BOARDS, naive_events, (1, delay)).await;

    println!(
        "pipeline benchmark ({events} gift events, 8 partitions, boards: star_coins day/week/month/all, star_flowers week, star_fans day per receiver)"
    );
    println!(
        "  {:<40} {:>10} {:>14} {:>12} {:>14}",
        "", "events/s", "rankflow µs/ev", "Redis µs/ev", "Redis cmds/ev"
    );
    for (name, r) in [
        (
            format!("batched (max_events {max_events}, max_delay_ms {delay})"),
            batched,
        ),
        ("naive (max_events 1)".to_string(), naive),
    ] {
        println!(
            "  {name:<40} {:>10.0} {:>14.2} {:>12.2} {:>14.1}",
            r.events_per_s,
            r.rankflow_us(),
            r.redis_us(),
            r.commands_per_event()
        );
    }
    println!("  (naive measured over the first {naive_events} events)");
    println!(
        "  ratio batched / naive : {:>10.1}x",
        batched.events_per_s / naive.events_per_s
    );
}
