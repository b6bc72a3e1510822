//! What a composite board (docs/score-encoding.md) costs per event next to a plain one:
//! 300,000 score events (100,000 players, Zipf) in an 8-partition topic,
//! consumed in the same run against the same servers into
//! - a plain board: points summed per player, views `week` and `all`, once
//!   with its dense-rank index (`dense_ranks = true`) and once without
//!   (the default for such a board);
//! - a tie-break board: the same, `tie_break = "earliest"`;
//! - the seed 000 stage-clear board: three fields (levels cleared summed,
//!   revives summed ascending, first clear time as a min), same views, with
//!   and without its dense-rank index.
//!
//! Prints events/s, CPU-µs per event of rankflow (this process) and of
//! Redis (`INFO cpu`), Redis commands per event, and each board's ratio to
//! the plain one.
//!
//! Run with `cargo bench --bench composite` (`BENCH_EVENTS` changes the
//! load).

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use common::*;
use rankflow::event::EventType;
use support::{Run, consume, env_u64};

const PLAIN: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["week", "all"]
dense_ranks = true
"#;

const PLAIN_NO_DENSE: &str = r#"
[[board]]
name = "points_nd"
event = "score"
member = "user_id"
score = "points"
periods = ["week", "all"]
dense_ranks = false
"#;

const TIED: &str = r#"
[[board]]
name = "points_tied"
event = "score"
member = "user_id"
score = "points"
tie_break = "earliest"
periods = ["week", "all"]
dense_ranks = true
"#;

const COMPOSITE: &str = r#"
[[board]]
name = "stage_clears"
event = "score"
member = "user_id"
periods = ["week", "all"]
order_by = [
  { field = "levels",      score = "cleared ? 1 : 0", filter = "has(cleared)", aggregate = "sum", order = "desc" },
  { field = "revives",     score = "revives", filter = "has(revives)", aggregate = "sum", order = "asc" },
  { field = "first_clear", score = "ts", filter = "has(cleared) && cleared", aggregate = "min", order = "asc" },
]
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 300_000);
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    eprintln!("producing {events} score events (100000 players, Zipf 1.1) into 8 partitions...");
    let options = support::zipf_options(&broker, &topic, events, EventType::Score, 7);
    let sent = support::produce(options).await;
    eprintln!("produced {sent} events");

    let defaults = rankflow::config::BatchConfig::default();
    let batch = (defaults.max_events.get(), defaults.max_delay_ms.get());
    let composite_no_dense = COMPOSITE.replace("order_by = [", "dense_ranks = false\norder_by = [");
    let mut runs: Vec<(&str, Run)> = Vec::new();
    for (name, boards) in [
        ("plain (sum)", PLAIN),
        ("plain, dense_ranks = false", PLAIN_NO_DENSE),
        ("tie-break (sum, earliest)", TIED),
        ("composite (3 fields)", COMPOSITE),
        ("composite, dense_ranks = false", &composite_no_dense),
    ] {
        eprintln!("{name}:");
        runs.push((
            name,
            consume(&broker, &redis, &topic, boards, events, batch).await,
        ));
    }

    println!(
        "composite benchmark ({events} score events, 8 partitions, one board with views week and all; batch {} events / {} ms)",
        batch.0, batch.1
    );
    println!(
        "  {:<32} {:>10} {:>15} {:>12} {:>14} {:>22}",
        "board",
        "events/s",
        "rankflow µs/ev",
        "Redis µs/ev",
        "Redis cmds/ev",
        "CPU per event vs plain"
    );
    let plain = runs[0].1;
    let total = |r: &Run| r.rankflow_us() + r.redis_us();
    for (name, r) in &runs {
        println!(
            "  {name:<32} {:>10.0} {:>15.2} {:>12.2} {:>14.1} {:>21.2}x",
            r.events_per_s,
            r.rankflow_us(),
            r.redis_us(),
            r.commands_per_event(),
            total(r) / total(&plain).max(1e-9)
        );
    }
}
