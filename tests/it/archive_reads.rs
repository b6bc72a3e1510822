//! Reads of past periods (docs/history.md, issue 10) against a real redis-server
//! and a private PostgreSQL: the HTTP API answers a past period from Redis
//! while its key exists and from the archive once it is gone, with the
//! same JSON but `"source"`, both equal to a hand-made reference; a past
//! period in neither is 404, the current one empty is 200; the periods list
//! merges live and archived periods; an archive outage is a JSON 503; the
//! archive's statements use its indexes and read scores back exactly; and
//! `rankflow top --period` prints an archived period.
//!
//! No Kafka: live keys are written with plain Redis commands on the
//! documented layout, archived rows with `Archive::copy` (as the archiver
//! does), and the API is served from `api::router` over a `Reader` with the
//! archive handle, as `rankflow run` wires it.

use crate::common;

use common::archive_env::{
    ArchiveEnv, Member, SPEED, archive_table, assert_reads_use_indexes, check_reads, week_bounds,
    week_copy, week_key,
};
use common::postgres::Postgres;
use common::*;
use futures::stream;
use rankflow::archive::copy::{Archive, PeriodKey, Standing};
use rankflow::archive::read::ArchiveReader;
use rankflow::archive::schema;
use serde_json::{Value, json};

/// 2026-11-21T12:00:00Z: week 2026-W47 is current.
const NOW: i64 = 1_795_262_400_000;
/// The past week read live, then archived.
const PAST: &str = "2026-W45";

fn boards(pg_url: &str) -> String {
    format!(
        r#"{}
[[board]]
name = "plain"
event = "score"
member = "user_id"
score = "points"
periods = ["week", "all"]
archive = ["week"]

[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["week"]
archive = ["week"]
{SPEED}"#,
        archive_table(pg_url)
    )
}

/// The reference boards, ranked by hand-stated rules: score descending;
/// among equal scores, for `plain` and `fans` Redis's order of members
/// (bytes, descending, as ZREVRANGE gives), for `speed` the earliest time.
fn reference(board: &str, scope: Option<&str>) -> Vec<Member> {
    let mut v: Vec<Member> = match (board, scope) {
        ("plain", _) => {
            let mut v: Vec<Member> = (0..23)
                .map(|i| (format!("p{i:02}"), ((i * 7) % 23) as f64 + 0.5, 0))
                .collect();
            v.push(("tenth".into(), 0.1, 0));
            v.push(("big".into(), 9_007_199_254_740_992.0, 0));
            // Ties p17 (17 × 7 mod 23 = 4): "tie_a" > "p17", so it ranks first.
            v.push(("tie_a".into(), 4.5, 0));
            v.push(("neg".into(), -2.25, 0));
            v
        }
        ("fans", Some(s)) => (0..17)
            .map(|i| (format!("{s}_f{i:02}"), ((i * 5) % 17 + 1) as f64, 0))
            .collect(),
        ("speed", _) => (0..20)
            .map(|i| {
                // Five scores, four members each, reached at distinct times.
                (
                    format!("r{i:02}"),
                    (i % 5) as f64 * 10.0,
                    1_794_000_000_000 + ((i * 7919) % 20) as i64 * 1000,
                )
            })
            .collect(),
        other => panic!("no reference for {other:?}"),
    };
    v.sort_by(|a, b| {
        b.1.total_cmp(&a.1).then_with(|| {
            if board == "speed" {
                a.2.cmp(&b.2)
            } else {
                b.0.cmp(&a.0)
            }
        })
    });
    v
}

fn score_json(s: f64) -> Value {
    if s.fract() == 0.0 && s.abs() <= 9_007_199_254_740_992.0 {
        json!(s as i64)
    } else {
        json!(s)
    }
}

fn entry(rank: usize, m: &Member) -> Value {
    json!({"rank": rank, "member": m.0, "score": score_json(m.1)})
}

async fn env() -> ArchiveEnv {
    ArchiveEnv::start("reads", boards, NOW).await
}

/// Status, `Retry-After` and JSON body (Null if not JSON).
async fn get(url: &str) -> (u16, Option<String>, Value) {
    let resp = reqwest::get(url).await.expect("HTTP request");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = resp.text().await.expect("body");
    (
        status,
        retry,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// The reads compared live and archived, with the answers the reference
/// gives for each (source left out): (path, status, body).
fn expected_reads(board: &str, scope: Option<&str>, ms: &[Member]) -> Vec<(String, u16, Value)> {
    let base = format!("/v1/boards/{board}/week");
    let q = match scope {
        Some(s) => format!("period={PAST}&scope={s}"),
        None => format!("period={PAST}"),
    };
    let list = |entries: Vec<Value>| {
        json!({"board": board, "view": "week", "period": PAST, "scope": scope,
               "total": ms.len(), "entries": entries})
    };
    let mut out = Vec::new();
    for (offset, limit) in [(0, 7), (7, 7), (14, 7), (21, 7), (28, 7), (3, 0), (0, 1000)] {
        let entries = ms
            .iter()
            .enumerate()
            .skip(offset)
            .take(limit)
            .map(|(i, m)| entry(i + 1, m))
            .collect();
        let path = format!("{base}/top?{q}&offset={offset}&limit={limit}");
        out.push((path, 200, list(entries)));
    }
    let last = ms.len() - 1;
    for i in [0, ms.len() / 2, last] {
        let path = format!("{base}/members/{}?{q}", ms[i].0);
        out.push((path, 200, entry(i + 1, &ms[i])));
        for radius in [0, 2, 3] {
            let (from, to) = (i.saturating_sub(radius), (i + radius).min(last));
            let entries = (from..=to).map(|j| entry(j + 1, &ms[j])).collect();
            let path = format!("{base}/around/{}?{q}&radius={radius}", ms[i].0);
            out.push((path, 200, list(entries)));
        }
    }
    for path in [
        format!("{base}/members/nobody?{q}"),
        format!("{base}/around/nobody?{q}"),
    ] {
        let error = json!({"error": "member \"nobody\" is not on this board"});
        out.push((path, 404, error));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_period_reads_the_same_live_and_archived() {
    let mut env = env().await;
    let instances = [
        ("plain", None),
        ("fans", Some("s1")),
        ("fans", Some("s2")),
        ("speed", None),
    ];
    let mut reads = 0;
    for (board, scope) in instances {
        let ms = reference(board, scope);
        env.write_live(board, scope, PAST, &ms).await;
        let expected = expected_reads(board, scope, &ms);
        let live = check_reads(&env.base, &expected, "live").await;
        // The archiver's work: copy the final standings, then the keys go.
        env.archive(board, scope, PAST, &ms).await;
        env.delete_live(board, scope, PAST).await;
        let archived = check_reads(&env.base, &expected, "archive").await;
        assert_eq!(live, archived, "{board} {scope:?}");
        reads += expected.len();
    }
    // The reference's own edge cases are in the answers as written.
    let (_, _, top) =
        get(&env.url(&format!("/v1/boards/plain/week/top?period={PAST}&limit=1"))).await;
    assert_eq!(top["entries"][0]["score"].as_u64(), Some(1 << 53), "{top}");
    let (_, _, tenth) = get(&env.url(&format!(
        "/v1/boards/plain/week/members/tenth?period={PAST}"
    )))
    .await;
    assert_eq!(tenth["score"].as_f64(), Some(0.1), "{tenth}");

    // A past period that never had events, and the current one still empty.
    let (code, _, body) = get(&env.url("/v1/boards/plain/week/top?period=2026-W40")).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(
        body["error"], "period 2026-W40 of board plain had no events",
        "{body}"
    );
    let (code, _, body) =
        get(&env.url("/v1/boards/fans/week/members/x?period=2026-W40&scope=s1")).await;
    assert_eq!(code, 404, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("had no events"),
        "{body}"
    );
    for path in [
        "/v1/boards/plain/week/top?period=2026-W47",
        "/v1/boards/plain/week/top",
    ] {
        let (code, _, body) = get(&env.url(path)).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert_eq!(body["total"], 0, "{body}");
        assert_eq!(body["entries"], json!([]), "{body}");
        assert_eq!(body["source"], "live", "{body}");
    }
    println!(
        "verified: {reads} reads (top pages, members, around, misses) of 4 board instances equal the reference live and archived; 404 for a period without events, 200 empty for the current one"
    );
}

/// (period, source, members) of a periods page.
fn listed(body: &Value) -> Vec<(String, String, u64)> {
    body["periods"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|p| {
            let (start, end) = week_bounds(p["period"].as_str().expect("period"));
            let rfc = |ms: i64| {
                chrono::DateTime::from_timestamp_millis(ms)
                    .expect("time")
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            };
            assert_eq!(p["start"], rfc(start), "{p}");
            assert_eq!(p["end"], rfc(end), "{p}");
            (
                p["period"].as_str().expect("period").to_string(),
                p["source"].as_str().expect("source").to_string(),
                p["members"].as_u64().expect("members"),
            )
        })
        .collect()
}

fn members(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| (format!("m{i}"), (n - i) as f64, 0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periods_merge_live_and_archived_newest_first_and_an_outage_is_a_503() {
    let mut env = env().await;
    // Live: the current week, the last one (also archived, with other
    // numbers: the live copy is what reads answer, so it is listed), and a
    // closed week kept past its retention (10 weeks) because it waits for
    // the archiver in the due set. Archived only: W45 and W44.
    env.write_live("plain", None, "2026-W47", &members(1)).await;
    env.write_live("plain", None, "2026-W46", &members(2)).await;
    env.archive("plain", None, "2026-W46", &members(9)).await;
    env.archive("plain", None, "2026-W45", &members(3)).await;
    env.archive("plain", None, "2026-W44", &members(4)).await;
    env.write_live("plain", None, "2026-W30", &members(5)).await;
    let mut c = env.redis.conn().await;
    let _: usize = redis::cmd("ZADD")
        .arg(format!("{}:archive:due", env.prefix))
        .arg(week_bounds("2026-W30").1 + 600_000)
        .arg("{plain}:week:2026-W30")
        .query_async(&mut c)
        .await
        .expect("ZADD due");
    // Another scope's period must not show up in s1's list.
    env.write_live("fans", Some("s2"), "2026-W46", &members(2))
        .await;
    env.archive("fans", Some("s1"), "2026-W44", &members(6))
        .await;

    let want: Vec<(String, String, u64)> = [
        ("2026-W47", "live", 1),
        ("2026-W46", "live", 2),
        ("2026-W45", "archive", 3),
        ("2026-W44", "archive", 4),
        ("2026-W30", "live", 5),
    ]
    .iter()
    .map(|(p, s, n)| (p.to_string(), s.to_string(), *n))
    .collect();
    let mut got = Vec::new();
    for offset in [0, 2, 4] {
        let path = format!("/v1/boards/plain/week/periods?limit=2&offset={offset}");
        let (code, _, body) = get(&env.url(&path)).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert_eq!(body["total"], 5, "{body}");
        assert_eq!(
            (&body["board"], &body["view"], &body["scope"]),
            (&json!("plain"), &json!("week"), &Value::Null)
        );
        got.extend(listed(&body));
    }
    assert_eq!(got, want);
    let (_, _, all) = get(&env.url("/v1/boards/plain/week/periods")).await;
    assert_eq!(listed(&all), want);
    let (_, _, beyond) = get(&env.url("/v1/boards/plain/week/periods?offset=9")).await;
    assert_eq!(
        (beyond["total"].as_u64(), listed(&beyond)),
        (Some(5), vec![])
    );
    let (_, _, s1) = get(&env.url("/v1/boards/fans/week/periods?scope=s1")).await;
    assert_eq!(
        listed(&s1),
        vec![("2026-W44".to_string(), "archive".to_string(), 6)]
    );
    assert_eq!(s1["scope"], "s1");

    // Bad listings.
    for (path, status, says) in [
        (
            "/v1/boards/plain/all/periods",
            400,
            "hour, day, week, month and year",
        ),
        ("/v1/boards/fans/week/periods", 400, "scope"),
        ("/v1/boards/plain/week/periods?limit=1001", 400, "limit"),
        ("/v1/boards/plain/week/periods?offset=-1", 400, "offset"),
        (
            "/v1/boards/plain/week/periods?period=2026-W47",
            400,
            "period",
        ),
        ("/v1/boards/nope/week/periods", 404, "nope"),
        ("/v1/boards/plain/day/periods", 404, "day"),
    ] {
        let (code, _, body) = get(&env.url(path)).await;
        assert_eq!(code, status, "{path}: {body}");
        let error = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: {body}"));
        assert!(error.contains(says), "{path}: {error}");
    }

    // PostgreSQL stops: archived reads and listings are JSON 503s with
    // Retry-After; live reads go on.
    env.pg.stop();
    for path in [
        "/v1/boards/plain/week/top?period=2026-W45",
        "/v1/boards/plain/week/members/m0?period=2026-W44",
        "/v1/boards/plain/week/around/m0?period=2026-W44",
        "/v1/boards/plain/week/periods",
    ] {
        let (code, retry, body) = get(&env.url(path)).await;
        assert_eq!(code, 503, "{path}: {body}");
        assert!(retry.is_some(), "{path}: no Retry-After");
        let error = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: {body}"));
        assert!(error.contains("archive"), "{path}: {error}");
    }
    let (code, _, body) = get(&env.url("/v1/boards/plain/week/top?period=2026-W46")).await;
    assert_eq!((code, &body["source"]), (200, &json!("live")), "{body}");

    // It comes back: the reader reconnects by itself.
    env.pg.start_server();
    let body = wait_for(
        std::time::Duration::from_secs(20),
        "archived reads after PostgreSQL restarts",
        || async {
            let (code, _, body) = get(&env.url("/v1/boards/plain/week/top?period=2026-W45")).await;
            (code == 200).then_some(body)
        },
    )
    .await;
    assert_eq!(
        (&body["source"], &body["total"]),
        (&json!("archive"), &json!(3))
    );
    println!(
        "verified: 5 periods (3 live incl. one kept for the archiver, 2 archived) listed newest first over 3 pages; 7 bad listings refused; PostgreSQL down → 4 JSON 503s with Retry-After while live reads answer; reconnected after restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_reads_use_the_indexes_and_read_scores_back_exactly() {
    let pg = Postgres::start();
    let mut writer = Archive::connect(&pg.url()).await.expect("connect");
    schema::migrate(writer.client()).await.expect("migrate");
    // Scores that print long or sit at the edge of exactness.
    let exact = [
        0.1,
        0.30000000000000004,
        9_007_199_254_740_992.0,
        -9_007_199_254_740_992.0,
        4_503_599_627_370_495.5,
        123_456.789,
        1e-300,
        5e-324,
        1.797_693_134_862_315_7e308,
        -2.5e-7,
        0.0,
    ];
    // Several large periods, so the planner has a real choice.
    for w in 40..44 {
        let key = week_key("b", None, &format!("2026-W{w}"));
        let rows: Vec<Standing> = (0..30_000)
            .map(|i| Standing {
                member: format!("m{i}"),
                score: exact.get(i).copied().unwrap_or((30_000 - i) as f64),
            })
            .collect();
        writer
            .copy(week_copy(&key), stream::iter(vec![Ok(rows)]))
            .await
            .expect("copy");
    }
    let key = week_key("b", None, "2026-W42");
    let ids = ["m777", "m3", "nobody"].map(String::from);
    assert_reads_use_indexes(writer.client(), &key, "m777", &ids).await;

    let reader = ArchiveReader::new(&pg.url()).expect("url");
    let page = reader
        .page(&key, 1, exact.len() as u64)
        .await
        .expect("page")
        .expect("archived");
    assert_eq!(page.period.members, 30_000);
    assert_eq!(page.period.start_ms, week_bounds(&key.period).0);
    assert_eq!(page.period.end_ms, week_bounds(&key.period).1);
    for (i, (row, want)) in page.rows.iter().zip(exact).enumerate() {
        assert_eq!(row.rank, i as u64 + 1);
        assert_eq!(row.member, format!("m{i}"));
        assert_eq!(
            row.score.to_bits(),
            want.to_bits(),
            "{want} read as {}",
            row.score
        );
    }
    assert_eq!(page.rows.len(), exact.len());
    let around = reader
        .around(&key, "m29999", 2)
        .await
        .expect("around")
        .expect("archived");
    let ranks: Vec<u64> = around.rows.iter().map(|r| r.rank).collect();
    assert_eq!((around.found, ranks), (true, vec![29_998, 29_999, 30_000]));
    let missing = reader.member(&key, "nobody").await.expect("member");
    assert_eq!(missing.map(|m| (m.found, m.rows.len())), Some((false, 0)));
    let other = PeriodKey {
        period: "2026-W01".into(),
        ..key
    };
    assert_eq!(reader.page(&other, 1, 10).await.expect("page"), None);
    println!(
        "verified: page, member and around plans use the primary key and member index (4 × 30,000 rows, no scan of the rows table); {} edge-case scores read back bit for bit",
        exact.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankflow_top_prints_an_archived_period() {
    let mut env = env().await;
    let ms = reference("plain", None);
    // A week long past by any clock this test runs on.
    env.archive("plain", None, "2024-W05", &ms).await;
    let config = CliConfig::new(&boards(&env.pg.url()), &env.redis.url(), &env.prefix);
    let stdout = config.stdout("top plain week --period 2024-W05 --limit 5", &[]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("plain week 2024-W05  ({} members, archive)", ms.len()).as_str()),
        "{stdout}"
    );
    assert_eq!(lines.len(), 2 + 5, "{stdout}");
    for (i, (line, m)) in lines[2..].iter().zip(&ms).enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let score = score_json(m.1).to_string();
        assert_eq!(
            cols,
            [(i + 1).to_string().as_str(), &m.0, &score],
            "{stdout}"
        );
    }
    // A week that never had events is an error naming it.
    let out = config.run("top plain week --period 2024-W06", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("period 2024-W06 of board plain had no events"),
        "{stderr}"
    );
    println!(
        "verified: rankflow top --period prints the archived week 2024-W05 (top 5 of {}) and refuses a week without events",
        ms.len()
    );
}
