//! The archive's tables in PostgreSQL, created and migrated by rankflow:
//! numbered, additive migrations (files in `sql/`), recorded in
//! `rankflow_schema_version`, applied under an advisory lock so that the
//! instances of a fleet starting together migrate once.
//!
//! A migration that alters a table needs its exclusive lock, and while it
//! waits for it (behind a long report, another instance's copy) every new
//! query of that table queues behind the migration. So each attempt runs
//! with a short `lock_timeout` ([`LOCK_WAIT`]): when it expires the
//! attempt is rolled back, the sessions holding locks on rankflow's tables
//! are logged in a sentence, the queue drains, and the migration is tried
//! again, a bounded number of times before it fails with a message naming
//! those sessions (docs/history.md, "Migrations and locks").

use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::ArchiveError;

/// Advisory-lock class of rankflow's locks (an arbitrary constant; with the
/// second key it names one lock among other applications' locks).
pub const LOCK_CLASS: i32 = 0x726b_666c; // "rkfl"
/// Second key of the migration lock (period locks use a hash of the period).
const MIGRATION_LOCK: i32 = 0;

/// One schema change. Migrations only add (tables, columns, indexes), so an
/// older rankflow keeps working against a newer schema.
pub(crate) struct Migration {
    pub(crate) version: i32,
    pub(crate) description: &'static str,
    pub(crate) sql: &'static str,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "archived periods and their standings",
        sql: include_str!("sql/001_archive.sql"),
    },
    Migration {
        version: 2,
        description: "when each period was announced on the closed topic",
        sql: include_str!("sql/002_announced.sql"),
    },
    Migration {
        version: 3,
        description: "competition and dense ranks of archived rows",
        sql: include_str!("sql/003_rank_styles.sql"),
    },
    Migration {
        version: 4,
        description: "every field of composite boards' archived rows",
        sql: include_str!("sql/004_composite_fields.sql"),
    },
    Migration {
        version: 5,
        description: "hidden members' archived rows, and a member index for erasures",
        sql: include_str!("sql/005_hidden_members.sql"),
    },
];

/// The schema version this rankflow writes.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// How a migration waits for its locks.
#[derive(Debug, Clone, Copy)]
pub struct LockWait {
    /// The `lock_timeout` of each attempt: the longest a migration makes
    /// the queries queued behind its lock request wait.
    pub timeout: Duration,
    /// Attempts before the migration fails.
    pub attempts: u32,
    /// Pause between attempts, in which the queued queries run.
    pub pause: Duration,
}

/// rankflow's own: a queue behind a migration never lasts more than 2 s
/// (reads of the archive allow 5 s), and a migration that cannot get its
/// locks for about 30 s fails (the archiver tries again on a later pass).
pub const LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(2),
    attempts: 10,
    pause: Duration::from_secs(1),
};

/// Brings the schema up to [`latest`]; returns the version found before.
/// Waits for locks as [`LOCK_WAIT`] says.
pub async fn migrate(client: &mut Client) -> Result<i32, ArchiveError> {
    migrate_waiting(client, LOCK_WAIT).await
}

/// [`migrate`], waiting for locks as `wait` says. Each attempt that runs
/// into its `lock_timeout` is rolled back and logged (a warning naming the
/// sessions that hold locks on rankflow's tables); after `wait.attempts`
/// of them it fails with [`ArchiveError::MigrationLocked`].
pub async fn migrate_waiting(client: &mut Client, wait: LockWait) -> Result<i32, ArchiveError> {
    let mut attempt = 1;
    loop {
        let e = match migrate_once(client, wait.timeout).await {
            Ok(found) => {
                if attempt > 1 {
                    tracing::info!(attempt, "The archive schema migration got its locks.");
                }
                return Ok(found);
            }
            Err(ArchiveError::Postgres(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => e,
            Err(e) => return Err(e),
        };
        let holders = lock_holders(client)
            .await
            .unwrap_or_else(|why| format!("(could not be listed: {why})"));
        let waited = format!("{} ms", wait.timeout.as_millis());
        if attempt >= wait.attempts {
            return Err(ArchiveError::MigrationLocked(format!(
                "{attempt} attempts each waited {waited} (lock_timeout) for a lock and were rolled back ({e}); \
                 sessions holding locks on rankflow's tables: {holders}. \
                 Let them finish or end them (pg_terminate_backend), and the next attempt migrates"
            )));
        }
        tracing::warn!(
            attempt,
            attempts = wait.attempts,
            waited = %waited,
            holders = %holders,
            "The archive schema migration waited for a lock held by other sessions, was rolled back so as not to hold up their queries, and will be tried again."
        );
        tokio::time::sleep(wait.pause).await;
        attempt += 1;
    }
}

/// One attempt, in one transaction with `lock_timeout` set for it alone.
async fn migrate_once(client: &mut Client, lock_timeout: Duration) -> Result<i32, ArchiveError> {
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = {}",
        lock_timeout.as_millis().max(1)
    ))
    .await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&LOCK_CLASS, &MIGRATION_LOCK],
    )
    .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS rankflow_schema_version (
             version     integer     PRIMARY KEY,
             description text        NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let found: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM rankflow_schema_version",
            &[],
        )
        .await?
        .try_get(0)?;
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO rankflow_schema_version (version, description) VALUES ($1, $2)",
            &[&m.version, &m.description],
        )
        .await?;
        tracing::info!(
            version = m.version,
            description = m.description,
            "Archive schema migrated."
        );
    }
    tx.commit().await?;
    if found > latest() {
        tracing::warn!(
            found,
            known = latest(),
            "The archive schema is newer than this rankflow knows; it only adds, so this version keeps working."
        );
    }
    Ok(found)
}

/// The sessions holding locks on rankflow's tables or its migration lock,
/// longest transaction first, as a clause for a log line: who they are,
/// what they are doing and since when (never their query text, which may
/// hold data).
async fn lock_holders(client: &Client) -> Result<String, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT a.pid,
                    coalesce(nullif(a.application_name, ''), '-'),
                    coalesce(a.usename::text, '-'),
                    coalesce(a.state, '-'),
                    extract(epoch FROM now() - a.xact_start)::bigint,
                    string_agg(DISTINCT coalesce(c.relname::text, 'the migration lock'), ', ')
               FROM pg_locks l
               JOIN pg_stat_activity a ON a.pid = l.pid
               LEFT JOIN pg_class c ON l.locktype = 'relation' AND c.oid = l.relation
              WHERE l.granted AND l.pid <> pg_backend_pid()
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND ((l.locktype = 'relation' AND c.relkind IN ('r', 'p')
                      AND c.relname LIKE 'rankflow\\_%')
                  OR (l.locktype = 'advisory' AND l.classid = $1::int8::oid
                      AND l.objid = $2::int8::oid AND l.objsubid = 2))
              GROUP BY a.pid, a.application_name, a.usename, a.state, a.xact_start
              ORDER BY a.xact_start NULLS LAST
              LIMIT 5",
            &[&i64::from(LOCK_CLASS), &i64::from(MIGRATION_LOCK)],
        )
        .await?;
    if rows.is_empty() {
        return Ok("none any more".into());
    }
    let shown: Vec<String> = rows
        .iter()
        .map(|r| {
            let secs: Option<i64> = r.get(4);
            let open = secs.map_or(String::new(), |s| format!(", transaction open {s} s"));
            format!(
                "pid {} (application {}, user {}, {}{open}) on {}",
                r.get::<_, i32>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
                r.get::<_, String>(3),
                r.get::<_, String>(5),
            )
        })
        .collect();
    Ok(shown.join("; "))
}
