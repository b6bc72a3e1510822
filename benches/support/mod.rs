//! What the end-to-end benchmarks share: consuming a preloaded topic with
//! an in-process rankflow and measuring the run — events/s from the first
//! applied event to the last, rankflow's CPU time (this process, from
//! `/proc/self/stat`), Redis's CPU time (`INFO cpu`) and the commands Redis
//! ran (`INFO commandstats`, script-internal calls included), and where
//! Redis's time went (per command, per script).

// Each bench that includes this module uses a different part of it.
#![allow(dead_code)]

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
    /// Batches flushed.
    pub batches: f64,
    /// Events counted `quarantined` (docs/checks.md).
    pub quarantined: f64,
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

/// The median of `values`, sorting them: the mean of the middle two of an
/// even count (taking the upper one, as an index `len / 2` does, would
/// favour the higher ratios).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
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

/// Runs `rankflow produce` with `options` on a blocking thread (the
/// producer waits for every delivery) and answers how many were sent.
/// The benchmarks' stream: `events` of `kind` from 100,000 members (Zipf
/// 1.1) and 1,000 receivers or 20 games, as fast as the broker takes them.
pub fn zipf_options(
    broker: &Broker,
    topic: &str,
    events: u64,
    kind: rankflow::event::EventType,
    seed: u64,
) -> rankflow::produce::Options {
    rankflow::produce::Options {
        brokers: broker.brokers(),
        topic: topic.to_string(),
        events,
        rate: 0,
        members: 100_000,
        receivers: 1_000,
        games: 20,
        types: vec![kind],
        skew: 1.1,
        key: Default::default(),
        seed,
        client: Vec::new(),
    }
}

pub async fn produce(options: rankflow::produce::Options) -> u64 {
    tokio::task::spawn_blocking(move || {
        let clock: SharedClock = Arc::new(SystemClock);
        rankflow::produce::run(&options, clock, &|| false)
    })
    .await
    .expect("producer thread")
    .expect("produce")
}

/// Consumes `events` events of `topic` into `boards` with a fresh group
/// and key prefix, and measures the run.
/// A clock for the producer that moves `step_ms` on each reading, from
/// `events × step_ms` ago: the events' times spread over the past as a
/// live stream's would, instead of all falling within the seconds the
/// preload takes.
#[derive(Debug)]
struct Spread {
    start: i64,
    step_ms: i64,
    reads: std::sync::atomic::AtomicI64,
}

impl rankflow::clock::Clock for Spread {
    fn now_ms(&self) -> i64 {
        let n = self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.start + n * self.step_ms
    }
}

/// [`produce`] with the events' times `step_ms` apart, ending now.
pub async fn produce_spread(options: rankflow::produce::Options, step_ms: i64) -> u64 {
    let now = rankflow::clock::Clock::now_ms(&SystemClock);
    let clock: SharedClock = Arc::new(Spread {
        start: now - options.events as i64 * step_ms,
        step_ms,
        reads: std::sync::atomic::AtomicI64::new(0),
    });
    tokio::task::spawn_blocking(move || rankflow::produce::run(&options, clock, &|| false))
        .await
        .expect("producer thread")
        .expect("produce")
}

pub async fn consume(
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    boards: &str,
    events: u64,
    batch: (usize, u64),
) -> Run {
    consume_with(broker, redis, topic, boards, events, batch, &|_| {}).await
}

/// [`consume`], with `prepare` run on the run's set-up before rankflow
/// starts (settings in `extra`, keys written under its prefix).
pub async fn consume_with(
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    boards: &str,
    events: u64,
    batch: (usize, u64),
    prepare: &dyn Fn(&mut Setup),
) -> Run {
    let served = Served {
        boards,
        batch,
        prepare,
    };
    consume_until(broker, redis, topic, served, Until::Counted(events)).await
}

/// [`consume_with`] for a configuration with the shadow board `shadow`: the
/// run ends when the live consumers have counted the topic's `events` and
/// the shadow is complete up to the end too (its backfill positions,
/// raised by its backfill or by the live consumers applying it beside
/// their boards; the shadow counts no events in `rankflow_events_total`).
pub async fn consume_with_shadow(
    shadow: &str,
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    served: Served<'_>,
    events: u64,
) -> Run {
    consume_until(
        broker,
        redis,
        topic,
        served,
        Until::Backfilled(events, shadow),
    )
    .await
}

/// When a measured run ends.
pub enum Until<'a> {
    /// Once the live consumers have counted this many events.
    Counted(u64),
    /// Once they have, and the shadow board's backfill positions
    /// (`<prefix>:positions~backfill:<shadow>`, next offsets) add up to as
    /// many.
    Backfilled(u64, &'a str),
}

/// What a measured run serves: its boards, batch settings and set-up.
pub struct Served<'a> {
    pub boards: &'a str,
    pub batch: (usize, u64),
    pub prepare: &'a dyn Fn(&mut Setup),
}

/// Runs rankflow over the topic until `until` holds.
async fn consume_until(
    broker: &Broker,
    redis: &Redis,
    topic: &str,
    served: Served<'_>,
    until: Until<'_>,
) -> Run {
    let Served {
        boards,
        batch,
        prepare,
    } = served;
    let mut setup = Setup::new(broker, redis, boards);
    setup.topic = topic.to_string();
    setup.batch = batch;
    prepare(&mut setup);
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
    let quarantined = |text: &str| {
        metric_sum(
            text,
            "rankflow_events_total",
            &[("topic", topic), ("outcome", "quarantined")],
        )
    };
    let quarantined_base = quarantined(&text);
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
        if done(redis, &setup.prefix, &until, n).await {
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
                batches: fc - flush_base.1,
                quarantined: quarantined(&text) - quarantined_base,
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

/// Calls and microseconds per command from `INFO commandstats`, keyed by
/// the lower-case command name (`evalsha`, `zincrby`, ...). Commands called
/// by scripts are counted under their own names as well as inside the
/// `evalsha` that ran them.
pub type CommandStats = std::collections::BTreeMap<String, (f64, f64)>;

/// Redis's per-command counters so far.
pub async fn command_stats(redis: &Redis) -> CommandStats {
    let mut c = redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    let mut stats = CommandStats::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        stats.insert(name.to_string(), (field("calls="), field("usec=")));
    }
    stats
}

/// What each command added between two snapshots (commands that ran at
/// least once in between).
pub fn command_delta(before: &CommandStats, after: &CommandStats) -> CommandStats {
    after
        .iter()
        .filter_map(|(name, &(calls, usec))| {
            let (c0, u0) = before.get(name).copied().unwrap_or((0.0, 0.0));
            (calls > c0).then(|| (name.clone(), (calls - c0, usec - u0)))
        })
        .collect()
}

/// Top-level commands the harness and rankflow send outside scripts; every
/// other command in [`CommandStats`] ran inside a script (the apply and
/// positions scripts are the only writers). rankflow's one top-level read
/// while it consumes, the `HMGET` of positions when partitions are
/// assigned, is left in: it shares its name with the scripts' fence reads,
/// which outnumber it by far.
pub const TOP_LEVEL: &[&str] = &[
    "evalsha", "info", "slowlog", "config", "ping", "script", "client", "hello", "select",
    "cluster",
];

/// Records every top-level command in SLOWLOG from now on (threshold 0),
/// after emptying it, so [`script_split`] can tell the scripts apart.
pub async fn slowlog_all(redis: &Redis, max_len: u64) {
    let mut c = redis.conn().await;
    for (k, v) in [
        ("slowlog-max-len", max_len.to_string()),
        ("slowlog-log-slower-than", "0".to_string()),
    ] {
        let _: Result<(), _> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut c)
            .await;
    }
    let _: Result<(), _> = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut c).await;
}

/// One script's share of the EVALSHA calls SLOWLOG recorded.
#[derive(Debug, Clone, Default)]
pub struct ScriptTime {
    pub calls: f64,
    pub usec: f64,
    pub max_usec: f64,
}

/// Groups the EVALSHA entries of SLOWLOG by script and by the board of the
/// call's first key (the apply script's calls each start with one board
/// instance's fence; the positions script's only key is `<prefix>:positions`),
/// and puts the threshold back to Redis's default (10 ms) so later phases are
/// not recorded. Script hashes carry a nonce per load, so the key is what
/// names a script here.
pub async fn script_split(redis: &Redis) -> std::collections::BTreeMap<String, ScriptTime> {
    // Hundreds of thousands of entries take longer than the client's default
    // response timeout to arrive.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut c = redis::Client::open(redis.url())
        .expect("client")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connection");
    let entries: Vec<redis::Value> = match redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut c)
        .await
    {
        Ok(entries) => entries,
        Err(e) => {
            eprintln!("SLOWLOG GET failed: {e}");
            Vec::new()
        }
    };
    let _: Result<(), _> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("10000")
        .query_async(&mut c)
        .await;
    let mut split = std::collections::BTreeMap::<String, ScriptTime>::new();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        // id, timestamp, duration (µs), arguments, client address, name.
        let usec = match fields.get(2) {
            Some(redis::Value::Int(u)) => *u as f64,
            _ => continue,
        };
        let args: Vec<String> = match fields.get(3) {
            Some(redis::Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                })
                .collect(),
            _ => continue,
        };
        if !args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case("evalsha"))
        {
            continue;
        }
        let key = args.get(3).map(String::as_str).unwrap_or("");
        let name = if key.ends_with(":positions") {
            "positions script".to_string()
        } else {
            // `<prefix>:{<board>[:<scope>]}:...`: the board of the first
            // instance in the call.
            let board = key
                .split_once('{')
                .map(|(_, r)| r.split(&[':', '}'][..]).next().unwrap_or(""))
                .unwrap_or("?");
            format!("apply script, first board {board}")
        };
        let t = split.entry(name).or_default();
        t.calls += 1.0;
        t.usec += usec;
        t.max_usec = t.max_usec.max(usec);
    }
    split
}

/// The plain workload's boards: the example config's period boards
/// (`star_coins` day/week/month/all, `star_flowers` week, `star_fans` day
/// per receiver).
pub const PLAIN: &str = r#"
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

// ------------------------------------------------ the seed-style consumer

/// A gift event as the seed-style consumer reads it (docs/events.md): only the
/// fields its boards use, decoded into owned strings as a hand-written
/// consumer would.
#[derive(serde::Deserialize)]
struct SeedGift {
    #[serde(rename = "type")]
    kind: String,
    ts: i64,
    sender_id: String,
    receiver_id: String,
    gift_id: String,
    count: f64,
    value: f64,
}

/// The UTC day (`2026-05-01`), ISO week (`2026-W18`) and month (`2026-05`)
/// of `ts_ms`: the simple period names a hand-written consumer computes.
fn seed_periods(ts_ms: i64) -> Option<(String, String, String)> {
    use chrono::Datelike;
    let t = chrono::DateTime::from_timestamp_millis(ts_ms)?;
    let week = t.iso_week();
    Some((
        t.format("%Y-%m-%d").to_string(),
        format!("{}-W{:02}", week.year(), week.week()),
        t.format("%Y-%m").to_string(),
    ))
}

/// One event's writes to [`PLAIN`]'s boards, as one pipeline of `ZINCRBY`s
/// (no Lua, no fences, no dedup): `star_coins` day/week/month/all by
/// receiver with `count * value`, `star_flowers` week by receiver with
/// `count` for flowers, `star_fans` day per receiver by sender with
/// `count * value`. `None` for an event those boards do not take.
fn seed_pipeline(prefix: &str, g: &SeedGift) -> Option<redis::Pipeline> {
    if g.kind != "gift" {
        return None;
    }
    let (day, week, month) = seed_periods(g.ts)?;
    let coins = g.count * g.value;
    let mut p = redis::pipe();
    let coin_views = [
        format!("day:{day}"),
        format!("week:{week}"),
        format!("month:{month}"),
        "all".to_string(),
    ];
    for view in coin_views {
        p.zincr(format!("{prefix}:star_coins:{view}"), &g.receiver_id, coins)
            .ignore();
    }
    if g.gift_id == "flower" {
        let key = format!("{prefix}:star_flowers:week:{week}");
        p.zincr(key, &g.receiver_id, g.count).ignore();
    }
    let fans = format!("{prefix}:star_fans:{}:day:{day}", g.receiver_id);
    p.zincr(fans, &g.sender_id, coins).ignore();
    Some(p)
}

/// The seed-style consumer's Kafka side: a plain `StreamConsumer` in a
/// group of its own, from the start of `topic`, with librdkafka's defaults
/// otherwise (auto-commit included), as a user would write it.
fn seed_consumer(broker: &Broker, topic: &str) -> rdkafka::consumer::StreamConsumer {
    use rdkafka::consumer::Consumer;
    let consumer: rdkafka::consumer::StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("seed"))
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("seed-style consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

/// Consumes `events` events of `topic` the way the seeds describe a
/// consumer — per event, decode the JSON and send one pipelined round trip
/// of `ZINCRBY`s to Redis (see [`seed_pipeline`]) — and measures it like
/// [`consume`]: events/s from the first event to the last, this process's
/// CPU (nothing else runs in it meanwhile), Redis's CPU and commands.
pub async fn consume_seed(broker: &Broker, redis: &Redis, topic: &str, events: u64) -> Run {
    use rdkafka::Message;
    let (cpu0, redis0) = (process_cpu_s(), redis_usage(redis).await);
    let consumer = seed_consumer(broker, topic);
    let mut conn = redis.conn().await;
    let prefix = unique("seed");
    let (mut n, mut skipped) = (0u64, 0u64);
    let mut started: Option<Instant> = None;
    let mut last_report = Instant::now();
    while n < events {
        let next = tokio::time::timeout(Duration::from_secs(60), consumer.recv()).await;
        let message = match next.expect("seed-style consumer: no event for 60 s") {
            Ok(m) => m,
            Err(e) => {
                eprintln!("  seed-style consumer: {e}");
                continue;
            }
        };
        started.get_or_insert_with(Instant::now);
        n += 1;
        let gift = message
            .payload()
            .and_then(|p| serde_json::from_slice::<SeedGift>(p).ok());
        let Some(pipe) = gift.and_then(|g| seed_pipeline(&prefix, &g)) else {
            skipped += 1;
            continue;
        };
        let _: () = pipe
            .query_async(&mut conn)
            .await
            .expect("seed-style ZINCRBY pipeline");
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {n} events applied");
            last_report = Instant::now();
        }
    }
    let took = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let (cpu1, redis1) = (process_cpu_s(), redis_usage(redis).await);
    drop(consumer);
    let run = Run {
        events: n as f64,
        events_per_s: n as f64 / took.max(1e-9),
        rankflow_cpu_s: cpu1 - cpu0,
        redis_cpu_s: redis1.0 - redis0.0,
        redis_commands: redis1.1 - redis0.1,
        ..Run::default()
    };
    eprintln!(
        "  {n} events ({skipped} skipped) in {took:.2}s: {:.0}/s, consumer {:.2} CPU-µs, Redis {:.2} CPU-µs and {:.1} commands per event",
        run.events_per_s,
        run.rankflow_us(),
        run.redis_us(),
        run.commands_per_event()
    );
    run
}

/// Writes `member` hidden from `board` into the moderation record under
/// `prefix` (docs/redis-layout.md), as `rankflow member hide` leaves it,
/// before the consumers start: the write path then routes its updates to
/// the hidden twins of the board's views.
pub fn hide(redis: &Redis, prefix: &str, member: &str, board: &str) {
    let entry = serde_json::to_string(&rankflow::moderation::HiddenEntry {
        boards: Some(vec![board.to_string()]),
        at: 0,
        actor: "bench".to_string(),
        reason: None,
    })
    .expect("JSON");
    let key = format!("{prefix}:moderation");
    redis.cli(&["HSET", &key, &format!("h:{member}"), &entry]);
    redis.cli(&["HINCRBY", &key, "~gen", "1"]);
}

/// Records the shadow board `shadow` complete up to the start of `topic`'s
/// 8 partitions, where the live consumers are too: the state a backfill
/// leaves once it has caught up, before a run consumes the topic.
pub fn caught_up(redis: &Redis, prefix: &str, topic: &str, shadow: &str) {
    for key in [
        format!("{prefix}:positions~backfill:{shadow}"),
        format!("{prefix}:positions"),
    ] {
        for p in 0..8 {
            redis.cli(&["HSET", &key, &format!("{topic}/{p}"), "0"]);
        }
    }
}

/// Whether a run that counted `n` events is done (`Until`).
async fn done(redis: &Redis, prefix: &str, until: &Until<'_>, n: f64) -> bool {
    match *until {
        Until::Counted(events) => n >= events as f64,
        Until::Backfilled(events, _) if n < events as f64 => false,
        Until::Backfilled(events, shadow) => {
            let mut conn = redis.conn().await;
            let positions: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                .arg(format!("{prefix}:positions~backfill:{shadow}"))
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            positions.values().sum::<i64>() >= events as i64
        }
    }
}

/// One rule check and one rate check on gifts (docs/checks.md): at most
/// 500 gifts of one sender per minute of event time, and no gift worth
/// more than 100,000 coins (`benches/checks.rs`, and the operator features
/// of `benches/pipeline.rs`).
pub const CHECKS: &str = r#"
[[check]]
name = "gift_cap"
event = "gift"
rule = "count * value <= 100000"

[[check]]
name = "gift_rate"
event = "gift"
member = "sender_id"
max_rate = "500/1m"
"#;

/// Tells `perf record --control` (if a profile script started the bench
/// under it, `BENCH_PERF_CTL` naming its control FIFO) to start or stop
/// sampling.
pub fn perf_control(command: &str) {
    if let Ok(path) = std::env::var("BENCH_PERF_CTL")
        && let Err(e) = std::fs::write(&path, format!("{command}\n"))
    {
        eprintln!("perf control {path}: {e}");
    }
}
