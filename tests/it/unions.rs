//! Rolling views computed at read time (docs/http-api.md, issue 12 point 1):
//! `last:<N><unit>` over the period boards the real apply path wrote (rules,
//! batch, Lua, a real redis-server), read through the HTTP API, against the
//! reference of `tests/it/common/unions.rs`, computed from the events alone
//! (local dates with chrono-tz, sums and maxima by hand): 10 days of events in Asia/Tokyo
//! across a month boundary, events at local midnight edges so that a UTC
//! calendar would misplace them, `period=` in the past, a tie-break board
//! (its tie order follows the documented rule), a max board with equal
//! maxima in two periods, rank styles, member lists, `around`, the board
//! listing and bad views; `last:24h` across New York's fall-back night.
//! Caching and single flight are checked with `INFO commandstats`; one test
//! runs on a 3-primary Redis Cluster, one runs `rankflow top` and `check`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::NaiveDate;
use chrono_tz::Tz;
use common::direct::Direct;
use common::unions::*;
use common::*;
use rankflow::reader::Unions;
use serde_json::{Value, json};

/// The boards of these tests: score events ranking `user_id` by
/// `points`, each with what sets it apart.
fn boards_toml() -> String {
    [
        score_board(
            "heat",
            r#"periods = ["day", "week"]
timezone = "Asia/Tokyo"
retention = { day = "800d", week = "800d" }"#,
        ),
        score_board(
            "speed",
            &format!(
                r#"tie_break = "earliest"
{TOKYO_DAYS}"#
            ),
        ),
        score_board(
            "best",
            &format!(
                r#"aggregate = "max"
tie_break = "earliest"
{TOKYO_DAYS}"#
            ),
        ),
        score_board(
            "per_game",
            &format!(
                r#"scope = "game_id"
{TOKYO_DAYS}"#
            ),
        ),
        score_board(
            "short",
            r#"periods = ["day"]
retention = { day = "35d" }"#,
        ),
        score_board(
            "latest",
            r#"aggregate = "last"
periods = ["day"]"#,
        ),
    ]
    .concat()
}

/// One event: member, time (ms), points.
type Ev = (String, i64, i64);

/// 10 Tokyo days 2026-10-27 ..= 2026-11-05, 8 members, 3 events at each
/// of 00:05, 12:00 and 23:55 local (the first and last are on another UTC
/// date), with points from a fixed pseudo-random sequence; events in time
/// order.
fn events() -> Vec<Ev> {
    let mut next = lcg(12_345);
    let mut out: Vec<Ev> = tokyo_times(&[(0, 5), (12, 0), (23, 55)], 3)
        .into_iter()
        .map(|ts| {
            let member = format!("m{}", next() % 8);
            (member, ts, (next() % 50) as i64 + 1)
        })
        .collect();
    out.sort_by_key(|e| e.1);
    out
}

/// The reference union of the Tokyo days `from ..= to` (see
/// [`union_reference`]).
fn reference(
    evs: &[Ev],
    from: NaiveDate,
    to: NaiveDate,
    agg: &str,
    tie: Option<&str>,
) -> Vec<(String, i64)> {
    let evs = evs.iter().map(|(m, ts, p)| (m.as_str(), *ts, *p));
    union_reference(evs, (from, to), agg, tie)
}

async fn applied(redis_url: &str, prefix: &str, evs: &[Ev], now: i64) -> Direct {
    let mut d = Direct::new(redis_url, prefix, &boards_toml(), now).await;
    let batch: Vec<Value> = evs
        .iter()
        .enumerate()
        .map(|(i, (m, ts, p))| {
            json!({"type": "score", "event_id": format!("e{i}"), "ts": ts, "user_id": m, "game_id": "g", "points": p})
        })
        .collect();
    for chunk in batch.chunks(30) {
        d.apply(chunk).await;
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_views_equal_the_reference_across_a_month_in_tokyo() {
    rolling_views_equal_the_reference(Unions::new(1_000)).await;
}

/// The same reads with every union built in slices (ZSCAN, combined in
/// rankflow, written in slices, renamed into place), as large ones are:
/// no ZUNIONSTORE, and no temporary key left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_views_built_in_slices_equal_the_same_reference() {
    let (redis, prefix, base) =
        rolling_views_equal_the_reference(Unions::new(1_000).with_inline_max(0)).await;
    assert_eq!(redis.calls("zunionstore"), 0);
    assert!(redis.calls("zscan") > 0);
    let left = redis.cli(&["KEYS", &format!("{prefix}:*:build:*")]);
    assert_eq!(left.trim(), "", "temporary keys left: {left}");
    let (status, _) = get_json(&format!("{base}/v1/boards/speed/last:7d/top")).await;
    assert_eq!(status, 200);
    let result = format!("{prefix}:{{speed}}:u:last:7d:2026-11-05");
    let pttl: i64 = redis.cli(&["PTTL", &result]).trim().parse().unwrap_or(-3);
    assert!(pttl > 0 && pttl <= 2_000, "{result} PTTL {pttl}");
    let times: i64 = redis
        .cli(&["PTTL", &format!("{result}:t")])
        .trim()
        .parse()
        .unwrap_or(-3);
    assert!(
        times > 0 && times <= 2_000,
        "its time hash expires with it: {times}"
    );
}

async fn rolling_views_equal_the_reference(unions: Unions) -> (Redis, String, String) {
    let redis = Redis::start();
    let evs = events();
    let prefix = unique("un");
    let d = applied(&redis.url(), &prefix, &evs, now()).await;
    let base = serve_with(&d, unions).await;
    let top = |board: &str, view: &str, extra: &str| {
        format!("{base}/v1/boards/{board}/{view}/top?limit=1000{extra}")
    };
    let today = date(2026, 11, 5);
    for (board, view, extra, from, to, agg, tie) in [
        (
            "heat",
            "last:7d",
            "",
            date(2026, 10, 30),
            today,
            "sum",
            None,
        ),
        ("heat", "last:3d", "", date(2026, 11, 3), today, "sum", None),
        (
            "heat",
            "last:10d",
            "",
            date(2026, 10, 27),
            today,
            "sum",
            None,
        ),
        ("heat", "last:1d", "", today, today, "sum", None),
        // One scope of a scoped board (every event is in game g).
        (
            "per_game",
            "last:7d",
            "&scope=g",
            date(2026, 10, 30),
            today,
            "sum",
            None,
        ),
        // The range moved into the past, across the month boundary.
        (
            "heat",
            "last:3d",
            "&period=2026-11-01",
            date(2026, 10, 30),
            date(2026, 11, 1),
            "sum",
            None,
        ),
        (
            "heat",
            "last:7d",
            "&period=2026-10-31",
            date(2026, 10, 25),
            date(2026, 10, 31),
            "sum",
            None,
        ),
        (
            "speed",
            "last:7d",
            "",
            date(2026, 10, 30),
            today,
            "sum",
            Some("earliest"),
        ),
        (
            "speed",
            "last:3d",
            "&period=2026-11-02",
            date(2026, 10, 31),
            date(2026, 11, 2),
            "sum",
            Some("earliest"),
        ),
        (
            "best",
            "last:7d",
            "",
            date(2026, 10, 30),
            today,
            "max",
            Some("earliest"),
        ),
        (
            "best",
            "last:3d",
            "",
            date(2026, 11, 3),
            today,
            "max",
            Some("earliest"),
        ),
    ] {
        let want = reference(&evs, from, to, agg, tie);
        assert!(
            want.len() >= 4,
            "{board} {view}{extra}: too few members to say much"
        );
        let (status, body) = get_json(&top(board, view, extra)).await;
        assert_eq!(status, 200, "{board} {view}{extra}: {body}");
        assert_eq!(rows(&body), want, "{board} {view}{extra}");
        assert_eq!(body["total"], want.len(), "{board} {view}{extra}");
        assert_eq!(body["source"], "live");
        let newest = extra.strip_prefix("&period=").unwrap_or("2026-11-05");
        assert_eq!(body["period"], newest, "{board} {view}{extra}");
    }
    // Weeks too: the ISO week 2026-W45 (2-8 Nov) and W44 in Tokyo.
    let want = reference(&evs, date(2026, 10, 26), today, "sum", None);
    let (_, body) = get_json(&top("heat", "last:2w", "")).await;
    assert_eq!(rows(&body), want, "last:2w");
    assert_eq!(body["period"], "2026-W45");
    (redis, prefix, base)
}

/// The reference for `tie-break` and `max` boards checks the union's tie
/// time rule on purpose-made data: equal totals whose latest events
/// differ, and equal maxima reached in different periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tie_times_of_a_union_follow_the_documented_rule() {
    tie_times_follow_the_rule(Unions::new(1_000)).await;
}

/// The same rule when the union is built in slices, as large ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tie_times_of_a_union_built_in_slices_follow_the_same_rule() {
    tie_times_follow_the_rule(Unions::new(1_000).with_inline_max(0)).await;
}

async fn tie_times_follow_the_rule(unions: Unions) {
    let redis = Redis::start();
    let at = |d: u32, h: u32| tokyo(2026, 11, d, h, 0);
    let evs: Vec<Ev> = vec![
        // speed (sum, earliest): a and b both total 10 over 3-5 Nov; a's
        // latest event is on the 5th, b's on the 4th, so b ranks first.
        ("a".into(), at(3, 9), 4),
        ("b".into(), at(3, 10), 6),
        ("a".into(), at(5, 1), 6),
        ("b".into(), at(4, 8), 4),
        // c ties at 10 within the 4th only, later than b's last event.
        ("c".into(), at(4, 9), 10),
        // best (max, earliest): x has 50 on the 3rd and the 5th, y on the
        // 4th: x's winning time is the 3rd, so x ranks before y.
        ("x".into(), at(3, 12), 50),
        ("y".into(), at(4, 12), 50),
        ("x".into(), at(5, 12), 50),
        // Outside the range (the 2nd): would change both orders.
        ("b".into(), at(2, 12), 1),
        ("y".into(), at(2, 13), 50),
    ];
    let mut sorted = evs.clone();
    sorted.sort_by_key(|e| e.1);
    let d = applied(&redis.url(), &unique("tie"), &sorted, now()).await;
    let base = serve_with(&d, unions).await;
    let (_, speed) = get_json(&format!("{base}/v1/boards/speed/last:3d/top?limit=10")).await;
    let want_speed = reference(
        &sorted,
        date(2026, 11, 3),
        date(2026, 11, 5),
        "sum",
        Some("earliest"),
    );
    assert_eq!(rows(&speed), want_speed);
    // (x and y lead the sums; then the three tied at 10.)
    let tied: Vec<&str> = want_speed
        .iter()
        .filter(|(_, v)| *v == 10)
        .map(|(m, _)| m.as_str())
        .collect();
    assert_eq!(tied, ["b", "c", "a"], "reference itself");
    let (_, best) = get_json(&format!("{base}/v1/boards/best/last:3d/top?limit=10")).await;
    let want_best = reference(
        &sorted,
        date(2026, 11, 3),
        date(2026, 11, 5),
        "max",
        Some("earliest"),
    );
    assert_eq!(rows(&best), want_best);
    assert_eq!(want_best[0].0, "x");
    // A member read on a tie-break union finds its entry through the
    // union's time hash.
    let (status, a) = get_json(&format!("{base}/v1/boards/speed/last:3d/members/a")).await;
    assert_eq!(
        (status, a["rank"].as_u64(), a["score"].as_i64()),
        (200, Some(5), Some(10)),
        "{a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_and_rank_style_works_on_a_union_view() {
    let redis = Redis::start();
    let evs = events();
    let d = applied(&redis.url(), &unique("rd"), &evs, now()).await;
    let base = serve(&d, 1_000).await;
    for (board, agg, tie) in [("heat", "sum", None), ("speed", "sum", Some("earliest"))] {
        let want = reference(&evs, date(2026, 10, 30), date(2026, 11, 5), agg, tie);
        let view = format!("{base}/v1/boards/{board}/last:7d");
        // Ranks by counting.
        for (style, rank) in [
            (
                "competition",
                competition_rank as fn(&[(String, i64)], i64) -> u64,
            ),
            ("dense", dense_rank),
        ] {
            let (status, body) = get_json(&format!("{view}/top?limit=1000&rank={style}")).await;
            assert_eq!(status, 200, "{body}");
            let expected: Vec<u64> = want.iter().map(|(_, v)| rank(&want, *v)).collect();
            assert_eq!(ranks(&body), expected, "{board} rank={style}");
        }
        for (i, (m, v)) in want.iter().enumerate() {
            let (status, e) = get_json(&format!("{view}/members/{m}")).await;
            assert_eq!(status, 200, "{e}");
            assert_eq!(
                (e["rank"].as_u64(), e["score"].as_i64()),
                (Some(i as u64 + 1), Some(*v))
            );
            let (_, e) = get_json(&format!("{view}/members/{m}?rank=dense")).await;
            assert_eq!(
                e["rank"].as_u64(),
                Some(dense_rank(&want, *v)),
                "{board} {m} dense"
            );
        }
        let (mid, _) = &want[3];
        let (status, around) = get_json(&format!("{view}/around/{mid}?radius=2")).await;
        assert_eq!(status, 200, "{around}");
        assert_eq!(rows(&around), want[1..6].to_vec(), "{board} around");
        let ids = format!("{},{},nobody", want[2].0, want[0].0);
        let (status, list) = get_json(&format!("{view}/members?ids={ids}")).await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(rows(&list), vec![want[0].clone(), want[2].clone()]);
        assert_eq!(list["missing"], json!(["nobody"]));
        let (_, missing) = get_json(&format!("{view}/members/nobody")).await;
        assert!(
            missing["error"]
                .as_str()
                .is_some_and(|e| e.contains("nobody")),
            "{missing}"
        );
    }
    // The listing offers each board's union views, with the largest N.
    let (_, listing) = get_json(&format!("{base}/v1/boards")).await;
    let unions = |name: &str| {
        listing["boards"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["name"] == name))
            .map(|b| b["unions"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        unions("heat"),
        json!([{"view": "last:<N>d", "max_n": 400}, {"view": "last:<N>w", "max_n": 114}])
    );
    assert_eq!(unions("short"), json!([{"view": "last:<N>d", "max_n": 35}]));
    assert_eq!(unions("latest"), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_union_views_are_refused_with_the_reason() {
    let redis = Redis::start();
    let d = Direct::new(&redis.url(), &unique("bad"), &boards_toml(), now()).await;
    let base = serve(&d, 1_000).await;
    for (path, status, words) in [
        ("heat/last:0d/top", 400, "last:<N><unit>"),
        ("heat/last:7x/top", 400, "last:<N><unit>"),
        ("heat/last:07d/top", 400, "last:<N><unit>"),
        ("heat/last:401d/top", 400, "at most last:400d"),
        ("short/last:36d/top", 400, "at most last:35d"),
        ("heat/last:2mo/top", 404, "has no view \"last:2mo\""),
        ("latest/last:2d/top", 400, "last value"),
        ("heat/last:3d/top?period=2026-02-30", 400, "period"),
        ("heat/last:3d/members/nobody", 404, "nobody"),
        ("per_game/last:3d/top", 400, "scope"),
    ] {
        let (got, body) = get_json(&format!("{base}/v1/boards/{path}")).await;
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(got, status, "{path}: {body}");
        assert!(error.contains(words), "{path}: {error}");
        if status == 400 && !path.contains("period=") && !path.contains("per_game") {
            assert!(error.contains("view"), "{path}: {error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_is_computed_once_per_ttl_and_once_for_concurrent_readers() {
    let redis = Redis::start();
    let prefix = unique("ca");
    let evs = events();
    let d = applied(&redis.url(), &prefix, &evs, now()).await;
    let ttl = 2_000;
    let r = reader(&d, ttl);
    let q = |view: &str| query("heat", view);
    let want = reference(&evs, date(2026, 10, 30), date(2026, 11, 5), "sum", None);
    let before = redis.calls("zunionstore");
    let first = r.top(&q("last:7d"), 0, 1000).await.expect("read");
    assert_eq!(first.total, want.len() as u64);
    assert_eq!(redis.calls("zunionstore"), before + 1);
    let key = format!("{prefix}:{{heat}}:u:last:7d:2026-11-05");
    let pttl = |k: &str| -> i64 { redis.cli(&["PTTL", k]).trim().parse().unwrap_or(-3) };
    let marker = format!("{key}:fresh");
    // The result lives the TTL and no longer; it is fresh a grace
    // (a quarter of the TTL, 1 s at most) less: 1.5 s of 2 s.
    let (fresh_for, lives) = (pttl(&marker), pttl(&key));
    assert!(
        fresh_for > 0 && fresh_for <= 1_500,
        "{marker} PTTL {fresh_for}"
    );
    assert!(
        lives > fresh_for + 400 && lives <= ttl,
        "{key} PTTL {lives} (marker {fresh_for})"
    );
    // Within the TTL: pages, members and around reuse the result.
    r.top(&q("last:7d"), 2, 3).await.expect("page");
    r.member(&q("last:7d"), &want[0].0).await.expect("member");
    r.around(&q("last:7d"), &want[2].0, 1)
        .await
        .expect("around");
    assert_eq!(
        redis.calls("zunionstore"),
        before + 1,
        "reused within the TTL"
    );
    // After the TTL: computed afresh, once.
    wait_for(
        Duration::from_secs(10),
        "the result to go stale",
        || async { (redis.cli(&["EXISTS", &marker]).trim() == "0").then_some(()) },
    )
    .await;
    let again = r.top(&q("last:7d"), 0, 1000).await.expect("read");
    assert_eq!(again.entries, first.entries);
    assert_eq!(
        redis.calls("zunionstore"),
        before + 2,
        "a fresh union after the TTL"
    );

    // 32 readers of a cold union at once (all started before any reply
    // arrives): one script call, one ZUNIONSTORE, 32 equal answers.
    let (z0, e0) = (redis.calls("zunionstore"), redis.calls("evalsha"));
    let cold = q("last:5d");
    let reads = (0..32).map(|_| r.top(&cold, 0, 1000));
    let answers = futures::future::join_all(reads).await;
    assert_eq!(
        redis.calls("zunionstore"),
        z0 + 1,
        "one union for 32 readers"
    );
    assert_eq!(
        redis.calls("evalsha"),
        e0 + 1,
        "one script call for 32 readers"
    );
    let want5 = reference(&evs, date(2026, 11, 1), date(2026, 11, 5), "sum", None);
    for a in answers {
        assert_eq!(list_rows(&a.expect("read")), want5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_views_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let evs = events();
    let prefix = unique("cl");
    let d = applied(&cluster.nodes[0].url(), &prefix, &evs, now()).await;
    // Results kept long enough to be listed below.
    let base = serve(&d, 60_000).await;
    for (board, view, from, agg, tie) in [
        ("heat", "last:7d", date(2026, 10, 30), "sum", None),
        (
            "speed",
            "last:3d",
            date(2026, 11, 3),
            "sum",
            Some("earliest"),
        ),
        (
            "best",
            "last:10d",
            date(2026, 10, 27),
            "max",
            Some("earliest"),
        ),
    ] {
        let want = reference(&evs, from, date(2026, 11, 5), agg, tie);
        let (status, body) =
            get_json(&format!("{base}/v1/boards/{board}/{view}/top?limit=1000")).await;
        assert_eq!(status, 200, "{board} {view}: {body}");
        assert_eq!(rows(&body), want, "{board} {view} on the cluster");
    }
    // The results live beside their period keys, under the board's tag.
    let results = cluster.keys(&format!("{prefix}:*:u:*")).await;
    for tag in ["heat", "speed", "best"] {
        assert!(
            results
                .iter()
                .any(|k| k.starts_with(&format!("{prefix}:{{{tag}}}:u:last:"))),
            "{tag}: {results:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankflow_top_reads_a_rolling_view_and_check_shows_the_cache() {
    let redis = Redis::start();
    let prefix = unique("cli");
    let evs = events();
    let _d = applied(&redis.url(), &prefix, &evs, now()).await;
    let config = CliConfig::new(&boards_toml(), &redis.url(), &prefix);
    // `top` uses the machine's clock: the range is named with --period.
    let stdout = config.stdout("top heat last:3d --period 2026-11-05 --limit 20", &[]);
    let got: Vec<(String, i64)> = stdout
        .lines()
        .skip(2)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[1].to_string(), cols[2].parse().expect("score"))
        })
        .collect();
    let want = reference(&evs, date(2026, 11, 3), date(2026, 11, 5), "sum", None);
    assert_eq!(got, want, "{stdout}");
    let checked = config.stdout("check", &[("RANKFLOW_HTTP_UNION_CACHE", "250ms")]);
    assert!(checked.contains("union views cached 250ms"), "{checked}");
}

/// `last:24h` and `last:2d` in America/New_York across the fall-back night
/// (2026-11-01 02:00 EDT → 01:00 EST): the 24 hour periods back from
/// 12:00 EST span 25 real hours, since both real 01:xx hours are the one
/// period `T01`. The reference steps back through real hours and collects
/// local hour labels with chrono-tz, independently of rankflow's calendar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_24_hours_span_the_fall_back_night_in_new_york() {
    let ny: Tz = chrono_tz::America::New_York;
    let redis = Redis::start();
    let boards = r#"
[[board]]
name = "ny"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day"]
timezone = "America/New_York"
retention = { hour = "800d", day = "800d" }
"#;
    let hour = 3_600_000;
    let start = chrono::DateTime::parse_from_rfc3339("2026-10-31T00:20:00Z")
        .expect("time")
        .timestamp_millis();
    let now = start + 41 * hour; // 2026-11-01T17:20Z = 12:20 EST
    let evs: Vec<Ev> = (0..42)
        .map(|i| (format!("m{}", i % 5), start + i * hour, 1 + i * 7 % 23))
        .collect();
    let batch: Vec<Value> = evs
        .iter()
        .enumerate()
        .map(|(i, (m, ts, p))| json!({"type": "score", "event_id": format!("n{i}"), "ts": ts, "user_id": m, "game_id": "g", "points": p}))
        .collect();
    let mut d = Direct::new(&redis.url(), &unique("ny"), boards, now).await;
    d.apply(&batch).await;
    let base = serve(&d, 1_000).await;
    let local = |ts: i64, fmt: &str| {
        chrono::DateTime::from_timestamp_millis(ts)
            .expect("ts")
            .with_timezone(&ny)
            .format(fmt)
            .to_string()
    };
    let mut labels = BTreeSet::new();
    let mut t = now;
    while labels.len() < 24 {
        labels.insert(local(t, "%Y-%m-%dT%H"));
        t -= hour;
    }
    let sum_where = |keep: &dyn Fn(i64) -> bool| {
        let mut acc: BTreeMap<String, i64> = BTreeMap::new();
        for (m, ts, p) in &evs {
            if keep(*ts) {
                *acc.entry(m.clone()).or_default() += p;
            }
        }
        let mut rows: Vec<(String, i64)> = acc.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        rows
    };
    let in_hours = |ts: i64| labels.contains(&local(ts, "%Y-%m-%dT%H"));
    // 25 real hours of events, one per hour, in the 24 periods.
    assert_eq!(evs.iter().filter(|e| in_hours(e.1)).count(), 25);
    let (status, body) = get_json(&format!("{base}/v1/boards/ny/last:24h/top?limit=100")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["period"], "2026-11-01T12");
    assert_eq!(rows(&body), sum_where(&in_hours), "last:24h");
    let days = ["2026-10-31", "2026-11-01"];
    let in_days = |ts: i64| days.contains(&local(ts, "%Y-%m-%d").as_str());
    let (_, body) = get_json(&format!("{base}/v1/boards/ny/last:2d/top?limit=100")).await;
    assert_eq!(rows(&body), sum_where(&in_days), "last:2d");
}
