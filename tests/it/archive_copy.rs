//! The archive's PostgreSQL side against a real PostgreSQL (a private
//! cluster per test): migrations, exact scores, one transaction per copy,
//! the per-period lock, and copies cut short leaving nothing behind.

use crate::common;

use common::postgres::Postgres;
use futures::stream;
use rankflow::archive::ArchiveError;
use rankflow::archive::copy::{Archive, Copied, Copy, PeriodKey, Standing};
use rankflow::archive::schema;

fn key(period: &str) -> PeriodKey {
    PeriodKey {
        board: "star_coins".into(),
        scope: "room:1".into(),
        view: "week".into(),
        period: period.into(),
    }
}

fn what(key: &PeriodKey, replace: bool) -> Copy<'_> {
    Copy {
        key,
        start_ms: 1_763_337_600_000,
        end_ms: 1_763_942_400_000,
        replace,
    }
}

/// `n` standings in chunks of `chunk`, scores from a hand-made formula.
fn standings(n: usize, chunk: usize) -> Vec<Result<Vec<Standing>, ArchiveError>> {
    let all: Vec<Standing> = (0..n)
        .map(|i| Standing {
            member: format!("m{i}"),
            score: (n - i) as f64 * 1.5,
        })
        .collect();
    all.chunks(chunk).map(|c| Ok(c.to_vec())).collect()
}

async fn archive(pg: &Postgres) -> Archive {
    let mut a = Archive::connect(&pg.url()).await.unwrap();
    schema::migrate(a.client()).await.unwrap();
    a
}

async fn count(a: &mut Archive, sql: &str) -> i64 {
    a.client().query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn migrations_run_once_even_when_instances_start_together() {
    let pg = Postgres::start();
    let url = pg.url();
    let runs = (0..4).map(|_| {
        let url = url.clone();
        tokio::spawn(async move {
            let mut a = Archive::connect(&url).await.unwrap();
            schema::migrate(a.client()).await.unwrap()
        })
    });
    let found: Vec<i32> = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    // Exactly one of them found an empty database.
    assert_eq!(found.iter().filter(|v| **v == 0).count(), 1, "{found:?}");
    let mut a = archive(&pg).await;
    assert_eq!(
        count(&mut a, "SELECT count(*) FROM rankflow_schema_version").await,
        schema::latest() as i64
    );
    let indexes = count(
        &mut a,
        "SELECT count(*) FROM pg_indexes WHERE tablename IN ('rankflow_archive', 'rankflow_archived_periods')",
    )
    .await;
    assert_eq!(
        indexes, 5,
        "two primary keys, the unique member index, the hidden rows' and the erasures' indexes"
    );
    println!(
        "verified: 4 instances migrated together, one applied version {}",
        schema::latest()
    );
}

#[tokio::test]
async fn scores_are_stored_exactly() {
    let pg = Postgres::start();
    let mut a = archive(&pg).await;
    // Hand-picked doubles: integers at the edge of exactness, fractions
    // that print long, tiny and huge magnitudes, negatives, zero.
    let mut scores = vec![
        0.0,
        1.0,
        -1.0,
        0.1,
        0.30000000000000004,
        123456.789,
        9007199254740992.0,
        -9007199254740992.0,
        4503599627370495.5,
        1e-300,
        5e-324,
        1.7976931348623157e308,
        -2.5e-7,
        10000.0,
        0.0001,
    ];
    // And pseudo-random bit patterns (a fixed LCG: the same every run).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while scores.len() < 2000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let f = f64::from_bits(x);
        if f.is_finite() {
            scores.push(f);
        }
    }
    let rows: Vec<Standing> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| Standing {
            member: format!("m{i}"),
            score: *s,
        })
        .collect();
    let k = key("2026-W47");
    let out = a
        .copy(what(&k, false), stream::iter(vec![Ok(rows)]))
        .await
        .unwrap();
    assert_eq!(
        out,
        Copied::Done {
            members: scores.len() as u64
        }
    );
    let back = a
        .client()
        .query(
            "SELECT rank, member, score::float8, score::text FROM rankflow_archive ORDER BY rank",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(back.len(), scores.len());
    for (i, row) in back.iter().enumerate() {
        let (rank, member, score, text): (i64, String, f64, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(rank, i as i64 + 1);
        assert_eq!(member, format!("m{i}"));
        assert_eq!(
            score.to_bits(),
            (scores[i] + 0.0).to_bits(),
            "score {} stored as {text}",
            scores[i]
        );
        // PostgreSQL's own reading of the text is the same decimal Rust prints.
        assert_eq!(text.parse::<f64>().unwrap(), scores[i], "{text}");
    }
    println!(
        "verified: {} scores (edge cases and random bit patterns) read back bit for bit",
        scores.len()
    );
}

#[tokio::test]
async fn a_copy_is_complete_or_absent_and_never_twice() {
    let pg = Postgres::start();
    let mut a = archive(&pg).await;
    let k = key("2026-W47");

    // Cut short after 3 of 10 chunks (a Redis failure mid-read): nothing stays.
    let mut broken = standings(10_000, 1_000);
    broken.truncate(3);
    broken.push(Err(ArchiveError::Source("Redis went away".into())));
    let err = a
        .copy(what(&k, false), stream::iter(broken))
        .await
        .unwrap_err();
    assert!(matches!(err, ArchiveError::Source(_)), "{err}");
    assert_eq!(
        count(&mut a, "SELECT count(*) FROM rankflow_archive").await,
        0
    );
    assert_eq!(
        count(&mut a, "SELECT count(*) FROM rankflow_archived_periods").await,
        0
    );

    // Another archiver holds the period: this one leaves it alone.
    let mut other = Archive::connect(&pg.url()).await.unwrap();
    let tx = other.client().transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&schema::LOCK_CLASS, &k.path()],
    )
    .await
    .unwrap();
    let busy = a
        .copy(what(&k, false), stream::iter(standings(10, 5)))
        .await
        .unwrap();
    assert_eq!(busy, Copied::Busy);
    // Its connection dies (as with kill -9): the lock goes with it, as
    // soon as PostgreSQL has seen the connection close (asynchronously, so
    // a copy right after may still find it held: retried, as the archiver
    // does every tick, within a bound).
    drop(tx);
    drop(other);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let done = loop {
        let out = a
            .copy(what(&k, false), stream::iter(standings(10_000, 1_000)))
            .await
            .unwrap();
        if out != Copied::Busy || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(done, Copied::Done { members: 10_000 });
    let again = a
        .copy(what(&k, false), stream::iter(standings(5, 5)))
        .await
        .unwrap();
    assert_eq!(again, Copied::AlreadyArchived);
    assert_eq!(
        count(&mut a, "SELECT count(*) FROM rankflow_archive").await,
        10_000
    );

    // Copied again on request: replaced, not added to.
    let redo = a
        .copy(what(&k, true), stream::iter(standings(7, 3)))
        .await
        .unwrap();
    assert_eq!(redo, Copied::Done { members: 7 });
    assert_eq!(
        count(&mut a, "SELECT count(*) FROM rankflow_archive").await,
        7
    );
    let members: i64 = a
        .client()
        .query_one("SELECT members FROM rankflow_archived_periods", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(members, 7);
    let top: (String, String) = {
        let r = a
            .client()
            .query_one(
                "SELECT member, score::text FROM rankflow_archive WHERE rank = 1",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(top, ("m0".to_string(), "10.5".to_string()));
    println!(
        "verified: cut-short copy left 0 rows; busy period skipped; 10000 rows once; replaced by 7"
    );
}

#[tokio::test]
async fn an_unparsable_url_is_a_permanent_fault() {
    let err = match Archive::connect("postgres://host:notaport/db").await {
        Err(e) => e,
        Ok(_) => panic!("connected with a broken URL"),
    };
    assert!(!err.is_retriable(), "{err}");
    assert!(err.to_string().starts_with("archive.url"), "{err}");
}
