//! Hide, restore and erase (docs/moderation.md), checked against a twin
//! run: two key prefixes in one redis-server take the same batches through
//! the consumer's own code (`common::direct::Direct`), while the clock
//! crosses hours and midnight, windows slide and buckets leave; only run A
//! has its member `x1` hidden, restored and erased. The reference for A is
//! B's raw data, key by key:
//!
//! - while `x1` is hidden, every sorted set of A equals B's without `x1`'s
//!   entry (so the others' ranks close up for a plain `ZRANGE`), reads of
//!   it are 404, and its events count `hidden`;
//! - once restored, every key of B is in A with the same contents (views,
//!   tie and field hashes, dense-rank indexes, window buckets, counts and
//!   best-bucket indexes), and A has nothing else but empty twins and the
//!   fences' moderation stamp;
//! - once erased, A equals B without `x1` again, and no key name, member,
//!   field or value of A holds the id; its later events count `erased` and
//!   change nothing, redelivered or new.
//!
//! A second test hides from one board only; a third runs the fleet race: a
//! consumer that has not heard of a hide applies the member's events to
//! an instance the hide visited (refused by the stamp, encoded again) and
//! to a scope it never had (seen through the member index).

use crate::common;

use std::collections::BTreeMap;

use common::direct::Direct;
use common::*;
use rankflow::admin::{ActionRequest, MemberAction};
use rankflow::telemetry::Outcome;
use serde_json::{Value, json};

const BOARDS: &str = r#"
[[board]]
name = "m_sum"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day", "all"]
windows = ["3h/10m"]

[[board]]
name = "m_max"
event = "score"
member = "user_id"
score = "points"
aggregate = "max"
tie_break = "earliest"
periods = ["day", "all"]
windows = ["1h/10m"]

[[board]]
name = "m_last"
event = "score"
member = "user_id"
score = "points"
aggregate = "last"
periods = ["all"]
windows = ["1h/10m"]

[[board]]
name = "m_comp"
event = "score"
member = "user_id"
periods = ["day", "all"]
windows = ["1h/10m"]
order_by = [
  { field = "s", score = "points", aggregate = "sum", order = "desc" },
  { field = "x", score = "points", aggregate = "max", order = "desc" },
]

[[board]]
name = "m_game"
event = "score"
member = "user_id"
score = "points"
scope = "game_id"
periods = ["day", "all"]
windows = ["1h/10m"]
"#;

const KEY: &str = "erase-key-0123456789abcdef";
const TARGET: &str = "x1";
const MIN: i64 = 60_000;
const DAY: i64 = 86_400_000;

/// 21:00 UTC tomorrow: the run crosses midnight, and every key's expiry
/// (absolute, set from event times) is still ahead of the real clock of
/// redis-server.
fn start() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    (now / DAY + 1) * DAY + 21 * 60 * MIN
}

/// xorshift64, so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One batch of events around `now`: members u0..u7 and the target, games
/// g0..g3, times up to 20 minutes back (some buckets already left).
fn batch(rng: &mut Rng, round: usize, now: i64) -> Vec<Value> {
    (0..12)
        .map(|k| {
            let user = if rng.next(4) == 0 {
                TARGET.to_string()
            } else {
                format!("u{}", rng.next(8))
            };
            json!({
                "type": "score",
                "event_id": format!("r{round}e{k}"),
                "ts": now - rng.next(20) as i64 * MIN,
                "user_id": user,
                "game_id": format!("g{}", rng.next(4)),
                "points": rng.next(30) as i64 + 1,
            })
        })
        .collect()
}

/// A key's contents, comparable.
#[derive(Debug, Clone, PartialEq)]
enum Dump {
    Zset(Vec<(String, f64)>),
    Hash(BTreeMap<String, String>),
    Text(String),
}

/// Every key under `prefix:` on `nodes` (one server, or a cluster's
/// nodes: each key is read where it lives), by name without the prefix.
async fn dump(nodes: &[&Redis], prefix: &str) -> BTreeMap<String, Dump> {
    let mut out = BTreeMap::new();
    for node in nodes {
        let mut c = node.conn().await;
        dump_node(&mut c, prefix, &mut out).await;
    }
    out
}

async fn dump_node(
    c: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    out: &mut BTreeMap<String, Dump>,
) {
    let names: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(c)
        .await
        .expect("KEYS");
    for name in names {
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(c)
            .await
            .expect("TYPE");
        let dumped = match kind.as_str() {
            "zset" => {
                // Best-bucket indexes (`:ord`) hold binary members.
                let raw: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                    .arg(&name)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(c)
                    .await
                    .expect("ZRANGE");
                Dump::Zset(
                    raw.into_iter()
                        .map(|(m, s)| (String::from_utf8_lossy(&m).into_owned(), s))
                        .collect(),
                )
            }
            "hash" => Dump::Hash(
                redis::cmd("HGETALL")
                    .arg(&name)
                    .query_async(c)
                    .await
                    .expect("HGETALL"),
            ),
            "string" => Dump::Text(
                redis::cmd("GET")
                    .arg(&name)
                    .query_async(c)
                    .await
                    .expect("GET"),
            ),
            "none" => continue,
            other => panic!("{name} is a {other}"),
        };
        out.insert(name[prefix.len() + 1..].to_string(), dumped);
    }
}

/// Whether a view's stored member is the target's (tie-break and composite
/// boards put codes in front of the id).
fn is_target(stored: &str) -> bool {
    stored.ends_with(TARGET)
}

/// B's data as A must hold it while the target is out of it: its sorted
/// sets without the target (the dense-rank indexes `:v` may differ, and are
/// checked after the restore).
fn without_target(b: &BTreeMap<String, Dump>) -> BTreeMap<String, Vec<(String, f64)>> {
    b.iter()
        .filter(|(k, _)| !k.ends_with(":v") && !k.contains(":log") && !k.contains(":ord"))
        .filter_map(|(k, d)| match d {
            Dump::Zset(entries) => {
                let kept: Vec<_> = entries
                    .iter()
                    .filter(|(m, _)| !is_target(m))
                    .cloned()
                    .collect();
                (!kept.is_empty()).then(|| (k.clone(), kept))
            }
            _ => None,
        })
        .collect()
}

/// A's sorted sets outside twins, as [`without_target`] keeps B's.
fn views_of(a: &BTreeMap<String, Dump>) -> BTreeMap<String, Vec<(String, f64)>> {
    a.iter()
        .filter(|(k, _)| {
            !k.contains("~h") && !k.ends_with(":v") && !k.contains(":log") && !k.contains(":ord")
        })
        .filter_map(|(k, d)| match d {
            Dump::Zset(entries) => Some((k.clone(), entries.clone())),
            _ => None,
        })
        .collect()
}

/// A's data as it must equal B's: twins left out when they hold nothing of
/// a member any more (their cut, log and empty keys aside), and the fences'
/// moderation stamp.
fn comparable(a: &BTreeMap<String, Dump>) -> BTreeMap<String, Dump> {
    a.iter()
        .filter(|(k, _)| !k.contains("~h") && !k.starts_with("member") && *k != "moderation")
        .map(|(k, d)| {
            let d = match d {
                Dump::Hash(h) if k.ends_with(":off") => {
                    let mut h = h.clone();
                    h.remove("~mod");
                    Dump::Hash(h)
                }
                d => d.clone(),
            };
            (k.clone(), d)
        })
        .filter(|(_, d)| !matches!(d, Dump::Hash(h) if h.is_empty()))
        .collect()
}

/// Whether any key name, member, field or value holds the target's id.
fn traces(a: &BTreeMap<String, Dump>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, d) in a {
        if k.contains(TARGET) {
            out.push(format!("key {k}"));
        }
        match d {
            Dump::Zset(e) => out.extend(
                e.iter()
                    .filter(|(m, _)| m.contains(TARGET))
                    .map(|(m, _)| format!("{k}: member {m}")),
            ),
            Dump::Hash(h) => out.extend(
                h.iter()
                    .filter(|(f, v)| f.contains(TARGET) || v.contains(TARGET))
                    .map(|(f, v)| format!("{k}: {f} = {v}")),
            ),
            Dump::Text(t) if t.contains(TARGET) => out.push(format!("{k}: {t}")),
            Dump::Text(_) => {}
        }
    }
    out
}

/// Asserts two dumps are equal, naming only the keys that differ.
#[track_caller]
fn same<T: PartialEq + std::fmt::Debug>(
    a: &BTreeMap<String, T>,
    b: &BTreeMap<String, T>,
    what: &str,
) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}:\n  A {:?}\n  B {:?}", a.get(k), b.get(k)))
        .collect();
    assert!(
        diff.is_empty(),
        "{what}: {} keys differ\n{}",
        diff.len(),
        diff.join("\n")
    );
}

/// Reads every window of every instance the runs write, so that each is
/// trimmed to the clock (reads trim first): an instance that only an
/// erased member's events touch is in no batch of run A, while run B's
/// batches trim it.
async fn trim_windows(d: &Direct) {
    let reader = d.reader();
    for (board, view) in [
        ("m_sum", "win:3h"),
        ("m_max", "win:1h"),
        ("m_last", "win:1h"),
        ("m_comp", "win:1h"),
    ] {
        let _ = reader.top(&query(board, view), 0, 1).await;
    }
    for g in 0..4 {
        let mut q = query("m_game", "win:1h");
        q.scope = Some(format!("g{g}"));
        let _ = reader.top(&q, 0, 1).await;
    }
}

/// Registries (the trimmer's, the scopes') list what batches touched:
/// after an erasure, run A's batches leave out the erased member's events.
fn without_registries<T: Clone>(m: &BTreeMap<String, T>) -> BTreeMap<String, T> {
    m.iter()
        .filter(|(k, _)| *k != "windows" && !k.contains(":scopes:"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn count(outcomes: &[(Outcome, u64)], which: Outcome) -> u64 {
    outcomes
        .iter()
        .filter(|(o, _)| *o == which)
        .map(|(_, n)| n)
        .sum()
}

fn request(member: &str, boards: Option<Vec<&str>>) -> ActionRequest {
    ActionRequest {
        member: member.to_string(),
        boards: boards.map(|b| b.into_iter().map(str::to_string).collect()),
        reason: Some("test".to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_restore_and_erase_leave_exactly_what_a_run_without_them_holds() {
    let redis = Redis::start();
    twin_run(&format!("\"{}\"", redis.url()), &[&redis], Phases::SINGLE).await;
}

/// The same on the 3-primary Redis Cluster of the tests, shorter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_restore_and_erase_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let nodes: Vec<&Redis> = cluster.nodes.iter().collect();
    twin_run(&cluster.toml_urls(), &nodes, Phases::CLUSTER).await;
}

/// The rounds at which the twin run hides, restores and erases, and its end.
struct Phases {
    hide: usize,
    restore: usize,
    erase: usize,
    end: usize,
}

impl Phases {
    const SINGLE: Phases = Phases {
        hide: 20,
        restore: 40,
        erase: 50,
        end: 60,
    };
    const CLUSTER: Phases = Phases {
        hide: 8,
        restore: 18,
        erase: 24,
        end: 30,
    };
}

async fn twin_run(url: &str, redis: &[&Redis], phases: Phases) {
    let (pa, pb) = (unique("ma"), unique("mb"));
    let t0 = start();
    let mut a = Direct::with_url_toml(url, &pa, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    let mut b = Direct::with_url_toml(url, &pb, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    let moderator = a.moderator();
    let mut rng = Rng(0x5eed_0029);
    let mut hidden_events = 0;
    let Phases {
        hide,
        restore,
        erase,
        end,
    } = phases;
    for round in 0..end {
        let now = t0 + round as i64 * 7 * MIN;
        a.clock.set(now);
        b.clock.set(now);
        let events = batch(&mut rng, round, now);
        let targets = events.iter().filter(|e| e["user_id"] == TARGET).count() as u64;
        if round == hide {
            let report = moderator
                .act(MemberAction::Hide, &request(TARGET, None), "tester")
                .await
                .expect("hide");
            assert_eq!(report.state, "hidden");
            let held: Vec<&str> = report.boards.iter().map(|h| h.board.as_str()).collect();
            assert_eq!(
                held,
                ["m_sum", "m_max", "m_last", "m_comp", "m_game"],
                "{report:?}"
            );
            let game = &report.boards[4];
            assert!(
                !game.scopes.is_empty() && game.views.contains(&"all".to_string()),
                "{game:?}"
            );
            // Repeating it changes nothing.
            moderator
                .act(MemberAction::Hide, &request(TARGET, None), "tester")
                .await
                .expect("hide again");
        }
        if round == restore {
            let report = moderator
                .act(MemberAction::Restore, &request(TARGET, None), "tester")
                .await
                .expect("restore");
            assert_eq!(report.state, "visible");
            // (Compared once both have applied this round's batch: the
            // restore trimmed A's windows to this round's clock already.)
        }
        if round == erase {
            let report = moderator
                .act(MemberAction::Erase, &request(TARGET, None), "tester")
                .await
                .expect("erase");
            assert_eq!((report.state, report.member.is_none()), ("erased", true));
        }
        let (_, ra) = a.apply(&events).await;
        b.apply(&events).await;
        let settled = a.settle_last(&ra);
        let (da, db) = (dump(redis, &pa).await, dump(redis, &pb).await);
        match round {
            r if (hide..restore).contains(&r) => {
                // The batch built before the consumer heard of the hide
                // counts its events as it saw them (docs/moderation.md).
                let hidden = count(&settled, Outcome::Hidden);
                if round == 20 {
                    assert_eq!(
                        hidden + count(&settled, Outcome::Applied),
                        12,
                        "round {round}"
                    );
                } else {
                    assert_eq!(hidden, targets, "round {round}");
                }
                hidden_events += targets;
                same(
                    &views_of(&da),
                    &without_target(&db),
                    &format!("hidden, round {round}"),
                );
            }
            r if (restore..erase).contains(&r) => same(
                &comparable(&da),
                &comparable(&db),
                &format!("restored, round {round}"),
            ),
            r if r >= erase => {
                assert_eq!(count(&settled, Outcome::Erased), targets, "round {round}");
                trim_windows(&a).await;
                trim_windows(&b).await;
                let (da, db) = (dump(redis, &pa).await, dump(redis, &pb).await);
                same(
                    &without_registries(&views_of(&da)),
                    &without_registries(&without_target(&db)),
                    &format!("erased, round {round}"),
                );
                assert_eq!(traces(&da), Vec::<String>::new(), "erased, round {round}");
                // A redelivery changes nothing either.
                a.redeliver_last().await;
                assert_eq!(dump(redis, &pa).await, da, "redelivered, round {round}");
            }
            _ => same(&da, &db, &format!("before, round {round}")),
        }
    }
    assert!(
        hidden_events > 20,
        "{hidden_events} events of the hidden member"
    );
    let shown = moderator.show(TARGET).await.expect("show");
    assert_eq!(shown.state, "erased");
    // Erased members stay erased for a consumer that starts afresh (a new
    // group reading the topic from the start: new offsets to the fences).
    let mut c = Direct::with_url_toml(url, &pa, BOARDS, a.now())
        .await
        .with_erase_key(KEY);
    let before = dump(redis, &pa).await;
    let replay: Vec<Value> = (0..40)
        .map(|k| {
            json!({"type": "score", "event_id": format!("again{k}"), "ts": a.now() - k * MIN,
                        "user_id": TARGET, "game_id": "g9", "points": 5})
        })
        .collect();
    c.take_over(&a);
    c.load_moderation().await;
    let (outcomes, _) = c.apply(&replay).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Erased),
        "{outcomes:?}"
    );
    assert_eq!(
        dump(redis, &pa).await,
        before,
        "a replay of the erased member's events"
    );
}

/// Sorted-set keys of A (outside twins) that hold the target, with its score.
fn holding_target(a: &BTreeMap<String, Dump>) -> BTreeMap<String, f64> {
    a.iter()
        .filter(|(k, _)| {
            !k.contains("~h") && !k.ends_with(":v") && !k.contains(":ord") && !k.contains(":log")
        })
        .filter_map(|(k, d)| match d {
            Dump::Zset(e) => e
                .iter()
                .find(|(m, _)| is_target(m))
                .map(|(_, s)| (k.clone(), *s)),
            _ => None,
        })
        .collect()
}

fn event(id: &str, now: i64, user: &str, game: &str, points: i64) -> Value {
    json!({"type": "score", "event_id": id, "ts": now, "user_id": user, "game_id": game, "points": points})
}

/// The fleet race, on boards chosen by name: consumer 2 has read the
/// moderation record before the hide and applies the member's events
/// after it, to an instance the hide stamped (its call is refused and
/// encoded again) and to a scope the member never had (its registration in
/// the member index reads the new state). Nothing of the member shows on
/// the boards it is hidden from; the others keep showing it; the restore
/// brings back the events that arrived meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_has_not_heard_of_a_hide_never_shows_the_member() {
    let redis = Redis::start();
    let prefix = unique("mr");
    let t0 = start();
    let mut one = Direct::new(&redis.url(), &prefix, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    let mut two = Direct::new(&redis.url(), &prefix, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    two.take_over(&one);
    let moderator = one.moderator();
    one.apply(&[
        event("a1", t0, TARGET, "g0", 5),
        event("a2", t0, "u1", "g0", 7),
    ])
    .await;
    two.take_over(&one);
    // Consumer 2 reads the record (generation 0) and registers (x1, g0);
    // consumer 3 reads it too.
    two.apply(&[event("b1", t0 + MIN, TARGET, "g0", 1)]).await;
    let mut three = Direct::new(&redis.url(), &prefix, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    three.take_over(&two);
    three.apply(&[event("c1", t0 + MIN, "u3", "g0", 1)]).await;
    one.take_over(&three);
    let hidden_from = vec!["m_sum", "m_game"];
    let report = moderator
        .act(
            MemberAction::Hide,
            &request(TARGET, Some(hidden_from.clone())),
            "tester",
        )
        .await
        .expect("hide");
    assert_eq!(report.state, "hidden");
    assert_eq!(
        report.hidden.as_ref().and_then(|h| h.boards.clone()),
        Some(vec!["m_sum".to_string(), "m_game".to_string()])
    );
    // Consumer 3 still holds generation 0, and its batch touches only a
    // scope the member never had (no instance there carries a stamp): on
    // one node its call checks the record's generation.
    three.take_over(&one);
    three
        .apply(&[event("c2", t0 + 2 * MIN, TARGET, "g8", 4)])
        .await;
    two.take_over(&three);
    // Consumer 2 still holds generation 0.
    let (_, r) = two
        .apply(&[
            event("b2", t0 + 2 * MIN, TARGET, "g0", 10),
            event("b3", t0 + 2 * MIN, TARGET, "g7", 20),
            event("b4", t0 + 2 * MIN, "u2", "g7", 3),
        ])
        .await;
    assert!(r.boards.iter().map(|b| b.applied).sum::<u64>() > 0);
    let da = dump(&[&redis], &prefix).await;
    let held = holding_target(&da);
    for key in held.keys() {
        assert!(
            !key.starts_with("{m_sum}") && !key.starts_with("{m_game"),
            "{key} shows the member hidden from it: {held:?}"
        );
    }
    // The boards it is not hidden from took every event: 5 + 1 + 4 + 10 + 20
    // (`m_last` keeps the latest).
    assert_eq!(held.get("{m_last}:all"), Some(&20.0), "{held:?}");
    assert_eq!(
        held.keys().filter(|k| k.starts_with("{m_max}")).count(),
        3,
        "{held:?}"
    );
    let shown = moderator.show(TARGET).await.expect("show");
    let game = shown
        .boards
        .iter()
        .find(|h| h.board == "m_game")
        .expect("m_game");
    assert!(
        game.views.is_empty() && game.hidden_views.contains(&"all".to_string()),
        "{game:?}"
    );
    assert_eq!(game.scopes, ["g0", "g7", "g8"], "{game:?}");
    // Restored: the events that arrived meanwhile are there.
    moderator
        .act(MemberAction::Restore, &request(TARGET, None), "tester")
        .await
        .expect("restore");
    let held = holding_target(&dump(&[&redis], &prefix).await);
    assert_eq!(held.get("{m_sum}:all"), Some(&40.0), "{held:?}");
    assert_eq!(held.get("{m_game:g0}:all"), Some(&16.0), "{held:?}");
    assert_eq!(held.get("{m_game:g7}:all"), Some(&20.0), "{held:?}");
    assert_eq!(held.get("{m_game:g8}:all"), Some(&4.0), "{held:?}");
    let shown = moderator.show(TARGET).await.expect("show");
    assert_eq!(shown.state, "visible");
    assert!(
        shown.boards.iter().all(|h| h.hidden_views.is_empty()),
        "{shown:?}"
    );
}

/// The twin of a view key named without its prefix (`{tag}:view` →
/// `{tag}~h:view`).
fn twin_of(key: &str) -> String {
    match key.find('}') {
        Some(i) => format!("{}~h{}", &key[..=i], &key[i + 1..]),
        None => key.to_string(),
    }
}

/// `rankflow member <action> target`, killed with SIGKILL after `after`;
/// then the same command repeated until it succeeds (an interrupted
/// action's lock lasts `union_cache` + 5 s). Returns the action the member's state
/// showed pending right after the kill, if any.
async fn killed_then_repeated(
    cli: &CliConfig,
    moderator: &rankflow::admin::Moderator,
    action: &str,
    after: std::time::Duration,
) -> Option<String> {
    let env = [("RANKFLOW_HTTP_UNION_CACHE", "100ms")];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["member", action, TARGET, "-c"])
        .arg(&cli.path)
        .envs(env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("rankflow member");
    tokio::time::sleep(after).await;
    let _ = child.kill();
    let _ = child.wait();
    let pending = moderator.show(TARGET).await.expect("show").pending;
    let command = format!("member {action} {TARGET}");
    wait_for(
        std::time::Duration::from_secs(30),
        "the repeated action to finish",
        || async {
            let out = cli.run(&command, &env);
            out.status.success().then_some(())
        },
    )
    .await;
    pending
}

/// `kill -9` of `rankflow member` in the middle of a hide, then of a
/// restore, at several moments: repeating the command finishes the job,
/// and until it does the member's state says an action is pending. After
/// each hide the target is in no view and every twin holds what its view
/// held; after each restore every view holds exactly what it held before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_killed_midway_is_finished_by_repeating_it() {
    let redis = Redis::start();
    let prefix = unique("mk");
    let now = chrono::Utc::now().timestamp_millis();
    let d = Direct::new(&redis.url(), &prefix, BOARDS, now)
        .await
        .with_erase_key(KEY);
    let mut d = d;
    for chunk in 0..3 {
        let events: Vec<Value> = (chunk * 500..(chunk + 1) * 500)
            .flat_map(|g| {
                [
                    event(
                        &format!("t{g}"),
                        now - (g % 50) * MIN,
                        TARGET,
                        &format!("g{g}"),
                        g % 30 + 1,
                    ),
                    event(
                        &format!("o{g}"),
                        now,
                        &format!("u{}", g % 8),
                        &format!("g{g}"),
                        3,
                    ),
                ]
            })
            .collect();
        d.apply(&events).await;
    }
    let before = holding_target(&dump(&[&redis], &prefix).await);
    assert!(
        before.len() > 1500 * 3,
        "{} keys hold the target",
        before.len()
    );
    let cli = CliConfig::new(
        &format!("[admin]\nerase_key = \"{KEY}\"\n{BOARDS}"),
        &redis.url(),
        &prefix,
    );
    let moderator = d.moderator();
    let mut interrupted = Vec::new();
    for after_ms in [60, 160] {
        let after = std::time::Duration::from_millis(after_ms);
        interrupted.extend(killed_then_repeated(&cli, &moderator, "hide", after).await);
        let da = dump(&[&redis], &prefix).await;
        assert_eq!(
            holding_target(&da),
            BTreeMap::new(),
            "hidden (killed after {after_ms} ms)"
        );
        for (key, score) in &before {
            let twin = twin_of(key);
            let held = match da.get(&twin) {
                Some(Dump::Zset(e)) => e.iter().find(|(m, _)| is_target(m)).map(|(_, s)| *s),
                _ => None,
            };
            assert_eq!(held, Some(*score), "{twin} (killed after {after_ms} ms)");
        }
        let shown = moderator.show(TARGET).await.expect("show");
        assert_eq!((shown.state, shown.pending), ("hidden", None));
        interrupted.extend(killed_then_repeated(&cli, &moderator, "restore", after).await);
        let held = holding_target(&dump(&[&redis], &prefix).await);
        assert_eq!(held, before, "restored (killed after {after_ms} ms)");
        let shown = moderator.show(TARGET).await.expect("show");
        assert_eq!((shown.state, shown.pending), ("visible", None));
    }
    // At least one kill landed in the middle of an action (its state said so).
    assert!(!interrupted.is_empty(), "no kill interrupted an action");
    println!(
        "verified: actions interrupted by kill -9: {interrupted:?}; each finished by repeating it"
    );
}

/// On one node the calls of a batch check the record's generation
/// themselves: a consumer that has not heard of a hide from one scoped
/// board, and whose batch writes the member to a scope it never had (no
/// instance it touches was visited by the hide, so none carries a stamp),
/// is refused by the record and routes the member to the twins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_scope_of_a_hidden_member_is_caught_by_the_record() {
    let redis = Redis::start();
    let prefix = unique("mn");
    let t0 = start();
    let mut stale = Direct::new(&redis.url(), &prefix, BOARDS, t0)
        .await
        .with_erase_key(KEY);
    stale.apply(&[event("a1", t0, TARGET, "g0", 5)]).await;
    let moderator = stale.moderator();
    moderator
        .act(
            MemberAction::Hide,
            &request(TARGET, Some(vec!["m_game"])),
            "tester",
        )
        .await
        .expect("hide");
    stale.apply(&[event("a2", t0 + MIN, TARGET, "g8", 4)]).await;
    let da = dump(&[&redis], &prefix).await;
    let held = holding_target(&da);
    assert!(
        held.keys().all(|k| !k.starts_with("{m_game")),
        "a board it is hidden from shows it: {held:?}"
    );
    assert_eq!(held.get("{m_sum}:all"), Some(&9.0), "{held:?}");
    let twin = match da.get("{m_game:g8}~h:all") {
        Some(Dump::Zset(e)) => e.clone(),
        other => panic!("no twin of g8: {other:?}"),
    };
    assert_eq!(twin, vec![(TARGET.to_string(), 4.0)]);
}
