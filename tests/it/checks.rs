//! Checks and quarantine end to end (docs/checks.md): real tansu and
//! redis-server, rankflow as separate processes. Events that fail a rule
//! check or a rate check must reach the quarantine topic unchanged, with
//! their check and source in the headers, and change no board; the set of
//! quarantined sources and every board must equal a reference model
//! computed here from the events, also when the instances of a fleet are
//! killed with `kill -9` in turn while events flow.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    let base = now_ms() - n as i64 * step_ms - 60_000;
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

const PARTITIONS: i32 = 6;
/// Events per second, sent as `RATE / 10` every 100 ms.
const RATE: usize = 1_000;
const PRODUCE_FOR: Duration = Duration::from_secs(30);
const KILL_EVERY: Duration = Duration::from_secs(3);
const KILLS: usize = 8;

/// The chaos pattern of the exactly-once tests (`repeated_kill`): three
/// instances share the group while events flow, and one after the other
/// is killed with `kill -9` and started again. Decisions must not depend
/// on which instance saw an event, on batch boundaries or on redeliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_killed_in_turn_quarantine_exactly_what_the_model_does() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = setup(&broker, &redis);
    setup.batch = (1000, 20);
    broker.create_topic(&setup.topic, PARTITIONS).await;
    let total = RATE * PRODUCE_FOR.as_secs() as usize;
    // 60 members, each about 3.5 events per minute of event time: near
    // the limit of 3, so that passing and failing alternate.
    let sent = events(total, 60, PARTITIONS, 285, 11);
    let (expect_q, expect) = model(&setup.topic, &sent);
    let messages: Vec<(i32, Vec<u8>)> = sent
        .iter()
        .map(|e| (e.partition, e.payload.clone()))
        .collect();
    let mut fleet = [
        Process::start(&setup),
        Process::start(&setup),
        Process::start(&setup),
    ];
    let started = Instant::now();
    let produce = produce_steadily(&broker, &setup.topic, messages, RATE);
    kill_in_turn(&mut fleet, &setup, &redis, started, KILL_EVERY, KILLS).await;
    produce.await.expect("producer");
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(120), || {
        fleet
            .iter()
            .map(Process::log)
            .collect::<Vec<_>>()
            .join("\n---\n")
    })
    .await;
    let topic = setup.quarantine.clone().unwrap_or_default();
    let letters = read_letters(&broker, &topic, Duration::from_secs(60), QUIET, |l| {
        by_source(l).len() >= expect_q.len()
    })
    .await;
    let got = by_source(&letters);
    let missing: Vec<_> = expect_q
        .keys()
        .filter(|s| !got.contains_key(*s))
        .take(5)
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|s| !expect_q.contains_key(*s))
        .take(5)
        .collect();
    assert_eq!(
        got, expect_q,
        "quarantined sources differ: missing {missing:?}, extra {extra:?}"
    );
    println!(
        "verified: after {KILLS} kill -9s of 3 instances, {} of {total} events quarantined as the model does ({} letters, {} sent again), and the board equals the model's",
        expect_q.len(),
        letters.len(),
        letters.len() - got.len()
    );
}

/// The rates script driven directly against a real Redis, as flushes call
/// it, through random batches, redeliveries of batches that were decided
/// but not applied, and stale redeliveries from a consumer that lost its
/// partitions: every first decision must equal the reference model's, and
/// every later one on the same event the same again (or `Applied` once the
/// state knows its batch applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_decisions_hold_through_batches_and_redeliveries_against_a_model() {
    let redis = Redis::start();
    let said =
        rate_decisions_against_the_model(&format!("\"{}\"", redis.url()), &unique("rf")).await;
    println!("verified: {said}");
}

/// The same on the 3-primary Redis Cluster of the tests: the states of a
/// batch go out per bucket, and end up on more than one primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_decisions_hold_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let prefix = unique("rf");
    let said = rate_decisions_against_the_model(&cluster.toml_urls(), &prefix).await;
    let spread = cluster.spread(&format!("{prefix}:rate:*")).await;
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "states per primary: {spread:?}"
    );
    println!("verified on the cluster (states per primary {spread:?}): {said}");
}

/// A configuration for driving `rates::decide` directly: `BOARDS` (with
/// its checks) and `checks` besides, Redis at `url` (a TOML value) under
/// `prefix`; with its compiled checks.
fn decide_config(
    checks: &str,
    url: &str,
    prefix: &str,
) -> (rankflow::config::Config, rankflow::checks::CheckSet) {
    let text = format!(
        "{BOARDS}\n{checks}[kafka]\nbrokers = \"unused:9092\"\ntopics = [\"t\"]\nquarantine_topic = \"q\"\n\
         [redis]\nurl = {url}\nkey_prefix = \"{prefix}\"\n"
    );
    let cfg =
        rankflow::config::Config::from_toml(&text, std::path::Path::new("t.toml"), Vec::new())
            .expect("config");
    let checks = cfg.compile_checks().expect("checks");
    (cfg, checks)
}

/// Drives the rates script as [`rate_decisions_hold_through_batches_and_redeliveries_against_a_model`]
/// says, against the Redis at `url` (a TOML value); answers what it did.
async fn rate_decisions_against_the_model(url: &str, prefix: &str) -> String {
    use rankflow::event::EventType;
    use rankflow::sink::rates::{Candidate, Decision, Known, decide};
    use rankflow::sink::store::Store;

    let slow_rate = "[[check]]\nname = \"slow_rate\"\nevent = \"score\"\nmember = \"user_id\"\nmax_rate = \"5/5m\"\n";
    let (cfg, checks) = decide_config(slow_rate, url, prefix);
    let store = Store::connect(&cfg.redis).await.expect("redis");
    let scripts = store.scripts();
    let fields = vec!["t/0".to_string(), "t/1".to_string()];
    let limits = [(3usize, 60_000i64), (5, 300_000)];

    let mut rng = SmallRng::seed_from_u64(5);
    // Per partition: the events, as (member, ts).
    let mut log: [Vec<(String, i64)>; 2] = [Vec::new(), Vec::new()];
    let mut ts = 1_763_700_000_000i64;
    for _ in 0..3_000 {
        ts += [0, 0, 5_000, 20_000, 90_000][rng.random_range(0..5)];
        // A member's events are in one partition, so they arrive in the
        // order of their times, whatever the interleaving of partitions.
        let m = rng.random_range(0..6);
        log[m % 2].push((format!("m{m}"), ts));
    }
    // The model: each member's passed times, and every first decision.
    let mut passed: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut first: BTreeMap<(u16, i64), Decision> = BTreeMap::new();
    let mut model = |part: u16, offset: i64, member: &str, ts: i64| -> Decision {
        *first.entry((part, offset)).or_insert_with(|| {
            let history = passed.entry(member.to_string()).or_default();
            for (i, (n, length)) in limits.iter().enumerate() {
                let within = history
                    .iter()
                    .filter(|&&t| t > ts - length && t <= ts)
                    .count();
                if within >= *n {
                    return Decision::Failed(i);
                }
            }
            history.push(ts);
            Decision::Pass
        })
    };
    // Per partition: the position (next offset applied) and how far
    // decisions reached.
    let mut position = [0i64; 2];
    let mut reached = [0i64; 2];
    let (mut batches, mut again, mut stale, mut skipped) = (0, 0, 0, 0);
    let mut known = Known::default();
    while position
        .iter()
        .zip(&log)
        .any(|(p, l)| (*p as usize) < l.len())
    {
        // A batch: from each partition's position, up to 40 events,
        // interleaved at random (each partition in its order).
        let mut next = position;
        let mut candidates = Vec::new();
        let take = rng.random_range(1..40);
        for _ in 0..take {
            let p = rng.random_range(0..2usize);
            let Some((member, ts)) = log[p].get(next[p] as usize) else {
                continue;
            };
            candidates.push(Candidate {
                part: p as u16,
                offset: next[p],
                ts: *ts,
                kind: EventType::Score,
                member: member.as_str().into(),
            });
            next[p] += 1;
        }
        let applied = [position[0] - 1, position[1] - 1];
        let got = decide(
            &store,
            &scripts,
            prefix,
            &checks,
            (&fields, &applied),
            &candidates,
            &mut known,
        )
        .await
        .expect("decide");
        for (c, d) in candidates.iter().zip(&got) {
            let want = model(c.part, c.offset, &c.member, c.ts);
            assert_eq!(
                *d, want,
                "{}/{} ({} at {})",
                c.part, c.offset, c.member, c.ts
            );
            again += usize::from(c.offset < reached[c.part as usize]);
        }
        for p in 0..2 {
            reached[p] = reached[p].max(next[p]);
        }
        batches += 1;
        // One batch in four is not applied (the consumer died): the next
        // one starts at the same position and delivers it again.
        if rng.random_range(0..4) > 0 {
            position = next;
        }
        // Now and then, a consumer that lost its partitions sends an event
        // the state knows applied: it is skipped.
        let p = rng.random_range(0..2usize);
        if position[p] > 2 && rng.random_range(0..5) == 0 {
            let offset = rng.random_range(0..position[p] - 1);
            let (member, ts) = &log[p][offset as usize];
            let old = Candidate {
                part: p as u16,
                offset,
                ts: *ts,
                kind: EventType::Score,
                member: member.as_str().into(),
            };
            // Another consumer, with no memory of states: what it writes
            // makes the first one's memory stale (its compare-and-set
            // fails, and it reads again).
            let got = decide(
                &store,
                &scripts,
                prefix,
                &checks,
                (&fields, &[-1, -1]),
                &[old],
                &mut Known::default(),
            )
            .await
            .expect("decide");
            // Skipped once the member's state learnt that its batch was
            // applied (from a later call with the member); until then
            // decided as the first time.
            let was = model(p as u16, offset, member, *ts);
            assert!(
                got == vec![Decision::Applied] || got == vec![was],
                "stale {p}/{offset}: {got:?}, first {was:?}"
            );
            stale += 1;
            skipped += usize::from(got == vec![Decision::Applied]);
        }
    }
    let failed = first.values().filter(|d| **d != Decision::Pass).count();
    assert!(
        again > 100 && skipped > 20 && failed > 100,
        "{again} {skipped} {failed}"
    );
    format!(
        "{} events in {batches} batches decided as the model ({failed} failed), {again} decided again after a batch was not applied, {stale} stale redeliveries ({skipped} skipped as applied, the rest decided as before)",
        first.len()
    )
}

/// `rankflow <args>`: its exit code and output (standard output first,
/// then the log, at debug level for rankflow's own lines).
fn rankflow(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(args)
        .env("RANKFLOW_LOG", "rankflow=debug")
        .output()
        .expect("rankflow runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// `rankflow release -c <config> --source <source>`.
fn release(config: &std::path::Path, source: &str) -> (Option<i32>, String) {
    rankflow(&[
        "release".as_ref(),
        "-c".as_ref(),
        config.as_os_str(),
        "--source".as_ref(),
        source.as_ref(),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_message_counts_once_and_its_original_never() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = setup(&broker, &redis);
    broker.create_topic(&setup.topic, 3).await;
    let sent = events(150, 6, 3, 1_000, 3);
    let (expect_q, mut expect) = model(&setup.topic, &sent);
    let messages: Vec<(i32, Vec<u8>)> = sent
        .iter()
        .map(|e| (e.partition, e.payload.clone()))
        .collect();
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut app = Process::start(&setup);
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(60), || {
        app.log()
    })
    .await;
    let topic = setup.quarantine.clone().unwrap_or_default();
    read_letters(
        &broker,
        &topic,
        Duration::from_secs(30),
        Duration::ZERO,
        |l| by_source(l).len() >= expect_q.len(),
    )
    .await;
    // The source of each sent event.
    let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
    let sources: Vec<String> = sent
        .iter()
        .map(|e| {
            let offset = offsets.entry(e.partition).or_insert(0);
            *offset += 1;
            format!("{}/{}/{}", setup.topic, e.partition, *offset - 1)
        })
        .collect();
    let config = app.dir.path().join("rankflow.toml");
    for check in ["points_cap", "score_rate"] {
        let (i, source) = sources
            .iter()
            .enumerate()
            .find(|(_, s)| expect_q.get(*s).map(String::as_str) == Some(check))
            .expect("a quarantined event of each check");
        let (code, out) = release(&config, source);
        assert_eq!(code, Some(0), "{out}");
        let said = format!("released {source} (check {check}): applied\n");
        assert!(out.starts_with(&said), "{out}");
        *expect
            .entry("points/all".into())
            .or_default()
            .entry(sent[i].user.clone())
            .or_default() += sent[i].points as f64;
        wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(20), || {
            app.log()
        })
        .await;
        let (code, out) = release(&config, source);
        assert_eq!(code, Some(0), "{out}");
        let said = format!("released {source} (check {check}): already released\n");
        assert!(out.starts_with(&said), "{out}");
        println!("verified: {source} ({check}) released once; released again: {said}");
    }
    let bogus = format!("{}/0/100000", setup.topic);
    let (code, out) = release(&config, &bogus);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no letter with rankflow-source"), "{out}");
    // Every message read again (the positions Redis keeps for resuming are
    // gone): the released originals are decided as before, and nothing
    // changes.
    app.kill9();
    let _: () = redis::cmd("DEL")
        .arg(format!("{}:positions", setup.prefix))
        .query_async(&mut redis.conn().await)
        .await
        .expect("DEL");
    let mut again = Setup::new(&broker, &redis, BOARDS);
    again.topic = setup.topic.clone();
    again.prefix = setup.prefix.clone();
    again.quarantine = setup.quarantine.clone();
    app = Process::start(&again);
    wait_for(
        Duration::from_secs(60),
        "every message read again",
        || async { (redis.positions_sum(&setup.prefix).await >= sent.len() as i64).then_some(()) },
    )
    .await;
    wait_boards_or_show(&redis, &again, &expect, Duration::from_secs(30), || {
        app.log()
    })
    .await;
    println!(
        "verified: after every message was read again, the 2 released events still count once"
    );
}

/// An erasure (docs/moderation.md) leaves no rate-check state named by the
/// member's id; another member's state stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_member_deletes_its_rate_state() {
    use rankflow::admin::{ActionRequest, MemberAction};
    use rankflow::event::EventType;
    use rankflow::sink::rates::{Candidate, Known, decide};

    let redis = Redis::start();
    let prefix = unique("rf");
    let (_, checks) = decide_config("", &format!("\"{}\"", redis.url()), &prefix);
    let direct = common::direct::Direct::new(&redis.url(), &prefix, BOARDS, now_ms())
        .await
        .with_erase_key("secret");
    let candidates: Vec<Candidate> = ["gone", "kept"]
        .iter()
        .enumerate()
        .map(|(i, m)| Candidate {
            part: 0,
            offset: i as i64,
            ts: now_ms(),
            kind: EventType::Score,
            member: (*m).into(),
        })
        .collect();
    let scripts = direct.store.scripts();
    let fields = vec!["t/0".to_string()];
    decide(
        &direct.store,
        &scripts,
        &prefix,
        &checks,
        (&fields, &[-1]),
        &candidates,
        &mut Known::default(),
    )
    .await
    .expect("decide");
    let states = || async { redis.keys(&format!("{prefix}:rate:*")).await };
    assert_eq!(states().await.len(), 2, "{:?}", states().await);
    let req = ActionRequest {
        member: "gone".into(),
        boards: None,
        reason: None,
    };
    direct
        .moderator()
        .act(MemberAction::Erase, &req, "test")
        .await
        .expect("erase");
    let left = states().await;
    assert!(
        left.len() == 1 && left[0].ends_with(":score:kept"),
        "{left:?}"
    );
    println!("verified: after erasing `gone`, the rate states left are {left:?}");
}

/// Two consumers decide events of a member that has no state yet at the
/// same moment: both read none, one creates it, and the other must find
/// out and decide its events anew from the first one's state. A later
/// event then counts both (`score_rate` is 3 a minute): had either
/// consumer's events been lost from the state, it would pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_creating_one_members_state_at_once_both_count() {
    use rankflow::event::EventType;
    use rankflow::sink::rates::{Candidate, Decision, Known, decide};
    use rankflow::sink::store::Store;

    let redis = Redis::start();
    let prefix = unique("rf");
    let (cfg, checks) = decide_config("", &format!("\"{}\"", redis.url()), &prefix);
    let store = Store::connect(&cfg.redis).await.expect("redis");
    let scripts = store.scripts();
    let fields = vec!["t/0".to_string(), "t/1".to_string()];
    let ts = now_ms();
    let event = |part: u16, offset: i64, at: i64| Candidate {
        part,
        offset,
        ts: at,
        kind: EventType::Score,
        member: "racer".into(),
    };
    for round in 0..20 {
        let prefix = format!("{prefix}-{round}");
        let (a, b) = (
            [event(0, 0, ts), event(0, 1, ts + 10)],
            [event(1, 0, ts + 5)],
        );
        let (mut known_a, mut known_b) = (Known::default(), Known::default());
        // Polled in turn on one connection: both reads go out before
        // either write.
        let (got_a, got_b) = tokio::join!(
            decide(
                &store,
                &scripts,
                &prefix,
                &checks,
                (&fields, &[-1, -1]),
                &a,
                &mut known_a
            ),
            decide(
                &store,
                &scripts,
                &prefix,
                &checks,
                (&fields, &[-1, -1]),
                &b,
                &mut known_b
            ),
        );
        let (got_a, got_b) = (got_a.expect("a"), got_b.expect("b"));
        assert_eq!(got_b, vec![Decision::Pass], "round {round}");
        assert_eq!(got_a, vec![Decision::Pass, Decision::Pass], "round {round}");
        let later = [event(0, 2, ts + 20)];
        let got = decide(
            &store,
            &scripts,
            &prefix,
            &checks,
            (&fields, &[-1, -1]),
            &later,
            &mut Known::default(),
        )
        .await
        .expect("later");
        assert!(
            matches!(got[..], [Decision::Failed(_)]),
            "round {round}: the fourth event within a minute got {got:?}"
        );
    }
    println!(
        "verified: in 20 rounds of two consumers creating one member's state at once, a later event counted the events of both"
    );
}

/// `rankflow check` with `[[check]]` entries: what it lists for a valid
/// configuration, and, for each mistake, exit 2 with the check, its number
/// and the field in the message (a hand-made table).
#[test]
fn the_configuration_check_lists_the_checks_and_locates_their_mistakes() {
    // The boards of `BOARDS` without its checks.
    let boards = BOARDS.split("[[check]]").next().unwrap_or_default();
    let check = |kafka_extra: &str, checks: &str| -> (Option<i32>, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.toml");
        let text = format!(
            "[kafka]\nbrokers = \"127.0.0.1:{}\"\ntopics = [\"events\"]\n{kafka_extra}\n[redis]\nurl = \"redis://127.0.0.1:{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n{boards}\n{checks}",
            free_port(),
            free_port()
        );
        std::fs::write(&file, text).expect("write config");
        rankflow(&["check".as_ref(), "-c".as_ref(), file.as_os_str()])
    };
    let q = "quarantine_topic = \"q\"";
    let rule = "[[check]]\nname = \"points_cap\"\nevent = \"score\"\nrule = \"points <= 100\"\n";
    let rate = |name: &str, member: &str, max_rate: &str| {
        format!(
            "[[check]]\nname = \"{name}\"\nevent = \"score\"\nmember = \"{member}\"\nmax_rate = \"{max_rate}\"\n"
        )
    };
    let (code, out) = check(
        q,
        &format!("{rule}{}", rate("score_rate", "user_id", "30/1m")),
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(
            "checks (quarantine topic q):\n  points_cap: score events must satisfy `points <= 100`\n  score_rate: at most 30 score events of one `user_id` per 1m of event time\n"
        ),
        "{out}"
    );
    let wrong = [
        (
            q.to_string(),
            format!("{rule}{}", rate("score_rate", "user_id", "30")),
            "check `score_rate` (#2), field `max_rate`: \"30\": expected N/length",
        ),
        (
            q.to_string(),
            format!("{rule}{}", rate("points_cap", "user_id", "30/1m")),
            "check `points_cap` (#2), field `name`: another check already has this name",
        ),
        (
            q.to_string(),
            format!(
                "{}{}",
                rate("a_rate", "user_id", "30/1m"),
                rate("b_rate", "game_id", "5/1s")
            ),
            "check `b_rate` (#2), field `member`: the rate checks of one event type must count the same member",
        ),
        (
            q.to_string(),
            "[[check]]\nname = \"bad\"\nevent = \"score\"\nrule = \"points + 1\"\n".to_string(),
            "check `bad` (#1), field `rule`:",
        ),
        (
            q.to_string(),
            "[[check]]\nname = \"Bad\"\nevent = \"score\"\nrule = \"true\"\n".to_string(),
            "check `Bad` (#1), field `name`: must match",
        ),
        (
            q.to_string(),
            "[[check]]\nname = \"half\"\nevent = \"score\"\nmember = \"user_id\"\n".to_string(),
            "check `half` (#1), field `max_rate`: missing",
        ),
        (
            String::new(),
            rule.to_string(),
            "setting `kafka.quarantine_topic`: is required with [[check]] entries",
        ),
        (
            "quarantine_topic = \"events\"".to_string(),
            rule.to_string(),
            "setting `kafka.quarantine_topic`: \"events\" is also in kafka.topics",
        ),
    ];
    for (kafka, checks, says) in wrong {
        let (code, out) = check(&kafka, &checks);
        assert_eq!(code, Some(2), "{checks}: {out}");
        assert!(out.contains(says), "{checks}: expected {says:?} in {out}");
    }
    println!("verified: the checks listed, and 8 mistakes located with exit 2");
}
