//! What the end-to-end benchmarks share: consuming a preloaded topic with
//! an in-process rankflow and measuring the run — events/s from the first
//! applied event to the last, rankflow's CPU time (this process, from
//! `/proc/self/stat`), Redis's CPU time (`INFO cpu`) and the commands Redis
//! ran (`INFO commandstats`, script-internal calls included).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use rankflow::clock::{SharedClock, SystemClock};

/// One measured consumption run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub events: f64,
    pub events_per_s: f64,
    /// CPU seconds of this process (the consumer, its librdkafka threads).
    pub rankflow_cpu_s: f64,
    /// CPU seconds of redis-server (user + sys).
    pub redis_cpu_s: f64,
    /// Commands Redis executed, including those called by scripts.
    pub redis_commands: f64,
    /// Mean batch flush time (one pipelined round of script calls).
    pub flush_ms: f64,
}

impl Run {
    pub fn rankflow_us(&self) -> f64 {
        1e6 * self.rankflow_cpu_s / self.events.max(1.0)
    }
    pub fn redis_us(&self) -> f64 {
        1e6 * self.redis_cpu_s / self.events.max(1.0)
    }
    pub fn commands_per_event(&self) -> f64 {
        self.redis_commands / self.events.max(1.0)
    }
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) of this process so far. Linux reports them
/// in clock ticks of 1/100 s (`CLK_TCK` is 100 on every Linux ABI rankflow
/// builds for); runs last seconds, so the tick is fine enough.
pub fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// Redis's CPU seconds and executed commands so far.
pub async fn redis_usage(redis: &Redis) -> (f64, f64) {
    let mut c = redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("all")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    let mut cpu = 0.0;
    let mut calls = 0.0;
    for line in info.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_sys:")
            .or_else(|| line.strip_prefix("used_cpu_user:"))
        {
            cpu += v.trim().parse::<f64>().unwrap_or(0.0);
        }
        let cmd_calls = line.strip_prefix("cmdstat_").and_then(|l| {
            l.split(&[':', ','][..])
                .find_map(|kv| kv.strip_prefix("calls="))
        });
        if let Some(n) = cmd_calls {
            calls += n.parse::<f64>().unwrap_or(0.0);
        }
    }
    (cpu, calls)
}

/// Consumes `events` events of `topic` into `boards` with a fresh group
/// and key prefix, and measures the run.
pub async fn consume(
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    boards: &str,
    events: u64,
    batch: (usize, u64),
) -> Run {
    let mut setup = Setup::new(broker, redis, boards);
    setup.topic = topic.to_string();
    setup.batch = batch;
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
    let flushes = |text: &str| {
        (
            metric_sum(text, "rankflow_batch_flush_seconds_sum", &[]),
            metric_sum(text, "rankflow_batch_flush_seconds_count", &[]),
        )
    };
    // Counters are process-wide; measure this run's increase.
    let text = scrape(metrics.clone()).await;
    let base = counted(&text);
    let flush_base = flushes(&text);
    let (cpu0, redis0) = (process_cpu_s(), redis_usage(redis).await);
    // Throughput runs from the first applied event (not from start-up and
    // the group join); CPU from before start-up, which is small.
    let mut started: Option<Instant> = None;
    let mut last_report = Instant::now();
    let run = loop {
        let text = scrape(metrics.clone()).await;
        let n = counted(&text) - base;
        if n > 0.0 && started.is_none() {
            started = Some(Instant::now());
        }
        if n >= events as f64 {
            let took = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
            let (cpu1, redis1) = (process_cpu_s(), redis_usage(redis).await);
            let (fs, fc) = flushes(&text);
            break Run {
                events: n,
                events_per_s: n / took.max(1e-9),
                rankflow_cpu_s: cpu1 - cpu0,
                redis_cpu_s: redis1.0 - redis0.0,
                redis_commands: redis1.1 - redis0.1,
                flush_ms: 1000.0 * (fs - flush_base.0) / (fc - flush_base.1).max(1.0),
            };
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {n} events applied");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    app.stop().await;
    eprintln!(
        "  {} events in {:.2}s: {:.0}/s, rankflow {:.2} CPU-µs, Redis {:.2} CPU-µs and {:.1} commands per event, flush {:.1} ms",
        run.events,
        run.events / run.events_per_s.max(1e-9),
        run.events_per_s,
        run.rankflow_us(),
        run.redis_us(),
        run.commands_per_event(),
        run.flush_ms
    );
    run
}
