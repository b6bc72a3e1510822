//! What a shadow board's backfill (docs/rebuilds.md) costs and how fast it
//! goes, in one run against the same servers: `BENCH_EVENTS` gift events
//! of history (default 1,000,000; the plain workload of
//! `benches/pipeline.rs`: 100,000 senders, 1,000 receivers, Zipf 1.1, 8
//! partitions, event times 20 ms apart)
//! 1. consumed by the plain boards from scratch, at the default batch
//!    settings: the plain pipeline's events/s, the baseline;
//! 2. then, with the live group caught up, the same fleet restarted while
//!    `BENCH_LIVE_RATE` live events per second (default 5,000) arrive,
//!    first without a shadow (what a restart's group join costs the live
//!    consumers), then with a shadow of `star_coins` (its four views,
//!    re-priced) that backfills the whole history: the backfill's
//!    events/s over the history and its ratio to the baseline, and in
//!    both restarts the live consumers' lag (`rankflow_consumer_lag`,
//!    summed over partitions, sampled every 100 ms for at least 8 s):
//!    its largest value, when it fell under a tenth of a second's events,
//!    and its median and largest from then on.
//!
//! Run with `cargo bench --bench shadows`.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::event::EventType;
use support::{PLAIN, consume_with, env_u64};

const SHADOW: &str = r#"
[[board]]
name = "star_coins_v2"
shadow_of = "star_coins"
backfill_from = "2000-01-01T00:00:00Z"
event = "gift"
member = "receiver_id"
score = 'count * value * (gift_id == "rocket" ? 2 : 1)'
periods = ["day", "week", "month", "all"]
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 1_000_000);
    let live_rate = env_u64("BENCH_LIVE_RATE", 5_000);
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    eprintln!("producing {events} gift events of history into 8 partitions...");
    let options = support::zipf_options(&broker, &topic, events, EventType::Gift, 11);
    let sent = support::produce_spread(options, 20).await;
    eprintln!("produced {sent} events");
    let defaults = rankflow::config::BatchConfig::default();
    let batch = (defaults.max_events.get(), defaults.max_delay_ms.get());

    // 1. The plain pipeline over the history; its group and prefix are
    // kept, so the live consumers of run 2 start caught up.
    eprintln!("plain pipeline:");
    let kept = std::sync::Mutex::new((String::new(), String::new()));
    let plain = consume_with(&broker, &redis, &topic, PLAIN, sent, batch, &|s| {
        *kept.lock().expect("kept") = (s.prefix.clone(), s.group.clone());
    })
    .await;
    let (prefix, group) = kept.lock().expect("kept").clone();

    // 2. The same fleet restarted under live events, without and then
    // with the shadow: a restart's own lag (the group join) is the
    // baseline of what the backfill adds.
    let mut setup = Setup::new(&broker, &redis, PLAIN);
    setup.topic = topic.clone();
    setup.prefix = prefix.clone();
    setup.group = group;
    setup.batch = batch;
    eprintln!("restart without the shadow, {live_rate} live events/s:");
    let control = restart_under_live(&broker, &redis, &setup, live_rate, None).await;
    eprintln!("restart with a shadow of star_coins, {live_rate} live events/s:");
    setup.boards = format!("{PLAIN}{SHADOW}");
    let shadowed = restart_under_live(&broker, &redis, &setup, live_rate, Some(sent)).await;
    let took = shadowed.backfill_s;
    let (cpu, redis_cpu) = (shadowed.cpu_s, shadowed.redis_cpu_s);
    let backfill_rate = sent as f64 / took.max(1e-9);
    println!(
        "shadow board backfill ({sent} gift events of history, 8 partitions, the plain boards plus a shadow of star_coins; batch {} events / {} ms)",
        batch.0, batch.1
    );
    println!(
        "  plain pipeline over the history:          {:>10.0} events/s  (rankflow {:.2} CPU-µs/ev, Redis {:.2} CPU-µs/ev)",
        plain.events_per_s,
        plain.rankflow_us(),
        plain.redis_us()
    );
    println!(
        "  backfill of the shadow over the history:  {:>10.0} events/s  ({:.2}x the plain pipeline; {took:.1} s; rankflow {:.2} and Redis {:.2} CPU-µs per replayed event, live consumption included)",
        backfill_rate,
        backfill_rate / plain.events_per_s.max(1e-9),
        1e6 * cpu / sent as f64,
        1e6 * redis_cpu / sent as f64
    );
    for (name, r) in [
        ("without the shadow", &control),
        ("with the shadow", &shadowed),
    ] {
        println!(
            "  live consumer lag after a restart {name:<19} ({} live events): largest {:.0}, back under {} after {:.1} s, then median {:.0} and largest {:.0} until {:.1} s",
            r.live_sent,
            r.largest,
            live_rate / 10,
            r.settled_s,
            r.median_after,
            r.largest_after,
            r.watched_s
        );
    }
}

/// What a restart under live events showed.
struct Restart {
    /// Seconds until the backfill had replayed the history (0 without).
    backfill_s: f64,
    cpu_s: f64,
    redis_cpu_s: f64,
    live_sent: u64,
    /// The live consumers' lag: largest, when it first fell under a tenth
    /// of a second's events, and the median and largest after that.
    largest: f64,
    settled_s: f64,
    median_after: f64,
    largest_after: f64,
    watched_s: f64,
}

/// Restarts the fleet of `setup` while `live_rate` events/s arrive and
/// watches the live consumers' lag for at least 8 s, and, with `history`,
/// until the shadow's backfill has replayed that many messages.
async fn restart_under_live(
    broker: &Broker,
    redis: &Redis,
    setup: &Setup,
    live_rate: u64,
    history: Option<u64>,
) -> Restart {
    let stop = Arc::new(AtomicBool::new(false));
    let live = {
        let mut options = support::zipf_options(broker, &setup.topic, 0, EventType::Gift, 12);
        options.rate = live_rate;
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let clock: SharedClock = Arc::new(SystemClock);
            rankflow::produce::run(&options, clock, &|| stop.load(Ordering::Relaxed))
        })
    };
    let cpu0 = support::process_cpu_s();
    let redis0 = support::redis_usage(redis).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let app = InProcess::start(setup, clock).await;
    let since = Instant::now();
    let positions = format!("{}:positions~backfill:star_coins_v2", setup.prefix);
    let mut conn = redis.conn().await;
    let mut started: Option<Instant> = None;
    let mut backfill_s = 0.0;
    let mut lags: Vec<(f64, f64)> = Vec::new();
    let mut last_report = Instant::now();
    loop {
        let watched = since.elapsed().as_secs_f64();
        if let Some(history) = history.filter(|_| backfill_s == 0.0) {
            let done: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                .arg(&positions)
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            let replayed: i64 = done.values().sum();
            if replayed > 0 && started.is_none() {
                started = Some(Instant::now());
            }
            if replayed >= history as i64 {
                backfill_s = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                eprintln!("  ... {replayed} of {history} replayed");
                last_report = Instant::now();
            }
        }
        let text = get_text(&app.url("/metrics")).await.unwrap_or_default();
        if text.contains("rankflow_consumer_lag{") {
            lags.push((watched, metric_sum(&text, "rankflow_consumer_lag", &[])));
        }
        let backfilled = history.is_none() || backfill_s > 0.0;
        if backfilled && watched >= 8.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu_s = support::process_cpu_s() - cpu0;
    let redis1 = support::redis_usage(redis).await;
    stop.store(true, Ordering::Relaxed);
    let live_sent = live.await.expect("live producer").expect("produce");
    app.stop().await;
    let largest = lags.iter().map(|l| l.1).fold(0.0, f64::max);
    let settle = (live_rate / 10) as f64;
    let at = lags
        .iter()
        .position(|l| l.1 <= settle)
        .unwrap_or(lags.len());
    let mut after: Vec<f64> = lags[at..].iter().map(|l| l.1).collect();
    Restart {
        backfill_s,
        cpu_s,
        redis_cpu_s: redis1.0 - redis0.0,
        live_sent,
        largest,
        settled_s: lags.get(at).map_or(f64::NAN, |l| l.0),
        median_after: support::median(&mut after.clone()),
        largest_after: after.drain(..).fold(0.0, f64::max),
        watched_s: lags.last().map_or(0.0, |l| l.0),
    }
}
