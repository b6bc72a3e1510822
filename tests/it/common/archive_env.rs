//! A Redis and a private PostgreSQL behind rankflow's HTTP API, with the
//! reader able to fall back to the archive: what the tests of archived
//! reads and rank styles (`tests/it/archive_reads.rs`, `tests/it/rank_styles.rs`)
//! start from. Live periods are written with plain Redis commands on the
//! documented layout (docs/redis-layout.md; the keys and the stored tie key
//! are written here from it, not taken from rankflow's code), archived
//! periods with [`Archive::copy`] as the archiver does, and read back
//! through the API.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use chrono::{NaiveDate, Weekday};
use futures::stream;
use rankflow::archive::copy::{Archive, Copied, Copy, PeriodKey, Standing};
use rankflow::archive::read::{ArchiveReader, sql};
use rankflow::archive::schema;
use serde_json::Value;

use super::direct::Direct;
use super::postgres::Postgres;
use super::{Redis, get_json, unique};

pub struct ArchiveEnv {
    pub redis: Redis,
    pub pg: Postgres,
    pub prefix: String,
    /// Base URL of the API.
    pub base: String,
    /// A migrated connection to write archived periods with.
    pub writer: Archive,
    _direct: Direct,
}

impl ArchiveEnv {
    /// `boards` gets the PostgreSQL URL and returns the `[archive]` and
    /// `[[board]]` tables; `now` is the readers' clock.
    pub async fn start(name: &str, boards: fn(&str) -> String, now: i64) -> ArchiveEnv {
        let redis = Redis::start();
        let pg = Postgres::start();
        let mut writer = Archive::connect(&pg.url()).await.expect("connect");
        schema::migrate(writer.client()).await.expect("migrate");
        let prefix = unique(name);
        let direct = Direct::new(&redis.url(), &prefix, &boards(&pg.url()), now).await;
        let reader = direct
            .reader()
            .with_archive(ArchiveReader::new(&pg.url()).expect("archive url"));
        let slot = Arc::new(OnceLock::new());
        let _ = slot.set(reader);
        let base = direct.serve(slot).await;
        ArchiveEnv {
            redis,
            pg,
            prefix,
            base,
            writer,
            _direct: direct,
        }
    }
    /// The live key of a week of `board` (in `scope`, if scoped).
    pub fn key(&self, board: &str, scope: Option<&str>, period: &str) -> String {
        let tag = match scope {
            Some(s) => format!("{board}:{s}"),
            None => board.to_string(),
        };
        format!("{}:{{{tag}}}:week:{period}", self.prefix)
    }

    /// Writes `ms` as the live key of a week (and, for the [`EARLIEST`]
    /// board, its time hash).
    pub async fn write_live(&self, board: &str, scope: Option<&str>, period: &str, ms: &[Member]) {
        let key = self.key(board, scope, period);
        let mut c = self.redis.conn().await;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&key);
        for m in ms {
            zadd.arg(m.1).arg(stored(board, m));
        }
        let added: usize = zadd.query_async(&mut c).await.expect("ZADD");
        assert_eq!(added, ms.len());
        if board == EARLIEST {
            let mut hset = redis::cmd("HSET");
            hset.arg(format!("{key}:t"));
            for m in ms {
                hset.arg(&m.0).arg(m.2);
            }
            let _: usize = hset.query_async(&mut c).await.expect("HSET");
        }
    }

    /// Deletes the live key of a week and its time hash.
    pub async fn delete_live(&self, board: &str, scope: Option<&str>, period: &str) {
        let key = self.key(board, scope, period);
        let mut c = self.redis.conn().await;
        let _: usize = redis::cmd("DEL")
            .arg(&key)
            .arg(format!("{key}:t"))
            .query_async(&mut c)
            .await
            .expect("DEL");
    }

    /// Copies `ms` (in rank order) as the archive of a week, in chunks of 4
    /// (so ties also cross chunk boundaries), as the archiver does: a week
    /// already archived is not copied again, and then this fails.
    pub async fn archive(&mut self, board: &str, scope: Option<&str>, period: &str, ms: &[Member]) {
        let key = week_key(board, scope, period);
        let chunks: Vec<_> = ms
            .chunks(4)
            .map(|c| {
                Ok(c.iter()
                    .map(|m| Standing {
                        member: m.0.clone(),
                        score: m.1,
                    })
                    .collect())
            })
            .collect();
        let copied = self
            .writer
            .copy(week_copy(&key), stream::iter(chunks))
            .await
            .expect("copy");
        assert_eq!(
            copied,
            Copied::Done {
                members: ms.len() as u64
            }
        );
    }

    /// The API's URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Calls of each command Redis has served (`INFO commandstats`).
    pub async fn commandstats(&self) -> BTreeMap<String, u64> {
        let text = self.redis.cli(&["INFO", "commandstats"]);
        text.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.strip_prefix("calls=")?.split(',').next()?;
                Some((name.to_string(), calls.parse().ok()?))
            })
            .collect()
    }
}

/// The `[archive]` table of these tests: the PostgreSQL at `pg_url`,
/// periods archived 10 minutes after they close.
pub fn archive_table(pg_url: &str) -> String {
    format!("\n[archive]\nurl = \"{pg_url}\"\ngrace = \"10m\"\n")
}

/// The `plain` board: points of `score` events per `user_id` by week,
/// archived.
pub const PLAIN: &str = r#"
[[board]]
name = "plain"
event = "score"
member = "user_id"
score = "points"
periods = ["week"]
archive = ["week"]
"#;

/// The [`EARLIEST`] board: `plain` with ties broken by the earliest time.
pub const SPEED: &str = r#"
[[board]]
name = "speed"
event = "score"
member = "user_id"
score = "points"
periods = ["week"]
tie_break = "earliest"
archive = ["week"]
"#;

/// One member of a board written live or archived: name, value, and the
/// time it got the value (read by the [`EARLIEST`] board only).
pub type Member = (String, f64, i64);

/// The board of these tests with `tie_break = "earliest"` ([`SPEED`]).
pub const EARLIEST: &str = "speed";

/// The member as a board keeps it: for the [`EARLIEST`] board `2^48 − 1 −
/// ts` in 12 hex digits before the member, the documented tie key of an
/// `earliest` board read in descending order; else the member itself.
pub fn stored(board: &str, m: &Member) -> String {
    if board == EARLIEST {
        format!("{:012x}{}", (1i64 << 48) - 1 - m.2, m.0)
    } else {
        m.0.clone()
    }
}

/// The archive's key of a week of `board` (in `scope`, if scoped).
pub fn week_key(board: &str, scope: Option<&str>, period: &str) -> PeriodKey {
    PeriodKey {
        board: board.into(),
        scope: scope.unwrap_or("").into(),
        view: "week".into(),
        period: period.into(),
    }
}

/// Reads each `(path, status, body)` of `reads` from the API at `base`:
/// the status and body must be the expected ones, the body of a 200 with
/// `"source": source` added (left out of what is returned).
pub async fn check_reads(base: &str, reads: &[(String, u16, Value)], source: &str) -> Vec<Value> {
    let mut bodies = Vec::new();
    for (path, status, want) in reads {
        let (code, mut body) = get_json(&format!("{base}{path}")).await;
        assert_eq!(code, *status, "{path}: {body}");
        if code == 200 {
            assert_eq!(body["source"], source, "{path}: {body}");
            body.as_object_mut().expect("object").remove("source");
        }
        assert_eq!(&body, want, "{path} ({source})");
        bodies.push(body);
    }
    bodies
}

/// What to copy to archive the week `key` names, as the archiver asks: its
/// bounds, and no copy over one already complete.
pub fn week_copy(key: &PeriodKey) -> Copy<'_> {
    let (start_ms, end_ms) = week_bounds(&key.period);
    Copy {
        key,
        start_ms,
        end_ms,
        replace: false,
    }
}

/// The bounds of an ISO week (`2026-W45`) in ms: Monday 00:00 UTC and the
/// next Monday's.
pub fn week_bounds(period: &str) -> (i64, i64) {
    let (y, w) = period.split_once("-W").expect("week id");
    let start = NaiveDate::from_isoywd_opt(
        y.parse().expect("year"),
        w.parse().expect("week"),
        Weekday::Mon,
    )
    .expect("week")
    .and_hms_opt(0, 0, 0)
    .expect("midnight")
    .and_utc()
    .timestamp_millis();
    (start, start + 7 * 86_400_000)
}

/// ANALYZEs the archive's tables (holding large periods, so the planner
/// has a real choice), then EXPLAINs its read statements (a page of ranks
/// 100-150, `member`, the list `ids`, 5 around `member`) on the period
/// `key` in every rank style (docs/http-api.md),
/// and checks their plans: none scans the
/// rows table (the completion table has a row per period, and a scan of it
/// is the planner's rightful choice); a page uses the primary key, a member
/// or a list the member index, `around` both (a bitmap scan of the primary
/// key, whose range depends on the member's rank, is still the index).
pub async fn assert_reads_use_indexes(
    client: &tokio_postgres::Client,
    key: &PeriodKey,
    member: &str,
    ids: &[String],
) {
    let (b, s, v, p) = (&key.board, &key.scope, &key.view, &key.period);
    client
        .batch_execute("ANALYZE rankflow_archive; ANALYZE rankflow_archived_periods")
        .await
        .expect("analyze");
    let explain = |sql: &str| format!("EXPLAIN {sql}");
    for style in ["ordinal", "competition", "dense"] {
        let plans = [
            (
                "page",
                client
                    .query(
                        &explain(sql::PAGE),
                        &[&b, &s, &v, &p, &100i64, &150i64, &style],
                    )
                    .await,
            ),
            (
                "member",
                client
                    .query(&explain(sql::MEMBER), &[&b, &s, &v, &p, &member, &style])
                    .await,
            ),
            (
                "members",
                client
                    .query(&explain(sql::MEMBERS), &[&b, &s, &v, &p, &ids, &style])
                    .await,
            ),
            (
                "around",
                client
                    .query(
                        &explain(sql::AROUND),
                        &[&b, &s, &v, &p, &member, &5i64, &style],
                    )
                    .await,
            ),
        ];
        for (name, plan) in plans {
            let text: String = plan
                .expect("explain")
                .iter()
                .map(|r| r.get::<_, String>(0) + "\n")
                .collect();
            assert!(
                !text.contains("Seq Scan on rankflow_archive "),
                "{name} ({style}) scans the rows:\n{text}"
            );
            let uses = |index: &str| {
                text.contains(&format!("Index Scan using {index} "))
                    || text.contains(&format!("Bitmap Index Scan on {index} "))
            };
            let ok = match name {
                "page" => uses("rankflow_archive_pkey"),
                "member" | "members" => uses("rankflow_archive_member"),
                _ => uses("rankflow_archive_member") && uses("rankflow_archive_pkey"),
            };
            assert!(ok, "{name} ({style}):\n{text}");
        }
    }
}
