//! Shadow boards (docs/rebuilds.md) from the outside: a fleet that has run
//! with the plain boards for a while is restarted with shadows of two of
//! them under changed rules. Their backfill replays the topic's history
//! while events keep arriving, through `kill -9`s of instances, a join and a
//! Redis crash; once `/v1/boards` says done, every shadow view must equal
//! a board that had had the new rules since `backfill_from` (a reference
//! model computed from the produced events), and every live board must
//! still equal its own reference.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::reference::*;
use common::*;

/// Two shadows of [`MIXED_BOARDS`]' boards: `star_coins` re-priced (rockets
/// count double) and the scoped `fans` counting gifts instead of items.
fn shadows(backfill_from: &str) -> String {
    format!(
        r#"
[[board]]
name = "star_coins_v2"
shadow_of = "star_coins"
backfill_from = "{backfill_from}"
event = "gift"
member = "receiver_id"
score = 'count * value * (gift_id == "rocket" ? 2 : 1)'
periods = ["day", "all"]

[[board]]
name = "fans_v2"
shadow_of = "fans"
backfill_from = "{backfill_from}"
event = "gift"
member = "sender_id"
score = "1"
scope = "receiver_id"
periods = ["all"]
"#
    )
}

/// The shadows' reference: the gifts at or after `from`, under their rules.
fn shadow_model(messages: &[(i32, Vec<u8>)], from: i64) -> Boards {
    let mut want: Boards = BTreeMap::new();
    let mut add = |key: String, member: &str, v: f64| {
        *want
            .entry(key)
            .or_default()
            .entry(member.to_string())
            .or_insert(0.0) += v;
    };
    for (_, bytes) in messages {
        let e: serde_json::Value = serde_json::from_slice(bytes).expect("json");
        let ts = e["ts"].as_i64().expect("ts");
        if e["type"] != "gift" || ts < from {
            continue;
        }
        let receiver = e["receiver_id"].as_str().expect("receiver");
        let sender = e["sender_id"].as_str().expect("sender");
        let mut coins = e["count"].as_f64().expect("count") * e["value"].as_f64().expect("value");
        if e["gift_id"] == "rocket" {
            coins *= 2.0;
        }
        let day = chrono::DateTime::from_timestamp_millis(ts)
            .expect("ts")
            .format("%Y-%m-%d");
        add(format!("star_coins_v2/day:{day}"), receiver, coins);
        add("star_coins_v2/all".into(), receiver, coins);
        add(format!("fans_v2:{receiver}/all"), sender, 1.0);
    }
    want
}

/// Messages the backfill of `board` has replayed, by its recorded positions.
async fn replayed(redis: &Redis, setup: &Setup, board: &str) -> i64 {
    let positions: BTreeMap<String, i64> = redis::cmd("HGETALL")
        .arg(format!("{}:positions~backfill:{board}", setup.prefix))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap_or_default();
    positions.values().sum()
}

/// The `backfill` object `/v1/boards` shows for `board`.
async fn backfill_of(p: &Process, board: &str) -> serde_json::Value {
    let body: serde_json::Value = get_text(&p.url("/v1/boards"))
        .await
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    body["boards"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == board))
        .map(|b| b["backfill"].clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_kills_a_join_and_a_redis_crash_equals_a_board_that_always_had_its_rules()
 {
    let broker = Broker::start();
    let mut redis = Redis::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
    ]);
    let mut setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    setup.batch = (1000, 20);
    broker.create_topic(&setup.topic, 4).await;
    let total = 120_000;
    let base = now_ms();
    let (messages, mut expect) = mixed_events(total, 31, 4, base);
    // The events span the two hours before `base`: the first hour is
    // history the shadows must skip.
    let from = base - 3_600_000;
    let from_text = chrono::DateTime::from_timestamp_millis(from)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let want_shadows = shadow_model(&messages, from);
    let (history, live) = messages.split_at(total / 2);

    // History: the plain boards only.
    send_all(&broker.producer(), &setup.topic, history).await;
    let mut old = Process::start(&setup);
    wait_for(Duration::from_secs(120), "the history applied", || async {
        (redis.positions_sum(&setup.prefix).await >= (total / 2) as i64).then_some(())
    })
    .await;
    old.kill9();
    println!("history: {} events applied by the plain boards", total / 2);

    // The fleet restarts with the shadows while the rest arrives.
    setup.boards = format!("{MIXED_BOARDS}{}", shadows(&from_text));
    let feeder = feed(
        &broker,
        &setup.topic,
        live.to_vec(),
        4_000,
        Duration::from_millis(300),
    );
    let started = Instant::now();
    let mut fleet = vec![Process::start(&setup), Process::start(&setup)];
    let running = wait_for(Duration::from_secs(30), "the backfill running", || async {
        let b = backfill_of(&fleet[0], "star_coins_v2").await;
        (b["state"] == "running").then_some(b)
    })
    .await;
    println!("backfill started: {running}");
    // Each fault once the backfill has made progress since the last one.
    let mut at = 0;
    for fault in 0..3 {
        at = wait_for(Duration::from_secs(60), "backfill progress", || async {
            let n = replayed(&redis, &setup, "star_coins_v2").await;
            (n >= at + 4_000).then_some(n)
        })
        .await;
        assert!(
            at < (total / 2) as i64,
            "the faults come while the history is replayed ({at} replayed)"
        );
        let when = started.elapsed().as_secs_f64();
        if let Some(victim) = fleet.get_mut(fault) {
            victim.kill9();
            *victim = Process::start(&setup);
            println!(
                "injected: kill -9 of instance {fault} at {when:.1} s, the backfill at {at} messages, restarted"
            );
        } else {
            redis.kill9();
            redis.restart();
            println!(
                "injected: kill -9 of Redis and a restart from its append-only file at {when:.1} s, the backfill at {at} messages"
            );
        }
    }
    fleet.push(Process::start(&setup));
    println!("injected: a third instance joins");
    feeder.await.expect("feeder");

    expect.extend(want_shadows.clone());
    let show = || {
        fleet
            .iter()
            .map(|p| p.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(240), show).await;
    let done = wait_for(Duration::from_secs(30), "both backfills done", || async {
        let a = backfill_of(&fleet[2], "star_coins_v2").await;
        let b = backfill_of(&fleet[2], "fans_v2").await;
        (a["state"] == "done" && b["state"] == "done" && a["lag"] == 0 && b["lag"] == 0)
            .then_some((a, b))
    })
    .await;
    let shadow_members: usize = want_shadows.values().map(BTreeMap::len).sum();
    println!(
        "verified: {} shadow instances ({shadow_members} members) equal the model of the new rules since {from_text}, the live boards their own; backfill {} / {}",
        want_shadows.len(),
        done.0,
        done.1
    );
    let metrics = get_text(&fleet[2].url("/metrics"))
        .await
        .unwrap_or_default();
    assert_eq!(
        metric_sum(
            &metrics,
            "rankflow_backfill_lag",
            &[("board", "star_coins_v2")]
        ),
        0.0,
        "{metrics}"
    );
}
