//! End-to-end throughput: 1,000,000 gift events (100,000 senders, 1,000
//! receivers, Zipf) in an 8-partition topic, consumed into the example
//! config's gift boards (at least 5 sorted sets per gift), once with the
//! default batch settings and once with `batch.max_events = 1` (one round
//! trip per event, the naive approach), in the same run against the same
//! servers. Prints events/s for both and their ratio.
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench pipeline`).
//! `BENCH_EVENTS` and `BENCH_NAIVE_EVENTS` shrink the loads for a quick look.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::event::EventType;

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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Consumes the topic with a fresh group and key prefix; returns events/s
/// measured from the first applied event to the last.
async fn consume(
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    events: u64,
    max_events: usize,
    max_delay_ms: u64,
) -> f64 {
    let mut setup = Setup::new(broker, redis, BOARDS);
    setup.topic = topic.to_string();
    setup.batch = (max_events, max_delay_ms);
    let clock: SharedClock = Arc::new(SystemClock);
    let app = InProcess::start(&setup, clock).await;
    let metrics = app.url("/metrics");
    // One client with keep-alive, polled every 50 ms: the measurement must
    // not take CPU from what it measures.
    let client = reqwest::Client::new();
    let scrape = |url: String| {
        let client = client.clone();
        async move {
            match client.get(url).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        }
    };
    let counted = |text: &str| metric_sum(text, "rankflow_events_total", &[("topic", topic)]);
    // Counters are process-wide; measure this run's increase.
    let text = scrape(metrics.clone()).await;
    let base = counted(&text);
    let flush_base = (
        metric_sum(&text, "rankflow_batch_flush_seconds_sum", &[]),
        metric_sum(&text, "rankflow_batch_flush_seconds_count", &[]),
    );
    let mut started: Option<Instant> = None;
    let mut last_report = Instant::now();
    let result = loop {
        let n = counted(&scrape(metrics.clone()).await) - base;
        if n > 0.0 && started.is_none() {
            started = Some(Instant::now());
            eprintln!("  first events applied");
        }
        if n >= events as f64 {
            let took = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
            let text = scrape(metrics.clone()).await;
            let flushes =
                metric_sum(&text, "rankflow_batch_flush_seconds_count", &[]) - flush_base.1;
            let flush_s = metric_sum(&text, "rankflow_batch_flush_seconds_sum", &[]) - flush_base.0;
            eprintln!(
                "  {n} events in {took:.2}s; {flushes} flushes, {:.1} ms each on average, {:.0}% of the time in Redis",
                1000.0 * flush_s / flushes.max(1.0),
                100.0 * flush_s / took.max(1e-9)
            );
            break n / took.max(1e-9);
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {n} events applied");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    app.stop().await;
    if std::env::var("BENCH_REDIS_STATS").is_ok() {
        let mut c = redis.conn().await;
        let mut stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        let cpu: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        stats.push_str(&cpu);
        eprintln!("{stats}");
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .unwrap_or(());
    }
    result
}

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
    let batched = consume(
        &broker,
        &redis,
        &topic,
        events,
        max_events,
        defaults.max_delay_ms.get(),
    )
    .await;
    eprintln!("naive: max_events = 1 over the first {naive_events} events");
    let naive = consume(
        &broker,
        &redis,
        &topic,
        naive_events,
        1,
        defaults.max_delay_ms.get(),
    )
    .await;

    println!(
        "pipeline benchmark ({events} gift events, 8 partitions, boards: star_coins day/week/month/all, star_flowers week, star_fans day per receiver)"
    );
    println!(
        "  batched (max_events {max_events}, max_delay_ms {}): {batched:>10.0} events/s",
        defaults.max_delay_ms.get()
    );
    println!("  naive   (max_events 1): {naive:>10.0} events/s");
    println!("  (naive measured over the first {naive_events} events)");
    println!("  ratio batched / naive : {:>10.1}x", batched / naive);
}
