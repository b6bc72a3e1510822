//! The archiver against real servers: Redis (keys written by hand the way
//! the apply script lays them out, plus due-set entries), a private
//! PostgreSQL, and tansu for the period-closed topic. Expected rows come
//! from hand-made references (rankings sorted here, periods computed with
//! chrono's ISO weeks), never from the code under test.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{Datelike, NaiveDate, TimeZone, Utc};
use common::postgres::Postgres;
use common::{
    Broker, Process, Redis, Setup, assert_holds, get_text, metric_sum, status_of, unique, wait_for,
};
use rankflow::archive::runner::{Archiver, Outcome, Report};
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::config::Config;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};

const DAY: i64 = 86_400_000;
const GRACE: i64 = 600_000;
/// 2^48 − 1: the largest tie key (docs/score-encoding.md).
const MAXT: i64 = (1 << 48) - 1;

const BOARDS: &str = r#"
[[board]]
name = "plain"
event = "gift"
member = "sender_id"
score = "count"
periods = ["week"]
archive = ["week"]
retention = { week = "8w" }

[[board]]
name = "ties"
event = "score"
member = "user_id"
score = "points"
aggregate = "max"
tie_break = "earliest"
periods = ["week"]
archive = ["week"]
retention = { week = "8w" }

[[board]]
name = "low"
event = "score"
member = "user_id"
score = "points"
aggregate = "min"
periods = ["week"]
archive = ["week"]
retention = { week = "8w" }

[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["week"]
archive = ["week"]
retention = { week = "8w" }
"#;

/// An ISO week that ended at least a day ago: (id, start ms, end ms), from
/// chrono's ISO calendar (the reference for rankflow's period math).
fn past_week(weeks_ago: i64) -> (String, i64, i64) {
    week_of(Utc::now() - chrono::Duration::days(7 * weeks_ago + 1))
}

/// The ISO week of `day`: (id, start ms, end ms).
fn week_of(day: chrono::DateTime<Utc>) -> (String, i64, i64) {
    let iso = day.iso_week();
    let monday =
        NaiveDate::from_isoywd_opt(iso.year(), iso.week(), chrono::Weekday::Mon).expect("a Monday");
    let start = Utc
        .from_utc_datetime(&monday.and_hms_opt(0, 0, 0).expect("midnight"))
        .timestamp_millis();
    (
        format!("{}-W{:02}", iso.year(), iso.week()),
        start,
        start + 7 * DAY,
    )
}

/// The test's world: servers, a config file, names.
struct World {
    redis: Redis,
    pg: Postgres,
    prefix: String,
    dir: tempfile::TempDir,
    extra: String,
}

impl World {
    fn new() -> World {
        World {
            redis: Redis::start(),
            pg: Postgres::start(),
            prefix: unique("rf"),
            dir: tempfile::tempdir().expect("tempdir"),
            extra: String::new(),
        }
    }

    fn toml(&self, chunk: usize, brokers: &str) -> String {
        format!(
            "[kafka]\nbrokers = \"{brokers}\"\ngroup_id = \"{g}\"\ntopics = [\"{t}\"]\n\
             [redis]\nurl = \"{r}\"\nkey_prefix = \"{p}\"\n\
             [archive]\nurl = \"{pg}\"\ninterval_ms = 200\nchunk = {chunk}\n{extra}\n{BOARDS}",
            g = unique("g"),
            t = unique("t"),
            r = self.redis.url(),
            p = self.prefix,
            pg = self.pg.url(),
            extra = self.extra,
        )
    }

    fn config(&self, chunk: usize, brokers: &str) -> Config {
        Config::from_toml(
            &self.toml(chunk, brokers),
            std::path::Path::new("t.toml"),
            Vec::new(),
        )
        .expect("test config")
    }

    fn config_file(&self, chunk: usize) -> std::path::PathBuf {
        let path = self.dir.path().join("rankflow.toml");
        std::fs::write(&path, self.toml(chunk, "127.0.0.1:1")).expect("write config");
        path
    }

    async fn archiver(&self, chunk: usize, brokers: &str) -> Archiver {
        let clock: SharedClock = Arc::new(SystemClock);
        rankflow::app::archiver(&self.config(chunk, brokers), clock)
            .await
            .expect("archiver")
    }

    fn key(&self, tag: &str, view: &str) -> String {
        format!("{}:{{{tag}}}:{view}", self.prefix)
    }

    fn due_key(&self) -> String {
        format!("{}:archive:due", self.prefix)
    }

    async fn redis(&self) -> redis::aio::MultiplexedConnection {
        self.redis.conn().await
    }

    /// Writes a period's members (already encoded) and registers it as due.
    async fn write_period(&self, tag: &str, view: &str, rows: &[(String, f64)], close_ms: i64) {
        let mut c = self.redis().await;
        let key = self.key(tag, view);
        for chunk in rows.chunks(5000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(&key);
            for (m, s) in chunk {
                cmd.arg(*s).arg(m);
            }
            let _: () = cmd.query_async(&mut c).await.expect("ZADD");
        }
        self.add_due(tag, view, close_ms).await;
    }

    async fn add_due(&self, tag: &str, view: &str, close_ms: i64) {
        let mut c = self.redis().await;
        let _: () = redis::cmd("ZADD")
            .arg(self.due_key())
            .arg(close_ms)
            .arg(format!("{{{tag}}}:{view}"))
            .query_async(&mut c)
            .await
            .expect("ZADD due");
    }

    async fn due_members(&self) -> Vec<String> {
        let mut c = self.redis().await;
        redis::cmd("ZRANGE")
            .arg(self.due_key())
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .expect("ZRANGE due")
    }

    async fn pttl(&self, key: &str) -> i64 {
        let mut c = self.redis().await;
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut c)
            .await
            .expect("PTTL")
    }

    async fn pg(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.pg.url(), tokio_postgres::NoTls)
            .await
            .expect("PostgreSQL");
        tokio::spawn(conn);
        client
    }

    /// (rank, member, exact score text) of one archived period.
    async fn archived_rows(
        &self,
        board: &str,
        scope: &str,
        period: &str,
    ) -> Vec<(i64, String, String)> {
        self.pg()
            .await
            .query(
                "SELECT rank, member, score::text FROM rankflow_archive
                  WHERE board = $1 AND scope = $2 AND view = 'week' AND period = $3 ORDER BY rank",
                &[&board, &scope, &period],
            )
            .await
            .expect("archived rows")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// Completion rows of a board: period → (members, start ms, end ms).
    async fn completions(&self, board: &str) -> BTreeMap<(String, String), (i64, i64, i64)> {
        self.pg()
            .await
            .query(
                "SELECT scope, period, members,
                        (extract(epoch FROM period_start) * 1000)::int8,
                        (extract(epoch FROM period_end) * 1000)::int8
                   FROM rankflow_archived_periods WHERE board = $1",
                &[&board],
            )
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3), r.get(4))))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn archived(reports: &[Report]) -> BTreeMap<String, u64> {
    reports
        .iter()
        .filter_map(|r| match r.outcome {
            Outcome::Archived { members, .. } => Some((r.period.clone(), members)),
            _ => None,
        })
        .collect()
}

/// Ranked reference: (member, score) sorted by the board's rules here.
fn ranked(rows: &[(&str, f64, i64)], desc: bool) -> Vec<(i64, String, f64)> {
    let mut v: Vec<(&str, f64, i64)> = rows.to_vec();
    v.sort_by(|a, b| {
        let by_score = if desc {
            b.1.total_cmp(&a.1)
        } else {
            a.1.total_cmp(&b.1)
        };
        by_score.then(a.2.cmp(&b.2))
    });
    v.iter()
        .enumerate()
        .map(|(i, (m, s, _))| (i as i64 + 1, m.to_string(), *s))
        .collect()
}

#[tokio::test]
async fn periods_are_archived_exactly_with_ranks_marker_and_expiry() {
    let w = World::new();
    let (week, start, end) = past_week(1);
    let close = end + GRACE;
    let view = format!("week:{week}");

    // plain: exact scores, ties on score broken by member bytes (Redis).
    let plain = [
        ("alice", 9007199254740992.0, 0),
        ("bob", 0.1, 0),
        ("carol", -3.5, 0),
        ("dave", 1e-7, 0),
        ("erin", 12.0, 0),
        ("frank", 12.0, 0),
    ];
    let plain_rows: Vec<(String, f64)> =
        plain.iter().map(|(m, s, _)| (m.to_string(), *s)).collect();
    w.write_period("plain", &view, &plain_rows, close).await;
    // ties: max, earliest first among equal scores. Stored members carry
    // the 12-hex tie key 2^48-1-ts in front, K:t holds the times.
    let ties = [
        ("zed", 50.0, 3_000),
        ("amy", 50.0, 1_000),
        ("bo", 50.0, 2_000),
        ("cy", 70.0, 9_000),
        ("dee", 10.0, 5),
    ];
    let tie_rows: Vec<(String, f64)> = ties
        .iter()
        .map(|(m, s, t)| (format!("{:012x}{m}", MAXT - t), *s))
        .collect();
    w.write_period("ties", &view, &tie_rows, close).await;
    let mut c = w.redis().await;
    for (m, _, t) in &ties {
        let _: () = redis::cmd("HSET")
            .arg(w.key("ties", &format!("{view}:t")))
            .arg(*m)
            .arg(*t)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    // low: min board, ascending ranks.
    let low = [("p", 3.25, 0), ("q", -1.0, 0), ("r", 100.0, 0)];
    let low_rows: Vec<(String, f64)> = low.iter().map(|(m, s, _)| (m.to_string(), *s)).collect();
    w.write_period("low", &view, &low_rows, close).await;
    // fans: two scopes, one needing escapes in the key.
    w.write_period(
        "fans:u1",
        &view,
        &[("x".into(), 2.0), ("y".into(), 5.0)],
        close,
    )
    .await;
    w.write_period("fans:a%3Ab", &view, &[("x".into(), 7.0)], close)
        .await;
    // A period with no events (registered, never written) and one not yet due.
    let (older, _, older_end) = past_week(2);
    w.add_due("plain", &format!("week:{older}"), older_end + GRACE)
        .await;
    let future = format!("week:{}", past_week(-2).0);
    w.add_due("plain", &future, Utc::now().timestamp_millis() + 7 * DAY)
        .await;

    let mut archiver = w.archiver(2, "127.0.0.1:1").await;
    let t0 = Instant::now();
    let reports = archiver.pass(None).await.expect("pass");
    let took = t0.elapsed();
    let got = archived(&reports);
    let want: BTreeMap<String, u64> = [
        (format!("plain//week/{week}"), 6),
        (format!("ties//week/{week}"), 5),
        (format!("low//week/{week}"), 3),
        (format!("fans/u1/week/{week}"), 2),
        (format!("fans/a:b/week/{week}"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "{reports:?}");
    let empty: Vec<&str> = reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Empty))
        .map(|r| r.period.as_str())
        .collect();
    assert_eq!(empty, vec![format!("plain//week/{older}")]);

    // Rows against the references, exact decimal text.
    let text = |s: f64| -> String {
        match s {
            9007199254740992.0 => "9007199254740992".into(),
            1e-7 => "0.0000001".into(),
            s if s.fract() == 0.0 => format!("{}", s as i64),
            s => format!("{s}"),
        }
    };
    for (board, rows, desc) in [
        ("plain", &plain[..], true),
        ("ties", &ties[..], true),
        ("low", &low[..], false),
    ] {
        let mut want = ranked(rows, desc);
        if board == "plain" {
            // Equal scores without a tie-break: Redis orders members by
            // bytes, and a descending read puts "frank" before "erin".
            want.sort_by_key(|(r, _, _)| *r);
            let (i, j) = (
                want.iter().position(|w| w.1 == "erin").unwrap(),
                want.iter().position(|w| w.1 == "frank").unwrap(),
            );
            want[i].1 = "frank".into();
            want[j].1 = "erin".into();
        }
        let want: Vec<(i64, String, String)> =
            want.into_iter().map(|(r, m, s)| (r, m, text(s))).collect();
        assert_eq!(w.archived_rows(board, "", &week).await, want, "{board}");
    }
    assert_eq!(
        w.archived_rows("fans", "u1", &week).await,
        vec![(1, "y".into(), "5".into()), (2, "x".into(), "2".into())]
    );
    assert_eq!(
        w.archived_rows("fans", "a:b", &week).await,
        vec![(1, "x".into(), "7".into())]
    );
    // Completion rows with the period's bounds; none for the empty period.
    let done = w.completions("plain").await;
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[&(String::new(), week.clone())], (6, start, end));

    // Marker set to the close time; expiry back at end + 8 weeks; due
    // items gone except the future one.
    let expire_at = end + 56 * DAY;
    for tag in ["plain", "ties", "low", "fans:u1", "fans:a%3Ab"] {
        let k = w.key(tag, &view);
        let marker = w.redis.cli(&["GET", &format!("{k}:closed")]);
        assert_eq!(marker.trim(), close.to_string(), "{tag}");
        for key in [k.clone(), format!("{k}:closed")] {
            let left = w.pttl(&key).await;
            let want = expire_at - Utc::now().timestamp_millis();
            assert!(
                (left - want).abs() < 60_000,
                "{key}: PTTL {left}, want ~{want}"
            );
        }
    }
    assert!(w.pttl(&w.key("ties", &format!("{view}:t"))).await > 0);
    assert_eq!(w.due_members().await, vec![format!("{{plain}}:{future}")]);

    // A second pass finds nothing due and changes nothing.
    let again = archiver.pass(None).await.expect("second pass");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(w.completions("fans").await.len(), 2);

    // --period without --scope copies every scope the archive knows again.
    let again = archiver.recopy("fans", &week, None).await.expect("recopy");
    let got: BTreeMap<String, u64> = archived(&again);
    let want: BTreeMap<String, u64> = [
        (format!("fans/a:b/week/{week}"), 1),
        (format!("fans/u1/week/{week}"), 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "{again:?}");
    assert_eq!(
        w.archived_rows("fans", "u1", &week).await,
        vec![(1, "y".into(), "5".into()), (2, "x".into(), "2".into())]
    );
    // A period that has not closed is not copied (nor closed early).
    let current = week_of(Utc::now()).0;
    let early = archiver
        .recopy("plain", &current, None)
        .await
        .expect("recopy");
    assert!(
        matches!(&early[..], [r] if matches!(&r.outcome, Outcome::Failed(e) if e.to_string().contains("not closed yet"))),
        "{early:?}"
    );
    println!(
        "verified: 5 periods (plain, tie-break, asc, 2 scopes) archived exactly in {took:?}, 1 empty period closed, 1 future period left due"
    );
}

/// `rankflow archive` as a process: its output, exit codes, and a kill -9
/// in the middle of a 300,000-member copy (chunks of 1,000).
#[tokio::test]
async fn a_killed_copy_leaves_nothing_and_a_rerun_completes_it() {
    let w = World::new();
    let (week, _, end) = past_week(1);
    let view = format!("week:{week}");
    let n = 300_000usize;
    let rows: Vec<(String, f64)> = (0..n)
        .map(|i| (format!("m{i:06}"), (i % 977) as f64))
        .collect();
    w.write_period("plain", &view, &rows, end + GRACE).await;
    let config = w.config_file(1_000);
    let bin = env!("CARGO_BIN_EXE_rankflow");

    let mut child = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rankflow archive starts");
    let pg = w.pg().await;
    // Kill it while its COPY is running.
    wait_for(Duration::from_secs(60), "the COPY to start", || {
        let pg = &pg;
        async move {
            let n: i64 = pg
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY rankflow_archive%'",
                    &[],
                )
                .await
                .ok()?
                .get(0);
            (n > 0).then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().expect("kill -9");
    let status = child.wait().expect("wait");
    assert!(!status.success());
    // PostgreSQL sees the socket close and rolls the transaction back.
    wait_for(Duration::from_secs(30), "the killed copy to roll back", || {
        let pg = &pg;
        async move {
            let n: i64 = pg
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY rankflow_archive%'",
                    &[],
                )
                .await
                .ok()?
                .get(0);
            (n == 0).then_some(())
        }
    })
    .await;
    let count = |sql: &'static str| {
        let pg = &pg;
        async move { pg.query_one(sql, &[]).await.expect(sql).get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM rankflow_archived_periods").await,
        0
    );
    assert_eq!(count("SELECT count(*) FROM rankflow_archive").await, 0);
    assert_eq!(w.due_members().await.len(), 1, "still due");
    assert_eq!(
        w.pttl(&w.key("plain", &view)).await,
        -1,
        "no expiry meanwhile"
    );

    let t0 = Instant::now();
    let out = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .output()
        .expect("rankflow archive runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("archived plain//week/{week}: {n} members in ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("total: 1 period(s): 1 archived (300000 members)"),
        "{stdout}"
    );
    assert_eq!(
        count("SELECT count(*) FROM rankflow_archive").await,
        n as i64
    );
    assert_eq!(
        count("SELECT count(DISTINCT member) FROM rankflow_archive").await,
        n as i64
    );
    assert_eq!(
        count("SELECT max(rank) FROM rankflow_archive").await,
        n as i64
    );
    assert_eq!(
        count("SELECT sum(members)::int8 FROM rankflow_archived_periods").await,
        n as i64
    );
    // Rank order: scores never rise down the ranks.
    assert_eq!(
        count(
            "SELECT count(*) FROM rankflow_archive a JOIN rankflow_archive b
               ON b.rank = a.rank + 1 WHERE b.score > a.score"
        )
        .await,
        0
    );
    assert!(w.due_members().await.is_empty());
    println!(
        "verified: kill -9 mid-COPY left 0 rows; the re-run copied {n} members once in {:?}",
        t0.elapsed()
    );

    // --period copies it again (replace): same rows, still no duplicates.
    let out = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .args(["--board", "plain", "--period", &week])
        .output()
        .expect("rankflow archive --period runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("archived plain//week/{week}: {n} members")),
        "{stdout}"
    );
    assert_eq!(
        count("SELECT count(*) FROM rankflow_archive").await,
        n as i64
    );
    // A period whose keys are gone cannot be copied again: exit 1.
    let (gone, _, _) = past_week(3);
    let out = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .args(["--board", "plain", "--period", &gone])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn postgres_down_keeps_keys_and_fails_then_a_later_pass_completes() {
    let mut w = World::new();
    let (week, _, end) = past_week(1);
    let view = format!("week:{week}");
    w.write_period(
        "plain",
        &view,
        &[("a".into(), 1.0), ("b".into(), 2.0)],
        end + GRACE,
    )
    .await;
    let config = w.config_file(100);
    let bin = env!("CARGO_BIN_EXE_rankflow");
    w.pg.stop();
    let out = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("failed plain//week/{week}: ")),
        "{stdout}"
    );
    // Closed (marker) but kept: no expiry, still due.
    let k = w.key("plain", &view);
    assert_eq!(w.redis.cli(&["EXISTS", &format!("{k}:closed")]).trim(), "1");
    assert_eq!(w.pttl(&k).await, -1);
    assert_eq!(w.due_members().await.len(), 1);

    w.pg.start_server();
    let out = Command::new(bin)
        .args(["archive", "-c"])
        .arg(&config)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        w.archived_rows("plain", "", &week).await,
        vec![(1, "b".into(), "2".into()), (2, "a".into(), "1".into())]
    );
    assert!(w.pttl(&k).await > 0);
    assert!(w.due_members().await.is_empty());
}

#[tokio::test]
async fn two_archivers_copy_each_period_once() {
    let w = World::new();
    let (week, _, end) = past_week(1);
    let view = format!("week:{week}");
    let scopes = 24;
    for s in 0..scopes {
        let rows: Vec<(String, f64)> = (0..500)
            .map(|i| (format!("m{i}"), (i * (s + 1)) as f64))
            .collect();
        w.write_period(&format!("fans:r{s}"), &view, &rows, end + GRACE)
            .await;
    }
    let mut a = w.archiver(50, "127.0.0.1:1").await;
    let mut b = w.archiver(50, "127.0.0.1:1").await;
    let (ra, rb) = tokio::join!(a.pass(None), b.pass(None));
    let (ra, rb) = (ra.expect("pass a"), rb.expect("pass b"));
    let (by_a, by_b) = (archived(&ra).len(), archived(&rb).len());
    let copies = by_a + by_b;
    // Whatever the interleaving, each period is copied by exactly one.
    assert_eq!(copies, scopes as usize, "a: {ra:?}\nb: {rb:?}");
    let mut both: Vec<String> = archived(&ra)
        .into_keys()
        .chain(archived(&rb).into_keys())
        .collect();
    both.sort();
    both.dedup();
    assert_eq!(both.len(), scopes as usize);
    let pg = w.pg().await;
    let n: i64 = pg
        .query_one("SELECT count(*) FROM rankflow_archive", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, scopes * 500);
    let periods: i64 = pg
        .query_one("SELECT count(*) FROM rankflow_archived_periods", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(periods, scopes);
    // Periods one skipped as busy are finished by a later pass.
    let (ra, rb) = tokio::join!(a.pass(None), b.pass(None));
    assert!(archived(&ra.unwrap()).is_empty() && archived(&rb.unwrap()).is_empty());
    assert!(w.due_members().await.is_empty());
    println!(
        "verified: two archivers, {scopes} periods: {by_a} copied by a, {by_b} by b, {n} rows, no duplicates"
    );
}

/// Period-closed messages: one per copy, keyed `board/scope/view/period`,
/// with the top `closed_top` entries the archive holds; valid against the
/// schema; `announced_at` set.
#[tokio::test]
async fn period_closed_messages_match_the_archive() {
    let broker = Broker::start();
    let topic = unique("closed");
    broker.create_topic(&topic, 1).await;
    let mut w = World::new();
    w.extra = format!("closed_topic = \"{topic}\"\nclosed_top = 3");
    let (week, start, end) = past_week(1);
    let view = format!("week:{week}");
    let plain: Vec<(String, f64)> = (0..5).map(|i| (format!("p{i}"), i as f64 * 1.5)).collect();
    w.write_period("plain", &view, &plain, end + GRACE).await;
    w.write_period(
        "fans:u1",
        &view,
        &[("x".into(), 2.0), ("y".into(), 5.0)],
        end + GRACE,
    )
    .await;
    w.write_period("fans:u2", &view, &[("z".into(), 1.0)], end + GRACE)
        .await;
    let mut archiver = w.archiver(2, &broker.brokers()).await;
    let reports = archiver.pass(None).await.expect("pass");
    assert_eq!(archived(&reports).len(), 3, "{reports:?}");

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("closed-reader"))
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    let mut seen: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Read on for a while after the third: a duplicate must show.
    let mut third_at: Option<Instant> = None;
    let mut received = 0;
    while Instant::now() < deadline && third_at.is_none_or(|t| t.elapsed() < Duration::from_secs(3))
    {
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
        else {
            continue;
        };
        received += 1;
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value: serde_json::Value =
            serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON");
        seen.insert(key, value);
        if seen.len() == 3 && third_at.is_none() {
            third_at = Some(Instant::now());
        }
    }
    assert_eq!(received, 3, "one message per copy: {seen:?}");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schemas/period-closed.schema.json")).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let iso = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    let pg = w.pg().await;
    for (board, scope, members) in [("plain", "", 5), ("fans", "u1", 2), ("fans", "u2", 1)] {
        let key = format!("{board}/{scope}/week/{week}");
        let msg = seen
            .get(&key)
            .unwrap_or_else(|| panic!("no message {key}: {seen:?}"));
        assert!(validator.is_valid(msg), "{msg}");
        let top: Vec<serde_json::Value> = w
            .archived_rows(board, scope, &week)
            .await
            .into_iter()
            .take(3)
            .map(|(rank, member, score)| {
                let score: serde_json::Value = serde_json::from_str(&score).unwrap();
                serde_json::json!({"rank": rank, "member": member, "score": score})
            })
            .collect();
        assert_eq!(msg["entries"], serde_json::Value::Array(top), "{key}");
        assert_eq!(msg["members"], members, "{key}");
        assert_eq!(msg["start"], iso(start));
        assert_eq!(msg["end"], iso(end));
        assert_eq!(msg["scope"], scope);
        let announced: bool = pg
            .query_one(
                "SELECT announced_at IS NOT NULL FROM rankflow_archived_periods
                  WHERE board = $1 AND scope = $2 AND period = $3",
                &[&board, &scope, &week],
            )
            .await
            .unwrap()
            .get(0);
        assert!(announced, "{key}");
    }
    // The top of plain, by hand: 6, 4.5, 3.
    assert_eq!(
        seen[&format!("plain//week/{week}")]["entries"],
        serde_json::json!([
            {"rank": 1, "member": "p4", "score": 6},
            {"rank": 2, "member": "p3", "score": 4.5},
            {"rank": 3, "member": "p2", "score": 3}
        ])
    );
    println!("verified: 3 period-closed messages, keyed by path, top 3 equal to the archive");
}

/// `rankflow run` with an archive that is down: the consumer runs, the
/// period closes and its keys stay, the backlog shows on /metrics; once
/// PostgreSQL is up the period is archived; SIGTERM ends it promptly.
#[tokio::test]
async fn run_archives_in_the_background_through_a_postgres_outage() {
    let broker = Broker::start();
    let mut w = World::new();
    w.pg.stop();
    let mut setup = Setup::new(&broker, &w.redis, BOARDS);
    setup.prefix = w.prefix.clone();
    setup.extra = format!("[archive]\nurl = \"{}\"\ninterval_ms = 200\n", w.pg.url());
    broker.create_topic(&setup.topic, 1).await;
    let (week, _, end) = past_week(1);
    let view = format!("week:{week}");
    w.write_period(
        "plain",
        &view,
        &[("a".into(), 1.0), ("b".into(), 2.0)],
        end + GRACE,
    )
    .await;
    let mut app = Process::start(&setup);
    let metrics = app.url("/metrics");
    let k = w.key("plain", &view);
    wait_for(
        Duration::from_secs(60),
        "the backlog on /metrics",
        || async {
            let text = get_text(&metrics).await?;
            let pending = metric_sum(&text, "rankflow_archive_pending", &[]);
            let oldest = metric_sum(&text, "rankflow_archive_oldest_pending_seconds", &[]);
            let errors = metric_sum(
                &text,
                "rankflow_archive_errors_total",
                &[("kind", "postgres_io")],
            );
            (pending == 1.0 && oldest > 3_600.0 && errors > 0.0).then_some(())
        },
    )
    .await;
    // Healthy while the archive is down, once consuming: the archive's
    // first failures can come before the consumer has joined its group.
    let health = app.url("/healthz");
    wait_for(
        Duration::from_secs(30),
        "/healthz 200 with PostgreSQL down",
        || async { (status_of(&health).await == 200).then_some(()) },
    )
    .await;
    // ...and stays so while the archiver keeps failing (it retries every
    // interval, each retry another postgres_io error).
    assert_holds(
        Duration::from_secs(3),
        "/healthz 200 with PostgreSQL down",
        || async {
            match status_of(&health).await {
                200 => Ok(()),
                other => Err(format!("status {other}")),
            }
        },
    )
    .await;
    assert_eq!(w.redis.cli(&["EXISTS", &format!("{k}:closed")]).trim(), "1");
    assert_eq!(w.pttl(&k).await, -1, "kept while the archive is down");

    w.pg.start_server();
    let t0 = Instant::now();
    wait_for(Duration::from_secs(60), "the period archived", || async {
        let text = get_text(&metrics).await?;
        let periods = metric_sum(
            &text,
            "rankflow_archive_periods_total",
            &[("board", "plain")],
        );
        let rows = metric_sum(&text, "rankflow_archive_rows_total", &[("board", "plain")]);
        let pending = metric_sum(&text, "rankflow_archive_pending", &[]);
        (periods == 1.0 && rows == 2.0 && pending == 0.0).then_some(())
    })
    .await;
    let took = t0.elapsed();
    assert_eq!(
        w.archived_rows("plain", "", &week).await,
        vec![(1, "b".into(), "2".into()), (2, "a".into(), "1".into())]
    );
    assert!(w.due_members().await.is_empty());
    assert!(w.pttl(&k).await > 0);

    app.sigterm();
    let stopped = Instant::now();
    loop {
        if let Some(status) = app.child.try_wait().expect("try_wait") {
            assert!(status.success(), "{}", app.log());
            break;
        }
        assert!(stopped.elapsed() < Duration::from_secs(10), "{}", app.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "verified: backlog 1 on /metrics while PostgreSQL was down, archived {took:?} after it came back, SIGTERM exit in {:?}",
        stopped.elapsed()
    );
}

/// An `archive.url` that cannot be parsed is a configuration fault: `run`,
/// `check` and `archive` exit 2 naming the setting, without waiting for any
/// server.
#[tokio::test]
async fn an_unusable_archive_url_exits_2_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rankflow.toml");
    let text = format!(
        "[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[redis]\nurl = \"redis://127.0.0.1:1\"\n\
         [archive]\nurl = \"postgres://u@127.0.0.1:notaport/db\"\n{BOARDS}"
    );
    std::fs::write(&config, text).unwrap();
    for command in ["run", "check", "archive"] {
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args([command, "-c"])
            .arg(&config)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("archive.url"), "{command}: {stderr}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{command} waited");
    }
}

/// A shadow board's closed periods may still take replayed events while
/// its backfill runs (docs/rebuilds.md): the archiver leaves them alone,
/// moving them on in the due set, and archives them once it is done.
#[tokio::test]
async fn a_shadows_periods_wait_for_its_backfill() {
    let mut w = World::new();
    w.extra = "[[board]]\nname = \"plain_v2\"\nshadow_of = \"plain\"\nbackfill_from = \"2020-01-06T00:00:00Z\"\n\
               event = \"gift\"\nmember = \"sender_id\"\nscore = \"count * 2\"\nperiods = [\"week\"]\n\
               archive = [\"week\"]\nretention = { week = \"8w\" }\n"
        .into();
    let (week, _, end) = past_week(1);
    let view = format!("week:{week}");
    let close = end + GRACE;
    let rows = [("a".to_string(), 4.0), ("b".to_string(), 2.0)];
    w.write_period("plain_v2", &view, &rows, close).await;
    w.write_period("plain", &view, &rows, close).await;
    let mut archiver = w.archiver(100, "127.0.0.1:1").await;
    let before = Utc::now().timestamp_millis();
    let reports = archiver.pass(None).await.expect("pass");
    assert_eq!(
        archived(&reports),
        BTreeMap::from([(format!("plain//week/{week}"), 2)]),
        "only the live board's period: {reports:?}"
    );
    let mut c = w.redis().await;
    let member = format!("{{plain_v2}}:{view}");
    let score: f64 = redis::cmd("ZSCORE")
        .arg(w.due_key())
        .arg(&member)
        .query_async(&mut c)
        .await
        .expect("ZSCORE");
    assert!(
        score as i64 >= before + 59_000,
        "moved on by a minute: {score} vs now {before}"
    );
    assert_eq!(w.pttl(&w.key("plain_v2", &view)).await, -1, "not closed");

    // Done: it is archived at the next pass once due again.
    let _: () = redis::cmd("HSET")
        .arg(format!("{}:backfill:plain_v2", w.prefix))
        .arg("done")
        .arg(before)
        .query_async(&mut c)
        .await
        .expect("HSET");
    w.add_due("plain_v2", &view, close).await;
    let reports = archiver.pass(None).await.expect("pass");
    assert_eq!(
        archived(&reports),
        BTreeMap::from([(format!("plain_v2//week/{week}"), 2)]),
        "{reports:?}"
    );
    println!(
        "verified: a shadow's closed period waited for its backfill (moved {} s on), then was archived",
        (score as i64 - before) / 1000
    );
}

/// After a shadow is promoted in place of its board (docs/rebuilds.md),
/// the board's periods that end after the promotion are archived, under
/// the board's name, from the shadow's data (what readers were served);
/// periods that ended before it from the board's own.
#[tokio::test]
async fn a_promoted_boards_later_periods_are_archived_from_its_shadow() {
    let mut w = World::new();
    w.extra = "[[board]]\nname = \"plain_v2\"\nshadow_of = \"plain\"\n\
               event = \"gift\"\nmember = \"sender_id\"\nscore = \"count * 2\"\nperiods = [\"week\"]\n\
               archive = [\"week\"]\nretention = { week = \"8w\" }\n"
        .into();
    let (older, _, older_end) = past_week(2);
    let (newer, _, newer_end) = past_week(1);
    let own = [("a".to_string(), 3.0), ("b".to_string(), 1.0)];
    let shadow = [
        ("b".to_string(), 8.0),
        ("a".to_string(), 6.0),
        ("c".to_string(), 2.0),
    ];
    for (week, end) in [(&older, older_end), (&newer, newer_end)] {
        let view = format!("week:{week}");
        w.write_period("plain", &view, &own, end + GRACE).await;
        w.write_period("plain_v2", &view, &shadow, end + GRACE)
            .await;
    }
    let mut c = w.redis().await;
    // Promoted between the two weeks' ends; the shadow's backfill is done.
    let since = older_end + 1;
    let _: () = redis::cmd("HSET")
        .arg(format!("{}:serving", w.prefix))
        .arg("plain")
        .arg(format!(
            "{{\"board\":\"plain_v2\",\"since\":{since},\"actor\":\"ops\"}}"
        ))
        .query_async(&mut c)
        .await
        .expect("HSET serving");
    let _: () = redis::cmd("HSET")
        .arg(format!("{}:backfill:plain_v2", w.prefix))
        .arg("done")
        .arg(since)
        .query_async(&mut c)
        .await
        .expect("HSET done");
    let mut archiver = w.archiver(100, "127.0.0.1:1").await;
    let reports = archiver.pass(None).await.expect("pass");
    assert_eq!(archived(&reports).len(), 4, "{reports:?}");
    let rows = |r: &[(&str, f64)]| -> Vec<(i64, String, String)> {
        r.iter()
            .enumerate()
            .map(|(i, (m, s))| (i as i64 + 1, m.to_string(), s.to_string()))
            .collect()
    };
    let own_rows = rows(&[("a", 3.0), ("b", 1.0)]);
    let shadow_rows = rows(&[("b", 8.0), ("a", 6.0), ("c", 2.0)]);
    assert_eq!(
        w.archived_rows("plain", "", &older).await,
        own_rows,
        "ended before: its own"
    );
    assert_eq!(
        w.archived_rows("plain", "", &newer).await,
        shadow_rows,
        "ended after: the shadow's"
    );
    assert_eq!(w.archived_rows("plain_v2", "", &newer).await, shadow_rows);
    println!(
        "verified: after a promotion, week {newer} of plain was archived from plain_v2's data and week {older} (ended before) from its own"
    );
}
