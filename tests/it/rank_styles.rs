//! Rank styles and lists of members (docs/http-api.md, issue 11 points 4 and 5)
//! against a real redis-server and a private PostgreSQL, through the HTTP
//! API: `rank=ordinal|competition|dense` on `top` pages (ties across a page
//! boundary), `members/{m}`, `around/{m}` and member lists, for a plain
//! board, a tie-break board (equal values tied whatever their times) and an
//! ascending (`min`) board; every answer equals a reference computed here
//! by counting (1 + members with a strictly better value; 1 + distinct
//! better values), live and archived (with the copy-time columns and with
//! the fallback for rows archived before them); member lists with unknown
//! and duplicate ids in one Redis round trip; bad lists refused with 400;
//! a dense walk longer than one script call's budget; and `rankflow top
//! --rank`.
//!
//! No Kafka: live keys are written with plain Redis commands on the
//! documented layout, archived rows with `Archive::copy` (as the archiver
//! does), and the API is served from `api::router` as `rankflow run` wires it.

use crate::common;

use std::collections::BTreeMap;

use common::archive_env::{ArchiveEnv, Member, PLAIN, SPEED, archive_table};
use common::{CliConfig, get_json};
use serde_json::{Value, json};

/// 2026-11-21T12:00:00Z: week 2026-W47 is current.
const NOW: i64 = 1_795_262_400_000;
/// The past week read live, then archived.
const PAST: &str = "2026-W45";
const STYLES: [&str; 3] = ["ordinal", "competition", "dense"];

/// `plain`, `speed` and `fast`, a `min` board (ascending).
fn boards(pg_url: &str) -> String {
    let fast = r#"
[[board]]
name = "fast"
event = "score"
member = "user_id"
score = "points"
aggregate = "min"
periods = ["week"]
archive = ["week"]
"#;
    [archive_table(pg_url).as_str(), PLAIN, SPEED, fast].concat()
}

/// The reference boards in rank order, by the rules of docs/http-api.md stated here:
/// `plain` descending, ties by member bytes descending (ZREVRANGE's order);
/// `speed` descending, ties by the earliest time; `fast` ascending, ties by
/// member bytes ascending (ZRANGE's order).
fn reference(board: &str) -> Vec<Member> {
    // 15 values with ties of every size; ranks 9-12 share 50, so a page of
    // 10 ends and the next begins inside that tie.
    let values = [
        100.0, 95.0, 95.0, 90.0, 80.0, 80.0, 70.0, 60.0, 50.0, 50.0, 50.0, 50.0, 40.0, 30.0, 30.0,
    ];
    let mut v: Vec<Member> = values
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            // Times deliberately out of step with the names.
            let ts = 1_794_000_000_000 + ((i * 7) % 15) as i64 * 1000;
            (format!("m{i:02}"), s, ts)
        })
        .collect();
    match board {
        "plain" => v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0))),
        "speed" => v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.2.cmp(&b.2))),
        "fast" => v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0))),
        other => panic!("no board {other}"),
    }
    v
}

/// Reference rank of the member at 0-based position `i` of `ms` (rank
/// order) in `style`, by counting over the whole board.
fn rank_of(ms: &[Member], i: usize, style: &str, asc: bool) -> u64 {
    let v = ms[i].1;
    let better = |s: f64| if asc { s < v } else { s > v };
    match style {
        "ordinal" => i as u64 + 1,
        "competition" => 1 + ms.iter().filter(|m| better(m.1)).count() as u64,
        "dense" => {
            let mut distinct: Vec<f64> = ms.iter().map(|m| m.1).filter(|&s| better(s)).collect();
            distinct.sort_by(f64::total_cmp);
            distinct.dedup();
            1 + distinct.len() as u64
        }
        other => panic!("no style {other}"),
    }
}

fn entry(ms: &[Member], i: usize, style: &str, asc: bool) -> Value {
    json!({"rank": rank_of(ms, i, style, asc), "member": ms[i].0, "score": ms[i].1 as i64})
}

async fn env() -> ArchiveEnv {
    ArchiveEnv::start("ranks", boards, NOW).await
}

async fn post(url: &str, body: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

/// Every read of one board's past period in every style, checked against
/// the reference; returns the answers without `"source"` for comparing
/// live with archived.
async fn check_reads(env: &ArchiveEnv, board: &str, ms: &[Member], source: &str) -> Vec<Value> {
    let asc = board == "fast";
    let base = format!("/v1/boards/{board}/week");
    let mut answers = Vec::new();
    let mut record = |path: String, mut body: Value| {
        assert_eq!(body["source"], source, "{path}: {body}");
        if let Some(o) = body.as_object_mut() {
            o.remove("source");
        }
        answers.push(json!({"path": path, "body": body}));
    };
    for style in STYLES {
        // Pages of 10: the second starts inside the tie of ranks 9-12.
        for offset in [0usize, 10] {
            let path = format!("{base}/top?period={PAST}&limit=10&offset={offset}&rank={style}");
            let (code, body) = get_json(&env.url(&path)).await;
            assert_eq!(code, 200, "{path}: {body}");
            let want: Vec<Value> = (offset..ms.len().min(offset + 10))
                .map(|i| entry(ms, i, style, asc))
                .collect();
            assert_eq!(body["entries"], json!(want), "{path}");
            assert_eq!(body["total"], ms.len(), "{path}");
            record(path, body);
        }
        for i in [0, 2, 9, 11, 14] {
            let m = &ms[i].0;
            let path = format!("{base}/members/{m}?period={PAST}&rank={style}");
            let (code, body) = get_json(&env.url(&path)).await;
            assert_eq!(code, 200, "{path}: {body}");
            let mut want = entry(ms, i, style, asc);
            want["source"] = json!(source);
            assert_eq!(body, want, "{path}");
            record(path, body);
        }
        // Around the last of the tie: radius 3 reaches back into it.
        let m = &ms[11].0;
        let path = format!("{base}/around/{m}?period={PAST}&radius=3&rank={style}");
        let (code, body) = get_json(&env.url(&path)).await;
        assert_eq!(code, 200, "{path}: {body}");
        let want: Vec<Value> = (8..15).map(|i| entry(ms, i, style, asc)).collect();
        assert_eq!(body["entries"], json!(want), "{path}");
        record(path, body);
        // A friends list: out of order, one repeated, two unknown.
        let ids = [&ms[12].0, "ghost", &ms[3].0, &ms[10].0, &ms[3].0, "nobody"];
        let path = format!(
            "{base}/members?period={PAST}&rank={style}&ids={}",
            ids.join(",")
        );
        let (code, body) = get_json(&env.url(&path)).await;
        assert_eq!(code, 200, "{path}: {body}");
        let want: Vec<Value> = [3, 10, 12]
            .iter()
            .map(|&i| entry(ms, i, style, asc))
            .collect();
        assert_eq!(body["entries"], json!(want), "{path}");
        assert_eq!(body["missing"], json!(["ghost", "nobody"]), "{path}");
        assert_eq!(body["total"], ms.len(), "{path}");
        assert_eq!(body["period"], PAST, "{path}");
        let posted = post(
            &env.url(&format!("{base}/members?period={PAST}&rank={style}")),
            &serde_json::to_string(&ids).expect("json"),
        )
        .await;
        assert_eq!(posted, (200, body.clone()), "POST {path}");
        record(path, body);
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_style_matches_the_reference_live_and_archived() {
    let mut env = env().await;
    for board in ["plain", "speed", "fast"] {
        let ms = reference(board);
        env.write_live(board, None, PAST, &ms).await;
        let live = check_reads(&env, board, &ms, "live").await;
        env.archive(board, None, PAST, &ms).await;
        env.delete_live(board, None, PAST).await;
        let archived = check_reads(&env, board, &ms, "archive").await;
        assert_eq!(live, archived, "{board}");
        // Rows archived before the style columns existed: the reads
        // compute the same ranks over the period.
        env.writer
            .client()
            .execute(
                "UPDATE rankflow_archive SET rank_competition = NULL, rank_dense = NULL
                  WHERE board = $1",
                &[&board],
            )
            .await
            .expect("null the columns");
        let old = check_reads(&env, board, &ms, "archive").await;
        assert_eq!(live, old, "{board} without the copy-time columns");
        println!(
            "{board}: {} reads in 3 styles equal the reference live, archived and archived before 003",
            live.len()
        );
    }
    // The page boundary the documented example is about, spelled out: page 2 of
    // `plain` starts inside the tie of ranks 9-12.
    let (_, body) = get_json(&env.url(&format!(
        "/v1/boards/plain/week/top?period={PAST}&limit=10&offset=10&rank=competition"
    )))
    .await;
    assert_eq!(body["entries"][0]["rank"], 9, "{body}");
    let (_, body) = get_json(&env.url(&format!(
        "/v1/boards/plain/week/top?period={PAST}&limit=10&offset=10&rank=dense"
    )))
    .await;
    assert_eq!(body["entries"][0]["rank"], 7, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_list_is_one_round_trip_and_bad_lists_are_refused() {
    let env = env().await;
    for board in ["plain", "speed"] {
        env.write_live(board, None, "2026-W47", &reference(board))
            .await;
    }
    let ids = "m03,m14,ghost,m03,m07";
    // Warm up: the first read loads the script into Redis.
    let url = |board: &str| {
        env.url(&format!(
            "/v1/boards/{board}/week/members?ids={ids}&rank=dense"
        ))
    };
    let (code, body) = get_json(&url("speed")).await;
    assert_eq!(code, 200, "{body}");
    for board in ["plain", "speed"] {
        let before = env.redis.commandstats();
        let (code, body) = get_json(&url(board)).await;
        let after = env.redis.commandstats();
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["missing"], json!(["ghost"]), "{body}");
        assert_eq!(body["entries"].as_array().map(Vec::len), Some(3), "{body}");
        let delta: BTreeMap<&str, u64> = after
            .iter()
            .map(|(k, v)| (k.as_str(), v - before.get(k).copied().unwrap_or(0)))
            .filter(|(_, d)| *d > 0)
            .collect();
        // One EVALSHA from the client; everything else ran inside it
        // (INFO is this test's own reading of the counters).
        assert_eq!(delta.get("evalsha"), Some(&1), "{board}: {delta:?}");
        let inside = ["zcard", "zscore", "zrevrank", "zrange", "hget", "info"];
        for cmd in delta.keys() {
            assert!(
                *cmd == "evalsha" || inside.contains(cmd),
                "{board}: {cmd} was sent outside the script: {delta:?}"
            );
        }
        // One ZSCORE per distinct id that could be on the board.
        let known = if board == "speed" { 3 } else { 4 };
        assert_eq!(delta.get("zscore"), Some(&known), "{board}: {delta:?}");
        println!("{board}: one round trip, commands {delta:?}");
    }

    let base = env.url("/v1/boards/plain/week/members");
    let too_many: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let at_most: Vec<String> = (0..1000).map(|i| format!("u{i}")).collect();
    let (code, body) = post(&base, &serde_json::to_string(&at_most).expect("json")).await;
    assert_eq!(
        (code, body["missing"].as_array().map(Vec::len)),
        (200, Some(1000))
    );
    for (what, code_body) in [
        (
            "1001 ids",
            post(&base, &serde_json::to_string(&too_many).expect("json")).await,
        ),
        (
            "1001 ids in the query",
            get_json(&format!("{base}?ids={}", too_many.join(","))).await,
        ),
        ("an empty list", post(&base, "[]").await),
        ("a number", post(&base, r#"["a", 1]"#).await),
        ("an object", post(&base, r#"{"ids": ["a"]}"#).await),
        ("bad JSON", post(&base, "[\"a\",").await),
        ("no ids", get_json(&base).await),
        ("empty ids", get_json(&format!("{base}?ids=")).await),
    ] {
        let (code, body) = code_body;
        assert_eq!(code, 400, "{what}: {body}");
        assert_eq!(body["parameter"], "ids", "{what}: {body}");
        assert!(
            body["error"].as_str().unwrap_or("").contains("ids"),
            "{what}: {body}"
        );
    }
    for path in [
        "/v1/boards/plain/week/top?rank=olympic",
        "/v1/boards/plain/week/members/m01?rank=",
        "/v1/boards/plain/week/around/m01?rank=Dense",
        "/v1/boards/plain/week/members?ids=a&rank=first",
    ] {
        let (code, body) = get_json(&env.url(path)).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert_eq!(body["parameter"], "rank", "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dense_walk_longer_than_one_call_continues_where_it_stopped() {
    let env = env().await;
    // 25 000 distinct values and a tie at the bottom: the dense rank of the
    // last page needs 25 script calls' worth of steps (1000 per call).
    let n = 25_000usize;
    let key = env.key("plain", None, "2026-W47");
    let mut c = env.redis.conn().await;
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&key);
        for &i in chunk {
            zadd.arg((n - i) as f64 * 2.0).arg(format!("u{i:05}"));
        }
        let _: usize = zadd.query_async(&mut c).await.expect("ZADD");
    }
    let _: usize = redis::cmd("ZADD")
        .arg(&key)
        .arg(2.0)
        .arg("tied")
        .query_async(&mut c)
        .await
        .expect("ZADD");
    // u24999 and "tied" share the lowest value 2: "u24999" > "tied"? No:
    // "u" (0x75) > "t" (0x74), so u24999 ranks first (descending bytes).
    let path = format!(
        "/v1/boards/plain/week/top?offset={}&limit=5&rank=dense",
        n - 4
    );
    let (code, body) = get_json(&env.url(&path)).await;
    assert_eq!(code, 200, "{body}");
    let ranks: Vec<u64> = body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["rank"].as_u64())
        .collect();
    let n = n as u64;
    assert_eq!(ranks, [n - 3, n - 2, n - 1, n, n], "{body}");
    let (_, body) = get_json(&env.url("/v1/boards/plain/week/members/tied?rank=dense")).await;
    assert_eq!(body["rank"], n, "{body}");
    let (_, body) = get_json(&env.url("/v1/boards/plain/week/members/tied?rank=competition")).await;
    assert_eq!(body["rank"], n, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankflow_top_prints_ranks_in_the_style_asked_for() {
    let env = env().await;
    let ms = reference("speed");
    // The test clock's week, named with --period: live whichever week the
    // machine's clock (which `rankflow top` uses) is in, as its key exists.
    let week = {
        let d = chrono::DateTime::from_timestamp_millis(NOW).expect("now");
        let iso = chrono::Datelike::iso_week(&d);
        format!("{}-W{:02}", iso.year(), iso.week())
    };
    env.write_live("speed", None, &week, &ms).await;
    let config = CliConfig::new(&boards(&env.pg.url()), &env.redis.url(), &env.prefix);
    let top = |rank: &str| format!("top speed week --period {week} --limit 15 --rank {rank}");
    for style in STYLES {
        let stdout = config.stdout(&top(style), &[]);
        let rows: Vec<(u64, String)> = stdout
            .lines()
            .skip(2)
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols[0].parse().expect("rank"), cols[1].to_string())
            })
            .collect();
        let want: Vec<(u64, String)> = (0..ms.len())
            .map(|i| (rank_of(&ms, i, style, false), ms[i].0.clone()))
            .collect();
        assert_eq!(rows, want, "--rank {style}:\n{stdout}");
    }
    let out = config.run(&top("olympic"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("must be one of ordinal, competition, dense"),
        "{stderr}"
    );
}

/// Boards of every kind the dense-rank index serves, written through the
/// real apply script (`Direct`): the plain-sum fast path, a tie-break sum,
/// max, an ascending min, last, sliding windows of a sum and of a max
/// (evictions move and remove members), and one that keeps no index.
const INDEXED: &str = r#"
[[board]]
name = "isum"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
windows = ["10m/1m"]

[[board]]
name = "itie"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
tie_break = "latest"

[[board]]
name = "imax"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
aggregate = "max"
periods = ["all"]
windows = ["10m/1m"]

[[board]]
name = "imin"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
aggregate = "min"
periods = ["all"]

[[board]]
name = "ilast"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
aggregate = "last"
periods = ["all"]

[[board]]
name = "inone"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
dense_ranks = false
"#;

/// (board, view, ascending) of every view of [`INDEXED`].
const INDEXED_VIEWS: [(&str, &str, bool); 8] = [
    ("isum", "all", false),
    ("isum", "win:10m", false),
    ("itie", "all", false),
    ("imax", "all", false),
    ("imax", "win:10m", false),
    ("imin", "all", true),
    ("ilast", "all", false),
    ("inone", "all", false),
];

/// Reference dense ranks of a view's members in board order, counted from
/// its raw sorted set (1 + distinct better scores), with no index.
fn dense_from_raw(raw: &[(String, f64)], asc: bool) -> Vec<u64> {
    let mut scores: Vec<f64> = raw.iter().map(|r| r.1).collect();
    scores.sort_by(|a, b| if asc { a.total_cmp(b) } else { b.total_cmp(a) });
    scores.dedup();
    let mut out: Vec<(f64, u64)> = raw
        .iter()
        .map(|r| {
            let better = scores.iter().take_while(|s| **s != r.1).count();
            (r.1, better as u64 + 1)
        })
        .collect();
    out.sort_by(|a, b| {
        if asc {
            a.0.total_cmp(&b.0)
        } else {
            b.0.total_cmp(&a.0)
        }
    });
    out.into_iter().map(|r| r.1).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dense_index_holds_each_distinct_value_once_through_every_write_path() {
    use common::direct::Direct;
    use rankflow::reader::ranks::RankStyle;

    let redis = common::Redis::start();
    let prefix = common::unique("dx");
    let t0 = NOW;
    let mut direct = Direct::new(&redis.url(), &prefix, INDEXED, t0).await;
    let mut c = redis.conn().await;
    // xorshift, so a failure replays.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut checked = 0;
    for round in 0..12i64 {
        // Two minutes a round: the 10-minute windows evict from round 5 on.
        direct.clock.set(t0 + round * 120_000);
        let now = direct.now();
        let events: Vec<Value> = (0..60)
            .map(|k| {
                json!({"type": "score", "event_id": format!("r{round}e{k}"),
                       "ts": now - next(90) as i64 * 1000,
                       "user_id": format!("u{}", next(25)), "game_id": "g1",
                       // Few values, so members share and leave them.
                       "points": next(9) as i64 - 3})
            })
            .collect();
        direct.apply(&events).await;
        let reader = direct.reader();
        for (board, view, asc) in INDEXED_VIEWS {
            let key = format!("{prefix}:{{{board}}}:{view}");
            let mut zrange = redis::cmd("ZRANGE");
            zrange.arg(&key).arg(0).arg(-1).arg("WITHSCORES");
            if !asc {
                zrange.arg("REV");
            }
            let raw: Vec<(String, f64)> = zrange.query_async(&mut c).await.expect("ZRANGE");
            let index: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(format!("{key}:v"))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .expect("ZRANGE K:v");
            let mut distinct: Vec<f64> = raw.iter().map(|r| r.1).collect();
            distinct.sort_by(f64::total_cmp);
            distinct.dedup();
            if board == "inone" {
                assert!(
                    index.is_empty(),
                    "{key}: dense_ranks = false keeps no index"
                );
            } else {
                let held: Vec<f64> = index.iter().map(|e| e.1).collect();
                assert_eq!(held, distinct, "{key} round {round}: one entry per value");
                let ttl = |k: String| redis::cmd("PEXPIRETIME").arg(k).clone();
                let (kt, vt): (i64, i64) = redis::pipe()
                    .add_command(ttl(key.clone()))
                    .add_command(ttl(format!("{key}:v")))
                    .query_async(&mut c)
                    .await
                    .expect("PEXPIRETIME");
                if !raw.is_empty() {
                    assert_eq!(vt, kt, "{key}: the index expires with its view");
                }
            }
            let q = common::query(board, view);
            let list = reader
                .top_ranked(&q, 0, 1000, RankStyle::Dense)
                .await
                .expect("top");
            let ranks: Vec<u64> = list.entries.iter().map(|e| e.rank).collect();
            assert_eq!(ranks, dense_from_raw(&raw, asc), "{key} round {round}");
            checked += raw.len();
        }
    }
    println!("dense ranks of {checked} members checked against their raw views");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_with_members_before_the_index_never_gets_a_partial_one() {
    use common::direct::Direct;
    use rankflow::reader::ranks::RankStyle;

    let redis = common::Redis::start();
    let prefix = common::unique("dp");
    let mut direct = Direct::new(&redis.url(), &prefix, INDEXED, NOW).await;
    // Written before the upgrade: a view with members and no K:v.
    let key = format!("{prefix}:{{imin}}:all");
    let mut c = redis.conn().await;
    let _: usize = redis::cmd("ZADD")
        .arg(&key)
        .arg(5)
        .arg("old1")
        .arg(7)
        .arg("old2")
        .query_async(&mut c)
        .await
        .expect("ZADD");
    let events: Vec<Value> = [("u1", 5), ("u2", 6), ("u3", 9), ("old2", 1)]
        .iter()
        .enumerate()
        .map(|(i, (u, p))| {
            json!({"type": "score", "event_id": format!("p{i}"), "ts": NOW - 1000,
                   "user_id": u, "game_id": "g1", "points": p})
        })
        .collect();
    direct.apply(&events).await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("{key}:v"))
        .query_async(&mut c)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0, "no index is started under existing members");
    // Ascending min board: old2 1, old1 5, u1 5, u2 6, u3 9 (by hand).
    let q = common::query("imin", "all");
    let list = direct
        .reader()
        .top_ranked(&q, 0, 10, RankStyle::Dense)
        .await
        .expect("top");
    let got: Vec<(String, u64)> = list
        .entries
        .iter()
        .map(|e| (e.member.clone(), e.rank))
        .collect();
    let want = [("old2", 1), ("old1", 2), ("u1", 2), ("u2", 3), ("u3", 4)];
    let want: Vec<(String, u64)> = want.iter().map(|(m, r)| (m.to_string(), *r)).collect();
    assert_eq!(got, want, "read by the walk");
}

/// A board that turns `dense_ranks` off: each consumer drops the index of
/// a view the first time it writes it (a stale index is never left), and
/// not again in every call after (issue 32: index upkeep is paid per new
/// thing, not per batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_that_turns_its_index_off_drops_it_once_per_consumer() {
    use common::direct::Direct;

    let redis = common::Redis::start();
    let prefix = common::unique("dd");
    let event = |i: usize, p: i64| {
        json!({"type": "score", "event_id": format!("d{i}"), "ts": NOW - 1000,
               "user_id": format!("u{}", i % 7), "game_id": "g1", "points": p})
    };
    let batch =
        |from: usize| -> Vec<Value> { (from..from + 20).map(|i| event(i, i as i64)).collect() };
    let mut on = Direct::new(&redis.url(), &prefix, INDEXED, NOW).await;
    on.apply(&batch(0)).await;
    let index = format!("{prefix}:{{isum}}:all:v");
    assert_eq!(
        redis.cli(&["EXISTS", &index]).trim(),
        "1",
        "the index is kept"
    );
    let off_boards = INDEXED.replacen("dense_ranks = true", "dense_ranks = false", 1);
    let mut off = Direct::new(&redis.url(), &prefix, &off_boards, NOW).await;
    off.take_over(&on);
    let unlinks = |r: &common::Redis| r.commandstats().get("unlink").copied().unwrap_or(0);
    let before = unlinks(&redis);
    off.apply(&batch(100)).await;
    let first = unlinks(&redis) - before;
    assert_eq!(
        redis.cli(&["EXISTS", &index]).trim(),
        "0",
        "the first write drops it"
    );
    // Every board takes the events: isum's two views (all, win:10m) and
    // inone's one (`dense_ranks = false` from the start) are the views
    // without an index, one drop each.
    assert_eq!(
        first, 3,
        "one UNLINK per view without an index, in the first call"
    );
    for round in 0..3 {
        let before = unlinks(&redis);
        off.apply(&batch(200 + 100 * round)).await;
        assert_eq!(
            unlinks(&redis) - before,
            0,
            "round {round}: no drop in later calls"
        );
    }
    println!(
        "the index was dropped by the consumer's first write ({first} UNLINKs), then none in 3 calls"
    );
}

/// Commands served between two [`common::Redis::commandstats`] snapshots,
/// `evalsha` and `info` (the snapshots themselves) left out.
fn served(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .filter(|(k, _)| !["evalsha", "info", "script|load", "script"].contains(&k.as_str()))
        .map(|(k, v)| v - before.get(k).copied().unwrap_or(0))
        .sum()
}

/// Writes a plain board of `n` members with distinct values 1..=n and its
/// dense index, in the documented layout (K and K:v).
async fn distinct_board(redis: &common::Redis, key: &str, n: usize) {
    let mut c = redis.conn().await;
    for chunk in (1..=n).collect::<Vec<_>>().chunks(10_000) {
        let mut k = redis::cmd("ZADD");
        let mut v = redis::cmd("ZADD");
        k.arg(key);
        v.arg(format!("{key}:v"));
        for &i in chunk {
            k.arg(i as f64).arg(format!("m{i:07}"));
            v.arg(i as f64).arg(i.to_string());
        }
        let (_, _): (usize, usize) = redis::pipe()
            .add_command(k)
            .add_command(v)
            .query_async(&mut c)
            .await
            .expect("ZADD");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dense_page_at_the_bottom_of_200_000_values_costs_what_one_at_the_top_does() {
    use common::direct::Direct;
    use rankflow::reader::ranks::RankStyle;

    let redis = common::Redis::start();
    let prefix = common::unique("dl");
    let direct = Direct::new(&redis.url(), &prefix, INDEXED, NOW).await;
    let n = 200_000usize;
    distinct_board(&redis, &format!("{prefix}:{{isum}}:all"), n).await;
    let reader = direct.reader();
    let q = common::query("isum", "all");
    let mut cost = Vec::new();
    for offset in [0, n / 2, n - 10] {
        // Warm (script loaded), then measured.
        reader
            .top_ranked(&q, offset, 10, RankStyle::Dense)
            .await
            .expect("top");
        let before = redis.commandstats();
        let started = std::time::Instant::now();
        let page = reader
            .top_ranked(&q, offset, 10, RankStyle::Dense)
            .await
            .expect("top");
        let took = started.elapsed();
        let after = redis.commandstats();
        // Values n, n-1, ... from the top, all distinct: dense = ordinal.
        let ranks: Vec<u64> = page.entries.iter().map(|e| e.rank).collect();
        let want: Vec<u64> = (offset as u64 + 1..=offset as u64 + 10).collect();
        assert_eq!(ranks, want, "dense page at {offset}");
        let scripts = after["evalsha"] - before["evalsha"];
        cost.push((offset, served(&before, &after), scripts, took));
    }
    println!(
        "dense pages of 10 on {n} distinct values (offset, commands inside the script, script calls, wall time): {cost:?}"
    );
    let top = cost[0].1;
    for (offset, commands, scripts, _) in &cost {
        assert_eq!(*scripts, 1, "one script call at offset {offset}");
        assert!(
            *commands <= top + 1,
            "offset {offset}: {commands} commands, top page {top}"
        );
    }
}

/// Measurement, not a check (run with `--ignored --nocapture`): Redis
/// commands and CPU per update of a plain sum with and without the dense
/// index, and MEMORY USAGE of an index of 100 000 distinct values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_the_dense_index_write_cost_and_memory() {
    use common::direct::Direct;
    let cpu = |redis: &common::Redis| -> f64 {
        redis
            .cli(&["INFO", "cpu"])
            .lines()
            .filter_map(|l| {
                let (k, v) = l.trim().split_once(':')?;
                ["used_cpu_sys", "used_cpu_user"]
                    .contains(&k)
                    .then(|| v.parse::<f64>().ok())?
            })
            .sum()
    };
    let boards = r#"
[[board]]
name = "withidx"
dense_ranks = true
event = "score"
member = "user_id"
score = "points"
periods = ["all"]

[[board]]
name = "noidx"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
dense_ranks = false
"#;
    for board in ["noidx", "withidx"] {
        let redis = common::Redis::start();
        let one = boards
            .split("[[board]]")
            .find(|b| b.contains(&format!("\"{board}\"")))
            .map(|b| format!("[[board]]{b}"))
            .expect("board");
        let mut direct = Direct::new(&redis.url(), &common::unique("wc"), &one, NOW).await;
        let mut x = 88172645463325252u64;
        let (mut updates, mut commands, mut cpu_s) = (0u64, 0u64, 0.0);
        for round in 0..40 {
            let events: Vec<Value> = (0..2500)
                .map(|k| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    json!({"type": "score", "event_id": format!("r{round}e{k}"),
                           "ts": NOW - 1000, "user_id": format!("u{}", x % 50_000),
                           "game_id": "g", "points": (x >> 20) % 1000 + 1})
                })
                .collect();
            let before = redis.commandstats();
            let c0 = cpu(&redis);
            let (_, report) = direct.apply(&events).await;
            cpu_s += cpu(&redis) - c0;
            commands += served(&before, &redis.commandstats());
            updates += report.boards.iter().map(|b| b.applied).sum::<u64>();
        }
        println!(
            "{board}: {updates} updates, {:.2} Redis commands per update, {:.2} µs Redis CPU per update",
            commands as f64 / updates as f64,
            cpu_s * 1e6 / updates as f64
        );
    }
    let redis = common::Redis::start();
    distinct_board(&redis, "m:{b}:all", 100_000).await;
    let bytes = redis.cli(&["MEMORY", "USAGE", "m:{b}:all:v", "SAMPLES", "0"]);
    let bytes = bytes.trim();
    let view = redis.cli(&["MEMORY", "USAGE", "m:{b}:all", "SAMPLES", "0"]);
    let view = view.trim();
    println!(
        "MEMORY USAGE of K:v with 100000 distinct values: {bytes} bytes (the view K itself: {view})"
    );
}
