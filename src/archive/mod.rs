//! History (docs/history.md): closed periods kept in PostgreSQL. This module owns
//! the PostgreSQL side: how every connection is made, TLS included
//! ([`connect`]), the schema and its migrations ([`schema`]), exact
//! scores ([`numeric`]) and the copy of one period's standings
//! ([`copy`]): written in one transaction together with the row that marks
//! the copy complete, under a per-period advisory lock, so a copy is either
//! complete or absent and never done twice at once. It also owns the
//! archiver that drives copies: the due set in Redis ([`due`]), the frozen
//! standings read in chunks ([`standings`]), the period-closed message
//! ([`announce`]) and the tick loop with its step machine ([`runner`]).
//! Member actions (docs/moderation.md) mark, unmark and delete archived
//! rows ([`members`]); what copies and actions share about hidden rows is
//! in `hidden`.

pub(crate) mod announce;
pub mod connect;
pub mod copy;
pub mod due;
pub(crate) mod hidden;
pub mod members;
pub mod numeric;
pub mod read;
pub mod runner;
pub mod schema;
pub(crate) mod standings;

/// A failure of the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// `archive.url` cannot be used: a permanent configuration fault.
    #[error("archive.url: {0}")]
    Url(String),
    /// `archive.ca_file` cannot be used (unreadable, no certificate, or
    /// given where TLS is off): a permanent configuration fault.
    #[error("archive.ca_file: {0}")]
    CaFile(String),
    /// A PostgreSQL call failed: without an SQL state the connection did
    /// (kind `postgres_io`, retried on a new connection), with one the
    /// server refused it (kind `postgres`: permissions, a broken schema).
    #[error("PostgreSQL: {}", pg_error_text(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// Reading the standings to copy failed (e.g. Redis unreachable).
    #[error("reading the standings to archive: {0}")]
    Source(String),
    /// A due item this configuration cannot archive (its board or view is
    /// gone, its name is malformed): kept in the due set, never dropped.
    #[error("due item {member:?}: {reason}")]
    Due {
        /// The due set's member, `{<tag>}:<view id>`.
        member: String,
        /// What is wrong with it, as a clause.
        reason: String,
    },
    /// PostgreSQL could not be reached earlier in this pass; not tried
    /// again until the next one.
    #[error("PostgreSQL is unreachable: {0}")]
    Offline(String),
    /// Migrating the archive schema kept running into its `lock_timeout`:
    /// other sessions hold locks on rankflow's tables (the message names
    /// them). Tried again on a later pass.
    #[error("migrating the archive schema: {0}")]
    MigrationLocked(String),
    /// The period-closed message could not be published.
    #[error("announcing on the closed topic: {0}")]
    Announce(String),
}

/// A driver error in one line, with its causes. tokio-postgres's own text
/// names only the kind of failure ("db error", "error performing TLS
/// handshake"); why it failed (the server's message, "certificate verify
/// failed: hostname mismatch", "server does not support TLS") is in its
/// sources, each added unless the text already holds it.
pub(crate) fn pg_error_text(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    // A server's message may add DETAIL and HINT lines.
    text.replace('\n', " ")
}

/// Every label [`ArchiveError::kind`] gives, so the error series exist
/// (at 0) before the first error.
pub(crate) const ERROR_KINDS: [&str; 6] = [
    "config",
    "postgres_io",
    "postgres",
    "source",
    "due",
    "announce",
];

impl ArchiveError {
    /// A Redis failure while archiving.
    pub(crate) fn redis(e: impl std::fmt::Display) -> ArchiveError {
        ArchiveError::Source(e.to_string())
    }

    /// Whether trying again later can succeed without a configuration
    /// change. A PostgreSQL error with an SQL state is the server refusing
    /// (permissions, a broken schema): retried too, but reported as such.
    pub fn is_retriable(&self) -> bool {
        match self {
            ArchiveError::Url(_) | ArchiveError::CaFile(_) => false,
            ArchiveError::Postgres(e) => e.code().is_none(),
            ArchiveError::Source(_)
            | ArchiveError::Announce(_)
            | ArchiveError::Offline(_)
            | ArchiveError::MigrationLocked(_) => true,
            ArchiveError::Due { .. } => false,
        }
    }

    /// Bounded label for `rankflow_archive_errors_total{kind}`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ArchiveError::Url(_) | ArchiveError::CaFile(_) => "config",
            ArchiveError::Postgres(e) if e.code().is_none() => "postgres_io",
            ArchiveError::Offline(_) => "postgres_io",
            ArchiveError::Postgres(_) | ArchiveError::MigrationLocked(_) => "postgres",
            ArchiveError::Source(_) => "source",
            ArchiveError::Due { .. } => "due",
            ArchiveError::Announce(_) => "announce",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    #[test]
    fn a_driver_error_says_why_once() {
        let e = tokio_postgres::Config::from_str("host=h port=x").unwrap_err();
        assert_eq!(e.to_string(), "invalid connection string");
        let shown = ArchiveError::from(e).to_string();
        assert_eq!(
            shown,
            "PostgreSQL: invalid connection string: invalid value for option `port`"
        );
    }
}
