//! History (SPEC §8.1): closed periods kept in PostgreSQL. This module owns
//! the PostgreSQL side: the schema and its migrations ([`schema`]), exact
//! scores ([`numeric`]) and the copy of one period's standings
//! ([`copy`]): written in one transaction together with the row that marks
//! the copy complete, under a per-period advisory lock, so a copy is either
//! complete or absent and never done twice at once.

pub mod copy;
pub mod numeric;
pub mod read;
pub mod schema;

/// A failure of the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// `archive.url` cannot be used: a permanent configuration fault.
    #[error("archive.url: {0}")]
    Url(String),
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// Reading the standings to copy failed (e.g. Redis unreachable).
    #[error("reading the standings to archive: {0}")]
    Source(String),
}

impl ArchiveError {
    /// Whether trying again later can succeed without a configuration
    /// change. A PostgreSQL error with an SQL state is the server refusing
    /// (permissions, a broken schema): retried too, but reported as such.
    pub fn is_retriable(&self) -> bool {
        match self {
            ArchiveError::Url(_) => false,
            ArchiveError::Postgres(e) => e.code().is_none(),
            ArchiveError::Source(_) => true,
        }
    }

    /// Bounded label for `rankflow_archive_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            ArchiveError::Url(_) => "config",
            ArchiveError::Postgres(e) if e.code().is_none() => "postgres_io",
            ArchiveError::Postgres(_) => "postgres",
            ArchiveError::Source(_) => "source",
        }
    }
}
