//! Unions of scopes (docs/http-api.md, issue 12 points 2–6): `scope=a&scope=b` and
//! `scope=*` on period views, `all`, windows and `last:<N><unit>` views,
//! over boards written by the real apply path (rules, batch, Lua, a real
//! redis-server), read through the HTTP API, against the reference of
//! `tests/it/common/unions.rs`, computed from the events alone (Tokyo dates
//! with chrono-tz, sums and maxima by hand). Scope values with `:`, `{`, `}` and `%` check the escaping of
//! both key layouts. The scope registry's bound and expiry, caching with
//! `INFO commandstats`, the 3-primary Redis Cluster (a board kept in one
//! slot works, one in the default layout is refused) and `rankflow top`
//! with two `--scope`s each have a test.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use common::direct::Direct;
use common::unions::*;
use common::*;
use rankflow::reader::{Query, ScopeUnion, Unions};
use serde_json::{Value, json};

/// Games (scopes), one with every character the key layout escapes.
const GAMES: [&str; 4] = ["g1", "g2", "g3", "odd:{x}%"];

/// The boards of these tests: score events ranking `user_id` by
/// `points`, each with what sets it apart.
fn boards_toml() -> String {
    [
        score_board(
            "heat",
            r#"scope = "game_id"
periods = ["day", "all"]
windows = ["2d/1h"]
timezone = "Asia/Tokyo"
retention = { day = "800d" }"#,
        ),
        score_board(
            "heat_slot",
            r#"scope = "game_id"
scope_slot = "board"
periods = ["day", "all"]
timezone = "Asia/Tokyo"
retention = { day = "800d" }"#,
        ),
        score_board(
            "speed",
            &format!(
                r#"scope = "game_id"
scope_slot = "board"
tie_break = "earliest"
{TOKYO_DAYS}"#
            ),
        ),
        score_board(
            "best",
            &format!(
                r#"scope = "game_id"
aggregate = "max"
tie_break = "earliest"
{TOKYO_DAYS}"#
            ),
        ),
        score_board(
            "few",
            r#"scope = "game_id"
scope_registry = 3
periods = ["day", "all"]
timezone = "Asia/Tokyo"
retention = { day = "800d" }"#,
        ),
        score_board(
            "unlisted",
            r#"scope = "game_id"
scope_registry = 0
periods = ["day"]"#,
        ),
        score_board("total", r#"periods = ["day"]"#),
        score_board(
            "latest",
            r#"scope = "game_id"
aggregate = "last"
periods = ["day"]"#,
        ),
    ]
    .concat()
}

/// One event: member, time (ms), points, game.
type Ev = (String, i64, i64, String);

/// 10 Tokyo days 2026-10-27 ..= 2026-11-05 (across a month boundary), 8
/// members over the 4 games, 4 events at each of 00:05, 12:00, 19:00 and
/// 23:55 local (the first and last fall on another UTC date), points from
/// a fixed pseudo-random sequence; in time order.
fn events() -> Vec<Ev> {
    let mut next = lcg(99);
    let mut out: Vec<Ev> = tokyo_times(&[(0, 5), (12, 0), (19, 0), (23, 55)], 4)
        .into_iter()
        .map(|ts| {
            let member = format!("m{}", next() % 8);
            let game = GAMES[(next() % 4) as usize].to_string();
            (member, ts, (next() % 40) as i64 + 1, game)
        })
        .collect();
    out.sort_by_key(|e| e.1);
    out
}

/// The reference union of `games` over the Tokyo days `from ..= to` (see
/// [`union_reference`]).
fn reference(
    evs: &[Ev],
    games: &[&str],
    days: (NaiveDate, NaiveDate),
    agg: &str,
    tie: Option<&str>,
) -> Vec<(String, i64)> {
    let evs = evs
        .iter()
        .filter(|(.., g)| games.contains(&g.as_str()))
        .map(|(m, ts, p, _)| (m.as_str(), *ts, *p));
    union_reference(evs, days, agg, tie)
}

/// `scope=` parameters for `games`, URL-encoded.
fn scope_params(games: &[&str]) -> String {
    games
        .iter()
        .map(|g| {
            let enc: String = g
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("&scope={enc}")
        })
        .collect()
}

async fn applied(redis_url: &str, prefix: &str, evs: &[Ev]) -> Direct {
    let mut d = Direct::new(redis_url, prefix, &boards_toml(), now()).await;
    let batch: Vec<Value> = evs
        .iter()
        .enumerate()
        .map(|(i, (m, ts, p, g))| {
            json!({"type": "score", "event_id": format!("e{i}"), "ts": ts, "user_id": m, "game_id": g, "points": p})
        })
        .collect();
    for chunk in batch.chunks(40) {
        d.apply(chunk).await;
    }
    d
}

/// The reads of the main test: board, view and extra parameters, the
/// games, the day range, aggregate and tie rule.
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Vec<&'static str>,
    (NaiveDate, NaiveDate),
    &'static str,
    Option<&'static str>,
);

fn cases() -> Vec<Case> {
    let today = date(2026, 11, 5);
    let two = vec!["g1", "odd:{x}%"];
    let all = GAMES.to_vec();
    let ever = (date(2026, 1, 1), today);
    vec![
        ("heat", "day", "", two.clone(), (today, today), "sum", None),
        (
            "heat",
            "day",
            "&period=2026-10-31",
            two.clone(),
            (date(2026, 10, 31), date(2026, 10, 31)),
            "sum",
            None,
        ),
        ("heat", "all", "", two.clone(), ever, "sum", None),
        (
            "heat",
            "last:7d",
            "",
            two.clone(),
            (date(2026, 10, 30), today),
            "sum",
            None,
        ),
        (
            "heat",
            "last:3d",
            "&period=2026-11-01",
            vec!["g2", "g3", "g1"],
            (date(2026, 10, 30), date(2026, 11, 1)),
            "sum",
            None,
        ),
        (
            "heat_slot",
            "last:7d",
            "",
            two.clone(),
            (date(2026, 10, 30), today),
            "sum",
            None,
        ),
        ("heat_slot", "all", "", vec!["g3", "g2"], ever, "sum", None),
        (
            "speed",
            "last:7d",
            "",
            two.clone(),
            (date(2026, 10, 30), today),
            "sum",
            Some("earliest"),
        ),
        (
            "speed",
            "day",
            "&period=2026-11-02",
            vec!["g1", "g2", "g3"],
            (date(2026, 11, 2), date(2026, 11, 2)),
            "sum",
            Some("earliest"),
        ),
        (
            "best",
            "last:10d",
            "",
            two,
            (date(2026, 10, 27), today),
            "max",
            Some("earliest"),
        ),
        // scope=*: every game.
        ("heat", "day", "*", all.clone(), (today, today), "sum", None),
        (
            "heat",
            "last:7d",
            "*",
            all.clone(),
            (date(2026, 10, 30), today),
            "sum",
            None,
        ),
        ("heat", "all", "*", all.clone(), ever, "sum", None),
        (
            "heat_slot",
            "last:3d",
            "*&period=2026-11-01",
            all.clone(),
            (date(2026, 10, 30), date(2026, 11, 1)),
            "sum",
            None,
        ),
        (
            "speed",
            "last:7d",
            "*",
            all.clone(),
            (date(2026, 10, 30), today),
            "sum",
            Some("earliest"),
        ),
        (
            "best",
            "day",
            "*&period=2026-10-28",
            all,
            (date(2026, 10, 28), date(2026, 10, 28)),
            "max",
            Some("earliest"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unions_of_listed_and_of_all_scopes_equal_the_reference() {
    let redis = Redis::start();
    scope_unions_equal_the_reference(&redis, Unions::new(1_000)).await;
}

/// The same, every union built in slices as large ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_unions_built_in_slices_equal_the_same_reference() {
    let redis = Redis::start();
    scope_unions_equal_the_reference(&redis, Unions::new(1_000).with_inline_max(0)).await;
    assert_eq!(redis.calls("zunionstore"), 0);
    assert!(redis.calls("zscan") > 0);
}

async fn scope_unions_equal_the_reference(redis: &Redis, unions: Unions) {
    let evs = events();
    let d = applied(&redis.url(), &unique("su"), &evs).await;
    let base = serve_with(&d, unions).await;
    for (board, view, extra, games, range, agg, tie) in cases() {
        let (scopes, extra) = match extra.strip_prefix('*') {
            Some(rest) => ("&scope=*".to_string(), rest),
            None => (scope_params(&games), extra),
        };
        let url = format!("{base}/v1/boards/{board}/{view}/top?limit=1000{scopes}{extra}");
        let want = reference(&evs, &games, range, agg, tie);
        assert!(want.len() >= 4, "{url}: too few members to say much");
        let (status, body) = get_json(&url).await;
        assert_eq!(status, 200, "{url}: {body}");
        assert_eq!(rows(&body), want, "{url}");
        assert_eq!(body["total"], want.len(), "{url}");
        assert_eq!(body["scope"], Value::Null, "{url}");
        let shown = if scopes == "&scope=*" {
            json!(["*"])
        } else {
            json!(games)
        };
        assert_eq!(body["scopes"], shown, "{url}");
    }
}

/// A window's keys expire in Redis's real time, so this test runs at the
/// real time: events every 5 hours over the last 75 hours, round the games.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_union_is_the_sum_of_its_trimmed_scopes() {
    const HOUR: i64 = 3_600_000;
    let redis = Redis::start();
    let t0 = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    let evs: Vec<Value> = (0..15)
        .map(|k| {
            json!({"type": "score", "event_id": format!("w{k}"), "ts": t0 - k * 5 * HOUR,
                   "user_id": format!("m{}", k % 4), "game_id": GAMES[k as usize % 4], "points": k + 1})
        })
        .collect();
    let mut d = Direct::new(&redis.url(), &unique("sw"), &boards_toml(), t0).await;
    d.apply(&evs).await;
    let base = serve(&d, 1_000).await;
    // The reference: each game's own window, read alone, summed by hand.
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for g in GAMES {
        let url = format!(
            "{base}/v1/boards/heat/win:2d/top?limit=1000{}",
            scope_params(&[g])
        );
        let (status, body) = get_json(&url).await;
        assert_eq!(status, 200, "{url}: {body}");
        for (m, v) in rows(&body) {
            *want.entry(m).or_default() += v;
        }
    }
    let (status, body) = get_json(&format!(
        "{base}/v1/boards/heat/win:2d/top?limit=1000&scope=*"
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let got: BTreeMap<String, i64> = rows(&body).into_iter().collect();
    assert_eq!(got, want);
    // Events 0..=9 (up to 45 h old) are inside 2 days and 11..=14 (55 h
    // and older) are not, whatever the bucket edges; event 10 (50 h, 11
    // points) may be: 1 + .. + 10 = 55, or 66.
    let in_window: i64 = got.values().sum();
    assert!(
        (55..120).contains(&in_window),
        "a window, not all time: {in_window}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_around_rank_styles_and_member_lists_work_on_a_scope_union() {
    let redis = Redis::start();
    let evs = events();
    let d = applied(&redis.url(), &unique("sm"), &evs).await;
    let base = serve(&d, 1_000).await;
    let games = ["g2", "g3"];
    let want = reference(
        &evs,
        &games,
        (date(2026, 10, 30), date(2026, 11, 5)),
        "sum",
        None,
    );
    let view = format!("{base}/v1/boards/heat/last:7d");
    let sc = scope_params(&games);
    let (_, body) = get_json(&format!("{view}/top?limit=1000&rank=competition{sc}")).await;
    assert_eq!(
        ranks(&body),
        want.iter()
            .map(|(_, v)| competition_rank(&want, *v))
            .collect::<Vec<_>>()
    );
    for (i, (m, v)) in want.iter().enumerate() {
        let (status, e) = get_json(&format!("{view}/members/{m}?rank=dense{sc}")).await;
        assert_eq!(status, 200, "{e}");
        assert_eq!(
            (e["rank"].as_u64(), e["score"].as_i64()),
            (Some(dense_rank(&want, *v)), Some(*v))
        );
        let (_, e) = get_json(&format!("{view}/members/{m}?{}", &sc[1..])).await;
        assert_eq!(e["rank"].as_u64(), Some(i as u64 + 1), "{m}");
    }
    let (status, around) = get_json(&format!("{view}/around/{}?radius=1{sc}", want[2].0)).await;
    assert_eq!(status, 200, "{around}");
    assert_eq!(rows(&around), want[1..4].to_vec());
    let ids = format!("{},nobody,{}", want[3].0, want[1].0);
    let (status, list) = get_json(&format!("{view}/members?ids={ids}{sc}")).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(rows(&list), vec![want[1].clone(), want[3].clone()]);
    assert_eq!(list["missing"], json!(["nobody"]));
    assert_eq!(list["scopes"], json!(games));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scope_registry_is_bounded_expires_with_its_view_and_says_when_it_overflowed() {
    let redis = Redis::start();
    let prefix = unique("sr");
    let t = tokyo(2026, 11, 5, 10, 0);
    let ev = |i: usize, game: &str| json!({"type": "score", "event_id": format!("r{i}"), "ts": t, "user_id": format!("u{i}"), "game_id": game, "points": 5});
    let mut d = Direct::new(&redis.url(), &prefix, &boards_toml(), now()).await;
    d.apply(&[ev(0, "g1"), ev(1, "g2"), ev(2, "odd:{x}%")])
        .await;
    let base = serve(&d, 1).await;
    let top = |board: &str, view: &str| format!("{base}/v1/boards/{board}/{view}/top?scope=*");
    let (status, body) = get_json(&top("few", "day")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], 3);
    // The registry holds the raw values, and lives as long as its view.
    let reg = format!("{prefix}:{{few}}:scopes:day:2026-11-05");
    let listed = redis.cli(&["ZRANGE", &reg, "0", "-1"]);
    let listed: BTreeSet<&str> = listed.lines().map(str::trim).collect();
    assert_eq!(listed, BTreeSet::from(["g1", "g2", "odd:{x}%"]));
    let view_key = format!("{prefix}:{{few:g1}}:day:2026-11-05");
    let at = |k: &str| -> i64 { redis.cli(&["PEXPIRETIME", k]).trim().parse().unwrap_or(0) };
    assert!(at(&view_key) > now(), "the view expires");
    assert_eq!(
        at(&reg),
        at(&view_key),
        "the registry expires with its view"
    );
    let forever = format!("{prefix}:{{few}}:scopes:all");
    assert_eq!(at(&forever), -1, "the all-time registry has no expiry");
    // A fourth scope passes the bound of 3: scope=* is refused, naming
    // the bound, rather than answering for three of the four.
    d.apply(&[ev(3, "g3")]).await;
    let (status, body) = get_json(&top("few", "day")).await;
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("more than 3") && error.contains("scope_registry"),
        "{error}"
    );
    assert_eq!(body["parameter"], "scope");
    // Only bound + 1 values are kept.
    assert_eq!(redis.cli(&["ZCARD", &reg]).trim(), "4");
    d.apply(&[ev(4, "g4"), ev(5, "g5")]).await;
    assert_eq!(redis.cli(&["ZCARD", &reg]).trim(), "4");
    // Another consumer of the fleet (its own cache, under the bound
    // itself) adds three more a minute later: Redis still keeps 4, its
    // three among them (the most recently registered).
    let mut other = Direct::new(&redis.url(), &prefix, &boards_toml(), now() + 60_000).await;
    other.apply(&[ev(6, "h1"), ev(7, "h2"), ev(8, "h3")]).await;
    assert_eq!(redis.cli(&["ZCARD", &reg]).trim(), "4");
    let kept = redis.cli(&["ZRANGE", &reg, "0", "-1"]);
    assert!(
        ["h1", "h2", "h3"]
            .iter()
            .all(|h| kept.lines().any(|l| l.trim() == *h)),
        "{kept}"
    );
    // Listed scopes need no registry.
    let (status, body) = get_json(&format!(
        "{base}/v1/boards/few/day/top?scope=g1&scope=g3&scope=g5"
    ))
    .await;
    assert_eq!((status, body["total"].as_u64()), (200, Some(3)), "{body}");
    let (status, body) = get_json(&top("unlisted", "day")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("scope_registry = 0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_scope_unions_are_refused_with_the_reason() {
    let redis = Redis::start();
    let d = Direct::new(&redis.url(), &unique("sb"), &boards_toml(), now()).await;
    let base = serve(&d, 1_000).await;
    let many: String = (0..1001).map(|i| format!("&scope=s{i}")).collect();
    for (path, words) in [
        ("heat/day/top?scope=*&scope=g1", "give it alone"),
        ("total/day/top?scope=a&scope=b", "has no scope"),
        ("latest/day/top?scope=a&scope=b", "last value"),
        ("heat/day/periods?scope=a&scope=b", "one scope"),
        ("heat/day/top?scope=a&scope=b&period=2026-02-30", "period"),
        (&format!("heat/day/top?{}", &many[1..]), "at most 1000"),
    ] {
        let (status, body) = get_json(&format!("{base}/v1/boards/{path}")).await;
        assert_eq!(status, 400, "{path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{path}: {error}");
    }
    // The listing tells what each scoped board offers.
    let (_, listing) = get_json(&format!("{base}/v1/boards")).await;
    let offer = |name: &str| {
        listing["boards"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["name"] == name))
            .map(|b| (b["scope_unions"].clone(), b["key_pattern"].clone()))
            .unwrap_or_default()
    };
    let (heat, heat_keys) = offer("heat");
    assert_eq!(
        heat,
        json!({"max_listed": 1000, "registry": 10000, "scope_slot": "scope"})
    );
    assert!(
        heat_keys
            .as_str()
            .unwrap_or_default()
            .ends_with(":{heat:<scope>}:<view>")
    );
    let (slot, slot_keys) = offer("heat_slot");
    assert_eq!(slot["scope_slot"], "board");
    assert!(
        slot_keys
            .as_str()
            .unwrap_or_default()
            .ends_with(":{heat_slot}@<scope>:<view>")
    );
    assert_eq!(offer("total").0, Value::Null);
    assert_eq!(offer("latest").0, Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_union_is_computed_once_per_ttl_and_once_for_concurrent_readers() {
    let redis = Redis::start();
    let evs = events();
    let d = applied(&redis.url(), &unique("sc"), &evs).await;
    let r = reader(&d, 5_000);
    let q = |which: ScopeUnion, view: &str| Query {
        board: "heat".into(),
        view: view.into(),
        scope: None,
        scope_union: Some(which),
        period: None,
    };
    let listed = || ScopeUnion::Listed(vec!["g1".into(), "g2".into()]);
    let before = redis.calls("zunionstore");
    let first = r.top(&q(listed(), "last:7d"), 0, 1000).await.expect("read");
    assert_eq!(redis.calls("zunionstore"), before + 1);
    // Within the TTL: the same scopes in another order, pages, a member.
    let swapped = ScopeUnion::Listed(vec!["g2".into(), "g1".into()]);
    let again = r.top(&q(swapped, "last:7d"), 0, 1000).await.expect("read");
    assert_eq!(again.entries, first.entries);
    r.top(&q(listed(), "last:7d"), 2, 2).await.expect("page");
    r.member(&q(listed(), "last:7d"), &first.entries[0].member)
        .await
        .expect("member");
    assert_eq!(
        redis.calls("zunionstore"),
        before + 1,
        "reused within the TTL"
    );
    // 24 readers of a cold scope=* union at once: one union.
    let z0 = redis.calls("zunionstore");
    let reads = (0..24).map(|_| async { r.top(&q(ScopeUnion::All, "day"), 0, 1000).await });
    let answers = futures::future::join_all(reads).await;
    assert_eq!(
        redis.calls("zunionstore"),
        z0 + 1,
        "one union for 24 readers"
    );
    let want = reference(
        &evs,
        &GAMES,
        (date(2026, 11, 5), date(2026, 11, 5)),
        "sum",
        None,
    );
    for a in answers {
        assert_eq!(list_rows(&a.expect("read")), want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_unions_work_on_a_redis_cluster_for_a_board_kept_in_one_slot() {
    let cluster = RedisCluster::start();
    let evs = events();
    let prefix = unique("scl");
    let d = applied(&cluster.nodes[0].url(), &prefix, &evs).await;
    let base = serve(&d, 60_000).await;
    // Large unions are built in slices: the temporary keys share the slot.
    let sliced = serve_with(&d, Unions::new(60_000).with_inline_max(0)).await;
    let url = format!("{sliced}/v1/boards/speed/last:7d/top?limit=1000&scope=*");
    let (status, body) = get_json(&url).await;
    assert_eq!(status, 200, "{url}: {body}");
    let want = reference(
        &evs,
        &GAMES,
        (date(2026, 10, 30), date(2026, 11, 5)),
        "sum",
        Some("earliest"),
    );
    assert_eq!(rows(&body), want, "{url}");
    let today = date(2026, 11, 5);
    for (board, view, scopes, games, from, tie) in [
        (
            "heat_slot",
            "last:7d",
            scope_params(&["g1", "odd:{x}%"]),
            vec!["g1", "odd:{x}%"],
            date(2026, 10, 30),
            None,
        ),
        (
            "heat_slot",
            "day",
            "&scope=*".to_string(),
            GAMES.to_vec(),
            today,
            None,
        ),
        (
            "speed",
            "last:3d",
            "&scope=*".to_string(),
            GAMES.to_vec(),
            date(2026, 11, 3),
            Some("earliest"),
        ),
        // One scope of a board kept in one slot reads as before.
        (
            "heat_slot",
            "day",
            scope_params(&["g2"]),
            vec!["g2"],
            today,
            None,
        ),
    ] {
        let url = format!("{base}/v1/boards/{board}/{view}/top?limit=1000{scopes}");
        let (status, body) = get_json(&url).await;
        assert_eq!(status, 200, "{url}: {body}");
        assert_eq!(
            rows(&body),
            reference(&evs, &games, (from, today), "sum", tie),
            "{url}"
        );
    }
    // Every key of the board, and the union results, share its slot.
    let keys = cluster.keys(&format!("{prefix}:{{heat_slot}}*")).await;
    assert!(
        keys.iter()
            .any(|k| k.starts_with(&format!("{prefix}:{{heat_slot}}@g1:day:"))),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.contains("}:u:last:7d:2026-11-05:s:")),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.contains("}:scopes:day:2026-11-05")),
        "{keys:?}"
    );
    // A board in the default layout spreads its scopes over the cluster:
    // a union of them is refused, and says what to change.
    let url = format!("{base}/v1/boards/heat/day/top?scope=g1&scope=g2");
    let (status, body) = get_json(&url).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("scope_slot = \"board\""),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankflow_top_reads_a_union_of_two_scopes() {
    let redis = Redis::start();
    let prefix = unique("stop");
    let evs = events();
    let _d = applied(&redis.url(), &prefix, &evs).await;
    let stdout = CliConfig::new(&boards_toml(), &redis.url(), &prefix).stdout(
        "top heat last:3d --period 2026-11-05 --limit 3 --scope g1 --scope g2",
        &[],
    );
    assert!(stdout.contains("scopes=g1,g2"), "{stdout}");
    let want = reference(
        &evs,
        &["g1", "g2"],
        (date(2026, 11, 3), date(2026, 11, 5)),
        "sum",
        None,
    );
    for (m, v) in &want[..3] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(m.as_str()) && l.contains(&v.to_string())),
            "{m} {v} in {stdout}"
        );
    }
}
