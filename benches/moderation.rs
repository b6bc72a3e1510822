//! What moderation (docs/moderation.md) costs.
//!
//! 1. The write path, in one run against the same servers: 300,000 gift
//!    events (`BENCH_EVENTS`; 100,000 senders, 1,000 receivers, Zipf 1.1,
//!    8 partitions) into `star_coins` (receivers, unscoped) and `star_fans`
//!    (senders per receiver, scoped), consumed three times:
//!    - without the member index (turned off in this process: the write
//!      path as it was before moderation),
//!    - with it (the default),
//!    - with it, and one sender hidden, one receiver hidden and one sender
//!      erased in the moderation record (every update's member is looked
//!      up).
//!
//!    Prints events/s, CPU-µs per event of rankflow and of Redis, Redis
//!    commands per event, each run's ratio to the first, and the member
//!    index's bytes per (member, instance) pair (`MEMORY USAGE`).
//! 2. An action at scale: a scoped board with 10,000 scope values and
//!    1,000,000 members (`BENCH_MEMBERS`), plus an unscoped board of the
//!    same members, written through the consumer's own batches; one member
//!    is in 100 scopes. Times hide, restore and erase of that member (the
//!    moves; the API waits `[http] union_cache` more), and counts the
//!    keyspace scans Redis ran meanwhile (`SCAN`, `KEYS`: must be 0). The
//!    actions also change a PostgreSQL archive of 1,000,000 rows (10,000
//!    archived periods of 100 members, one per scope; the member in 100 of
//!    them), so the times include the archive's part.
//!
//! Run with `cargo bench --bench moderation`.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::Instant;

use common::direct::Direct;
use common::postgres::Postgres;
use common::*;
use rankflow::admin::{ActionRequest, MemberAction};
use rankflow::event::EventType;
use rankflow::moderation::MemberHasher;
use support::{Run, command_delta, command_stats, consume_with, env_u64};

const ERASE_KEY: &str = "bench-erase-key-0123456789";

const BOARDS: &str = r#"
[[board]]
name = "star_coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["day", "all"]

[[board]]
name = "star_fans"
event = "gift"
member = "sender_id"
score = "count * value"
scope = "receiver_id"
periods = ["day", "all"]
"#;

const SCALE: &str = r#"
[[board]]
name = "fans"
event = "score"
member = "user_id"
score = "points"
scope = "game_id"
periods = ["day", "all"]
windows = ["3h/10m"]

[[board]]
name = "players"
event = "score"
member = "user_id"
score = "points"
periods = ["day", "all"]
"#;

/// The moderation record of run 3: `u1` hidden from `star_fans`, `s1`
/// from `star_coins`, `u2` erased.
fn moderated(setup: &mut Setup, redis: &Redis) {
    let key = format!("{}:moderation", setup.prefix);
    let hasher = MemberHasher::new(Some(ERASE_KEY));
    support::hide(redis, &setup.prefix, "u1", "star_fans");
    support::hide(redis, &setup.prefix, "s1", "star_coins");
    redis.cli(&["HSET", &key, &format!("e:{}", hasher.hex("u2")), "{}"]);
    redis.cli(&["HSET", &key, "~gen", "3"]);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_u64("BENCH_EVENTS", 300_000);
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench");
    broker.create_topic(&topic, 8).await;
    eprintln!(
        "producing {events} gift events (100000 senders, 1000 receivers, Zipf 1.1) into 8 partitions..."
    );
    let options = support::zipf_options(&broker, &topic, events, EventType::Gift, 7);
    let sent = support::produce(options).await;
    eprintln!("produced {sent} events");
    let defaults = rankflow::config::BatchConfig::default();
    let batch = (defaults.max_events.get(), defaults.max_delay_ms.get());
    let with_key = |s: &mut Setup| s.extra = format!("[admin]\nerase_key = \"{ERASE_KEY}\"\n");
    let mut runs: Vec<(&str, Run)> = Vec::new();
    let mut index_bytes = 0.0;
    // The three alternate, `BENCH_ROUNDS` times (default 2): these
    // machines are noisy, and a drift then shows in every row alike.
    let rounds = env_u64("BENCH_ROUNDS", 2);
    let configs = [
        ("without the member index", false, false),
        ("with the member index", true, false),
        ("index, 2 hidden, 1 erased", true, true),
    ];
    // Each round starts with another of them, so that a drift during the
    // run (Redis holding more keys after every run, the machine's load)
    // favours none; the table lists every round in the order above.
    let order =
        (0..rounds as usize).flat_map(|r| (0..configs.len()).map(move |k| (r, (k + r) % 3)));
    let mut by_round: Vec<[Option<Run>; 3]> = vec![[None; 3]; rounds as usize];
    for (round, c) in order {
        let (name, index, record) = configs[c];
        eprintln!("round {}, {name}:", round + 1);
        rankflow::sink::members::disable_index_for_benchmarks(!index);
        let prefix = std::sync::Mutex::new(String::new());
        let run = consume_with(&broker, &redis, &topic, BOARDS, events, batch, &|s| {
            with_key(s);
            if record {
                moderated(s, &redis);
            }
            *prefix.lock().expect("prefix") = s.prefix.clone();
        })
        .await;
        if index && !record {
            let prefix = prefix.lock().expect("prefix").clone();
            index_bytes = index_bytes_per_pair(&redis, &prefix).await;
        }
        by_round[round][c] = Some(run);
    }
    for round in by_round {
        for (c, run) in round.into_iter().enumerate() {
            if let Some(run) = run {
                runs.push((configs[c].0, run));
            }
        }
    }
    rankflow::sink::members::disable_index_for_benchmarks(false);
    println!(
        "moderation, write path ({events} gift events, 8 partitions, star_coins + star_fans scoped by receiver; batch {} events / {} ms)",
        batch.0, batch.1
    );
    println!(
        "  {:<28} {:>10} {:>9} {:>15} {:>12} {:>14}",
        "run", "events/s", "vs first", "rankflow µs/ev", "Redis µs/ev", "Redis cmds/ev"
    );
    // Each row against the run without the index of its round.
    let mut ratios: [Vec<f64>; 3] = Default::default();
    for (i, (name, r)) in runs.iter().enumerate() {
        let first = runs[i - i % configs.len()].1;
        let ratio = r.events_per_s / first.events_per_s.max(1e-9);
        ratios[i % configs.len()].push(ratio);
        println!(
            "  {name:<28} {:>10.0} {:>8.2}x {:>15.2} {:>12.2} {:>14.2}",
            r.events_per_s,
            ratio,
            r.rankflow_us(),
            r.redis_us(),
            r.commands_per_event()
        );
    }
    for (c, mut rs) in ratios.into_iter().enumerate().skip(1) {
        let median = support::median(&mut rs);
        println!(
            "  {}: {:?} of the run without the index; median {median:.3}",
            configs[c].0,
            rs.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>(),
        );
    }
    println!(
        "  member index: {index_bytes:.0} bytes per (member, scoped instance) pair (MEMORY USAGE of its buckets)"
    );

    at_scale(&redis).await;
}

/// `MEMORY USAGE` of the member index's buckets over the fields they hold:
/// bytes per (member, scoped instance) pair.
async fn index_bytes_per_pair(redis: &Redis, prefix: &str) -> f64 {
    let mut c = redis.conn().await;
    let (mut bytes, mut pairs) = (0u64, 0u64);
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:members:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .expect("SCAN");
        for k in keys {
            let fields: u64 = redis::cmd("HLEN")
                .arg(&k)
                .query_async(&mut c)
                .await
                .expect("HLEN");
            let used: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&k)
                .query_async(&mut c)
                .await
                .expect("MEMORY USAGE");
            bytes += used;
            pairs += fields;
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    bytes as f64 / (pairs.max(1) as f64)
}

/// An archive of `scopes` closed days of `fans`, one per scope, of 100
/// members each, written by SQL (the archiver would take minutes for
/// 10,000 periods); `target` is 50th in 100 of them. Answers the rows.
async fn archive_at_scale(pg: &Postgres, scopes: i64) -> i64 {
    let mut a = rankflow::archive::copy::Archive::connect(&pg.url())
        .await
        .expect("archive");
    rankflow::archive::schema::migrate(a.client())
        .await
        .expect("schema");
    a.client()
        .execute(
            "INSERT INTO rankflow_archived_periods
                 (board, scope, view, period, period_start, period_end, members)
             SELECT 'fans', 'g' || s, 'day', '2026-11-20', '2026-11-20', '2026-11-21', 100
               FROM generate_series(0, $1::int8 - 1) s",
            &[&scopes],
        )
        .await
        .expect("periods");
    a.client()
        .execute(
            "INSERT INTO rankflow_archive
                 (board, scope, view, period, rank, member, score, rank_competition, rank_dense)
             SELECT 'fans', 'g' || s, 'day', '2026-11-20', r,
                    CASE WHEN r = 50 AND s % 97 = 0 AND s / 97 < 100 THEN 'target'
                         ELSE 'm' || (s * 100 + r) END,
                    1000 - r, r, r
               FROM generate_series(0, $1::int8 - 1) s, generate_series(1, 100) r",
            &[&scopes],
        )
        .await
        .expect("rows");
    a.client()
        .query_one("SELECT count(*) FROM rankflow_archive", &[])
        .await
        .expect("count")
        .get(0)
}

/// Part 2: hide, restore and erase one member of a board with 10,000 scope
/// values and `BENCH_MEMBERS` members.
async fn at_scale(redis: &Redis) {
    let members = env_u64("BENCH_MEMBERS", 1_000_000);
    let scopes = 10_000;
    let prefix = unique("scale");
    let now = chrono::Utc::now().timestamp_millis();
    let mut d = Direct::new(&redis.url(), &prefix, SCALE, now)
        .await
        .with_erase_key(ERASE_KEY);
    let loading = Instant::now();
    let chunk = 20_000u64;
    let mut i = 0;
    while i < members {
        let batch: Vec<serde_json::Value> = (i..(i + chunk).min(members))
            .map(|m| {
                serde_json::json!({"type": "score", "event_id": format!("e{m}"), "ts": now,
                    "user_id": format!("m{m}"), "game_id": format!("g{}", m % scopes), "points": m % 1000})
            })
            .collect();
        d.apply(&batch).await;
        i += chunk;
    }
    let target: Vec<serde_json::Value> = (0..100)
        .map(|g| {
            serde_json::json!({"type": "score", "event_id": format!("t{g}"), "ts": now,
                "user_id": "target", "game_id": format!("g{}", g * 97), "points": 500})
        })
        .collect();
    d.apply(&target).await;
    eprintln!(
        "loaded {members} members in {scopes} scopes in {:.1} s",
        loading.elapsed().as_secs_f64()
    );
    let pg = Postgres::start();
    let archived = archive_at_scale(&pg, scopes as i64).await;
    eprintln!("archived {archived} rows");
    let moderator = d.moderator().with_archive(Some(
        rankflow::archive::connect::Target::new(&pg.url(), None).expect("archive url"),
    ));
    let before = command_stats(redis).await;
    let mut took = Vec::new();
    for (name, action) in [
        ("hide", MemberAction::Hide),
        ("restore", MemberAction::Restore),
        ("erase", MemberAction::Erase),
    ] {
        let req = ActionRequest {
            member: "target".to_string(),
            boards: None,
            reason: None,
        };
        let started = Instant::now();
        let report = moderator.act(action, &req, "bench").await.expect(name);
        took.push((name, started.elapsed().as_secs_f64() * 1e3, report.state));
    }
    let delta = command_delta(&before, &command_stats(redis).await);
    let scans: f64 = ["scan", "keys"]
        .iter()
        .filter_map(|c| delta.get(*c))
        .map(|(calls, _)| calls)
        .sum();
    println!(
        "moderation, one action at scale (board `fans`: {scopes} scopes, {members} members; board `players`: the same members; the member in 100 scopes; an archive of {archived} rows in {scopes} periods, the member in 100)"
    );
    for (name, ms, state) in &took {
        println!("  {name:<8} {ms:>8.1} ms  -> {state}");
    }
    println!(
        "  keyspace scans (SCAN, KEYS) during the actions: {}",
        scans.abs() as u64
    );
}
