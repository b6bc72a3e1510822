//! Archiving one closed period of 1,000,000 members into PostgreSQL (a
//! private server started here): rankflow's path, a binary `COPY` streamed
//! in chunks of 10,000 rows inside one transaction, against two baselines
//! measured in the same run (each into empty tables): batched `INSERT ... SELECT unnest(...)` of
//! 10,000 rows per statement, and row-by-row `INSERT` (on a 50,000-row
//! sample: at its rate a million rows would take minutes). Prints rows/s,
//! the ratio to each baseline, and the peak resident memory added while
//! copying (chunks are generated on the fly, as the archiver reads them
//! from Redis, so it stays bounded by a chunk).
//!
//! A last phase runs the whole archiver (`rankflow archive`'s pass) on the
//! same million members kept in a real Redis: close, read in chunks,
//! decode, COPY, restore expiry, so the figure includes reading Redis.
//!
//! Run with `cargo bench --bench archive` (PostgreSQL and Redis from
//! scripts/setup.sh).

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::time::Instant;

use common::postgres::Postgres;
use futures::stream;
use rankflow::archive::ArchiveError;
use rankflow::archive::copy::{Archive, Copied, Copy, PeriodKey, Standing};
use rankflow::archive::numeric::Numeric;
use rankflow::archive::schema;

const MEMBERS: usize = 1_000_000;
const CHUNK: usize = 10_000;
const ROW_BY_ROW: usize = 50_000;

fn key(period: &str) -> PeriodKey {
    PeriodKey {
        board: "star_coins".into(),
        scope: String::new(),
        view: "week".into(),
        period: period.into(),
    }
}

/// Chunk `i` of a board whose scores fall with rank and include fractions.
fn chunk(i: usize) -> Vec<Standing> {
    (i * CHUNK..((i + 1) * CHUNK).min(MEMBERS))
        .map(|r| Standing {
            member: format!("user-{r:07}"),
            score: (MEMBERS - r) as f64 * 2.5,
        })
        .collect()
}

/// Peak resident set (VmHWM) in KiB; `reset` starts a new peak from now.
fn peak_rss_kib(reset: bool) -> u64 {
    if reset {
        // "5" resets the peak to the current resident set (Linux ≥ 4.0).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn copy_path(archive: &mut Archive) -> (f64, u64) {
    let k = key("2026-W47");
    let what = Copy {
        key: &k,
        start_ms: 0,
        end_ms: 1,
        replace: false,
    };
    let chunks = MEMBERS.div_ceil(CHUNK);
    let standings = stream::iter((0..chunks).map(|i| Ok::<_, ArchiveError>(chunk(i))));
    let before = rss_kib();
    peak_rss_kib(true);
    let started = Instant::now();
    let out = archive.copy(what, standings).await.expect("copy");
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(
        out,
        Copied::Done {
            members: MEMBERS as u64
        }
    );
    (
        MEMBERS as f64 / secs,
        peak_rss_kib(false).saturating_sub(before),
    )
}

async fn batched_insert(archive: &mut Archive) -> f64 {
    let client = archive.client();
    let tx = client.transaction().await.expect("transaction");
    let started = Instant::now();
    for i in 0..MEMBERS.div_ceil(CHUNK) {
        let rows = chunk(i);
        let ranks: Vec<i64> = (i * CHUNK..i * CHUNK + rows.len())
            .map(|r| r as i64 + 1)
            .collect();
        let members: Vec<&str> = rows.iter().map(|s| s.member.as_str()).collect();
        let scores: Vec<String> = rows.iter().map(|s| s.score.to_string()).collect();
        tx.execute(
            "INSERT INTO rankflow_archive (board, scope, view, period, rank, member, score)
             SELECT 'star_coins', '', 'week', '2026-W46', r, m, s::numeric
               FROM unnest($1::int8[], $2::text[], $3::text[]) AS t(r, m, s)",
            &[&ranks, &members, &scores],
        )
        .await
        .expect("batched insert");
    }
    tx.commit().await.expect("commit");
    MEMBERS as f64 / started.elapsed().as_secs_f64()
}

async fn row_by_row(archive: &mut Archive) -> f64 {
    let client = archive.client();
    let tx = client.transaction().await.expect("transaction");
    let stmt = tx
        .prepare(
            "INSERT INTO rankflow_archive (board, scope, view, period, rank, member, score)
             VALUES ('star_coins', '', 'week', '2026-W45', $1, $2, $3)",
        )
        .await
        .expect("prepare");
    let started = Instant::now();
    for r in 0..ROW_BY_ROW {
        let member = format!("user-{r:07}");
        let score = Numeric((MEMBERS - r) as f64 * 2.5);
        tx.execute(&stmt, &[&(r as i64 + 1), &member, &score])
            .await
            .expect("insert");
    }
    tx.commit().await.expect("commit");
    ROW_BY_ROW as f64 / started.elapsed().as_secs_f64()
}

async fn empty(archive: &mut Archive) {
    archive
        .client()
        .batch_execute("TRUNCATE rankflow_archive, rankflow_archived_periods")
        .await
        .expect("truncate");
}

/// The archiver's own pass over one due week of `MEMBERS` members in a
/// real Redis: rows/s and peak RSS added.
async fn archiver_path(pg: &Postgres) -> (f64, u64) {
    let redis = common::Redis::start();
    let prefix = common::unique("bench");
    let week = "2026-W10"; // 2026-03-02 .. 2026-03-09, long closed
    let close_ms = 1_773_014_400_000i64 + 600_000;
    let mut c = redis.conn().await;
    let key = format!("{prefix}:{{star_coins}}:week:{week}");
    for i in 0..MEMBERS.div_ceil(CHUNK) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(&key);
        for s in chunk(i) {
            cmd.arg(s.score).arg(s.member);
        }
        let _: () = cmd.query_async(&mut c).await.expect("ZADD");
    }
    let _: () = redis::cmd("ZADD")
        .arg(format!("{prefix}:archive:due"))
        .arg(close_ms)
        .arg(format!("{{star_coins}}:week:{week}"))
        .query_async(&mut c)
        .await
        .expect("ZADD due");
    let toml = format!(
        "[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[redis]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n\
         [archive]\nurl = \"{}\"\nchunk = {CHUNK}\n\
         [[board]]\nname = \"star_coins\"\nevent = \"gift\"\nmember = \"receiver_id\"\nscore = \"count\"\n\
         periods = [\"week\"]\narchive = [\"week\"]\n",
        redis.url(),
        pg.url()
    );
    let config =
        rankflow::config::Config::from_toml(&toml, std::path::Path::new("bench.toml"), Vec::new())
            .expect("bench config");
    let clock: rankflow::clock::SharedClock = std::sync::Arc::new(rankflow::clock::SystemClock);
    let mut archiver = rankflow::app::archiver(&config, clock)
        .await
        .expect("archiver");
    archiver.connect().await.expect("connect");
    let before = rss_kib();
    peak_rss_kib(true);
    let started = Instant::now();
    let reports = archiver.pass(None).await.expect("pass");
    let secs = started.elapsed().as_secs_f64();
    let rows: i64 = {
        let mut a = Archive::connect(&pg.url()).await.expect("connect");
        a.client()
            .query_one("SELECT members FROM rankflow_archived_periods WHERE board = 'star_coins' AND period = $1", &[&week])
            .await
            .expect("completion row")
            .get(0)
    };
    assert_eq!(reports.len(), 1, "one period archived: {reports:?}");
    assert_eq!(rows, MEMBERS as i64, "every member archived");
    (
        MEMBERS as f64 / secs,
        peak_rss_kib(false).saturating_sub(before),
    )
}

#[tokio::main]
async fn main() {
    let pg = Postgres::start();
    let mut archive = Archive::connect(&pg.url()).await.expect("connect");
    schema::migrate(archive.client()).await.expect("migrate");
    // rankflow's path first, so that what it adds to the resident set is
    // not memory the allocator kept from an earlier phase.
    // Each phase writes into empty tables, so index sizes are alike.
    let (copy, peak) = copy_path(&mut archive).await;
    empty(&mut archive).await;
    let slow = row_by_row(&mut archive).await;
    empty(&mut archive).await;
    let batched = batched_insert(&mut archive).await;
    empty(&mut archive).await;
    let (whole, whole_peak) = archiver_path(&pg).await;
    println!("archive of one period, {MEMBERS} members, chunks of {CHUNK}:");
    println!("  row-by-row INSERT ({ROW_BY_ROW} rows): {slow:>10.0} rows/s");
    println!("  batched INSERT unnest:              {batched:>10.0} rows/s");
    println!(
        "  binary COPY (rankflow):             {copy:>10.0} rows/s  ({:.1}x row-by-row, {:.2}x batched)",
        copy / slow,
        copy / batched
    );
    println!(
        "  whole archiver, Redis -> PostgreSQL: {whole:>10.0} rows/s  ({:.1}x row-by-row)",
        whole / slow
    );
    println!(
        "  peak RSS added while copying: {peak} KiB; whole archiver pass: {whole_peak} KiB (process peak {} KiB)",
        peak_rss_kib(false)
    );
}
