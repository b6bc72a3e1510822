//! End-to-end throughput (issue 14 point 4): 1,000,000 gift events (100,000
//! senders, 1,000 receivers, Zipf) in an 8-partition topic, consumed in the
//! same run against the same servers
//! - **plain**: into the example config's period boards (`star_coins`
//!   day/week/month/all, `star_flowers` week, `star_fans` day per receiver),
//!   default batch settings;
//! - **windows**: the issue's window workload: `3h/1m` windows on two boards
//!   (`star_coins`, and `star_fans` which is also a tie-break board, as in
//!   the example config) and a `7d/1d` rolling board (`star_flowers`);
//! - **baseline**: the plain boards with `batch.max_events = 1`, one round
//!   trip per event (the naive consumer), which both workloads are compared
//!   with.
//!
//! Prints for each workload events/s, the ratio to the baseline, per event
//! the CPU time of rankflow (`/proc`) and of Redis (`INFO cpu`) and the
//! commands Redis ran (`INFO commandstats`), next to the issue's targets;
//! then where Redis's time went: per command (`INFO commandstats` usec) and
//! per script call (`SLOWLOG` with a threshold of 0 during the batched runs,
//! only with `BENCH_SLOWLOG=1`: Redis 7 then logs every command scripts call
//! too, which costs it CPU).
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench pipeline`). Knobs:
//! `BENCH_EVENTS` and `BENCH_NAIVE_EVENTS` shrink the loads (a naive count of
//! 0 skips the baseline), `BENCH_WORKLOADS` picks workloads (`plain,windows`; `plain-nodense` and
//! `windows-nodense` are the same with `dense_ranks = false` on every board;
//! `ties` is `windows` without its windows, `windows-notie` without its tie-break),
//! `BENCH_MAX_EVENTS` changes the batch size. `scripts/profile.sh` sets
//! `BENCH_PERF_CTL` to a `perf record --control` FIFO: sampling is enabled
//! only while a batched workload is consumed, not while events are produced.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use common::*;
use rankflow::event::EventType;
use support::{CommandStats, PLAIN, Run, ScriptTime, consume, env_u64};

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

/// The issue's targets, printed beside the figures.
const TARGET_PLAIN_RATIO: f64 = 40.0;
const TARGET_WINDOWS_RATIO: f64 = 25.0;
const TARGET_PLAIN_RANKFLOW_US: f64 = 1.5;
const TARGET_WINDOWS_REDIS_US: f64 = 3.0;

/// One batched workload's measurements.
struct Measured {
    name: &'static str,
    run: Run,
    commands: CommandStats,
    scripts: BTreeMap<String, ScriptTime>,
}

/// Tells `perf record --control` (if the profile script started us under
/// it) to start or stop sampling.
fn perf_control(command: &str) {
    if let Ok(path) = std::env::var("BENCH_PERF_CTL")
        && let Err(e) = std::fs::write(&path, format!("{command}\n"))
    {
        eprintln!("perf control {path}: {e}");
    }
}

async fn produce(broker: &Broker, topic: &str, events: u64) {
    eprintln!(
        "producing {events} gift events (100000 senders, 1000 receivers, Zipf 1.1) into 8 partitions..."
    );
    let options = support::zipf_options(broker, topic, events, EventType::Gift, 42);
    let produced = Instant::now();
    let sent = support::produce(options).await;
    eprintln!(
        "produced {sent} events in {:.1}s",
        produced.elapsed().as_secs_f64()
    );
}

/// Consumes the topic into `boards` with the batched settings, recording
/// Redis's per-command and per-script time over the run.
async fn measure(
    setup: (&Broker, &Redis, &str),
    name: &'static str,
    boards: &str,
    events: u64,
    batch: (usize, u64),
) -> Measured {
    let (broker, redis, topic) = setup;
    eprintln!(
        "{name}: max_events = {}, max_delay_ms = {}",
        batch.0, batch.1
    );
    // SLOWLOG at threshold 0 also logs every command a script calls, which
    // costs Redis CPU and memory: only on request, never in measured runs.
    let slowlog = env_u64("BENCH_SLOWLOG", 0) == 1;
    let before = support::command_stats(redis).await;
    if slowlog {
        support::slowlog_all(redis, 2_000_000).await;
    }
    perf_control("enable");
    let run = consume(broker, redis, topic, boards, events, batch).await;
    perf_control("disable");
    let scripts = if slowlog {
        support::script_split(redis).await
    } else {
        BTreeMap::new()
    };
    let after = support::command_stats(redis).await;
    Measured {
        name,
        run,
        commands: support::command_delta(&before, &after),
        scripts,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 1_000_000);
    let naive_events = env_u64("BENCH_NAIVE_EVENTS", events).min(events);
    let workloads = std::env::var("BENCH_WORKLOADS").unwrap_or_else(|_| "plain,windows".into());
    let broker = Broker::start();
    let redis = Redis::start();
    eprintln!(
        "bench pid {}, redis pid {}",
        std::process::id(),
        redis_pid(&redis).await
    );
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    produce(&broker, &topic, events).await;

    let defaults = rankflow::config::BatchConfig::default();
    let max_events = env_u64("BENCH_MAX_EVENTS", defaults.max_events.get() as u64) as usize;
    let batch = (max_events, defaults.max_delay_ms.get());
    let mut measured = Vec::new();
    // The `-nodense` variants (asked for by name only) set `dense_ranks =
    // false` on every board: what the dense-rank index costs each workload.
    let nodense = |boards: &str| boards.replace("[[board]]\n", "[[board]]\ndense_ranks = false\n");
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
        ("plain-nodense", nodense(PLAIN)),
        ("windows-nodense", nodense(WINDOWS)),
        ("ties", without(WINDOWS, "windows = ")),
        ("windows-notie", without(WINDOWS, "tie_break = ")),
    ];
    for (name, boards) in &all {
        if workloads.split(',').any(|w| w.trim() == *name) {
            let servers = (&broker, &redis, topic.as_str());
            measured.push(measure(servers, name, boards, events, batch).await);
        }
    }
    let naive = if naive_events > 0 {
        eprintln!("baseline: max_events = 1 over the first {naive_events} events (plain boards)");
        Some(consume(&broker, &redis, &topic, PLAIN, naive_events, (1, batch.1)).await)
    } else {
        None
    };
    print_summary(events, naive_events, batch, &measured, naive.as_ref());
    for m in &measured {
        print_split(m);
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

fn print_summary(
    events: u64,
    naive_events: u64,
    batch: (usize, u64),
    measured: &[Measured],
    naive: Option<&Run>,
) {
    println!(
        "pipeline benchmark ({events} gift events, 8 partitions; batch {} events / {} ms)",
        batch.0, batch.1
    );
    println!(
        "  plain:   star_coins day/week/month/all, star_flowers week, star_fans day per receiver"
    );
    println!(
        "  windows: the same + 3h/1m on star_coins and star_fans (tie-break earliest), 7d/1d on star_flowers"
    );
    println!(
        "  {:<28} {:>10} {:>16} {:>15} {:>13} {:>14}",
        "workload", "events/s", "x baseline", "rankflow µs/ev", "Redis µs/ev", "Redis cmds/ev"
    );
    let rate = naive.map(|n| n.events_per_s);
    for m in measured {
        let r = &m.run;
        let (ratio_target, rankflow_target, redis_target) = match m.name {
            n if n.starts_with("plain") => (
                TARGET_PLAIN_RATIO,
                format!("<= {TARGET_PLAIN_RANKFLOW_US}"),
                String::new(),
            ),
            _ => (
                TARGET_WINDOWS_RATIO,
                String::new(),
                format!("<= {TARGET_WINDOWS_REDIS_US}"),
            ),
        };
        let ratio = rate.map_or("-".to_string(), |n| {
            format!("{:.1}x", r.events_per_s / n.max(1e-9))
        });
        println!(
            "  {:<28} {:>10.0} {:>16} {:>15.2} {:>13.2} {:>14.1}",
            m.name,
            r.events_per_s,
            ratio,
            r.rankflow_us(),
            r.redis_us(),
            r.commands_per_event()
        );
        println!(
            "  {:<28} {:>10} {:>16} {:>15} {:>13} {:>14}",
            "  issue 14 target",
            "",
            format!(">= {ratio_target}x"),
            rankflow_target,
            redis_target,
            ""
        );
    }
    if let Some(n) = naive {
        println!(
            "  {:<28} {:>10.0} {:>16} {:>15.2} {:>13.2} {:>14.1}",
            "baseline (max_events 1)",
            n.events_per_s,
            "1.0x",
            n.rankflow_us(),
            n.redis_us(),
            n.commands_per_event()
        );
        println!(
            "  (baseline: plain boards, one round trip per event, first {naive_events} events)"
        );
    }
}

/// Where Redis's time went in one workload: every command by total time,
/// then the EVALSHA calls by script and first board.
fn print_split(m: &Measured) {
    let events = m.run.events.max(1.0);
    println!(
        "\n  Redis time split, {} ({} events; INFO commandstats, calls inside scripts counted under their own name and inside evalsha)",
        m.name, m.run.events
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
