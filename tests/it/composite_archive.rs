//! Composite boards in the archive (docs/history.md with §8.2, issue 11) against a
//! real redis-server and a private PostgreSQL:
//! - a 3-field board (sum desc, min asc, last asc; missing fields, values
//!   at ±2^53, events out of order over two batches) is applied through
//!   the rules, the batch and the Lua script, archived by the archiver's
//!   own steps, and every read (pages cut inside tie groups, each member,
//!   around, lists of members) answers the same live and archived, equal
//!   to a table worked out by hand from the events; the archived
//!   competition and dense ranks (tied = every field equal) equal the
//!   table too, also when computed over the period for rows without
//!   them; an ascending board with a tie-break (a missing first field is
//!   +inf) reads the same live and archived, its styled ranks as by hand;
//! - the period-closed message of a composite period, through a real
//!   broker, carries the fields;
//! - the archive's statements on composite periods use its indexes, and
//!   fields at ±2^53 and the infinite score of a missing first field read
//!   back exactly.
//!
//! Live composite reads refuse rank styles other than ordinal and lists of
//! members until the dense-rank piece of issue 11 lands, so those are
//! checked on the archive's reader directly, against the same table.

use crate::common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::archive_env::{
    assert_reads_use_indexes, check_reads, week_bounds, week_copy, week_key,
};
use common::direct::Direct;
use common::postgres::Postgres;
use common::*;
use futures::stream;
use rankflow::archive::copy::{Archive, Copied, PeriodKey, Row};
use rankflow::archive::due::{self, DueItem};
use rankflow::archive::read::{ArchiveReader, ArchivedRow};
use rankflow::archive::runner::Outcome;
use rankflow::archive::schema;
use rankflow::board::composite::FieldValues;
use rankflow::board::keys;
use rankflow::clock::SharedClock;
use rankflow::config::Config;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use serde_json::{Value, json};

/// 2026-11-21T12:00:00Z: week 2026-W47 is current.
const NOW: i64 = 1_795_262_400_000;
/// The past week the board is written in, read live, then archived.
const PAST: &str = "2026-W45";
const M: i64 = 1 << 53;

/// The board, archived to `pg_url`; `extra` goes into `[archive]`.
fn boards(pg_url: &str, extra: &str) -> String {
    format!(
        r#"
[archive]
url = "{pg_url}"
grace = "10m"
{extra}

[[board]]
name = "stages"
event = "score"
member = "user_id"
periods = ["week"]
archive = ["week"]
order_by = [
  {{ field = "levels", score = "lv", filter = "has(lv)", aggregate = "sum", order = "desc" }},
  {{ field = "revives", score = "rv", filter = "has(rv)", aggregate = "min", order = "asc" }},
  {{ field = "code", score = "cd", filter = "has(cd)", aggregate = "last", order = "asc" }},
]

[[board]]
name = "speedrun"
event = "play"
member = "user_id"
periods = ["week"]
archive = ["week"]
tie_break = "earliest"
order_by = [
  {{ field = "time", score = "tm", filter = "has(tm)", aggregate = "min", order = "asc" }},
  {{ field = "deaths", score = "dt", filter = "has(dt)", aggregate = "sum", order = "desc" }},
]
"#
    )
}

/// One row of the hand-made table: member, the three fields, and its
/// ordinal, competition and dense ranks.
type Expected = (&'static str, [Option<i64>; 3], u64, u64, u64);

/// The final standings, worked out by hand from [`batches`] (not by the
/// code under test): levels descending, then revives ascending, then code
/// ascending, a missing field after every value, then member bytes
/// descending (the order `ZREVRANGE` gives equal entries). Tied = all
/// three fields equal: bob/ann, gus/fay, max/kim.
const TABLE: [Expected; 13] = [
    ("bob", [Some(M), Some(-M), Some(5)], 1, 1, 1),
    ("ann", [Some(M), Some(-M), Some(5)], 2, 1, 1),
    ("cat", [Some(M), Some(-M), Some(6)], 3, 3, 2),
    ("dan", [Some(M), Some(0), Some(-M)], 4, 4, 3),
    ("eve", [Some(M), None, Some(1)], 5, 5, 4),
    ("hal", [Some(3), Some(2), Some(M)], 6, 6, 5),
    ("gus", [Some(3), Some(2), None], 7, 7, 6),
    ("fay", [Some(3), Some(2), None], 8, 7, 6),
    ("ivy", [Some(0), Some(1), Some(0)], 9, 9, 7),
    ("jon", [Some(-M), Some(M), Some(-1)], 10, 10, 8),
    ("max", [None, Some(7), Some(2)], 11, 11, 9),
    ("kim", [None, Some(7), Some(2)], 12, 11, 9),
    ("ned", [None, None, Some(9)], 13, 13, 10),
];

/// A row of a hand-made table of `N` fields: member, fields, ordinal,
/// competition and dense ranks.
type Ranked<const N: usize> = (&'static str, [Option<i64>; N], u64, u64, u64);

/// The ascending board with a tie-break, by hand: time ascending (a
/// missing time last: +inf in Redis), deaths descending, then the earliest
/// time the tuple was reached, then member bytes ascending (`ZRANGE`).
/// Tied (competition, dense) = both fields equal, whatever the tie time.
const SPEEDRUN: [Ranked<2>; 6] = [
    ("p3", [Some(30), Some(5)], 1, 1, 1),
    ("p1", [Some(30), Some(2)], 2, 2, 2),
    ("p2", [Some(30), Some(2)], 3, 2, 2),
    ("p4", [Some(M), None], 4, 4, 3),
    ("p5", [None, Some(7)], 5, 5, 4),
    ("p6", [None, Some(7)], 6, 5, 4),
];

/// The events, in two batches; times are seconds after Wednesday of the
/// past week, out of order so that `last` must follow event time, sums
/// reach 2^53 exactly across batches.
fn batches() -> [Vec<Value>; 2] {
    let t0 = week_bounds(PAST).0 + 2 * 86_400_000;
    let mut n = 0;
    let mut ev = |user: &str, secs: i64, fields: &[(&str, i64)]| {
        n += 1;
        let mut e = json!({"type": "score", "event_id": format!("e{n}"), "ts": t0 + secs * 1000,
                           "user_id": user, "game_id": "g", "points": 0});
        for (k, v) in fields {
            e[*k] = json!(v);
        }
        e
    };
    let mut play = |user: &str, secs: i64, fields: &[(&str, i64)]| {
        let mut e = ev(user, secs, fields);
        e["type"] = json!("play");
        e["duration_ms"] = json!(1000);
        e
    };
    let plays = vec![
        play("p1", 1, &[("tm", 30), ("dt", 2)]),
        play("p2", 5, &[("tm", 31), ("dt", 2)]),
        play("p3", 9, &[("tm", 30), ("dt", 5)]),
        play("p4", 1, &[("tm", M)]),
        play("p5", 1, &[("dt", 3)]),
        play("p6", 2, &[("dt", 7)]),
        play("p2", 4, &[("tm", 30)]),
        play("p5", 1, &[("dt", 4)]),
    ];
    let mut first = vec![
        ev("ann", 9, &[("lv", M / 2), ("rv", 3), ("cd", 5)]),
        ev("bob", 1, &[("lv", M), ("rv", -M), ("cd", 5)]),
        ev("cat", 2, &[("lv", M - 1), ("rv", 0), ("cd", 6)]),
        ev("dan", 3, &[("lv", M), ("rv", 5), ("cd", -M)]),
        ev("eve", 1, &[("lv", M), ("cd", 7)]),
        ev("fay", 1, &[("lv", 1), ("rv", 2)]),
        ev("gus", 1, &[("lv", 3), ("rv", 4)]),
        ev("hal", 20, &[("lv", 3), ("rv", 2), ("cd", M)]),
        ev("ivy", 1, &[("lv", 0), ("rv", 1), ("cd", 0)]),
        ev("jon", 1, &[("lv", -M), ("rv", M), ("cd", -1)]),
        ev("kim", 1, &[("rv", 7), ("cd", 2)]),
        ev("max", 2, &[("rv", 9), ("cd", 3)]),
        ev("ned", 1, &[("cd", 9)]),
    ];
    let second = vec![
        // Earlier than ann's code 5: the code stays 5.
        ev("ann", 5, &[("lv", M / 2), ("rv", -M), ("cd", 9)]),
        ev("cat", 1, &[("lv", 1), ("rv", -M)]),
        ev("dan", 4, &[("rv", 0)]),
        // Later than eve's code 7: the code becomes 1.
        ev("eve", 30, &[("cd", 1)]),
        ev("fay", 2, &[("lv", 2)]),
        ev("gus", 2, &[("rv", 2)]),
        ev("hal", 1, &[("cd", 7)]),
        ev("hal", 3, &[("cd", 4)]),
        ev("max", 8, &[("rv", 7), ("cd", 2)]),
    ];
    first.extend(plays);
    [first, second]
}

fn fields_json(f: &[Option<i64>; 3]) -> Value {
    json!({"levels": f[0], "revives": f[1], "code": f[2]})
}

/// An entry as the API shows it: the score is the first field (`null`
/// when missing: the board holds -inf), `"fields"` all of them.
fn entry(e: &Expected) -> Value {
    json!({"rank": e.2, "member": e.0, "score": e.1[0], "fields": fields_json(&e.1)})
}

fn named(f: &[Option<i64>; 3]) -> FieldValues {
    FieldValues(
        ["levels", "revives", "code"]
            .iter()
            .map(|n| n.to_string())
            .zip(f.iter().copied())
            .collect(),
    )
}

/// The reads compared live and archived, with the reference's answer
/// (source left out): (path, status, body).
fn expected_reads() -> Vec<(String, u16, Value)> {
    let base = "/v1/boards/stages/week";
    let q = format!("period={PAST}");
    let list = |entries: Vec<Value>| {
        json!({"board": "stages", "view": "week", "period": PAST, "scope": null,
               "total": TABLE.len(), "entries": entries})
    };
    let mut out = Vec::new();
    // Pages cut inside the tie groups (bob/ann, gus/fay, max/kim) and past the end.
    for (offset, limit) in [
        (0, 13),
        (0, 2),
        (1, 3),
        (6, 2),
        (7, 4),
        (10, 3),
        (12, 5),
        (13, 5),
        (3, 0),
    ] {
        let entries = TABLE.iter().skip(offset).take(limit).map(entry).collect();
        out.push((
            format!("{base}/top?{q}&offset={offset}&limit={limit}"),
            200,
            list(entries),
        ));
    }
    for (i, e) in TABLE.iter().enumerate() {
        out.push((format!("{base}/members/{}?{q}", e.0), 200, entry(e)));
        let radius = i % 3;
        let (from, to) = (i.saturating_sub(radius), (i + radius).min(TABLE.len() - 1));
        let entries = TABLE[from..=to].iter().map(entry).collect();
        out.push((
            format!("{base}/around/{}?{q}&radius={radius}", e.0),
            200,
            list(entries),
        ));
    }
    for path in [
        format!("{base}/members/nobody?{q}"),
        format!("{base}/around/nobody?{q}"),
    ] {
        out.push((
            path,
            404,
            json!({"error": "member \"nobody\" is not on this board"}),
        ));
    }
    out
}

/// Rows of the archive's reader as (rank, member, score, fields).
fn rows(rows: &[ArchivedRow]) -> Vec<(u64, String, f64, Option<FieldValues>)> {
    rows.iter()
        .map(|r| (r.rank, r.member.clone(), r.score, r.fields.clone()))
        .collect()
}

/// The table's rows (in rank order) with ranks in `style`.
fn table_rows(
    style: &str,
    pick: impl Fn(usize) -> bool,
) -> Vec<(u64, String, f64, Option<FieldValues>)> {
    TABLE
        .iter()
        .enumerate()
        .filter(|(i, _)| pick(*i))
        .map(|(_, e)| {
            let rank = match style {
                "competition" => e.3,
                "dense" => e.4,
                _ => e.2,
            };
            let score = e.1[0].map_or(f64::NEG_INFINITY, |v| v as f64);
            (rank, e.0.to_string(), score, Some(named(&e.1)))
        })
        .collect()
}

/// Every styled read of the archive's reader against the table: pages
/// cut inside tie groups, each member, around, and a list of members
/// with unknown and repeated ids.
async fn check_styled(reader: &ArchiveReader, key: &PeriodKey) {
    for style in ["ordinal", "competition", "dense"] {
        for (first, last) in [(1u64, 13u64), (2, 4), (7, 8), (8, 12), (12, 20)] {
            let page = reader
                .page_ranked(key, first, last, style)
                .await
                .expect("page")
                .expect("archived");
            let want = table_rows(style, |i| (first..=last).contains(&(i as u64 + 1)));
            assert_eq!(rows(&page.rows), want, "{style} page {first}..={last}");
            assert_eq!(page.period.members, 13);
        }
        for (i, e) in TABLE.iter().enumerate() {
            let one = reader
                .member_ranked(key, e.0, style)
                .await
                .expect("member")
                .expect("archived");
            assert!(one.found, "{}", e.0);
            assert_eq!(
                rows(&one.rows),
                table_rows(style, |j| j == i),
                "{style} {}",
                e.0
            );
            let around = reader
                .around_ranked(key, e.0, 1, style)
                .await
                .expect("around")
                .expect("archived");
            let want = table_rows(style, |j| j + 1 >= i && j <= i + 1);
            assert_eq!(rows(&around.rows), want, "{style} around {}", e.0);
        }
        let ids: Vec<String> = ["kim", "nobody", "ann", "fay", "kim", "ned", "bob"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let list = reader
            .members(key, &ids, style)
            .await
            .expect("members")
            .expect("archived");
        let want = table_rows(style, |i| {
            ["kim", "ann", "fay", "ned", "bob"].contains(&TABLE[i].0)
        });
        assert_eq!(rows(&list.rows), want, "{style} members");
    }
}

/// The events of [`batches`] applied (during the past week) through the
/// rules, the batch and the Lua script; the clock is then set to [`NOW`].
async fn applied(redis: &Redis, prefix: &str, text: &str) -> Direct {
    let apply_at = week_bounds(PAST).0 + 3 * 86_400_000;
    let mut direct = Direct::new(&redis.url(), prefix, text, apply_at).await;
    for batch in batches() {
        let (_, report) = direct.apply(&batch).await;
        let c = &report.boards[0];
        assert_eq!((c.overflow, c.late), (0, 0), "{report:?}");
    }
    direct.clock.set(NOW);
    direct
}

/// Archives `board`'s past week (of `members`) with the archiver's own
/// steps (close, copy in chunks of 4, announce when `text` has a closed
/// topic, restore expiry).
async fn archive_past_week(
    direct: &Direct,
    redis: &Redis,
    prefix: &str,
    text: &str,
    brokers: &str,
    (board, members): (&str, u64),
) {
    let config_text = format!(
        "{text}\n[kafka]\nbrokers = \"{brokers}\"\ntopics = [\"t\"]\n[redis]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n",
        redis.url()
    )
    .replace("grace = \"10m\"", "grace = \"10m\"\nchunk = 4");
    let config = Config::from_toml(&config_text, std::path::Path::new("t.toml"), Vec::new())
        .expect("config");
    let set = config.compile_boards().expect("boards");
    let clock: SharedClock = Arc::new(direct.clock.clone());
    let mut archiver = rankflow::app::archiver(&config, clock)
        .await
        .expect("archiver");
    let item = DueItem {
        member: keys::due_member(board, &format!("week:{PAST}")),
        close_ms: week_bounds(PAST).0 + 7 * 86_400_000 + 600_000,
    };
    let period = due::resolve(&set, prefix, &item).expect("resolves");
    match archiver.process(&period, false).await {
        Outcome::Archived { members: n, .. } => assert_eq!(n, members),
        other => panic!("not archived: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_period_reads_the_same_live_and_archived_as_the_hand_made_table() {
    let redis = Redis::start();
    let pg = Postgres::start();
    let prefix = unique("carch");
    let text = boards(&pg.url(), "");
    let direct = applied(&redis, &prefix, &text).await;

    // The API over a reader that falls back to the archive.
    let reader = direct
        .reader()
        .with_archive(ArchiveReader::new(&pg.url()).expect("archive url"));
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(reader);
    let base = direct.serve(slot).await;
    let reads = expected_reads();
    let live = check_reads(&base, &reads, "live").await;

    let speedrun = format!("/v1/boards/speedrun/week/top?period={PAST}&limit=10");
    let (code, mut speed_live) = get_json(&format!("{base}{speedrun}")).await;
    assert_eq!((code, &speed_live["source"]), (200, &json!("live")));
    let speed_entries: Vec<Value> = SPEEDRUN
        .iter()
        .map(|e| {
            json!({"rank": e.2, "member": e.0, "score": e.1[0],
                        "fields": {"time": e.1[0], "deaths": e.1[1]}})
        })
        .collect();
    assert_eq!(speed_live["entries"], Value::Array(speed_entries));
    for board in [("stages", 13), ("speedrun", 6)] {
        archive_past_week(&direct, &redis, &prefix, &text, "unused:9092", board).await;
    }
    let view_id = format!("week:{PAST}");
    // K:f was kept with K while archived and expires with it again.
    let k = keys::view_key(&prefix, "stages", &view_id);
    let mut c = redis.conn().await;
    let expiry = |key: String| redis::cmd("PEXPIRETIME").arg(key).clone();
    let k_at: i64 = expiry(k.clone())
        .query_async(&mut c)
        .await
        .expect("PEXPIRETIME");
    let f_at: i64 = expiry(format!("{k}:f"))
        .query_async(&mut c)
        .await
        .expect("PEXPIRETIME");
    assert!(
        k_at == f_at || (k_at == -2 && f_at == -2),
        "K expires at {k_at}, K:f at {f_at}"
    );
    // Gone from Redis: every read comes from the archive, the same JSON.
    let _: i64 = redis::cmd("DEL")
        .arg(&k)
        .arg(format!("{k}:f"))
        .arg(format!("{k}:closed"))
        .query_async(&mut c)
        .await
        .expect("DEL");
    let archived = check_reads(&base, &reads, "archive").await;
    assert_eq!(live, archived);
    // The ascending board: +inf (missing time) and its tie key decoded.
    let k = keys::view_key(&prefix, "speedrun", &view_id);
    let _: i64 = redis::cmd("DEL")
        .arg(&k)
        .arg(format!("{k}:f"))
        .arg(format!("{k}:closed"))
        .query_async(&mut c)
        .await
        .expect("DEL");
    let (code, mut speed_archived) = get_json(&format!("{base}{speedrun}")).await;
    assert_eq!((code, &speed_archived["source"]), (200, &json!("archive")));
    for body in [&mut speed_live, &mut speed_archived] {
        body.as_object_mut().expect("object").remove("source");
    }
    assert_eq!(speed_live, speed_archived);

    // Every rank style and lists of members, on the archive's reader.
    let key = week_key("stages", None, PAST);
    let reader = ArchiveReader::new(&pg.url()).expect("archive url");
    check_styled(&reader, &key).await;
    let speed_key = PeriodKey {
        board: "speedrun".into(),
        ..key.clone()
    };
    for (style, pick) in [("competition", 3), ("dense", 4)] {
        let page = reader
            .page_ranked(&speed_key, 1, 6, style)
            .await
            .expect("page")
            .expect("archived");
        let got: Vec<(u64, String, f64)> = page
            .rows
            .iter()
            .map(|r| (r.rank, r.member.clone(), r.score))
            .collect();
        let want: Vec<(u64, String, f64)> = SPEEDRUN
            .iter()
            .map(|e| {
                let rank = if pick == 3 { e.3 } else { e.4 };
                (
                    rank,
                    e.0.to_string(),
                    e.1[0].map_or(f64::INFINITY, |v| v as f64),
                )
            })
            .collect();
        assert_eq!(got, want, "speedrun {style}");
    }
    // The ranks written at copy time are what the table says; rows without
    // them (as archived before version 3) get the same from the fallback.
    let mut writer = Archive::connect(&pg.url()).await.expect("connect");
    let cleared = writer
        .client()
        .execute(
            "UPDATE rankflow_archive SET rank_competition = NULL, rank_dense = NULL
              WHERE board = 'stages' AND period = $1",
            &[&PAST],
        )
        .await
        .expect("clear ranks");
    assert_eq!(cleared, 13);
    check_styled(&reader, &key).await;
    println!(
        "verified: {} reads equal live and archived and the hand-made table; 3 styles × (5 pages, 13 members, 13 around, 1 list) on the archive, with and without stored ranks; the ascending tie-break board too",
        reads.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_archive_reads_use_the_indexes_and_read_fields_back_exactly() {
    let pg = Postgres::start();
    let mut writer = Archive::connect(&pg.url()).await.expect("connect");
    schema::migrate(writer.client()).await.expect("migrate");
    let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    // Edge rows first, then many plain ones, so the planner has a choice.
    let edges = [
        (9_007_199_254_740_992.0, vec![Some(M), Some(-M), Some(M)]),
        (
            9_007_199_254_740_991.0,
            vec![Some(M - 1), Some(-(M - 1)), None],
        ),
        (-9_007_199_254_740_992.0, vec![Some(-M), None, Some(0)]),
        (f64::NEG_INFINITY, vec![None, Some(M), Some(-M)]),
        (f64::NEG_INFINITY, vec![None, None, None]),
    ];
    for w in 40..44 {
        let key = week_key("c", None, &format!("2026-W{w}"));
        let mut all: Vec<Row> = (0..20_000i64)
            .map(|i| Row {
                member: format!("m{i}"),
                score: (20_000 - i / 2) as f64,
                fields: Some(vec![Some(20_000 - i / 2), Some(i % 7), None]),
                hidden: false,
            })
            .collect();
        all.extend(edges.iter().enumerate().map(|(i, (score, fields))| Row {
            member: format!("edge{i}"),
            score: *score,
            fields: Some(fields.clone()),
            hidden: false,
        }));
        // The edges sort first by score except the infinite ones: rank
        // order as the board gives it is what the copy is handed.
        all.sort_by(|x, y| y.score.total_cmp(&x.score));
        let done = writer
            .copy_rows(week_copy(&key), Some(&names), stream::iter(vec![Ok(all)]))
            .await
            .expect("copy");
        assert_eq!(done, Copied::Done { members: 20_005 });
    }
    let key = week_key("c", None, "2026-W42");
    let ids = ["m777", "edge3", "nobody"].map(String::from);
    assert_reads_use_indexes(writer.client(), &key, "m777", &ids).await;

    // Fields at ±2^53, missing ones, and the -inf score read back exactly,
    // with ranks tied on every field (the two -inf rows differ in fields).
    let reader = ArchiveReader::new(&pg.url()).expect("url");
    let named3 =
        |f: &[Option<i64>]| FieldValues(names.iter().cloned().zip(f.iter().copied()).collect());
    let top = reader
        .page(&key, 1, 2)
        .await
        .expect("page")
        .expect("archived");
    assert_eq!(
        rows(&top.rows),
        vec![
            (1, "edge0".into(), M as f64, Some(named3(&edges[0].1))),
            (2, "edge1".into(), (M - 1) as f64, Some(named3(&edges[1].1))),
        ]
    );
    let tail = reader
        .page_ranked(&key, 20_003, 20_005, "dense")
        .await
        .expect("page")
        .expect("archived");
    let got: Vec<_> = rows(&tail.rows)
        .into_iter()
        .map(|(rank, m, score, f)| (rank, m, score.to_bits(), f))
        .collect();
    // 20,000 rows hold 10,000 distinct tuples (pairs of equal score and
    // i % 7 differ within a pair), plus 3 finite edges: count by hand.
    let distinct_before: u64 = 2 + 20_000 + 1;
    assert_eq!(
        got,
        vec![
            (
                distinct_before,
                "edge2".into(),
                (-M as f64).to_bits(),
                Some(named3(&edges[2].1))
            ),
            (
                distinct_before + 1,
                "edge3".into(),
                f64::NEG_INFINITY.to_bits(),
                Some(named3(&edges[3].1))
            ),
            (
                distinct_before + 2,
                "edge4".into(),
                f64::NEG_INFINITY.to_bits(),
                Some(named3(&edges[4].1))
            ),
        ]
    );
    println!(
        "verified: composite page/member/members/around plans use the primary key and member index in every style (4 × 20,005 rows); fields at ±2^53 and -inf scores read back exactly"
    );
}

/// The period-closed message of a composite period, through a real broker:
/// its top entries carry the fields by name, a missing first field is a
/// `null` score, and it validates against the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_period_closed_message_carries_the_fields() {
    let broker = Broker::start();
    let topic = unique("closed");
    broker.create_topic(&topic, 1).await;
    let redis = Redis::start();
    let pg = Postgres::start();
    let prefix = unique("carch");
    // The top 12 reach the members without a first field (ranks 11, 12).
    let text = boards(
        &pg.url(),
        &format!("closed_topic = \"{topic}\"\nclosed_top = 12"),
    );
    let direct = applied(&redis, &prefix, &text).await;
    archive_past_week(
        &direct,
        &redis,
        &prefix,
        &text,
        &broker.brokers(),
        ("stages", 13),
    )
    .await;

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("closed-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    let consumer = &consumer;
    let message = wait_for(
        Duration::from_secs(30),
        "the period-closed message",
        || async move {
            let m = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await;
            match m {
                Ok(Ok(m)) => Some((
                    String::from_utf8_lossy(m.key().unwrap_or_default()).to_string(),
                    serde_json::from_slice::<Value>(m.payload().unwrap_or_default()).expect("JSON"),
                )),
                _ => None,
            }
        },
    )
    .await;
    assert_eq!(message.0, format!("stages//week/{PAST}"));
    let want: Vec<Value> = TABLE.iter().take(12).map(entry).collect();
    assert_eq!(message.1["entries"], Value::Array(want));
    assert_eq!(message.1["members"], 13);
    let schema: Value =
        serde_json::from_str(include_str!("../../schemas/period-closed.schema.json"))
            .expect("schema");
    let validator = jsonschema::draft202012::new(&schema).expect("validator");
    assert!(validator.is_valid(&message.1), "{}", message.1);
    println!(
        "verified: the period-closed message of a composite period has the hand-made table's top 12 with fields and a null score for a missing first field"
    );
}
