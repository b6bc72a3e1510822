//! The archive's tables in PostgreSQL, created and migrated by rankflow:
//! numbered, additive migrations (files in `sql/`), recorded in
//! `rankflow_schema_version`, applied under an advisory lock so that the
//! instances of a fleet starting together migrate once.

use tokio_postgres::Client;

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
];

/// The schema version this rankflow writes.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings the schema up to [`latest`]; returns the version found before.
pub async fn migrate(client: &mut Client) -> Result<i32, ArchiveError> {
    let tx = client.transaction().await?;
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
