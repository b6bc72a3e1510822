//! Checks and quarantine end to end (docs/checks.md): real tansu and
//! redis-server, rankflow as separate processes. Events that fail a rule
//! check or a rate check must reach the quarantine topic unchanged, with
//! their check and source in the headers, and change no board; the set of
//! quarantined sources and every board must equal a reference model
//! computed here from the events, also when the instances of a fleet are
//! killed with `kill -9` in turn while events flow.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::letters::{Letter, read_letters};
use common::reference::{Boards, now_ms, wait_boards_or_show};
use common::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]

[[check]]
name = "points_cap"
event = "score"
rule = "points <= 100"

[[check]]
name = "score_rate"
event = "score"
member = "user_id"
max_rate = "3/1m"
"#;

const CAP: i64 = 100;
const RATE_N: usize = 3;
const RATE_MS: i64 = 60_000;

/// One produced event.
struct Sent {
    partition: i32,
    user: String,
    ts: i64,
    points: i64,
    payload: Vec<u8>,
}

/// Score events of `users` members, each member's events in one partition
/// (the producer's key is not the member: messages go to partitions
/// directly), with event times rising `step_ms` per event; one member in
/// eight sends bursts of events with the same time.
fn events(n: usize, users: usize, partitions: i32, step_ms: i64, seed: u64) -> Vec<Sent> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let base = now_ms() - 2 * 3_600_000;
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while out.len() < n {
        let u = rng.random_range(0..users);
        let ts = base + i as i64 * step_ms;
        let burst = if u % 8 == 0 { 4 } else { 1 };
        for _ in 0..burst {
            let points = rng.random_range(1..=120i64);
            let user = format!("u{u}");
            let payload = json!({"type": "score", "event_id": format!("s{}", out.len()), "ts": ts,
                                 "user_id": user, "game_id": "g", "points": points})
            .to_string()
            .into_bytes();
            out.push(Sent {
                partition: u as i32 % partitions,
                user,
                ts,
                points,
                payload,
            });
        }
        i += 1;
    }
    out.truncate(n);
    out
}

/// The reference: which sources a correct pipeline quarantines, by which
/// check, and the board it leaves. A member's events come in its
/// partition's order; each is checked against the cap, then against the
/// member's passed events within (ts − 1 min, ts].
fn model(topic: &str, sent: &[Sent]) -> (BTreeMap<String, String>, Boards) {
    let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
    let mut passed: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut quarantined = BTreeMap::new();
    let mut board: BTreeMap<String, f64> = BTreeMap::new();
    for e in sent {
        let offset = offsets.entry(e.partition).or_insert(0);
        let source = format!("{topic}/{}/{offset}", e.partition);
        *offset += 1;
        let history = passed.entry(&e.user).or_default();
        let within = history
            .iter()
            .filter(|&&t| t > e.ts - RATE_MS && t <= e.ts)
            .count();
        if e.points > CAP {
            quarantined.insert(source, "points_cap".to_string());
        } else if within >= RATE_N {
            quarantined.insert(source, "score_rate".to_string());
        } else {
            history.push(e.ts);
            *board.entry(e.user.clone()).or_default() += e.points as f64;
        }
    }
    (
        quarantined,
        BTreeMap::from([("points/all".to_string(), board)]),
    )
}

fn setup(broker: &Broker, redis: &Redis) -> Setup {
    let mut setup = Setup::new(broker, redis, BOARDS);
    setup.quarantine = Some(unique("quarantine"));
    setup
}

/// The quarantine topic's letters by source; a source sent twice (a
/// redelivery) must carry the same check both times.
fn by_source(letters: &[Letter]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for l in letters {
        let check = l.header("rankflow-check").to_string();
        if let Some(before) = out.insert(l.source().to_string(), check.clone()) {
            assert_eq!(before, check, "{} quarantined by two checks", l.source());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_failing_a_check_reach_the_quarantine_topic_unchanged_and_change_no_board() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = setup(&broker, &redis);
    broker.create_topic(&setup.topic, 3).await;
    let sent = events(600, 12, 3, 1_000, 7);
    let (expect_q, expect) = model(&setup.topic, &sent);
    let messages: Vec<(i32, Vec<u8>)> = sent
        .iter()
        .map(|e| (e.partition, e.payload.clone()))
        .collect();
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let app = Process::start(&setup);
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(60), || {
        app.log()
    })
    .await;
    let topic = setup.quarantine.clone().unwrap_or_default();
    let letters = read_letters(&broker, &topic, Duration::from_secs(30), QUIET, |l| {
        l.len() >= expect_q.len()
    })
    .await;
    assert_eq!(
        by_source(&letters),
        expect_q,
        "quarantined sources and checks"
    );
    // Unchanged: each letter's payload is its source message's.
    let mut payloads: BTreeMap<String, &[u8]> = BTreeMap::new();
    let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
    for e in &sent {
        let offset = offsets.entry(e.partition).or_insert(0);
        payloads.insert(
            format!("{}/{}/{offset}", setup.topic, e.partition),
            &e.payload,
        );
        *offset += 1;
    }
    for l in &letters {
        assert_eq!(
            Some(&l.payload.as_slice()),
            payloads.get(l.source()),
            "{}",
            l.source()
        );
        assert!(!l.header("rankflow-detail").is_empty(), "{:?}", l.headers);
    }
    let per_check = |c: &str| expect_q.values().filter(|v| *v == c).count();
    let metrics = get_text(&app.url("/metrics")).await.unwrap_or_default();
    for check in ["points_cap", "score_rate"] {
        let counted = metric_sum(&metrics, "rankflow_quarantined_total", &[("check", check)]);
        assert_eq!(counted as usize, per_check(check), "{check}: {metrics}");
    }
    let outcome = events_counted(&app.url("/metrics"), &setup.topic, "quarantined").await;
    assert_eq!(outcome as usize, expect_q.len());
    println!(
        "verified: {} of {} events quarantined ({} by points_cap, {} by score_rate), each letter the message unchanged; the board equals the model's",
        expect_q.len(),
        sent.len(),
        per_check("points_cap"),
        per_check("score_rate")
    );
}
