//! Shadow boards (docs/rebuilds.md) from the outside: a fleet that has run
//! with the plain boards for a while is restarted with shadows of two of
//! them under changed rules. Their backfill replays the topic's history
//! while events keep arriving, through `kill -9`s of instances, a join and a
//! Redis crash; once `/v1/boards` says done, every shadow view must equal
//! a board that had had the new rules since `backfill_from` (a reference
//! model computed from the produced events), and every live board must
//! still equal its own reference.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::composite::{
    BoardDef, FieldDef, Gen, Row, Rule, field_values, model, random_fields, ranked,
};
use common::letters::read_letters;
use common::reference::*;
use common::sse::Stream;
use common::*;

/// A shadow of [`MIXED_BOARDS`]' `star_coins`, re-priced: rockets count
/// double.
fn star_coins_v2(backfill_from: &str) -> String {
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
"#
    )
}

/// A shadow of [`MIXED_BOARDS`]' scoped `fans`, counting gifts instead of
/// items.
fn fans_v2(backfill_from: &str) -> String {
    format!(
        r#"
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

/// Both shadows.
fn shadows(backfill_from: &str) -> String {
    star_coins_v2(backfill_from) + &fans_v2(backfill_from)
}

/// The gifts of `messages` at or after `from` whose `event_id` is not in
/// `skip`.
fn gifts<'a>(
    messages: &'a [(i32, Vec<u8>)],
    from: i64,
    skip: &'a HashSet<String>,
) -> impl Iterator<Item = serde_json::Value> + 'a {
    messages
        .iter()
        .map(|(_, bytes)| serde_json::from_slice::<serde_json::Value>(bytes).expect("json"))
        .filter(move |e| {
            e["type"] == "gift"
                && e["ts"].as_i64().expect("ts") >= from
                && !skip.contains(e["event_id"].as_str().expect("event_id"))
        })
}

/// A `star_coins`-like board named `name` (views day and all) over
/// `gifts`, with rockets counting double if `repriced`.
fn coins(gifts: impl Iterator<Item = serde_json::Value>, name: &str, repriced: bool) -> Boards {
    let mut want: Boards = BTreeMap::new();
    for e in gifts {
        let receiver = e["receiver_id"].as_str().expect("receiver").to_string();
        let mut coins = e["count"].as_f64().expect("count") * e["value"].as_f64().expect("value");
        if repriced && e["gift_id"] == "rocket" {
            coins *= 2.0;
        }
        let day = chrono::DateTime::from_timestamp_millis(e["ts"].as_i64().expect("ts"))
            .expect("ts")
            .format("%Y-%m-%d");
        for view in [format!("day:{day}"), "all".to_string()] {
            *want
                .entry(format!("{name}/{view}"))
                .or_default()
                .entry(receiver.clone())
                .or_insert(0.0) += coins;
        }
    }
    want
}

/// The shadows' reference: the gifts at or after `from`, under their rules.
fn shadow_model(messages: &[(i32, Vec<u8>)], from: i64) -> Boards {
    let none = HashSet::new();
    let mut want = coins(gifts(messages, from, &none), "star_coins_v2", true);
    for e in gifts(messages, from, &none) {
        let receiver = e["receiver_id"].as_str().expect("receiver");
        let sender = e["sender_id"].as_str().expect("sender").to_string();
        *want
            .entry(format!("fans_v2:{receiver}/all"))
            .or_default()
            .entry(sender)
            .or_insert(0.0) += 1.0;
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

/// The logs of a fleet, for a failure's message.
fn logs(fleet: &[Process]) -> String {
    fleet
        .iter()
        .map(|p| p.log())
        .collect::<Vec<_>>()
        .join("\n----\n")
}

/// Now, and an hour before: the events span the two hours before now, so
/// a shadow backfilled from an hour ago must skip the first of them.
fn hour_ago() -> (i64, i64) {
    let base = now_ms();
    (base, base - 3_600_000)
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
    let from_text = rfc3339(from);
    let want_shadows = shadow_model(&messages, from);
    let (history, live) = messages.split_at(total / 2);

    // History: the plain boards only.
    apply_history(&broker, &redis, &setup, history)
        .await
        .kill9();
    println!("history: {} events applied by the plain boards", total / 2);

    // The fleet restarts with the shadows while the rest arrives.
    setup.boards = format!("{MIXED_BOARDS}{}", shadows(&from_text));
    setup.extra = format!("[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\n");
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
    let (status, body) = promote(&fleet[0], "star_coins", "star_coins_v2", true).await;
    assert_eq!(status, 409, "no promotion while the backfill runs: {body}");
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
    let show = || logs(&fleet);
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
    check_diffs(&fleet[2], &expect).await;
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

/// A list's entries as (member, score), in the order given.
fn pairs(body: &serde_json::Value) -> Vec<(String, f64)> {
    body["entries"]
        .as_array()
        .map(|es| {
            es.iter()
                .map(|e| {
                    (
                        e["member"].as_str().unwrap_or_default().to_string(),
                        e["score"].as_f64().unwrap_or(f64::NAN),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A board's (member, score) in rank order ([`ranks`]).
fn in_rank_order(board: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    let mut v: Vec<(String, (u64, f64))> = ranks(board).into_iter().collect();
    v.sort_by_key(|(_, (rank, _))| *rank);
    v.into_iter().map(|(m, (_, s))| (m, s)).collect()
}

/// Produces `history` and has it applied by a fleet of one on `setup`'s
/// boards: the boards a later fleet starts from (kill it when done).
async fn apply_history(
    broker: &Broker,
    redis: &impl Zsets,
    setup: &Setup,
    history: &[(i32, Vec<u8>)],
) -> Process {
    send_all(&broker.producer(), &setup.topic, history).await;
    let old = Process::start(setup);
    let n = history.len() as i64;
    wait_for(Duration::from_secs(120), "the history applied", || async {
        (redis.positions_sum(&setup.prefix).await >= n).then_some(())
    })
    .await;
    old
}

/// Ordinal ranks of a board (`ZREVRANGE` order: value descending, equal
/// values by member bytes descending).
fn ranks(board: &BTreeMap<String, f64>) -> BTreeMap<String, (u64, f64)> {
    let mut v: Vec<(&String, f64)> = board.iter().map(|(m, s)| (m, *s)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(a.0)));
    v.into_iter()
        .enumerate()
        .map(|(i, (m, s))| (m.clone(), (i as u64 + 1, s)))
        .collect()
}

/// The diff the model gives: members whose (rank, value) differ, each as
/// (shadow side, live side).
type Diff = BTreeMap<String, (Option<(u64, f64)>, Option<(u64, f64)>)>;

fn model_diff(shadow: &BTreeMap<String, f64>, live: &BTreeMap<String, f64>) -> Diff {
    let (s, l) = (ranks(shadow), ranks(live));
    s.keys()
        .chain(l.keys())
        .filter(|m| s.get(*m) != l.get(*m))
        .map(|m| (m.clone(), (s.get(m).copied(), l.get(m).copied())))
        .collect()
}

/// What the API's diff says, paged through `limit` at a time.
async fn api_diff(p: &Process, path: &str, limit: usize) -> (Diff, u64) {
    let mut got = Diff::new();
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = p.url(&format!("{path}{sep}limit={limit}&offset={}", got.len()));
        let (status, body) = get_json(&url).await;
        assert_eq!(status, 200, "{url}: {body}");
        let total = body["total"].as_u64().expect("total");
        let side = |v: &serde_json::Value| {
            v.as_object().map(|o| {
                (
                    o["rank"].as_u64().expect("rank"),
                    o["score"].as_f64().expect("score"),
                )
            })
        };
        let page = body["entries"].as_array().expect("entries").clone();
        for d in &page {
            got.insert(
                d["member"].as_str().expect("member").to_string(),
                (side(&d["shadow"]), side(&d["live"])),
            );
        }
        if page.len() < limit {
            return (got, total);
        }
    }
}

/// The diff endpoint against the model, for an unscoped and a scoped
/// shadow, paged; and its refusal for a board that is no shadow.
async fn check_diffs(p: &Process, expect: &Boards) {
    let empty = BTreeMap::new();
    let get = |k: &str| expect.get(k).unwrap_or(&empty);
    let want = model_diff(get("star_coins_v2/all"), get("star_coins/all"));
    let (got, total) = api_diff(p, "/v1/boards/star_coins_v2/all/diff", 3).await;
    assert_eq!(got, want);
    assert_eq!(total as usize, want.len());
    assert!(!want.is_empty(), "the re-pricing moved someone");
    let scope = "s1";
    let want_scoped = model_diff(
        get(&format!("fans_v2:{scope}/all")),
        get(&format!("fans:{scope}/all")),
    );
    let path = format!("/v1/boards/fans_v2/all/diff?scope={scope}");
    let (got_scoped, _) = api_diff(p, &path, 1000).await;
    assert_eq!(got_scoped, want_scoped);
    let (status, body) = get_json(&p.url("/v1/boards/star_coins/all/diff")).await;
    assert_eq!(status, 400, "{body}");
    println!(
        "verified: the diff lists the {} members of star_coins_v2/all and the {} of fans_v2 (scope {scope}) whose rank or value differ, as the model does, paged by 3",
        want.len(),
        want_scoped.len()
    );
}

/// `star_coins` alone and its re-priced shadow, with a rule check and a
/// rate check on gifts.
fn checked_boards(backfill_from: &str) -> String {
    format!(
        r#"
[[board]]
name = "star_coins"
event = "gift"
member = "receiver_id"
score = "count * value"
periods = ["day", "all"]

{shadow}
[[check]]
name = "count_cap"
event = "gift"
rule = "count < 15"

[[check]]
name = "gift_rate"
event = "gift"
member = "sender_id"
max_rate = "2/1m"
"#,
        shadow = star_coins_v2(backfill_from)
    )
}

/// [`checked_boards`] without its checks.
fn unchecked_boards(backfill_from: i64) -> String {
    let boards = checked_boards(&rfc3339(backfill_from));
    boards
        .split("[[check]]")
        .next()
        .unwrap_or_default()
        .to_string()
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Checks decide once, when the live consumers first see an event: a
/// replay must leave out exactly what they quarantined, though rate states
/// are gone by then and rules may have changed. The rate check here would
/// decide differently on a replay (its states were made by the live
/// order of events); leaving the decisions to a replay, or ignoring them,
/// fails the comparison.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_leaves_out_exactly_what_the_live_checks_quarantined() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let (mut setup, quarantine) = checked_setup(&broker, &redis, from).await;
    let total = 30_000;
    let (messages, _) = mixed_events(total, 32, 4, base);
    let (history, live) = messages.split_at(total / 2);
    // The history is decided by the plain fleet; the shadow comes later.
    let plain = checked_boards_without_shadow(&rfc3339(from));
    let boards = std::mem::replace(&mut setup.boards, plain);
    apply_history(&broker, &redis, &setup, history)
        .await
        .kill9();
    setup.boards = boards;
    let feeder = feed(
        &broker,
        &setup.topic,
        live.to_vec(),
        2_000,
        Duration::from_millis(200),
    );
    let fleet = [Process::start(&setup), Process::start(&setup)];
    feeder.await.expect("feeder");
    all_decided(&redis, &setup, total).await;
    let (quarantined, by_check) = quarantined_gifts(&broker, &quarantine, &messages).await;
    // The rule's part is known in advance: every gift of 15 or more.
    let none = HashSet::new();
    let big = gifts(&messages, i64::MIN, &none)
        .filter(|e| e["count"].as_i64().expect("count") >= 15)
        .count();
    assert_eq!(by_check.get("count_cap"), Some(&big), "{by_check:?}");
    assert!(
        by_check.get("gift_rate").is_some_and(|n| *n > 20),
        "{by_check:?}"
    );

    let expect = checked_model(&messages, from, &quarantined);
    let show = || logs(&fleet);
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(120), show).await;
    let done = wait_for(Duration::from_secs(30), "the backfill done", || async {
        let b = backfill_of(&fleet[0], "star_coins_v2").await;
        (b["state"] == "done" && b["lag"] == 0).then_some(b)
    })
    .await;
    println!(
        "verified: the shadow left out the {} events the live checks quarantined ({by_check:?}) and equals the model; backfill {done}",
        quarantined.len()
    );
}

/// [`checked_boards`] without the shadow: what an instance whose
/// configuration lacks it runs.
fn checked_boards_without_shadow(backfill_from: &str) -> String {
    let boards = checked_boards(backfill_from);
    boards
        .split("[[board]]\nname = \"star_coins_v2\"")
        .next()
        .unwrap_or_default()
        .to_string()
        + &boards[boards.find("[[check]]").expect("checks")..]
}

/// A setup of [`checked_boards`] with its shadow's history from `from`,
/// 4 partitions and a quarantine topic (named in the answer).
async fn checked_setup(broker: &Broker, redis: &Redis, from: i64) -> (Setup, String) {
    let mut setup = Setup::new(broker, redis, &checked_boards(&rfc3339(from)));
    setup.batch = (500, 20);
    let quarantine = unique("quarantine");
    setup.quarantine = Some(quarantine.clone());
    broker.create_topic(&setup.topic, 4).await;
    broker.create_topic(&quarantine, 2).await;
    (setup, quarantine)
}

/// Waits until the live consumers have decided `total` events.
async fn all_decided(redis: &Redis, setup: &Setup, total: usize) {
    wait_for(
        Duration::from_secs(180),
        "every event decided live",
        || async { (redis.positions_sum(&setup.prefix).await >= total as i64).then_some(()) },
    )
    .await;
}

/// The reference of [`checked_boards`]: `star_coins` over every gift the
/// checks passed, its shadow over those from `from` on.
fn checked_model(messages: &[(i32, Vec<u8>)], from: i64, quarantined: &HashSet<String>) -> Boards {
    let mut expect = coins(gifts(messages, i64::MIN, quarantined), "star_coins", false);
    expect.extend(coins(
        gifts(messages, from, quarantined),
        "star_coins_v2",
        true,
    ));
    expect
}

/// The gifts of `messages` that the fleet's checks quarantined, and how
/// many each check did: every letter of the quarantine topic, read until
/// every gift over the rule check's cap is there (letters come in
/// partition order), then a quiet spell brings the rest.
async fn quarantined_gifts(
    broker: &Broker,
    quarantine: &str,
    messages: &[(i32, Vec<u8>)],
) -> (HashSet<String>, BTreeMap<String, usize>) {
    let none = HashSet::new();
    let big: HashSet<String> = gifts(messages, i64::MIN, &none)
        .filter(|e| e["count"].as_i64().expect("count") >= 15)
        .map(|e| e["event_id"].as_str().expect("id").to_string())
        .collect();
    let id = |l: &common::letters::Letter| -> String {
        let e: serde_json::Value = serde_json::from_slice(&l.payload).expect("letter json");
        e["event_id"].as_str().expect("event_id").to_string()
    };
    let letters = read_letters(
        broker,
        quarantine,
        Duration::from_secs(180),
        Duration::from_secs(3),
        // Each letter parsed once per look (a look per letter of `big`
        // parsed every letter again: minutes under load).
        |read| {
            let ids: HashSet<String> = read.iter().map(id).collect();
            big.is_subset(&ids)
        },
    )
    .await;
    let mut quarantined = HashSet::new();
    let mut by_check = BTreeMap::<String, usize>::new();
    for l in &letters {
        if quarantined.insert(id(l)) {
            *by_check
                .entry(l.header("rankflow-check").to_string())
                .or_default() += 1;
        }
    }
    assert!(
        big.is_subset(&quarantined),
        "every gift over the cap quarantined"
    );
    (quarantined, by_check)
}

/// Once its backfill is done, a shadow is applied by the live consumers
/// beside their boards, and the backfill stops reading the partitions: a
/// message is then read and decoded once. Live events keep arriving with
/// a rule check and a rate check on, through `kill -9`s of instances (a
/// redelivered batch cannot tell a rate check's earlier verdict, so it
/// leaves the shadow to the backfill there) and an instance whose
/// configuration lacks the shadow (its partitions are taken back by the
/// backfill, then handed over again once it leaves). The shadow must
/// equal the model of its rules over the events the live checks passed,
/// the live board its own, and the backfill must have handed over and
/// taken back partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_done_backfill_hands_its_partitions_to_the_live_consumers_through_kills_and_an_instance_without_the_shadow()
 {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let from_text = rfc3339(from);
    let (mut setup, quarantine) = checked_setup(&broker, &redis, from).await;
    let total = 60_000;
    let (messages, _) = mixed_events(total, 39, 4, base);
    let (history, live) = messages.split_at(10_000);
    let with_shadow =
        std::mem::replace(&mut setup.boards, checked_boards_without_shadow(&from_text));
    let without_shadow = setup.boards.clone();
    apply_history(&broker, &redis, &setup, history)
        .await
        .kill9();
    setup.boards = with_shadow.clone();
    let mut fleet = vec![Process::start(&setup), Process::start(&setup)];
    wait_for(
        Duration::from_secs(90),
        "the backfill done and handed over",
        || async {
            let done = backfill_of(&fleet[0], "star_coins_v2").await["state"] == "done";
            (done && logs(&fleet).contains("leaves this partition to the live consumers"))
                .then_some(())
        },
    )
    .await;
    println!("the backfill is done and has left partitions to the live consumers");

    let feeder = feed(
        &broker,
        &setup.topic,
        live.to_vec(),
        400,
        Duration::from_millis(250),
    );
    // An instance without the shadow joins the live group: the partitions
    // it takes are read by the backfill again.
    setup.boards = without_shadow;
    let plain = Process::start(&setup);
    setup.boards = with_shadow;
    wait_for(
        Duration::from_secs(60),
        "a partition taken back by the backfill",
        || async {
            logs(&fleet)
                .contains("The shadow's backfill reads this partition again")
                .then_some(())
        },
    )
    .await;
    let mut at = redis.positions_sum(&setup.prefix).await;
    wait_for(Duration::from_secs(60), "live progress", || async {
        (redis.positions_sum(&setup.prefix).await >= at + 3_000).then_some(())
    })
    .await;
    plain.sigterm();
    println!("injected: an instance without the shadow ran in the live group, then stopped");
    // Faults while the live consumers apply the shadow again.
    for (victim, instance) in fleet.iter_mut().enumerate() {
        at = wait_for(Duration::from_secs(60), "live progress", || async {
            let n = redis.positions_sum(&setup.prefix).await;
            (n >= at + 4_000).then_some(n)
        })
        .await;
        instance.kill9();
        *instance = Process::start(&setup);
        println!("injected: kill -9 of instance {victim} at {at} live positions, restarted");
    }
    feeder.await.expect("feeder");
    all_decided(&redis, &setup, total).await;

    let (quarantined, _) = quarantined_gifts(&broker, &quarantine, &messages).await;
    let expect = checked_model(&messages, from, &quarantined);
    let show = || logs(&fleet);
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(120), show).await;
    // What the instances now running did (those killed took their logs).
    let log = logs(&fleet);
    let count = |line: &str| log.matches(line).count();
    let handed = count("The shadow's backfill leaves this partition to the live consumers");
    let started = count("The live consumers apply the shadow board in this partition")
        + count("The live consumers take this partition over from the shadows' backfill");
    assert!(handed >= 1 && started >= 1, "{log}");
    // In the end the live consumers apply the shadow everywhere.
    let lag = wait_for(Duration::from_secs(30), "the backfill level", || async {
        let b = backfill_of(&fleet[0], "star_coins_v2").await;
        (b["lag"] == 0).then_some(b)
    })
    .await;
    println!(
        "verified: the shadow ({} members) equals the model of its rules over the {} events the live checks passed and the live board its own; the backfill took a partition back from the instance without the shadow, and in the instances now running handed {handed} partitions over, the live consumers started applying the shadow {started} times; backfill {lag}",
        expect["star_coins_v2/all"].len(),
        total - quarantined.len()
    );
}

/// A broker that answers offsets for times with the partition's
/// beginning (tansu does) is caught by the time of the message it points
/// to: the backfill says so in `/v1/boards` and the log, replays from the
/// earliest message and skips the events before `backfill_from`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_cannot_answer_offsets_for_times_is_named_and_older_events_are_skipped() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let mut setup = Setup::new(&broker, &redis, "");
    setup.boards = unchecked_boards(from);
    broker.create_topic(&setup.topic, 2).await;
    let (messages, _) = mixed_events(3_000, 33, 2, base);
    // Each message stamped with its event's time, so that a broker that
    // answered offsets for times would skip the first hour.
    let producer = broker.producer();
    for (p, payload) in &messages {
        let e: serde_json::Value = serde_json::from_slice(payload).expect("json");
        let record = rdkafka::producer::FutureRecord::<(), [u8]>::to(&setup.topic)
            .partition(*p)
            .timestamp(e["ts"].as_i64().expect("ts"))
            .payload(payload);
        producer
            .send(record, Duration::from_secs(10))
            .await
            .expect("delivered");
    }
    let p = Process::start(&setup);
    let none = HashSet::new();
    let mut expect = coins(gifts(&messages, i64::MIN, &none), "star_coins", false);
    expect.extend(coins(gifts(&messages, from, &none), "star_coins_v2", true));
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(90), || p.log()).await;
    let b = wait_for(Duration::from_secs(30), "the backfill done", || async {
        let b = backfill_of(&p, "star_coins_v2").await;
        (b["state"] == "done").then_some(b)
    })
    .await;
    let note = b["note"].as_str().unwrap_or_default().to_string();
    assert!(
        note.contains("answered offsets for times with a message from")
            && note.contains("replaying from the earliest retained message"),
        "{b}"
    );
    assert!(
        p.log()
            .contains("The backfill cannot start exactly where asked."),
        "{}",
        p.log()
    );
    println!(
        "verified: the shadow equals the model of the events since backfill_from; /v1/boards said: {note}"
    );
}

/// The same on the 3-primary Redis Cluster of the tests: a shadow of a
/// scoped board and one of an unscoped board backfilled through a kill -9,
/// their instances spread over the primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_on_a_three_primary_cluster_equals_the_model() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let (base, from) = hour_ago();
    let mut setup = Setup::new_cluster(&broker, &cluster, MIXED_BOARDS);
    broker.create_topic(&setup.topic, 4).await;
    let total = 20_000;
    let (messages, mut expect) = mixed_events(total, 34, 4, base);
    let (history, live) = messages.split_at(total / 2);
    apply_history(&broker, &cluster, &setup, history)
        .await
        .kill9();
    setup.boards = format!("{MIXED_BOARDS}{}", shadows(&rfc3339(from)));
    let feeder = feed(
        &broker,
        &setup.topic,
        live.to_vec(),
        2_000,
        Duration::from_millis(300),
    );
    let mut fleet = [Process::start(&setup), Process::start(&setup)];
    wait_for(
        Duration::from_secs(60),
        "the backfill under way",
        || async {
            let b = backfill_of(&fleet[0], "star_coins_v2").await;
            (b["state"] == "running" && b["lag"].as_i64().is_some_and(|l| l < (total / 2) as i64))
                .then_some(())
        },
    )
    .await;
    fleet[0].kill9();
    fleet[0] = Process::start(&setup);
    println!("injected: kill -9 of an instance during the backfill, restarted");
    feeder.await.expect("feeder");
    expect.extend(shadow_model(&messages, from));
    let show = || logs(&fleet);
    wait_boards_or_show(&cluster, &setup, &expect, Duration::from_secs(180), show).await;
    let done = wait_for(Duration::from_secs(30), "the backfills done", || async {
        let a = backfill_of(&fleet[1], "star_coins_v2").await;
        let b = backfill_of(&fleet[1], "fans_v2").await;
        (a["state"] == "done" && b["state"] == "done").then_some((a, b))
    })
    .await;
    let per_node = cluster
        .spread(&format!("{}:{{fans_v2:*", setup.prefix))
        .await;
    assert!(
        per_node.iter().filter(|n| **n > 0).count() >= 2,
        "{per_node:?}"
    );
    println!(
        "verified: the shadows equal the model on 3 primaries (fans_v2 keys per node {per_node:?}); backfill {} / {}",
        done.0, done.1
    );

    // Made permanent: both boards take their shadows' rules and keys, the
    // fleet restarts on it, and more events arrive.
    let from_text = rfc3339(from);
    let others = &MIXED_BOARDS[MIXED_BOARDS
        .find("[[board]]\nname = \"flowers\"")
        .expect("flowers")..];
    setup.boards = format!(
        "{}{}{others}",
        made_permanent(
            &star_coins_v2(&from_text),
            "star_coins",
            "star_coins_v2",
            &from_text
        ),
        made_permanent(&fans_v2(&from_text), "fans", "fans_v2", &from_text)
    );
    for p in fleet.iter_mut() {
        p.kill9();
        *p = Process::start(&setup);
    }
    let (more, _) = mixed_events(8_000, 35, 4, base);
    let more = gifts_after(&more, from);
    send_all(&broker.producer(), &setup.topic, &more).await;
    let all: Vec<_> = messages.iter().chain(&more).cloned().collect();
    let want = shadow_model(&all, from);
    let show = || logs(&fleet);
    wait_boards_or_show(&cluster, &setup, &want, Duration::from_secs(120), show).await;
    println!(
        "verified: made permanent on 3 primaries, star_coins and fans (stored as their shadows) equal the model with {} more events",
        more.len()
    );
}

/// Score events for the tie-break, composite and window shadows: `n` of
/// them over the two hours before `base`, 30 users, the composite fields
/// of `common::composite` on each.
fn score_events(n: usize, base: i64) -> Vec<(i32, Vec<u8>)> {
    let mut g = Gen(0x5eed_0031);
    (0..n)
        .map(|i| {
            let ts = base - g.below(7_200_000) as i64;
            let mut e = serde_json::json!({"type": "score", "event_id": format!("t{i}"), "ts": ts,
                "user_id": format!("u{}", g.below(30)), "game_id": "g1", "points": g.below(1000) as i64 - 100});
            random_fields(&mut g, &mut e, &[]);
            ((i % 4) as i32, e.to_string().into_bytes())
        })
        .collect()
}

/// A `max` tie-break board (`earliest`) on points times `k`, with an `all`
/// view and a `3h/10m` window, as the ranks it must list: value
/// descending, then the time the value was first reached.
fn best_model(events: &[serde_json::Value], k: i64) -> Vec<(String, f64)> {
    let mut best: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for e in events {
        let (v, t) = (
            e["points"].as_i64().expect("points") * k,
            e["ts"].as_i64().expect("ts"),
        );
        let m = e["user_id"].as_str().expect("user").to_string();
        let b = best.entry(m).or_insert((v, t));
        if v > b.0 || (v == b.0 && t < b.1) {
            *b = (v, t);
        }
    }
    let mut rows: Vec<(String, (i64, i64))> = best.into_iter().collect();
    rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
    rows.into_iter().map(|(m, (v, _))| (m, v as f64)).collect()
}

/// What `top` lists for a view: (member, score) in rank order, and each
/// entry's composite fields.
async fn listed(
    p: &Process,
    board: &str,
    view: &str,
    n: usize,
) -> Option<(Vec<(String, f64)>, Vec<Row>)> {
    let (status, body) =
        get_json(&p.url(&format!("/v1/boards/{board}/{view}/top?limit=1000"))).await;
    if status != 200 {
        return None;
    }
    let entries = body["entries"].as_array()?.clone();
    let fields = entries
        .iter()
        .map(|e| {
            (
                e["member"].as_str().unwrap_or_default().to_string(),
                field_values(&e["fields"], n),
            )
        })
        .collect();
    Some((pairs(&body), fields))
}

/// Tie-break, composite and window views of shadows, backfilled, read back
/// through the API and compared with reference models: a `max` board with
/// `tie_break = "earliest"` (its `all` view and a `3h/10m` window) and a
/// two-field composite board with `tie_break = "latest"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tie_break_composite_and_window_shadows_equal_their_models() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let def = BoardDef {
        name: "ct".into(),
        fields: vec![
            FieldDef {
                rule: Rule::Sum,
                desc: true,
            },
            FieldDef {
                rule: Rule::Max,
                desc: false,
            },
        ],
        tie: "latest",
    };
    let shadow_def = BoardDef {
        name: "ct_v2".into(),
        ..def.clone()
    };
    let best = |name: &str, k: i64, shadow: &str| {
        format!(
            "[[board]]\nname = \"{name}\"\n{shadow}event = \"score\"\nmember = \"user_id\"\nscore = \"points * {k}\"\naggregate = \"max\"\ntie_break = \"earliest\"\nperiods = [\"all\"]\nwindows = [\"3h/10m\"]\n"
        )
    };
    let shadow_of = |of: &str| {
        format!(
            "shadow_of = \"{of}\"\nbackfill_from = \"{}\"\n",
            rfc3339(from)
        )
    };
    let plain = format!("{}{}", best("tb", 1, ""), def.toml("periods = [\"all\"]"));
    let mut setup = Setup::new(&broker, &redis, &plain);
    broker.create_topic(&setup.topic, 4).await;
    let messages = score_events(6_000, base);
    let (history, live) = messages.split_at(3_000);
    apply_history(&broker, &redis, &setup, history)
        .await
        .kill9();
    let ct_v2 = shadow_def.toml("periods = [\"all\"]").replacen(
        "event = ",
        &format!("{}event = ", shadow_of("ct")),
        1,
    );
    setup.boards = format!("{plain}{}{ct_v2}", best("tb_v2", 2, &shadow_of("tb")));
    let p = Process::start(&setup);
    send_all(&broker.producer(), &setup.topic, live).await;

    let events: Vec<serde_json::Value> = messages
        .iter()
        .map(|(_, b)| serde_json::from_slice(b).expect("json"))
        .collect();
    let since: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| e["ts"].as_i64().expect("ts") >= from)
        .cloned()
        .collect();
    let want_best = best_model(&since, 2);
    let want_ct = ranked(&shadow_def, &model(&shadow_def, &since));
    let n = def.fields.len();
    let want_tb = best_model(&events, 1);
    let want_live_ct = ranked(&def, &model(&def, &events));
    let look = || async {
        let all = listed(&p, "tb_v2", "all", 0).await?.0;
        let window = listed(&p, "tb_v2", "win:3h", 0).await?.0;
        let ct = listed(&p, "ct_v2", "all", n).await?.1;
        let tb = listed(&p, "tb", "all", 0).await?.0;
        let live_ct = listed(&p, "ct", "all", n).await?.1;
        (all == want_best
            && window == want_best
            && ct == want_ct
            && tb == want_tb
            && live_ct == want_live_ct)
            .then_some((all.len(), ct.len()))
    };
    let got = wait_for(
        Duration::from_secs(90),
        "the shadows and live boards equal their models",
        look,
    )
    .await;
    // And still, after a quiet spell: nothing applied twice late.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(look().await, Some(got), "changed after the match");
    println!(
        "verified: the tie-break shadow ({} members, all and win:3h) and the composite shadow ({} members) equal their models of the events since backfill_from, the live boards theirs, and still after 3 s",
        got.0, got.1
    );
}

/// An erased member stays erased in a shadow: its events before the
/// erasure are still in Kafka, and the backfill replays them after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_member_stays_erased_in_a_backfilled_shadow() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let boards = unchecked_boards(from);
    let (live_board, shadow_board) = boards
        .split_once("[[board]]\nname = \"star_coins_v2\"")
        .expect("two boards");
    let mut setup = Setup::new(&broker, &redis, live_board);
    setup.extra = "[admin]\nerase_key = \"erase-key-0123456789abcdef\"\n".into();
    broker.create_topic(&setup.topic, 2).await;
    let (messages, _) = mixed_events(6_000, 35, 2, base);
    let mut old = apply_history(&broker, &redis, &setup, &messages).await;
    let config = old.dir.path().join("rankflow.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["member", "erase", "s3", "-c"])
        .arg(&config)
        .output()
        .expect("rankflow member erase");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    old.kill9();
    println!("erased s3 with the plain boards; the shadow comes after");

    setup.boards = format!("{live_board}[[board]]\nname = \"star_coins_v2\"{shadow_board}");
    let p = Process::start(&setup);
    let erased = HashSet::from(["s3".to_string()]);
    let none = HashSet::new();
    let without = |b: Boards| -> Boards {
        b.into_iter()
            .map(|(k, mut m)| {
                m.retain(|member, _| !erased.contains(member));
                (k, m)
            })
            .collect()
    };
    let mut expect = without(coins(
        gifts(&messages, i64::MIN, &none),
        "star_coins",
        false,
    ));
    expect.extend(without(coins(
        gifts(&messages, from, &none),
        "star_coins_v2",
        true,
    )));
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(90), || p.log()).await;
    wait_for(Duration::from_secs(30), "the backfill done", || async {
        (backfill_of(&p, "star_coins_v2").await["state"] == "done").then_some(())
    })
    .await;
    let (status, _) = get_json(&p.url("/v1/boards/star_coins_v2/all/members/s3")).await;
    assert_eq!(status, 404);
    println!(
        "verified: s3, erased before the shadow existed, is in none of its views after the backfill replayed its events"
    );
}

const TOKEN: &str = "shadow-admin-token-0123456789";

/// `POST /v1/admin/boards/{board}/promote` with `{"shadow": …}`, with or
/// without the token.
async fn promote(p: &Process, board: &str, shadow: &str, token: bool) -> (u16, serde_json::Value) {
    let path = format!("/v1/admin/boards/{board}/promote");
    admin_post(p, &path, serde_json::json!({ "shadow": shadow }), token).await
}

/// A `POST` of the admin API, with or without the token.
async fn admin_post(
    p: &Process,
    path: &str,
    body: serde_json::Value,
    token: bool,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().post(p.url(path)).json(&body);
    if token {
        req = req.header("Authorization", format!("Bearer {TOKEN}"));
    }
    let resp = req.send().await.expect("POST");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// [`promote`] with the token, which must answer 200 serving `shadow`.
async fn promoted(p: &Process, board: &str, shadow: &str) -> serde_json::Value {
    let (status, body) = promote(p, board, shadow, true).await;
    assert_eq!(
        (status, body["served_by"].as_str()),
        (200, Some(shadow)),
        "{body}"
    );
    body
}

/// What reads of `star_coins` answer now: `all` top (member, score) in
/// rank order, one member of `day`, the board name they give.
async fn star_coins_reads(p: &Process, member: &str) -> (Vec<(String, f64)>, f64, String) {
    let (_, top) = get_json(&p.url("/v1/boards/star_coins/all/top?limit=1000")).await;
    let rows = pairs(&top);
    let (_, one) = get_json(&p.url(&format!("/v1/boards/star_coins/day/members/{member}"))).await;
    (
        rows,
        one["score"].as_f64().unwrap_or(f64::NAN),
        top["board"].as_str().unwrap_or_default().to_string(),
    )
}

/// Promoting a backfilled shadow switches every read of its board to the
/// shadow's data under the board's name, from the answer on; it is
/// idempotent, audited, shown by `/v1/boards` with the keys that now serve
/// the board, refused when it makes no sense, and rolled back by naming
/// the board itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoting_a_shadow_switches_every_read_and_promoting_the_board_rolls_back() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let mut setup = Setup::new(&broker, &redis, &unchecked_boards(from));
    let audit = unique("audit");
    setup.extra = format!("[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\naudit_topic = \"{audit}\"\n");
    broker.create_topic(&setup.topic, 2).await;
    broker.create_topic(&audit, 1).await;
    let (messages, _) = mixed_events(6_000, 36, 2, base);
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut p = Process::start(&setup);
    let none = HashSet::new();
    let live = coins(gifts(&messages, i64::MIN, &none), "star_coins", false);
    let shadow = coins(gifts(&messages, from, &none), "star_coins_v2", true);
    let mut expect = live.clone();
    expect.extend(shadow.clone());
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(90), || p.log()).await;
    wait_for(Duration::from_secs(30), "the backfill done", || async {
        (backfill_of(&p, "star_coins_v2").await["state"] == "done").then_some(())
    })
    .await;
    let day = |b: &Boards, name: &str, m: &str| -> f64 {
        b.iter()
            .find(|(k, _)| {
                k.starts_with(&format!("{name}/day:")) && k.ends_with(&rfc3339(base)[..10])
            })
            .and_then(|(_, v)| v.get(m).copied())
            .unwrap_or(f64::NAN)
    };
    let member = "s1";
    let want_live = (
        in_rank_order(&live["star_coins/all"]),
        day(&live, "star_coins", member),
        "star_coins".to_string(),
    );
    let want_shadow = (
        in_rank_order(&shadow["star_coins_v2/all"]),
        day(&shadow, "star_coins_v2", member),
        "star_coins".to_string(),
    );
    assert_ne!(want_live.0, want_shadow.0, "the re-pricing shows");
    assert_eq!(star_coins_reads(&p, member).await, want_live);

    // Refusals: no token, no such board, not a shadow of it, a shadow's place.
    assert_eq!(
        promote(&p, "star_coins", "star_coins_v2", false).await.0,
        401
    );
    assert_eq!(promote(&p, "nope", "star_coins_v2", true).await.0, 404);
    assert_eq!(promote(&p, "star_coins", "nope", true).await.0, 400);
    assert_eq!(
        promote(&p, "star_coins_v2", "star_coins", true).await.0,
        400
    );
    assert_eq!(
        star_coins_reads(&p, member).await,
        want_live,
        "nothing changed"
    );

    // A live view open across the promotion, and a rolling view.
    let mut stream = Stream::open(
        &p.url("/v1/boards/star_coins/all/top/stream?limit=10"),
        None,
    )
    .await;
    let first = stream
        .event(Duration::from_secs(5), "the stream's first list")
        .await;
    assert_eq!(pairs(&first.data), want_live.0);
    let rolling = || {
        let url = p.url("/v1/boards/star_coins/last:2d/top?limit=1000");
        async move { pairs(&get_json(&url).await.1) }
    };
    assert_eq!(
        rolling().await,
        want_live.0,
        "last:2d holds every event here"
    );

    // Promote: from the answer on, the shadow's data under the board's name.
    let body = promoted(&p, "star_coins", "star_coins_v2").await;
    assert_eq!(star_coins_reads(&p, member).await, want_shadow);
    assert_eq!(rolling().await, want_shadow.0);
    let pushed = stream
        .event_until(
            Duration::from_secs(5),
            "the stream's list after the promotion",
            |e| pairs(&e.data) == want_shadow.0,
        )
        .await;
    assert_eq!(pushed.data["board"], "star_coins");
    // The diff still compares the shadow with the board's own data.
    let (diff, _) = api_diff(&p, "/v1/boards/star_coins_v2/all/diff", 1000).await;
    assert_eq!(
        diff,
        model_diff(&shadow["star_coins_v2/all"], &live["star_coins/all"])
    );
    let (_, again) = promote(&p, "star_coins", "star_coins_v2", true).await;
    assert_eq!(again["since"], body["since"], "idempotent: {again}");
    let (_, listing) = get_json(&p.url("/v1/boards")).await;
    let info = listing["boards"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == "star_coins"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(info["served_by"]["board"], "star_coins_v2", "{info}");
    assert_eq!(
        info["key_pattern"],
        format!("{}:{{star_coins_v2}}:<view>", setup.prefix),
        "{info}"
    );
    assert_eq!(
        info["views"][1]["key"],
        setup.key("star_coins_v2", "all"),
        "{info}"
    );

    // Redis loses the promotions: a restarted instance writes them again
    // from the audit topic before it serves.
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{}:serving", setup.prefix))
        .query_async(&mut redis.conn().await)
        .await
        .expect("DEL");
    p.kill9();
    p = Process::start(&setup);
    let top = p.url("/v1/boards/star_coins/all/top");
    wait_for(Duration::from_secs(30), "reads served again", || async {
        (status_of(&top).await == 200).then_some(())
    })
    .await;
    let restored = star_coins_reads(&p, member).await;
    assert_eq!(
        restored, want_shadow,
        "the promotion came back from the audit topic"
    );
    assert!(
        p.log().contains("wrote them again from the audit topic"),
        "{}",
        p.log()
    );

    // Roll back by naming the board.
    promoted(&p, "star_coins", "star_coins").await;
    assert_eq!(star_coins_reads(&p, member).await, want_live);
    let letters = read_letters(
        &broker,
        &audit,
        Duration::from_secs(30),
        Duration::from_secs(2),
        |l| l.len() >= 3,
    )
    .await;
    let actions: Vec<(String, String)> = letters
        .iter()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_slice(&l.payload).expect("audit json");
            (
                e["action"].as_str().unwrap_or_default().to_string(),
                e["detail"]["served_by"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("board.promote", "star_coins_v2"),
            ("board.promote", "star_coins_v2"),
            ("board.promote", "star_coins")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec()
    );
    println!(
        "verified: promoted, reads of star_coins (top all, a member of day, last:2d) served the shadow's data from the answer on and its open top stream pushed it; the diff still compared it with the board's own data; /v1/boards gave its keys; idempotent; 4 refusals; after Redis lost the promotion a restarted instance wrote it again from the audit topic; rolled back; 3 audit messages"
    );
}

/// The day periods `/periods` lists for `board`: (period, members),
/// newest first.
async fn day_periods(p: &Process, board: &str) -> Vec<(String, u64)> {
    let url = p.url(&format!("/v1/boards/{board}/day/periods"));
    let (status, body) = get_json(&url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["board"], board, "{body}");
    body["periods"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let period = p["period"].as_str().unwrap_or_default().to_string();
                    (period, p["members"].as_u64().unwrap_or(0))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// After a promotion `/periods` lists what reads of the board answer: its
/// own days that ended before the promotion (the shadow, backfilled from
/// today, has none of them) and the shadow's current day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_boards_periods_are_its_own_past_days_and_the_shadows_current_one() {
    let broker = Broker::start();
    let redis = Redis::start();
    const DAY: i64 = 86_400_000;
    let now = now_ms();
    let today = now - now.rem_euclid(DAY);
    let mut setup = Setup::new(&broker, &redis, &unchecked_boards(today));
    setup.extra = format!("[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\n");
    broker.create_topic(&setup.topic, 1).await;
    // Day d before today has 4 - d receivers: 1 three days ago, 4 today.
    let mut messages = Vec::new();
    let mut want = Vec::new();
    for d in 0..4i64 {
        let ts = if d == 0 {
            now - 1_000
        } else {
            today - d * DAY + DAY / 2
        };
        for r in 0..4 - d {
            let gift = serde_json::json!({"type": "gift", "event_id": format!("g{d}-{r}"), "ts": ts,
                "sender_id": "u1", "receiver_id": format!("s{r}"), "gift_id": "rose", "count": 1, "value": 1.0});
            messages.push((0, serde_json::to_vec(&gift).expect("json")));
        }
        want.push((rfc3339(ts)[..10].to_string(), (4 - d) as u64));
    }
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let p = Process::start(&setup);
    wait_for(
        Duration::from_secs(60),
        "every day applied and the backfill done",
        || async {
            let done = backfill_of(&p, "star_coins_v2").await["state"] == "done";
            (done && day_periods(&p, "star_coins").await == want).then_some(())
        },
    )
    .await;
    assert_eq!(
        day_periods(&p, "star_coins_v2").await,
        want[..1].to_vec(),
        "the shadow has today alone"
    );

    promoted(&p, "star_coins", "star_coins_v2").await;
    assert_eq!(
        day_periods(&p, "star_coins").await,
        want,
        "the board's own past days, and today from the shadow"
    );
    // A past day reads as it is listed: from the board's own data.
    let (_, past) = get_json(&p.url(&format!(
        "/v1/boards/star_coins/day/top?period={}",
        want[3].0
    )))
    .await;
    assert_eq!(pairs(&past), vec![("s0".to_string(), 1.0)], "{past}");
    println!(
        "verified: after the promotion /periods of star_coins listed {want:?}, its own three past days and the shadow's today; the shadow alone lists only today"
    );
}

/// A scoped board and its shadow (the fans of each receiver; the shadow
/// counts gifts instead of items).
fn scoped_boards(backfill_from: &str) -> String {
    format!(
        r#"
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["all"]
{shadow}"#,
        shadow = fans_v2(backfill_from)
    )
}

/// (member, score) in the order a list gives them.
async fn list_of(p: &Process, path: &str) -> Vec<(String, f64)> {
    let (status, body) = get_json(&p.url(path)).await;
    assert_eq!(status, 200, "{path}: {body}");
    pairs(&body)
}

/// A promoted scoped board: a union of all its scopes (`scope=*`) and an
/// `around` read of one scope switch to the shadow's data with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoting_a_scoped_shadow_switches_unions_of_scopes_and_around() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let mut setup = Setup::new(&broker, &redis, &scoped_boards(&rfc3339(from)));
    setup.extra = format!("[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\n");
    broker.create_topic(&setup.topic, 2).await;
    let (messages, _) = mixed_events(6_000, 37, 2, base);
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut p = Process::start(&setup);
    // The models: per scope, and the union of every scope (a sum per
    // sender), for the board and its shadow.
    let none = HashSet::new();
    let mut expect: Boards = BTreeMap::new();
    let mut unions: [BTreeMap<String, f64>; 2] = Default::default();
    for (name, since, each, union) in [("fans", i64::MIN, None, 0), ("fans_v2", from, Some(1.0), 1)]
    {
        for e in gifts(&messages, since, &none) {
            let receiver = e["receiver_id"].as_str().expect("receiver");
            let sender = e["sender_id"].as_str().expect("sender").to_string();
            let v = each.unwrap_or_else(|| e["count"].as_f64().expect("count"));
            *expect
                .entry(format!("{name}:{receiver}/all"))
                .or_default()
                .entry(sender.clone())
                .or_insert(0.0) += v;
            *unions[union].entry(sender).or_insert(0.0) += v;
        }
    }
    wait_boards_or_show(&redis, &setup, &expect, Duration::from_secs(90), || p.log()).await;
    wait_for(Duration::from_secs(30), "the backfill done", || async {
        (backfill_of(&p, "fans_v2").await["state"] == "done").then_some(())
    })
    .await;
    let around = |board: &str| -> Vec<(String, f64)> {
        // u7's neighbours within 2 places in scope s1.
        let ranked = in_rank_order(&expect[&format!("{board}:s1/all")]);
        let at = ranked
            .iter()
            .position(|(m, _)| m == "u7")
            .expect("u7 in s1");
        ranked[at.saturating_sub(2)..(at + 3).min(ranked.len())].to_vec()
    };
    let union_path = "/v1/boards/fans/all/top?scope=*&limit=1000";
    let around_path = "/v1/boards/fans/all/around/u7?scope=s1&radius=2";
    assert_eq!(list_of(&p, union_path).await, in_rank_order(&unions[0]));
    assert_eq!(list_of(&p, around_path).await, around("fans"));
    let (status, body) = promote(&p, "fans", "fans_v2", true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        list_of(&p, union_path).await,
        in_rank_order(&unions[1]),
        "the union of scopes"
    );
    assert_eq!(list_of(&p, around_path).await, around("fans_v2"), "around");
    assert_ne!(unions[0], unions[1]);

    // Made permanent: `fans` takes the shadow's rules and keys. The union
    // of scopes (its registries and result keys), `around` and a member
    // action (the instances it finds) all go through the keys taken over.
    let from_text = rfc3339(from);
    setup.boards = made_permanent(&fans_v2(&from_text), "fans", "fans_v2", &from_text);
    p.kill9();
    p = Process::start(&setup);
    let union_now = || list_of(&p, union_path);
    wait_for(Duration::from_secs(30), "reads served again", || async {
        (status_of(&p.url(union_path)).await == 200).then_some(())
    })
    .await;
    assert_eq!(union_now().await, in_rank_order(&unions[1]), "permanent");
    assert_eq!(list_of(&p, around_path).await, around("fans_v2"));
    let (status, body) =
        admin_post(&p, "/v1/admin/members/u7/hide", serde_json::json!({}), true).await;
    assert_eq!(status, 200, "{body}");
    let mut without_u7 = unions[1].clone();
    without_u7.remove("u7");
    assert_eq!(union_now().await, in_rank_order(&without_u7), "u7 hidden");
    assert_eq!(status_of(&p.url(around_path)).await, 404);
    println!(
        "verified: after the promotion, fans' union of every scope ({} senders) and u7's neighbours in scope s1 came from fans_v2; made permanent (stored_as), the same reads came from the keys it took over, and hiding u7 took it out of them",
        unions[1].len()
    );
}

/// [`unchecked_boards`] after the promotion of `star_coins_v2` was made
/// permanent (docs/rebuilds.md): `star_coins` has the shadow's rules and
/// takes over its keys, and the shadow is gone.
fn permanent_boards(backfill_from: i64) -> String {
    let from = rfc3339(backfill_from);
    made_permanent(&star_coins_v2(&from), "star_coins", "star_coins_v2", &from)
}

/// The `shadow` board's text (`shadow_toml`) as `board` once the
/// promotion is permanent: its name, and `stored_as` the shadow's keys.
fn made_permanent(shadow_toml: &str, board: &str, shadow: &str, backfill_from: &str) -> String {
    let head = format!(
        "name = \"{shadow}\"\nshadow_of = \"{board}\"\nbackfill_from = \"{backfill_from}\"\n"
    );
    assert!(shadow_toml.contains(&head), "{shadow_toml}");
    shadow_toml.replace(
        &head,
        &format!("name = \"{board}\"\nstored_as = \"{shadow}\"\n"),
    )
}

/// Per partition, how far the live consumers' positions are ahead of
/// `star_coins_v2`'s backfill positions: messages the shadow would miss if
/// the live consumers took it over where they are.
async fn ahead_of_backfill(redis: &Redis, setup: &Setup) -> BTreeMap<String, i64> {
    let read = |key: String| async move {
        redis::cmd("HGETALL")
            .arg(key)
            .query_async::<BTreeMap<String, i64>>(&mut redis.conn().await)
            .await
            .unwrap_or_default()
    };
    let live = read(format!("{}:positions", setup.prefix)).await;
    let backfill = read(format!("{}:positions~backfill:star_coins_v2", setup.prefix)).await;
    live.into_iter()
        .filter_map(|(p, at)| {
            let gap = at - backfill.get(&p).copied().unwrap_or(at);
            (gap > 0).then_some((p, gap))
        })
        .collect()
}

/// Making a promotion permanent needs no second backfill: `star_coins`
/// takes the shadow's rules and, with `stored_as`, its keys. A rolling
/// restart runs an old and a new instance side by side while events
/// arrive; the new one stops, and the old one, then alone, is killed, its
/// backfill positions then behind its live positions (moved back, as an
/// instance that does not apply the shadow beside its boards leaves them),
/// so the messages in between reach the board only if the next new
/// instance resumes there. The board must equal the model of the new rules since
/// `backfill_from`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn making_a_promotion_permanent_takes_over_the_shadows_keys_without_a_second_backfill() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (base, from) = hour_ago();
    let mut setup = Setup::new(&broker, &redis, &unchecked_boards(from));
    setup.extra = format!("[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\n");
    setup.batch = (300, 10);
    broker.create_topic(&setup.topic, 4).await;
    let (messages, _) = mixed_events(110_000, 38, 4, base);
    let (history, rest) = messages.split_at(10_000);
    // Later events all fall after backfill_from: the permanent board has
    // no backfill_from, and counts older ones as any board does.
    let live = gifts_after(rest, from);
    let none = HashSet::new();
    let all: Vec<_> = history.iter().chain(&live).cloned().collect();
    let want = coins(gifts(&all, from, &none), "star_coins_v2", true);

    send_all(&broker.producer(), &setup.topic, history).await;
    let mut old = Process::start(&setup);
    let n = history.len() as i64;
    wait_for(
        Duration::from_secs(90),
        "the history applied and backfilled",
        || async {
            let backfilled = replayed(&redis, &setup, "star_coins_v2").await;
            let done = backfill_of(&old, "star_coins_v2").await["state"] == "done";
            (done && backfilled >= n && redis.positions_sum(&setup.prefix).await >= n).then_some(())
        },
    )
    .await;
    promoted(&old, "star_coins", "star_coins_v2").await;

    // The rolling restart: a new instance runs beside the old one while
    // events arrive, then stops.
    let feeder = feed(
        &broker,
        &setup.topic,
        live.clone(),
        200,
        Duration::from_millis(100),
    );
    setup.boards = permanent_boards(from);
    let mut fleet = vec![Process::start(&setup)];
    wait_for(
        Duration::from_secs(30),
        "the new instance taking over",
        || async {
            fleet[0]
                .log()
                .contains("The live consumers take over a board that was a shadow")
                .then_some(())
        },
    )
    .await;
    // It stops once it has applied batches of its own beside the old one.
    let taking_over = redis.positions_sum(&setup.prefix).await;
    wait_for(
        Duration::from_secs(30),
        "the new instance applying",
        || async {
            (redis.positions_sum(&setup.prefix).await >= taking_over + 2_000).then_some(())
        },
    )
    .await;
    fleet[0].sigterm();
    println!("the new instance ran beside the old one, then stopped");
    // The old instance, alone again, dies with its backfill behind.
    let read_positions = || async {
        let key = format!("{}:positions", setup.prefix);
        redis::cmd("HGETALL")
            .arg(key)
            .query_async::<BTreeMap<String, i64>>(&mut redis.conn().await)
            .await
            .unwrap_or_default()
    };
    let at_stop = read_positions().await;
    wait_for(
        Duration::from_secs(30),
        "the old instance holding every partition",
        || async {
            let now = read_positions().await;
            (now.len() == 4
                && now
                    .iter()
                    .all(|(p, at)| at_stop.get(p).is_none_or(|s| at > s)))
            .then_some(())
        },
    )
    .await;
    old.kill9();
    // Its live consumers applied the shadow beside their boards and kept
    // its backfill positions level with theirs. An instance that did not
    // (a version before that, or one whose batches could not show the
    // shadow complete) leaves them behind: as here, where they are moved
    // back by up to 500 messages, which they may always be (they only say
    // that everything before them reached the shadow).
    let key = format!("{}:positions~backfill:star_coins_v2", setup.prefix);
    let mut c = redis.conn().await;
    for (field, at) in read_positions().await {
        let _: i64 = redis::cmd("HSET")
            .arg(&key)
            .arg(&field)
            .arg((at - 500).max(0))
            .query_async(&mut c)
            .await
            .expect("move a backfill position back");
    }
    let gap = ahead_of_backfill(&redis, &setup).await;
    assert!(!gap.is_empty());
    println!(
        "injected: kill -9 of the old instance, its backfill positions then moved behind its live positions by {gap:?}"
    );
    fleet.push(Process::start(&setup));
    // A third instance joins once the second has resumed from the backfill
    // positions: a rebalance of a board already taken over.
    wait_for(
        Duration::from_secs(30),
        "the next instance resuming",
        || async {
            fleet[1]
                .log()
                .contains(
                    "A partition resumes where a board the live consumers took over is complete",
                )
                .then_some(())
        },
    )
    .await;
    fleet.push(Process::start(&setup));
    feeder.await.expect("feeder");

    let show = || logs(&fleet);
    wait_boards_or_show(&redis, &setup, &want, Duration::from_secs(120), show).await;
    let top = list_of(&fleet[2], "/v1/boards/star_coins/all/top?limit=1000").await;
    assert_eq!(top, in_rank_order(&want["star_coins_v2/all"]));
    let (_, listing) = get_json(&fleet[2].url("/v1/boards")).await;
    let info = &listing["boards"][0];
    assert_eq!(
        (
            info["name"].as_str(),
            info["key_pattern"].as_str(),
            info.get("served_by"),
            listing["boards"].as_array().map(Vec::len)
        ),
        (
            Some("star_coins"),
            Some(format!("{}:{{star_coins_v2}}:<view>", setup.prefix).as_str()),
            None,
            Some(1)
        ),
        "{listing}"
    );
    let log = logs(&fleet);
    let resumed = log
        .matches("A partition resumes where a board the live consumers took over is complete")
        .count();
    assert!(resumed >= 1, "{log}");
    assert!(!log.contains("Backfilling"), "no second backfill: {log}");
    // The live consumers keep the backfill positions level with theirs.
    wait_for(
        Duration::from_secs(30),
        "backfill positions kept level",
        || async {
            ahead_of_backfill(&redis, &setup)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    println!(
        "verified: star_coins, stored as star_coins_v2, equals the model of the new rules since backfill_from ({} members in all) through a rolling restart whose old instance died {} messages behind in its backfill; {resumed} partition resumptions went back to the backfill positions, none replayed the history; the backfill positions then stayed level",
        want["star_coins_v2/all"].len(),
        gap.values().sum::<i64>()
    );
}

/// The messages of `messages` whose event is at or after `from`.
fn gifts_after(messages: &[(i32, Vec<u8>)], from: i64) -> Vec<(i32, Vec<u8>)> {
    messages
        .iter()
        .filter(|(_, bytes)| {
            let e: serde_json::Value = serde_json::from_slice(bytes).expect("json");
            e["ts"].as_i64().expect("ts") >= from
        })
        .cloned()
        .collect()
}
