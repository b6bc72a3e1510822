//! Reading archived periods back (docs/history.md, "Reads"): whether a complete
//! copy of a period exists, a page of it by rank, one member's row, the rows
//! of a list of members, the rows around a member, and the list of a view's
//! archived periods. Ranks come in any style of docs/http-api.md: the ordinal
//! `rank`, or the competition and dense ranks written at copy time
//! (`sql/003_rank_styles.sql`). Rows of composite boards come with every
//! field, named as when the period was copied (`sql/004_composite_fields.sql`).
//!
//! Each read is one statement, so it sees one snapshot: the completion row
//! and the member rows of a period are written in one transaction
//! ([`super::copy`]), and a read never mixes a period's old copy with a
//! replacement. Every statement is a lookup on an index of
//! `sql/001_archive.sql` (the primary key's rank range, the unique member
//! index), so a read costs the same for a period of ten members or of a
//! million.
//!
//! The handle ([`ArchiveReader`]) connects on first use, reconnects after a
//! broken connection, bounds every statement (server side with
//! `statement_timeout`, client side for a network that stops answering)
//! and, after a failed connection attempt, fails fast for a moment instead
//! of making every request wait for the next attempt. Its errors say which
//! ones are worth retrying ([`ArchiveReadError::is_retriable`]); the HTTP
//! API answers those with 503.
//!
//! Row types are this module's own: `archive` must not depend on the
//! reader or the API, which depend on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::ArchiveError;
use super::connect::Target;
use super::copy::PeriodKey;
use crate::board::composite::FieldValues;

/// Longest a read may run in PostgreSQL; an indexed read takes
/// milliseconds, so hitting this means the server is in trouble.
const STATEMENT_TIMEOUT_MS: u64 = 5_000;
/// Longest the client waits for an answer: a little more than the
/// statement timeout, so the server's own cancel normally wins, and a
/// network that silently drops packets still ends the wait.
const CALL_TIMEOUT: Duration = Duration::from_millis(STATEMENT_TIMEOUT_MS + 1_000);
/// Longest a connection attempt may take, unless the URL sets its own.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// After a failed connection attempt, reads fail at once for this long
/// rather than queueing behind another attempt.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Why an archive read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ArchiveReadError {
    /// `archive.url` cannot be parsed: a permanent configuration fault.
    #[error("archive.url: {0}")]
    Url(String),
    /// The server cannot be reached, dropped the connection, or is
    /// shutting down or overloaded: worth trying again shortly.
    #[error("the archive (PostgreSQL) is unavailable: {0}")]
    Unavailable(String),
    /// No answer within the statement or client timeout.
    #[error("the archive (PostgreSQL) did not answer within {0} ms")]
    Timeout(u64),
    /// The server refused the read for a reason a retry does not cure
    /// (permissions, a missing table): an operator must look.
    #[error("the archive (PostgreSQL) refused the read: {0}")]
    Refused(String),
}

impl ArchiveReadError {
    /// Whether the same read can succeed later without anyone changing
    /// anything (the API answers these with 503 and `Retry-After`).
    pub(crate) fn is_retriable(&self) -> bool {
        matches!(
            self,
            ArchiveReadError::Unavailable(_) | ArchiveReadError::Timeout(_)
        )
    }

    /// Sorts a driver error by what the caller can do about it.
    fn from_pg(e: tokio_postgres::Error) -> ArchiveReadError {
        let Some(code) = e.code() else {
            // No SQL state: the connection failed or closed.
            return ArchiveReadError::Unavailable(e.to_string());
        };
        if *code == SqlState::QUERY_CANCELED {
            return ArchiveReadError::Timeout(STATEMENT_TIMEOUT_MS);
        }
        // 08: connection exceptions; 53: insufficient resources (too many
        // connections, out of memory); 57: operator intervention (shutdown,
        // crash recovery); 40: transaction rollbacks (serialization).
        let class = code.code().get(..2).unwrap_or("");
        if matches!(class, "08" | "53" | "57" | "40") {
            ArchiveReadError::Unavailable(e.to_string())
        } else {
            ArchiveReadError::Refused(e.to_string())
        }
    }

    /// Whether the connection that failed should be dropped and a new one
    /// opened for the next read.
    fn breaks_connection(&self) -> bool {
        self.is_retriable()
    }
}

/// The style name of plain 1, 2, 3... ranks (the `rank` column).
const ORDINAL: &str = "ordinal";

/// A complete copy of a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchivedPeriod {
    /// Members in the copy: the whole period, not only the rows read.
    pub members: u64,
    /// Period bounds, ms since the epoch: the first instant of the period...
    pub start_ms: i64,
    /// ...and the first instant after it.
    pub end_ms: i64,
}

/// One member's final standing in an archived period.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedRow {
    /// 1-based, in the style the read asked for (ordinal: in the board's
    /// order including its tie-break).
    pub rank: u64,
    /// The member as the API shows it.
    pub member: String,
    /// The value the member was ranked by when the period closed.
    pub score: f64,
    /// A composite board's fields by name, in field order, as the API
    /// shows them; `None` for other boards.
    pub fields: Option<FieldValues>,
}

/// Rows of a complete copy; which rows depends on the read.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedRows {
    /// The copy's completion row: its member count and bounds.
    pub period: ArchivedPeriod,
    /// In rank order.
    pub rows: Vec<ArchivedRow>,
    /// For member and around reads: whether the member is in the period.
    pub found: bool,
}

/// One period in a list of a view's periods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeriodRow {
    pub(crate) period: String,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) members: u64,
    /// Whether the caller found it in Redis (see [`ArchiveReader::periods`]).
    pub(crate) live: bool,
}

/// A page of a view's periods, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeriodPage {
    /// Periods in the whole list, not only on this page.
    pub(crate) total: u64,
    pub(crate) periods: Vec<PeriodRow>,
}

/// The statements, public so tests can `EXPLAIN` them. Period bounds come
/// back as ms since the epoch, scores as `float8`: the archive stores the
/// shortest decimal that reads back as the board's double
/// ([`super::numeric`]), and PostgreSQL converts that decimal to the
/// nearest double, which is that double exactly.
pub mod sql {
    /// Columns of the completion row `p`: members shown (hidden ones left
    /// out) and bounds in ms.
    macro_rules! period_columns {
        () => {
            "SELECT p.members - x.n,
                    (extract(epoch FROM p.period_start) * 1000)::int8,
                    (extract(epoch FROM p.period_end) * 1000)::int8"
        };
    }

    /// The completion row `p` of period `$1..$4`, with `x.n`, its number
    /// of hidden rows (docs/moderation.md; the partial index
    /// `rankflow_archive_hidden` of `sql/005_hidden_members.sql`).
    macro_rules! period_and_hidden {
        () => {
            " FROM rankflow_archived_periods p
              CROSS JOIN LATERAL (
                  SELECT count(*) AS n FROM rankflow_archive h
                   WHERE h.board = $1 AND h.scope = $2 AND h.view = $3
                     AND h.period = $4 AND h.hidden) x "
        };
    }

    /// How many hidden rows of the period `$1..$4` satisfy `$cond` (on
    /// `h`): none at all when the period hides nobody (`x.n = 0`), so a
    /// period without hidden members reads as before.
    macro_rules! hidden_count {
        ($cond:literal) => {
            concat!(
                "CASE WHEN x.n = 0 THEN 0 ELSE (
                     SELECT count(*) FROM rankflow_archive h
                      WHERE h.board = $1 AND h.scope = $2 AND h.view = $3
                        AND h.period = $4 AND h.hidden AND ",
                $cond,
                ") END"
            )
        };
    }

    /// The visible rows of period `$1..$4` that satisfy `$cond` (on `a`),
    /// each with `shown`: its ordinal rank once the hidden rows above it
    /// are left out (the others' ranks close up).
    macro_rules! shown_rows {
        ($cond:literal) => {
            concat!(
                "(SELECT a.*, a.rank - ",
                hidden_count!("h.rank < a.rank"),
                " AS shown
                    FROM rankflow_archive a
                   WHERE a.board = $1 AND a.scope = $2 AND a.view = $3 AND a.period = $4
                     AND NOT a.hidden AND ",
                $cond,
                ")"
            )
        };
    }

    /// The rank shown for row `a`, in the style named by parameter `$n`
    /// (`ordinal`, `competition` or `dense`): the column written at copy
    /// time, or, for rows archived before those columns existed (NULL),
    /// the same figure computed over the period (competition: the first
    /// rank holding the score; dense: distinct scores down to the row;
    /// with every field for composite rows, though those, written since
    /// version 4, always have their ranks).
    /// `COALESCE` evaluates the fallback only for such rows. Hidden rows
    /// above the row take their places off: for competition, those ranked
    /// above the row's tie; for dense, the tie groups that are wholly
    /// hidden (`hides_group`). A hide fills the columns of its periods
    /// first, so the fallback never meets a hidden row.
    macro_rules! styled_rank {
        ($n:literal) => {
            concat!(
                "CASE $",
                $n,
                "::text
                   WHEN 'competition' THEN coalesce(a.rank_competition,
                       (SELECT min(b.rank) FROM rankflow_archive b
                         WHERE b.board = $1 AND b.scope = $2 AND b.view = $3
                           AND b.period = $4 AND b.score = a.score
                           AND b.fields IS NOT DISTINCT FROM a.fields)) - ",
                hidden_count!("h.rank < a.rank_competition"),
                "
                   WHEN 'dense' THEN coalesce(a.rank_dense,
                       (SELECT count(DISTINCT (b.score, b.fields)) FROM rankflow_archive b
                         WHERE b.board = $1 AND b.scope = $2 AND b.view = $3
                           AND b.period = $4 AND b.rank <= a.rank)) - ",
                hidden_count!("h.hides_group AND h.rank < a.rank"),
                "
                   ELSE a.shown END"
            )
        };
    }

    /// The period's completion row and its rows ranked `$5 ..= $6` once
    /// hidden rows are left out (ordinal ranks; shown in style `$7`): one
    /// row with a NULL rank when the page is empty, none when the period
    /// has no complete copy. Those rows are stored at ranks `$5 ..= $6 +
    /// x.n`.
    pub const PAGE: &str = concat!(
        period_columns!(),
        ", true, ",
        styled_rank!("7"),
        ", a.member, a.score::float8, a.fields, p.fields",
        period_and_hidden!(),
        "LEFT JOIN LATERAL ",
        shown_rows!("a.rank BETWEEN $5 AND $6 + x.n"),
        " a ON a.shown BETWEEN $5 AND $6
          WHERE p.board = $1 AND p.scope = $2 AND p.view = $3 AND p.period = $4
          ORDER BY a.rank"
    );

    /// The completion row and member `$5`'s row (NULLs if absent or
    /// hidden), its rank in style `$6`.
    pub const MEMBER: &str = concat!(
        period_columns!(),
        ", a.rank IS NOT NULL, ",
        styled_rank!("6"),
        ", a.member, a.score::float8, a.fields, p.fields",
        period_and_hidden!(),
        "LEFT JOIN LATERAL ",
        shown_rows!("a.member = $5"),
        " a ON true
          WHERE p.board = $1 AND p.scope = $2 AND p.view = $3 AND p.period = $4"
    );

    /// The completion row and the rows of the members in `$5` (a text
    /// array; one row with NULLs when none is there), in rank order, ranks
    /// in style `$6`; hidden members are left out.
    pub const MEMBERS: &str = concat!(
        period_columns!(),
        ", true, ",
        styled_rank!("6"),
        ", a.member, a.score::float8, a.fields, p.fields",
        period_and_hidden!(),
        "LEFT JOIN LATERAL ",
        shown_rows!("a.member = ANY ($5::text[])"),
        " a ON true
          WHERE p.board = $1 AND p.scope = $2 AND p.view = $3 AND p.period = $4
          ORDER BY a.rank"
    );

    /// The completion row and the rows shown within `$6` ranks of member
    /// `$5` (not found when hidden), ranks in style `$7`.
    pub const AROUND: &str = concat!(
        period_columns!(),
        ", m.rank IS NOT NULL, ",
        styled_rank!("7"),
        ", a.member, a.score::float8, a.fields, p.fields",
        period_and_hidden!(),
        "LEFT JOIN LATERAL ",
        shown_rows!("a.member = $5"),
        " m ON true
          LEFT JOIN LATERAL ",
        shown_rows!("a.rank BETWEEN m.rank - $6 - x.n AND m.rank + $6 + x.n"),
        " a ON a.shown BETWEEN m.shown - $6 AND m.shown + $6
          WHERE p.board = $1 AND p.scope = $2 AND p.view = $3 AND p.period = $4
          ORDER BY a.rank"
    );

    /// A view's archived periods merged with the live ones the caller
    /// passes as arrays (`$4` ids, `$5` starts, `$6` ends, `$7` member
    /// counts; a live period hides its archived copy), newest first
    /// (ids of one view sort by time, byte for byte), `$8` from `$9` on.
    /// One row with NULLs after the total when the page is empty.
    pub(crate) const PERIODS: &str = "
        WITH live (period, start_ms, end_ms, members) AS (
            SELECT * FROM unnest($4::text[], $5::int8[], $6::int8[], $7::int8[])
        ), merged AS (
            SELECT period, start_ms, end_ms, members, true AS live FROM live
            UNION ALL
            SELECT p.period,
                   (extract(epoch FROM p.period_start) * 1000)::int8,
                   (extract(epoch FROM p.period_end) * 1000)::int8,
                   p.members, false
              FROM rankflow_archived_periods p
             WHERE p.board = $1 AND p.scope = $2 AND p.view = $3
               AND p.period <> ALL ($4::text[])
        )
        SELECT t.total, m.period, m.start_ms, m.end_ms,
               m.members - CASE WHEN m.live THEN 0 ELSE (
                   SELECT count(*) FROM rankflow_archive h
                    WHERE h.board = $1 AND h.scope = $2 AND h.view = $3
                      AND h.period = m.period AND h.hidden) END,
               m.live
          FROM (SELECT count(*) AS total FROM merged) t
          LEFT JOIN LATERAL (
              SELECT * FROM merged
               ORDER BY period COLLATE \"C\" DESC
               LIMIT $8 OFFSET $9
          ) m ON true";
}

/// A live connection with the statements prepared on it.
struct Connection {
    client: Client,
    page: Statement,
    member: Statement,
    members: Statement,
    around: Statement,
    periods: Statement,
}

/// The connection, or when the last attempt failed and why.
#[derive(Default)]
struct Slot {
    conn: Option<Arc<Connection>>,
    failed: Option<(Instant, ArchiveReadError)>,
}

/// A reconnecting read handle on the archive; cheap to clone (clones
/// share one connection, on which PostgreSQL pipelines their reads).
#[derive(Clone)]
pub struct ArchiveReader {
    target: Arc<Target>,
    slot: Arc<Mutex<Slot>>,
}

impl ArchiveReader {
    /// Reads `url` (a permanent fault if it cannot be used; its `sslmode`
    /// and `sslrootcert` apply); connects on the first read.
    pub fn new(url: &str) -> Result<ArchiveReader, ArchiveReadError> {
        match Target::new(url, None) {
            Ok(target) => Ok(ArchiveReader::with_target(target)),
            Err(ArchiveError::Url(m)) => Err(ArchiveReadError::Url(m)),
            Err(e) => Err(ArchiveReadError::Url(e.to_string())),
        }
    }

    /// Reads through `target` (`[archive] url` and `ca_file`, with their
    /// TLS); connects on the first read.
    pub fn with_target(mut target: Target) -> ArchiveReader {
        let config = target.config_mut();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // A host that vanishes without closing the socket is noticed.
        config.keepalives(true);
        if config.get_application_name().is_none() {
            config.application_name("rankflow-reads");
        }
        ArchiveReader {
            target: Arc::new(target),
            slot: Arc::new(Mutex::new(Slot::default())),
        }
    }

    /// The current connection, or a new one.
    async fn connection(&self) -> Result<Arc<Connection>, ArchiveReadError> {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = &slot.conn {
            if !conn.client.is_closed() {
                return Ok(conn.clone());
            }
            tracing::info!("The archive's read connection closed; reconnecting.");
            slot.conn = None;
        }
        if let Some((at, why)) = &slot.failed
            && at.elapsed() < RECONNECT_PAUSE
        {
            return Err(why.clone());
        }
        let attempt = tokio::time::timeout(CALL_TIMEOUT, self.connect()).await;
        let result = match attempt {
            Ok(Ok(conn)) => Ok(Arc::new(conn)),
            Ok(Err(e)) => Err(ArchiveReadError::from_pg(e)),
            Err(_) => Err(ArchiveReadError::Timeout(CALL_TIMEOUT.as_millis() as u64)),
        };
        match &result {
            Ok(conn) => {
                slot.conn = Some(conn.clone());
                slot.failed = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "The archive could not be reached for a read.");
                slot.failed = Some((Instant::now(), e.clone()));
            }
        }
        result
    }

    async fn connect(&self) -> Result<Connection, tokio_postgres::Error> {
        let client = self.target.connect("reads").await?;
        // Reads only: a bug can never write through this connection.
        client
            .batch_execute(&format!(
                "SET statement_timeout = {STATEMENT_TIMEOUT_MS};
                 SET default_transaction_read_only = on"
            ))
            .await?;
        Ok(Connection {
            page: client.prepare(sql::PAGE).await?,
            member: client.prepare(sql::MEMBER).await?,
            members: client.prepare(sql::MEMBERS).await?,
            around: client.prepare(sql::AROUND).await?,
            periods: client.prepare(sql::PERIODS).await?,
            client,
        })
    }

    /// Runs the statement `pick` chooses with `params`; a connection that
    /// failed is dropped so the next read opens another.
    async fn query(
        &self,
        pick: fn(&Connection) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, ArchiveReadError> {
        let conn = self.connection().await?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, conn.client.query(pick(&conn), params));
        let error = match answer.await {
            Ok(Ok(rows)) => return Ok(rows),
            Ok(Err(e)) => ArchiveReadError::from_pg(e),
            Err(_) => ArchiveReadError::Timeout(CALL_TIMEOUT.as_millis() as u64),
        };
        if error.breaks_connection() {
            let mut slot = self.slot.lock().await;
            if slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                slot.conn = None;
            }
        }
        tracing::warn!(error = %error, "An archive read failed.");
        Err(error)
    }

    /// Ranks `first ..= last` (1-based) of a period, or `None` if it has
    /// no complete copy. `first > last` reads only the completion row.
    pub async fn page(
        &self,
        key: &PeriodKey,
        first: u64,
        last: u64,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        self.page_ranked(key, first, last, ORDINAL).await
    }

    /// [`Self::page`] with ranks shown in the style named `style`
    /// (`ordinal`, `competition` or `dense`, docs/http-api.md); the page is still
    /// ordinal ranks `first ..= last`.
    pub async fn page_ranked(
        &self,
        key: &PeriodKey,
        first: u64,
        last: u64,
        style: &str,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        let (first, last) = (as_i64(first), as_i64(last));
        let rows = self
            .query(
                |c| &c.page,
                &[
                    &key.board,
                    &key.scope,
                    &key.view,
                    &key.period,
                    &first,
                    &last,
                    &style,
                ],
            )
            .await?;
        standings(&rows)
    }

    /// One member's row in a period (`found` false if absent), or `None`
    /// if the period has no complete copy.
    pub async fn member(
        &self,
        key: &PeriodKey,
        member: &str,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        self.member_ranked(key, member, ORDINAL).await
    }

    /// [`Self::member`] with the rank in the style named `style`.
    pub async fn member_ranked(
        &self,
        key: &PeriodKey,
        member: &str,
        style: &str,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        let rows = self
            .query(
                |c| &c.member,
                &[
                    &key.board,
                    &key.scope,
                    &key.view,
                    &key.period,
                    &member,
                    &style,
                ],
            )
            .await?;
        standings(&rows)
    }

    /// The rows of those of `members` that are in a period, in rank order
    /// with ranks in the style named `style` (one statement: `member =
    /// ANY`), or `None` if the period has no complete copy.
    pub async fn members(
        &self,
        key: &PeriodKey,
        members: &[String],
        style: &str,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        let rows = self
            .query(
                |c| &c.members,
                &[
                    &key.board,
                    &key.scope,
                    &key.view,
                    &key.period,
                    &members,
                    &style,
                ],
            )
            .await?;
        standings(&rows)
    }

    /// A member's row and up to `radius` rows on each side, or `None` if
    /// the period has no complete copy.
    pub async fn around(
        &self,
        key: &PeriodKey,
        member: &str,
        radius: u64,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        self.around_ranked(key, member, radius, ORDINAL).await
    }

    /// [`Self::around`] with ranks in the style named `style`.
    pub async fn around_ranked(
        &self,
        key: &PeriodKey,
        member: &str,
        radius: u64,
        style: &str,
    ) -> Result<Option<ArchivedRows>, ArchiveReadError> {
        let radius = as_i64(radius);
        let rows = self
            .query(
                |c| &c.around,
                &[
                    &key.board,
                    &key.scope,
                    &key.view,
                    &key.period,
                    &member,
                    &radius,
                    &style,
                ],
            )
            .await?;
        standings(&rows)
    }

    /// The archived periods of one board view and scope (`""` unscoped),
    /// merged with `live`: periods the caller found in Redis, which take
    /// the place of their archived copies, if any. Newest first, `limit`
    /// of them from `offset` on. With `live` empty this is the archive's
    /// own list.
    pub(crate) async fn periods(
        &self,
        board: &str,
        scope: &str,
        view: &str,
        live: &[PeriodRow],
        offset: u64,
        limit: u64,
    ) -> Result<PeriodPage, ArchiveReadError> {
        let ids: Vec<&str> = live.iter().map(|p| p.period.as_str()).collect();
        let starts: Vec<i64> = live.iter().map(|p| p.start_ms).collect();
        let ends: Vec<i64> = live.iter().map(|p| p.end_ms).collect();
        let members: Vec<i64> = live.iter().map(|p| as_i64(p.members)).collect();
        let (offset, limit) = (as_i64(offset), as_i64(limit));
        let rows = self
            .query(
                |c| &c.periods,
                &[
                    &board, &scope, &view, &ids, &starts, &ends, &members, &limit, &offset,
                ],
            )
            .await?;
        period_page(&rows)
    }
}

/// Counts as `int8`; every count here (ranks, members, offsets) is far
/// below `i64::MAX`, and a larger one saturates rather than wraps.
fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn as_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Decodes the rows of [`sql::PAGE`], [`sql::MEMBER`], [`sql::MEMBERS`]
/// or [`sql::AROUND`].
fn standings(rows: &[Row]) -> Result<Option<ArchivedRows>, ArchiveReadError> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let decode = |e: tokio_postgres::Error| ArchiveReadError::Refused(e.to_string());
    let period = ArchivedPeriod {
        members: as_u64(first.try_get(0).map_err(decode)?),
        start_ms: first.try_get(1).map_err(decode)?,
        end_ms: first.try_get(2).map_err(decode)?,
    };
    let found: bool = first.try_get(3).map_err(decode)?;
    let names: Option<Vec<String>> = first.try_get(8).map_err(decode)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let rank: Option<i64> = row.try_get(4).map_err(decode)?;
        let (Some(rank), Some(member), Some(score)) = (
            rank,
            row.try_get::<_, Option<String>>(5).map_err(decode)?,
            row.try_get::<_, Option<f64>>(6).map_err(decode)?,
        ) else {
            continue;
        };
        let values: Option<Vec<Option<i64>>> = row.try_get(7).map_err(decode)?;
        let fields = named(names.as_deref(), values, &member).map_err(ArchiveReadError::Refused)?;
        out.push(ArchivedRow {
            rank: as_u64(rank),
            member,
            score,
            fields,
        });
    }
    Ok(Some(ArchivedRows {
        period,
        rows: out,
        found,
    }))
}

/// A composite row's values named by its period's field names. A row whose
/// values do not match the names (never written so by [`super::copy`]) is
/// refused rather than shown with fields under the wrong names.
pub(super) fn named(
    names: Option<&[String]>,
    values: Option<Vec<Option<i64>>>,
    member: &str,
) -> Result<Option<FieldValues>, String> {
    match (names, values) {
        (None, None) => Ok(None),
        (Some(n), Some(v)) if n.len() == v.len() => {
            Ok(Some(FieldValues(n.iter().cloned().zip(v).collect())))
        }
        (n, v) => Err(format!(
            "the archived row of {member:?} has {:?} field values for the field names {n:?}",
            v.map(|v| v.len())
        )),
    }
}

/// Decodes the rows of [`sql::PERIODS`].
fn period_page(rows: &[Row]) -> Result<PeriodPage, ArchiveReadError> {
    let decode = |e: tokio_postgres::Error| ArchiveReadError::Refused(e.to_string());
    let total: i64 = match rows.first() {
        Some(r) => r.try_get(0).map_err(decode)?,
        None => 0,
    };
    let mut periods = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(period) = row.try_get::<_, Option<String>>(1).map_err(decode)? else {
            continue;
        };
        let get = |i| row.try_get::<_, Option<i64>>(i).map_err(decode);
        periods.push(PeriodRow {
            period,
            start_ms: get(2)?.unwrap_or(0),
            end_ms: get(3)?.unwrap_or(0),
            members: as_u64(get(4)?.unwrap_or(0)),
            live: row
                .try_get::<_, Option<bool>>(5)
                .map_err(decode)?
                .unwrap_or(false),
        });
    }
    Ok(PeriodPage {
        total: as_u64(total),
        periods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unparsable_url_is_a_permanent_fault() {
        let err = ArchiveReader::new("postgres://host:notaport/db").err();
        assert!(
            matches!(&err, Some(ArchiveReadError::Url(m)) if !m.is_empty()),
            "{err:?}"
        );
        assert!(err.is_some_and(|e| !e.is_retriable()));
        assert!(ArchiveReader::new("postgres://u@127.0.0.1:1/db").is_ok());
    }

    #[tokio::test]
    async fn an_unreachable_server_is_retriable_and_fails_fast_after() {
        // Port 1 on loopback: connection refused at once.
        let reader = ArchiveReader::new("postgres://u@127.0.0.1:1/db").unwrap();
        let key = PeriodKey {
            board: "b".into(),
            scope: String::new(),
            view: "week".into(),
            period: "2026-W47".into(),
        };
        let err = reader.page(&key, 1, 10).await.unwrap_err();
        assert!(err.is_retriable(), "{err}");
        assert!(matches!(err, ArchiveReadError::Unavailable(_)), "{err}");
        // Within the pause no new attempt is made; the same cause is given.
        let again = reader.member(&key, "m").await.unwrap_err();
        assert_eq!(again.to_string(), err.to_string());
    }

    #[test]
    fn the_statements_use_the_tables_of_the_schema() {
        for sql in [
            sql::PAGE,
            sql::MEMBER,
            sql::MEMBERS,
            sql::AROUND,
            sql::PERIODS,
        ] {
            assert!(sql.contains("rankflow_archived_periods"), "{sql}");
        }
        assert!(sql::PAGE.starts_with("SELECT p.members"));
    }
}
