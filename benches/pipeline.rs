//! End-to-end throughput (issue 32 point 1): 1,000,000 gift events (10,000
//! senders, 100 receivers, Zipf 1.1: what `rankflow produce` sends by
//! default, as a user preloading a topic would, and the stream issue 32's
//! figures were measured on, whose Redis CPU per event this stream matches)
//! in an 8-partition topic, consumed in the same run against the same
//! servers by
//! - **the seed-style consumer**, the baseline every row is compared with:
//!   what a user would otherwise run, built here (`support::consume_seed`):
//!   an rdkafka `StreamConsumer` in its own group that decodes each event
//!   and sends one pipelined round trip of `ZINCRBY`s per event, one per
//!   board key the plain workload touches (no Lua, no fences, no dedup);
//! - **rankflow**, each workload at each batch setting (by default the
//!   defaults, and `max_events = 2000, max_delay_ms = 20`, where a live
//!   fleet runs most of the time):
//!   - **plain**: the example config's period boards (`star_coins`
//!     day/week/month/all, `star_flowers` week, `star_fans` day per
//!     receiver);
//!   - **windows**: the same with `3h/1m` windows on two boards
//!     (`star_coins`, and `star_fans` which is also a tie-break board, as in
//!     the example config) and a `7d/1d` rolling board (`star_flowers`);
//! - **rankflow with `max_events = 1`** (one round trip per event through
//!   the scripts), a second figure only, when `BENCH_NAIVE_EVENTS` > 0.
//!
//! Prints for each row events/s, the ratio to the seed-style consumer (and
//! to `max_events = 1` when measured), per event the CPU time of rankflow or
//! of the seed-style consumer (this process, `/proc`) and of Redis (`INFO
//! cpu`) and the commands Redis ran (`INFO commandstats`), next to issue
//! 32's targets (plain ≥ 40×, windows ≥ 25× at the defaults; ≥ 30× and ≥ 12×
//! at 2,000-event batches), and per target the throughput Redis's one
//! thread allows at the Redis CPU per event measured and at its `ZADD`s
//! alone (`print_ceilings`); then where Redis's time went in each rankflow
//! row: per command (`INFO commandstats` usec) and per script call
//! (`SLOWLOG` with a threshold of 0, only with `BENCH_SLOWLOG=1`: Redis 7
//! then logs every command scripts call too, which costs it CPU).
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench pipeline`). Knobs:
//! `BENCH_EVENTS` shrinks the load; `BENCH_SEED_EVENTS` sets the seed-style
//! consumer's (default: `BENCH_NAIVE_EVENTS` if > 0, else `BENCH_EVENTS`; 0
//! skips it); `BENCH_NAIVE_EVENTS` runs `max_events = 1` over that many
//! events (default 0: skipped, it is slow); `BENCH_WORKLOADS` picks
//! workloads (`plain,windows`; `plain-dense` and `windows-dense` are the
//! same with `dense_ranks = true` on every board; `ties` is `windows`
//! without its windows, `windows-notie` without its tie-break);
//! `BENCH_OPS` (`plain,windows`; empty: none) picks the workloads run with
//! the operator features (a hidden member, a rule and a rate check, a
//! shadow board) beside the same workload without them, on a second stream
//! whose event times are 20 ms apart, `BENCH_OPS_ROUNDS` (2) times;
//! `BENCH_REDIS_CONFIG` (`"name value ..."`) sets Redis settings for the run
//! (both consumers share its Redis);
//! `BENCH_BATCHES` picks batch settings (`default,2000/20`: `default` or
//! `<max_events>/<max_delay_ms>`); `BENCH_MAX_EVENTS` changes the default
//! setting's batch size; `BENCH_MEMBERS` and `BENCH_RECEIVERS` change the
//! stream's distinct senders (10,000) and receivers (100; the other
//! benchmarks' stream has 100,000 and 1,000, a star_fans instance per
//! receiver and so ten times the board instances per batch). `scripts/profile.sh` sets `BENCH_PERF_CTL` to a
//! `perf record --control` FIFO: sampling is enabled only while a rankflow
//! row is consumed, not while events are produced or a baseline runs;
//! `BENCH_PERF_RUNS=ops` (`base`) samples only the operator rows with
//! (without) the features.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use common::*;
use rankflow::event::EventType;
use support::{CHECKS, CommandStats, PLAIN, Run, ScriptTime, consume, env_u64};

const WINDOWS: &str = r#"
[[board]]
name = "star_coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["day", "week", "month", "all"]
windows = ["3h/1m"]

[[board]]
name = "star_flowers"
event = "gift"
filter = 'gift_id == "flower"'
member = "receiver_id"
score = "count"
periods = ["week"]
windows = ["7d/1d"]

[[board]]
name = "star_fans"
event = "gift"
member = "sender_id"
score = "count * value"
scope = "receiver_id"
periods = ["day"]
windows = ["3h/1m"]
tie_break = "earliest"
"#;

/// A batch setting: `max_events`, `max_delay_ms`.
type Batch = (usize, u64);

/// The workload's boards with the operator features of the `-ops` rows:
/// a rule check and a rate check (`support::CHECKS`: at most 500 gifts of
/// one sender per minute of event time), and `star_coins_v2`, a shadow of
/// the workload's `star_coins` (the same views, as a shadow must keep
/// them) with new prices whose backfill has caught up: its positions and
/// the live ones say the stream's start before the run
/// (`support::caught_up`), so the live consumers apply it beside their
/// boards from their first batch and its backfill reads nothing, as once
/// any backfill is done (docs/rebuilds.md). The run also hides the top sender `u1` from `star_fans`
/// (`support::hide`). They run on a stream whose event times are 20 ms
/// apart, as a live stream's are (in the main stream every event has
/// nearly the same time, and a rate check would quarantine most of the top
/// senders' events), beside the same workload without them on that stream.
fn with_operator(boards: &str) -> String {
    let checks = if operator_feature("checks") {
        CHECKS
    } else {
        ""
    };
    if !operator_feature("shadow") {
        return format!("{boards}{checks}");
    }
    let coins = boards
        .split("[[board]]")
        .find(|b| b.contains("name = \"star_coins\""))
        .expect("the workload has star_coins");
    let shadow = coins
        .replace("name = \"star_coins\"", "name = \"star_coins_v2\"\nshadow_of = \"star_coins\"\nbackfill_from = \"2000-01-01T00:00:00Z\"")
        .replace("score = \"count * value\"", "score = 'count * value * (gift_id == \"rocket\" ? 2 : 1)'");
    format!("{boards}{checks}\n[[board]]{shadow}")
}

/// Whether `BENCH_OPS_FEATURES` (default `hide,checks,shadow`) names
/// `feature`: one at a time shows what each costs.
fn operator_feature(feature: &str) -> bool {
    std::env::var("BENCH_OPS_FEATURES")
        .unwrap_or_else(|_| "hide,checks,shadow".into())
        .split(',')
        .any(|f| f.trim() == feature)
}

/// The 2,000-event setting issue 32 measures beside the defaults.
const SMALL_BATCH: Batch = (2000, 20);

/// Issue 32's targets, the ratio to the seed-style consumer: (plain,
/// windows) at the default batch settings and at [`SMALL_BATCH`].
const TARGETS_DEFAULT: (f64, f64) = (40.0, 25.0);
const TARGETS_SMALL: (f64, f64) = (30.0, 12.0);

/// One rankflow row's measurements.
struct Measured {
    name: &'static str,
    /// `defaults` or `<max_events>/<max_delay_ms>`.
    batch: String,
    /// Issue 32's target ratio for this workload and batch, if it has one.
    target: Option<f64>,
    run: Run,
    commands: CommandStats,
    scripts: BTreeMap<String, ScriptTime>,
}

/// The baselines of the run: the seed-style consumer, and rankflow with
/// `max_events = 1`, each over its own event count (none if skipped).
struct Baselines {
    seed: Option<(u64, Run)>,
    naive: Option<(u64, Run)>,
}

/// The stream of gift events this benchmark sends (see the header).
fn stream(broker: &Broker, topic: &str, events: u64, seed: u64) -> rankflow::produce::Options {
    let mut options = support::zipf_options(broker, topic, events, EventType::Gift, seed);
    options.members = env_u64("BENCH_MEMBERS", 10_000);
    options.receivers = env_u64("BENCH_RECEIVERS", 100);
    options
}

async fn produce(broker: &Broker, topic: &str, events: u64) {
    let options = stream(broker, topic, events, 42);
    eprintln!(
        "producing {events} gift events ({} senders, {} receivers, Zipf 1.1) into 8 partitions...",
        options.members, options.receivers
    );
    let produced = Instant::now();
    let sent = support::produce(options).await;
    eprintln!(
        "produced {sent} events in {:.1}s",
        produced.elapsed().as_secs_f64()
    );
}

/// Consumes the topic into `boards` (with the operator features when
/// `operated`) with the batch settings `batch`, recording Redis's
/// per-command and per-script time over the run.
async fn measure(
    setup: (&Broker, &Redis, &str),
    (boards, operated): (&str, bool),
    events: u64,
    batch: Batch,
) -> (Run, CommandStats, BTreeMap<String, ScriptTime>) {
    let (broker, redis, topic) = setup;
    // SLOWLOG at threshold 0 also logs every command a script calls, which
    // costs Redis CPU and memory: only on request, never in measured runs.
    let slowlog = env_u64("BENCH_SLOWLOG", 0) == 1;
    let before = support::command_stats(redis).await;
    if slowlog {
        support::slowlog_all(redis, 2_000_000).await;
    }
    // BENCH_PERF_RUNS=ops (base) samples only the runs with (without)
    // the operator features, so one recording shows what they add.
    let sampled = match std::env::var("BENCH_PERF_RUNS").as_deref() {
        Ok("ops") => operated,
        Ok("base") => !operated,
        _ => true,
    };
    if sampled {
        support::perf_control("enable");
    }
    let run = if operated {
        // The operator features: the quarantine topic the checks need, the
        // hidden member, and the shadow board.
        let prepare = |s: &mut Setup| {
            s.quarantine = Some(unique("quarantine"));
            if operator_feature("hide") {
                support::hide(redis, &s.prefix, "u1", "star_fans");
            }
            if boards.contains("shadow_of") {
                support::caught_up(redis, &s.prefix, topic, "star_coins_v2");
            }
        };
        if boards.contains("shadow_of") {
            let served = support::Served {
                boards,
                batch,
                prepare: &prepare,
            };
            support::consume_with_shadow("star_coins_v2", broker, redis, topic, served, events)
                .await
        } else {
            support::consume_with(broker, redis, topic, boards, events, batch, &prepare).await
        }
    } else {
        consume(broker, redis, topic, boards, events, batch).await
    };
    if sampled {
        support::perf_control("disable");
    }
    let scripts = if slowlog {
        support::script_split(redis).await
    } else {
        BTreeMap::new()
    };
    let after = support::command_stats(redis).await;
    (run, support::command_delta(&before, &after), scripts)
}

/// The workloads `BENCH_WORKLOADS` names (default `plain,windows`), with
/// their boards.
fn workloads() -> Vec<(&'static str, String)> {
    let chosen = std::env::var("BENCH_WORKLOADS").unwrap_or_else(|_| "plain,windows".into());
    // The `-dense` variants set `dense_ranks = true` on every board (the
    // default keeps no index on these boards): what the index costs.
    let dense = |boards: &str| boards.replace("[[board]]\n", "[[board]]\ndense_ranks = true\n");
    // `ties` is the window workload without its windows (the plain boards
    // with `star_fans`'s tie-break), `windows-notie` without the tie-break:
    // with `plain`, they split the window workload's cost between the
    // tie-break and the windows.
    let without = |boards: &str, prefix: &str| {
        boards
            .lines()
            .filter(|l| !l.starts_with(prefix))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let all = [
        ("plain", PLAIN.to_string()),
        ("windows", WINDOWS.to_string()),
        ("plain-dense", dense(PLAIN)),
        ("windows-dense", dense(WINDOWS)),
        ("ties", without(WINDOWS, "windows = ")),
        ("windows-notie", without(WINDOWS, "tie_break = ")),
    ];
    all.into_iter()
        .filter(|(name, _)| chosen.split(',').any(|w| w.trim() == *name))
        .collect()
}

/// The batch settings `BENCH_BATCHES` names (default `default,2000/20`),
/// each with its label; `default` is rankflow's default setting, with
/// `BENCH_MAX_EVENTS` as its size if set.
fn batches() -> Vec<(String, Batch)> {
    let defaults = rankflow::config::BatchConfig::default();
    let max_events = env_u64("BENCH_MAX_EVENTS", defaults.max_events.get() as u64) as usize;
    let default = (max_events, defaults.max_delay_ms.get());
    let chosen = std::env::var("BENCH_BATCHES").unwrap_or_else(|_| "default,2000/20".into());
    let parse = |spec: &str| -> Batch {
        let (n, ms) = spec
            .split_once('/')
            .expect("BENCH_BATCHES: `default` or <max_events>/<max_delay_ms>");
        let n = n.trim().parse().expect("BENCH_BATCHES: max_events");
        (n, ms.trim().parse().expect("BENCH_BATCHES: max_delay_ms"))
    };
    chosen
        .split(',')
        .map(str::trim)
        .filter(|spec| !spec.is_empty())
        .map(|spec| {
            if spec == "default" {
                default
            } else {
                parse(spec)
            }
        })
        .map(|b| (batch_label(b), b))
        .collect()
}

/// `defaults` for rankflow's true default setting, else `<n>/<ms>`.
fn batch_label(batch: Batch) -> String {
    let d = rankflow::config::BatchConfig::default();
    if batch == (d.max_events.get(), d.max_delay_ms.get()) {
        "defaults".to_string()
    } else {
        format!("{}/{}", batch.0, batch.1)
    }
}

/// Issue 32's target for a workload at a batch setting: `plain*` rows take
/// the plain target, `windows*` rows the windows one; other workloads and
/// settings have none.
fn target(workload: &str, batch: Batch) -> Option<f64> {
    let targets = match batch_label(batch).as_str() {
        "defaults" => TARGETS_DEFAULT,
        _ if batch == SMALL_BATCH => TARGETS_SMALL,
        _ => return None,
    };
    match workload {
        w if w.starts_with("plain") => Some(targets.0),
        w if w.starts_with("windows") => Some(targets.1),
        _ => None,
    }
}

/// Runs the baselines over their own counts: the seed-style consumer
/// (`BENCH_SEED_EVENTS`, default `BENCH_NAIVE_EVENTS` if > 0, else all the
/// events) and rankflow with `max_events = 1` (`BENCH_NAIVE_EVENTS`,
/// default 0: skipped).
async fn baselines(broker: &Broker, redis: &Redis, topic: &str, events: u64) -> Baselines {
    let naive_events = env_u64("BENCH_NAIVE_EVENTS", 0).min(events);
    let seed_default = if naive_events > 0 {
        naive_events
    } else {
        events
    };
    let seed_events = env_u64("BENCH_SEED_EVENTS", seed_default).min(events);
    let mut b = Baselines {
        seed: None,
        naive: None,
    };
    if seed_events > 0 {
        eprintln!(
            "seed-style consumer: one pipelined ZINCRBY round trip per event, {seed_events} events (plain boards)"
        );
        let run = support::consume_seed(broker, redis, topic, seed_events).await;
        b.seed = Some((seed_events, run));
    }
    if naive_events > 0 {
        eprintln!("rankflow max_events = 1 over the first {naive_events} events (plain boards)");
        let delay = rankflow::config::BatchConfig::default().max_delay_ms.get();
        let run = consume(broker, redis, topic, PLAIN, naive_events, (1, delay)).await;
        b.naive = Some((naive_events, run));
    }
    b
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 1_000_000);
    let broker = Broker::start();
    let redis = Redis::start();
    // `BENCH_REDIS_CONFIG="name value ..."`: settings for the run's Redis,
    // which the seed-style consumer and rankflow share (docs/operations.md,
    // "Redis's small encodings": the listpack limits).
    let config = std::env::var("BENCH_REDIS_CONFIG").unwrap_or_default();
    let words: Vec<&str> = config.split_whitespace().collect();
    for pair in words.chunks(2) {
        let out = redis.cli(&[&["CONFIG", "SET"][..], pair].concat());
        assert_eq!(out.trim(), "OK", "CONFIG SET {pair:?}");
        eprintln!("redis: {}", pair.join(" "));
    }
    eprintln!(
        "bench pid {}, redis pid {}",
        std::process::id(),
        redis_pid(&redis).await
    );
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    produce(&broker, &topic, events).await;

    // The baselines first: the ratio is known as each row finishes.
    let base = baselines(&broker, &redis, &topic, events).await;
    let mut measured = Vec::new();
    for (name, boards) in workloads() {
        for (label, batch) in batches() {
            eprintln!(
                "{name}: max_events = {}, max_delay_ms = {}",
                batch.0, batch.1
            );
            let servers = (&broker, &redis, topic.as_str());
            let (run, commands, scripts) = measure(servers, (&boards, false), events, batch).await;
            measured.push(Measured {
                name,
                batch: label,
                target: target(name, batch),
                run,
                commands,
                scripts,
            });
        }
    }
    operator_rows(&broker, &redis, events, &mut measured).await;
    print_summary(events, &measured, &base);
    for m in &measured {
        print_split(m);
    }
}

/// The `-ops` workloads `BENCH_OPS` names (default `plain,windows`; empty:
/// none), each beside the same workload without the operator features
/// (`<workload>@spread`), on a stream of `events` whose times are 20 ms
/// apart, at every batch setting, in alternating order over
/// `BENCH_OPS_ROUNDS` rounds (default 2).
async fn operator_rows(broker: &Broker, redis: &Redis, events: u64, out: &mut Vec<Measured>) {
    let chosen = std::env::var("BENCH_OPS").unwrap_or_else(|_| "plain,windows".into());
    let pairs = [
        ("plain@spread", "plain-ops", PLAIN.to_string()),
        ("windows@spread", "windows-ops", WINDOWS.to_string()),
    ];
    let pairs: Vec<_> = pairs
        .into_iter()
        .filter(|(base, _, _)| {
            chosen
                .split(',')
                .any(|w| base.starts_with(&format!("{}@", w.trim())))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let topic = unique("bench-spread");
    broker.create_topic(&topic, 8).await;
    let options = stream(broker, &topic, events, 43);
    let sent = support::produce_spread(options, 20).await;
    eprintln!("produced {sent} events 20 ms apart for the operator features");
    for round in 0..env_u64("BENCH_OPS_ROUNDS", 2) {
        for (base, ops, boards) in &pairs {
            for (label, batch) in batches() {
                let with_ops = with_operator(boards);
                let mut order = [(*base, boards.clone()), (*ops, with_ops)];
                if round % 2 == 1 {
                    order.reverse();
                }
                for (name, boards) in order {
                    eprintln!("round {}, {name}: batch {label}", round + 1);
                    let servers = (broker, redis, topic.as_str());
                    let operated = name.ends_with("-ops");
                    let (run, commands, scripts) =
                        measure(servers, (&boards, operated), events, batch).await;
                    out.push(Measured {
                        name,
                        batch: label.clone(),
                        target: None,
                        run,
                        commands,
                        scripts,
                    });
                }
            }
        }
    }
}

/// redis-server's process id (`INFO server`), for `perf record -p`.
async fn redis_pid(redis: &Redis) -> String {
    let mut c = redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// `rate / base` as `12.3x`, or `-` without a base.
fn ratio(rate: f64, base: Option<f64>) -> String {
    base.map_or("-".to_string(), |b| format!("{:.1}x", rate / b.max(1e-9)))
}

/// Each `-ops` row against the same workload and batch without the
/// operator features (issue 32: within 20%, a ratio of at least 0.80).
fn print_operator_ratios(measured: &[Measured]) {
    // Rows come in pairs of one round: the workload with and without.
    for pair in measured.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (m, without) = match (a.name.ends_with("-ops"), b.name.ends_with("-ops")) {
            (true, false) => (a, b),
            (false, true) => (b, a),
            _ => continue,
        };
        if m.batch != without.batch || !without.name.ends_with("@spread") {
            continue;
        }
        let r = m.run.events_per_s / without.run.events_per_s.max(1e-9);
        let verdict = if r >= 0.80 { "ok" } else { "MISS" };
        println!(
            "  {} at {}: {r:.2}x of {} (>= 0.80 {verdict}; Redis {:+.2}, rankflow {:+.2} CPU-µs/ev; {} quarantined)",
            m.name,
            m.batch,
            without.name,
            m.run.redis_us() - without.run.redis_us(),
            m.run.rankflow_us() - without.run.rankflow_us(),
            m.run.quarantined
        );
    }
}

/// One line of the summary table.
fn print_row(name: &str, batch: &str, run: &Run, vs: (String, String, String)) {
    let (seed, target, naive) = vs;
    println!(
        "  {name:<16} {batch:<12} {:>9.0} {seed:>8} {target:>12} {naive:>9} {:>11.2} {:>11.2} {:>9.1}",
        run.events_per_s,
        run.rankflow_us(),
        run.redis_us(),
        run.commands_per_event()
    );
}

fn print_summary(events: u64, measured: &[Measured], base: &Baselines) {
    println!("pipeline benchmark ({events} gift events, 8 partitions; issue 32 targets)");
    println!(
        "  plain:   star_coins day/week/month/all, star_flowers week, star_fans day per receiver"
    );
    println!(
        "  windows: the same + 3h/1m on star_coins and star_fans (tie-break earliest), 7d/1d on star_flowers"
    );
    println!(
        "  seed:    rdkafka consumer, one pipelined round trip of ZINCRBY per plain board key per event"
    );
    println!(
        "  {:<16} {:<12} {:>9} {:>8} {:>12} {:>9} {:>11} {:>11} {:>9}",
        "row",
        "batch",
        "events/s",
        "x seed",
        "target",
        "x batch=1",
        "CPU µs/ev",
        "Redis µs/ev",
        "cmds/ev"
    );
    let seed_rate = base.seed.as_ref().map(|(_, r)| r.events_per_s);
    let naive_rate = base.naive.as_ref().map(|(_, r)| r.events_per_s);
    for m in measured {
        let rate = m.run.events_per_s;
        let target = match (m.target, seed_rate) {
            (Some(t), Some(s)) if rate / s.max(1e-9) >= t => format!(">= {t}x ok"),
            (Some(t), Some(_)) => format!(">= {t}x MISS"),
            (Some(t), None) => format!(">= {t}x"),
            (None, _) => String::new(),
        };
        let vs = (ratio(rate, seed_rate), target, ratio(rate, naive_rate));
        print_row(m.name, &m.batch, &m.run, vs);
    }
    print_operator_ratios(measured);
    print_ceilings(measured, seed_rate);
    let mut notes = Vec::new();
    if let Some((n, run)) = &base.seed {
        let vs = (
            "1.0x".into(),
            String::new(),
            ratio(run.events_per_s, naive_rate),
        );
        print_row("seed-style", "1 trip/event", run, vs);
        notes.push(format!(
            "seed-style: first {n} events; its CPU is this process's while it alone ran"
        ));
    }
    if let Some((n, run)) = &base.naive {
        let vs = (
            ratio(run.events_per_s, seed_rate),
            String::new(),
            "1.0x".into(),
        );
        let delay = rankflow::config::BatchConfig::default().max_delay_ms.get();
        print_row("plain", &batch_label((1, delay)), run, vs);
        notes.push(format!(
            "batch=1: rankflow with max_events = 1 on the plain boards, first {n} events"
        ));
    }
    for note in notes {
        println!("  ({note})");
    }
    println!(
        "  (CPU µs/ev: rankflow's, or the seed-style consumer's; cmds/ev: Redis commands, script calls included)"
    );
}

/// What Redis's one thread allows each row with a target, whatever
/// rankflow does: at the Redis CPU per event measured, Redis alone busy
/// for a whole second applies `1e6 / µs` events; and the sorted-set writes
/// alone (`ZADD`, one per distinct member and view in a batch, the least
/// the documented layout needs, no Lua, fences or index) allow no more
/// than their own share. A target above the first needs Redis cheaper per
/// event; above the second, fewer writes per event than the layout takes.
fn print_ceilings(measured: &[Measured], seed_rate: Option<f64>) {
    let Some(seed) = seed_rate else { return };
    for m in measured {
        let Some(target) = m.target else { continue };
        let events = m.run.events.max(1.0);
        let zadd_us = m.commands.get("zadd").map_or(0.0, |s| s.1) / events;
        let ceiling = |us: f64| 1e6 / us.max(1e-9);
        println!(
            "  {} at {}: {target}x needs {:.0} events/s; Redis at {:.2} µs/ev allows {:.0} ({:.1}x), its ZADDs alone ({:.2} µs/ev) {:.0} ({:.1}x)",
            m.name,
            m.batch,
            target * seed,
            m.run.redis_us(),
            ceiling(m.run.redis_us()),
            ceiling(m.run.redis_us()) / seed,
            zadd_us,
            ceiling(zadd_us),
            ceiling(zadd_us) / seed,
        );
    }
}

/// Where Redis's time went in one workload: every command by total time,
/// then the EVALSHA calls by script and first board.
fn print_split(m: &Measured) {
    let events = m.run.events.max(1.0);
    println!(
        "\n  Redis time split, {} at {} ({} events; INFO commandstats, calls inside scripts counted under their own name and inside evalsha)",
        m.name, m.batch, m.run.events
    );
    println!(
        "    {:<22} {:>12} {:>10} {:>12} {:>12}",
        "command", "calls", "calls/ev", "µs/call", "µs/ev"
    );
    let mut rows: Vec<_> = m.commands.iter().collect();
    rows.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    let mut inside = 0.0;
    for (name, &(calls, usec)) in rows {
        if !support::TOP_LEVEL.contains(&name.as_str()) {
            inside += usec;
        }
        println!(
            "    {name:<22} {calls:>12.0} {:>10.2} {:>12.2} {:>12.3}",
            calls / events,
            usec / calls.max(1.0),
            usec / events
        );
    }
    let evalsha = m.commands.get("evalsha").map_or(0.0, |s| s.1);
    println!(
        "    evalsha {:.3} µs/ev = commands inside scripts {:.3} + Lua and argument handling {:.3}",
        evalsha / events,
        inside / events,
        (evalsha - inside) / events
    );
    if m.scripts.is_empty() {
        println!(
            "    (BENCH_SLOWLOG=1 adds the time per script call from SLOWLOG; it distorts Redis CPU)"
        );
        return;
    }
    println!(
        "    {:<40} {:>8} {:>12} {:>12} {:>12}",
        "script calls (SLOWLOG)", "calls", "µs/call", "max µs", "µs/ev"
    );
    for (name, t) in &m.scripts {
        println!(
            "    {name:<40} {:>8.0} {:>12.1} {:>12.0} {:>12.3}",
            t.calls,
            t.usec / t.calls.max(1.0),
            t.max_usec,
            t.usec / events
        );
    }
}
