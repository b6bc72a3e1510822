//! A changed `[archive] grace` decides when periods close, also those
//! written before the change (docs/history.md, "Closing and late events"),
//! with the same answer in the consumer (late or not), the apply script and
//! the archiver (closed and copied or not). Tried as a user would: boards
//! written with one grace, the fleet restarted with another, against real
//! Redis and PostgreSQL.

use crate::common;

use std::sync::Arc;

use common::direct::Direct;
use common::postgres::Postgres;
use common::*;
use rankflow::archive::runner::{Archiver, Outcome, Report};
use rankflow::clock::{ManualClock, SharedClock};
use rankflow::config::Config;
use rankflow::telemetry::Outcome as EventOutcome;
use serde_json::json;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
/// 2026-11-21T00:00:00Z, a Saturday: day D of the tests.
const D: i64 = 1_795_219_200_000;

const BOARDS: &str = r#"
[[board]]
name = "days"
event = "gift"
member = "receiver_id"
score = "count"
periods = ["day"]
archive = ["day"]
"#;

fn archive_section(pg: &Postgres, grace: &str) -> String {
    format!(
        "[archive]\nurl = \"{}\"\ngrace = \"{grace}\"\ninterval_ms = 3600000\n",
        pg.url()
    )
}

/// The consumer's path (decode, rules, batch, apply script) with `grace`.
async fn consumer(redis: &Redis, pg: &Postgres, prefix: &str, grace: &str, now: i64) -> Direct {
    let text = format!("{}{BOARDS}", archive_section(pg, grace));
    Direct::new(&redis.url(), prefix, &text, now).await
}

/// An archiver with `grace`, on a clock standing at `now`.
async fn archiver(redis: &Redis, pg: &Postgres, prefix: &str, grace: &str, now: i64) -> Archiver {
    let text = format!(
        "{}{BOARDS}\n[kafka]\nbrokers = \"127.0.0.1:{}\"\ntopics = [\"t\"]\n[redis]\nurl = \"{}\"\nkey_prefix = \"{prefix}\"\n",
        archive_section(pg, grace),
        free_port(),
        redis.url()
    );
    let config =
        Config::from_toml(&text, std::path::Path::new("t.toml"), Vec::new()).expect("config");
    let clock: SharedClock = Arc::new(ManualClock::new(now));
    let mut a = rankflow::app::archiver(&config, clock)
        .await
        .expect("archiver");
    a.connect().await.expect("PostgreSQL");
    a
}

fn gift(receiver: &str, ts: i64) -> serde_json::Value {
    json!({"type": "gift", "event_id": format!("{receiver}-{ts}"), "ts": ts,
           "sender_id": "s", "receiver_id": receiver, "gift_id": "g", "count": 1, "value": 1})
}

/// The periods a pass archived, with their member counts, sorted.
fn archived(reports: &[Report]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = reports
        .iter()
        .filter_map(|r| match r.outcome {
            Outcome::Archived { members, .. } => Some((r.period.clone(), members)),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn day_path(day: i64) -> String {
    let date = chrono::DateTime::from_timestamp_millis(day)
        .expect("date")
        .date_naive();
    format!("days//day/{date}")
}

/// Written with 30 days of grace, restarted with one second: the past days
/// close at once. Before the fix their close time stayed end + 30 days in
/// the due set: nothing was archived and `rankflow_archive_pending` stayed
/// 0, while the consumer already counted their events late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortened_grace_closes_the_periods_written_before_it() {
    let redis = Redis::start();
    let pg = Postgres::start();
    let prefix = unique("gs");
    let now = D + 12 * HOUR;
    let mut old = consumer(&redis, &pg, &prefix, "30d", now).await;
    let gifts: Vec<_> = (0..4)
        .flat_map(|d| {
            let day = D - (3 - d) * DAY;
            [
                gift("a", day + HOUR),
                gift("b", day + 2 * HOUR),
                gift("a", day + 3 * HOUR),
            ]
        })
        .collect();
    let (outcomes, _) = old.apply(&gifts).await;
    assert!(
        outcomes.iter().all(|o| *o == EventOutcome::Applied),
        "{outcomes:?}"
    );
    let before = archiver(&redis, &pg, &prefix, "30d", now)
        .await
        .pass(None)
        .await
        .expect("pass");
    assert!(
        before.is_empty(),
        "nothing is due with 30 days of grace: {before:?}"
    );

    // The fleet restarts with 1 s of grace.
    let mut new = consumer(&redis, &pg, &prefix, "1s", now).await;
    new.take_over(&old);
    let (outcomes, _) = new.apply(&[gift("c", D - 2 * DAY + HOUR)]).await;
    assert_eq!(
        outcomes,
        vec![EventOutcome::Late],
        "the consumer says D-2 is closed"
    );
    let mut a = archiver(&redis, &pg, &prefix, "1s", now).await;
    let reports = a.pass(None).await.expect("pass");
    let want: Vec<(String, u64)> = (1..=3).rev().map(|n| (day_path(D - n * DAY), 2)).collect();
    assert_eq!(archived(&reports), want, "{reports:?}");
    // Day D is still open by both: its events are taken, it is not archived.
    let (outcomes, _) = new.apply(&[gift("c", D + 13 * HOUR)]).await;
    assert_eq!(outcomes, vec![EventOutcome::Applied]);
    assert!(archived(&a.pass(None).await.expect("pass")).is_empty());
    println!("verified: 30d -> 1s: the three past days were archived at once, day D stays open");
}

/// Written with one second of grace, restarted with two hours: a day that
/// ended 30 minutes ago is still open, for the consumer, the script and the
/// archiver, though the due set listed it by its old close time; it closes
/// at end + 2 h with the event it took meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lengthened_grace_keeps_open_what_it_covers() {
    let redis = Redis::start();
    let pg = Postgres::start();
    let prefix = unique("gl");
    let end = D + DAY;
    let mut old = consumer(&redis, &pg, &prefix, "1s", D + 23 * HOUR).await;
    let (outcomes, _) = old.apply(&[gift("a", D + 22 * HOUR)]).await;
    assert_eq!(outcomes, vec![EventOutcome::Applied]);

    // 30 minutes after the day's end, with 2 hours of grace.
    let later = end + 30 * MIN;
    let mut new = consumer(&redis, &pg, &prefix, "2h", later).await;
    new.take_over(&old);
    let (outcomes, report) = new.apply(&[gift("b", D + 23 * HOUR)]).await;
    assert_eq!(
        outcomes,
        vec![EventOutcome::Applied],
        "open for the consumer"
    );
    assert!(report.late_cutoffs.is_empty(), "and for the apply script");
    let mut a = archiver(&redis, &pg, &prefix, "2h", later).await;
    let reports = a.pass(None).await.expect("pass");
    assert!(
        archived(&reports).is_empty(),
        "closed too early: {reports:?}"
    );
    let (outcomes, report) = new.apply(&[gift("c", D + 23 * HOUR)]).await;
    assert_eq!(outcomes, vec![EventOutcome::Applied]);
    assert!(
        report.late_cutoffs.is_empty(),
        "the archiver did not close it"
    );

    // A consumer still on 1 s registers the next day meanwhile, with its
    // old close time (end + 1 s), after the archiver recorded 2 h.
    old.take_over(&new);
    let (outcomes, _) = old.apply(&[gift("d", end + HOUR)]).await;
    assert_eq!(outcomes, vec![EventOutcome::Applied]);

    // 30 minutes after the next day's end: day D (closed at end + 2 h) is
    // archived with its three receivers; the next day, listed by its old
    // close time, is not closed before end + 2 h either.
    let next_end = end + DAY;
    let mut a = archiver(&redis, &pg, &prefix, "2h", next_end + 30 * MIN).await;
    assert_eq!(
        archived(&a.pass(None).await.expect("pass")),
        vec![(day_path(D), 3)]
    );
    let mut a = archiver(&redis, &pg, &prefix, "2h", next_end + 2 * HOUR).await;
    assert_eq!(
        archived(&a.pass(None).await.expect("pass")),
        vec![(day_path(D + DAY), 1)]
    );
    println!(
        "verified: 1s -> 2h: a day stayed open 30 min after its end and closed at end + 2 h with 3 members; one registered with 1 s closed at end + 2 h too"
    );
}
