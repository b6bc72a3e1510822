//! Copying one closed period's standings into PostgreSQL: binary `COPY` of
//! the rows in rank order, chunk by chunk as they are read (memory bounded
//! by a chunk, not by the board), each with its competition and dense ranks
//! (docs/http-api.md, counted from the previous row), and the completion row, all in one
//! transaction. Rows of composite boards (docs/score-encoding.md) carry every field
//! (`sql/004_composite_fields.sql`), the period row the fields' names, and
//! their competition and dense ranks count members tied on every field. The transaction first takes the period's advisory lock
//! (`pg_try_advisory_xact_lock`): a second archiver of the same period sees
//! it taken and leaves the period alone, and a holder that dies (even by
//! `kill -9`) releases it with its connection, when PostgreSQL rolls its
//! transaction back. A period already complete is not copied again unless
//! asked to ([`Copy::replace`]).

use futures::{Stream, StreamExt};
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::ArchiveError;
use super::connect::Target;
use super::hidden;
use super::numeric::Numeric;
use super::schema::LOCK_CLASS;

/// Which period of which board instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeriodKey {
    /// The board's `name`.
    pub board: String,
    /// `""` for unscoped boards.
    pub scope: String,
    /// `hour`, `day`, `week`, `month` or `year`.
    pub view: String,
    /// The period id (`2026-W47`).
    pub period: String,
}

impl PeriodKey {
    /// `board/scope/view/period`: the key of the period-closed message and
    /// the name of the period's lock.
    pub fn path(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.board, self.scope, self.view, self.period
        )
    }
}

/// One member's final standing; rows come in rank order.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// The member as the API shows it (tie-break encoding removed).
    pub member: String,
    /// The member's value in the view: its aggregate, as the sorted set holds it.
    pub score: f64,
}

/// One member's final standing with, on a composite board, every field in
/// the board's field order (`None`: the field has no value); `score` is
/// then the first field, or the infinity the board lists last.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The member as the API shows it (tie-break or field encoding removed).
    pub member: String,
    /// The value the member is ranked by, as the sorted set holds it.
    pub score: f64,
    /// `None` on boards with one score.
    pub fields: Option<Vec<Option<i64>>>,
    /// Hidden by an admin (docs/moderation.md): read from the view's twin,
    /// ranked among the others, skipped by reads.
    pub hidden: bool,
}

impl From<Standing> for Row {
    fn from(s: Standing) -> Row {
        Row {
            member: s.member,
            score: s.score,
            fields: None,
            hidden: false,
        }
    }
}

/// What to copy.
pub struct Copy<'a> {
    /// The period copied; its path names the advisory lock.
    pub key: &'a PeriodKey,
    /// Period bounds, ms since the epoch, stored in the completion row:
    /// the first instant of the period...
    pub start_ms: i64,
    /// ...and the first instant after it.
    pub end_ms: i64,
    /// Copy again even if a complete copy exists (`rankflow archive --period`).
    pub replace: bool,
}

/// How a copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    /// Complete, with this many members.
    Done {
        /// Rows written, one per member.
        members: u64,
    },
    /// A complete copy already existed; nothing was written.
    AlreadyArchived,
    /// Another archiver holds the period; nothing was written.
    Busy,
}

/// A connection to the archive database.
pub struct Archive {
    client: Client,
}

const COLUMNS: [Type; 11] = [
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::NUMERIC,
    Type::INT8,
    Type::INT8,
    Type::INT8_ARRAY,
    Type::BOOL,
];

/// The value rows are tied on: the score, and every field of a composite
/// board (the score alone would tie members that differ in a later field).
type TieValue = (f64, Option<Vec<Option<i64>>>);

/// The ranks of the next row in each style (docs/http-api.md), kept while rows
/// stream by in rank order: equal values are contiguous, so a row's
/// competition and dense ranks follow from the previous row alone.
#[derive(Debug, Default)]
struct Ranks {
    ordinal: i64,
    competition: i64,
    dense: i64,
    previous: Option<TieValue>,
}

impl Ranks {
    /// `(ordinal, competition, dense)` of the next row, with value `score`
    /// and, on a composite board, `fields`.
    fn next(&mut self, score: f64, fields: Option<&[Option<i64>]>) -> (i64, i64, i64) {
        self.ordinal += 1;
        let tied = self
            .previous
            .as_ref()
            .is_some_and(|(s, f)| *s == score && f.as_deref() == fields);
        if !tied {
            self.competition = self.ordinal;
            self.dense += 1;
            self.previous = Some((score, fields.map(<[_]>::to_vec)));
        }
        (self.ordinal, self.competition, self.dense)
    }
}

impl Archive {
    /// Reads `url` (a permanent fault if it cannot be used; its `sslmode`
    /// and `sslrootcert` apply) and connects: [`Archive::connect_to`].
    pub async fn connect(url: &str) -> Result<Archive, ArchiveError> {
        Archive::connect_to(&Target::new(url, None)?).await
    }

    /// Connects to `target`, with its TLS.
    ///
    /// TCP keepalives are set on both ends, so a lost host is noticed
    /// within about 30 s: by this client (an archiver waiting on a dead
    /// server fails instead of hanging) and by the server (its
    /// `tcp_keepalives_*` for this session), which then ends the session
    /// and releases the period lock the lost archiver held.
    pub async fn connect_to(target: &Target) -> Result<Archive, ArchiveError> {
        let mut target = target.clone();
        let config = target.config_mut();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        // Named in pg_stat_activity (and in a migration's lock report).
        if config.get_application_name().is_none() {
            config.application_name("rankflow-archiver");
        }
        config
            .keepalives(true)
            .keepalives_idle(std::time::Duration::from_secs(10))
            .keepalives_interval(std::time::Duration::from_secs(5))
            .keepalives_retries(4);
        let client = target.connect("archiver").await?;
        client
            .batch_execute(
                "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; \
                 SET tcp_keepalives_count = 4",
            )
            .await?;
        Ok(Archive { client })
    }

    /// Whether this connection is encrypted (`pg_stat_ssl`): what
    /// `sslmode=prefer` ended up with.
    pub async fn uses_tls(&mut self) -> Result<bool, ArchiveError> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Whether the connection is gone (the server closed it or the host is
    /// lost): then a new one must be made.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The connection itself, for what is not a copy: migrating the schema
    /// ([`super::schema::migrate`]) and the period-closed message's
    /// transaction; tests also query through it.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Copies one period of a board with one score: every chunk of
    /// `standings`, in order, then the completion row, in one transaction.
    pub async fn copy<S>(&mut self, what: Copy<'_>, standings: S) -> Result<Copied, ArchiveError>
    where
        S: Stream<Item = Result<Vec<Standing>, ArchiveError>>,
    {
        let rows = standings.map(|chunk| chunk.map(|c| c.into_iter().map(Row::from).collect()));
        self.copy_rows(what, None, rows).await
    }

    /// Copies one period whose rows may carry fields: `fields` names them
    /// (a composite board's fields in rank order; `None` for other
    /// boards), and every row of a composite board must have one value
    /// slot per name.
    pub async fn copy_rows<S>(
        &mut self,
        what: Copy<'_>,
        fields: Option<&[String]>,
        rows: S,
    ) -> Result<Copied, ArchiveError>
    where
        S: Stream<Item = Result<Vec<Row>, ArchiveError>>,
    {
        self.copy_checked(what, fields, rows, std::future::ready(Ok(true)))
            .await
    }

    /// [`Self::copy_rows`], committed only if `check` (awaited after the
    /// rows are written, before the commit) answers true; else nothing is
    /// written and the answer is [`Copied::Busy`]. The archiver checks
    /// there that no member action crossed the copy.
    pub(crate) async fn copy_checked<S, C>(
        &mut self,
        what: Copy<'_>,
        fields: Option<&[String]>,
        rows: S,
        check: C,
    ) -> Result<Copied, ArchiveError>
    where
        S: Stream<Item = Result<Vec<Row>, ArchiveError>>,
        C: std::future::Future<Output = Result<bool, ArchiveError>>,
    {
        let key = what.key;
        let tx = self.client.transaction().await?;
        let locked: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock($1, hashtext($2))",
                &[&LOCK_CLASS, &key.path()],
            )
            .await?
            .try_get(0)?;
        if !locked {
            return Ok(Copied::Busy);
        }
        // A member action's update of the archive waits for this copy.
        hidden::share_lock(&tx).await?;
        let params: [&(dyn ToSql + Sync); 4] = [&key.board, &key.scope, &key.view, &key.period];
        let done = tx
            .query_opt(
                "SELECT 1 FROM rankflow_archived_periods
                  WHERE board = $1 AND scope = $2 AND view = $3 AND period = $4",
                &params,
            )
            .await?
            .is_some();
        if done && !what.replace {
            return Ok(Copied::AlreadyArchived);
        }
        for table in ["rankflow_archive", "rankflow_archived_periods"] {
            let sql = format!(
                "DELETE FROM {table} WHERE board = $1 AND scope = $2 AND view = $3 AND period = $4"
            );
            tx.execute(&sql, &params).await?;
        }
        let written = write_rows(&tx, key, fields.map(<[_]>::len), rows).await?;
        if written.hidden > 0 {
            let [b, s, v, p] =
                [&key.board, &key.scope, &key.view, &key.period].map(|c| [c.as_str()]);
            hidden::mark_groups(&tx, [&b, &s, &v, &p]).await?;
        }
        tx.execute(
            "INSERT INTO rankflow_archived_periods
                 (board, scope, view, period, period_start, period_end, members, fields)
             VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000), to_timestamp($6::float8 / 1000), $7, $8)",
            &[
                &key.board,
                &key.scope,
                &key.view,
                &key.period,
                &(what.start_ms as f64),
                &(what.end_ms as f64),
                &(written.rows as i64),
                &fields,
            ],
        )
        .await?;
        if !check.await? {
            tracing::info!(period = %key.path(), "A member action crossed the copy; the period is archived on a later pass.");
            return Ok(Copied::Busy);
        }
        tx.commit().await?;
        Ok(Copied::Done {
            members: written.rows,
        })
    }
}

/// What [`write_rows`] wrote.
struct Written {
    rows: u64,
    hidden: u64,
}

/// Streams the rows into a binary `COPY`, ranked 1, 2, 3... in the order
/// they come (with their competition and dense ranks); returns how many
/// rows were written and how many of them are hidden. `width` is the number of fields of a composite
/// board: a row without exactly that many fails the copy (its
/// transaction rolls back), as does a field row on another board.
async fn write_rows<S>(
    tx: &tokio_postgres::Transaction<'_>,
    key: &PeriodKey,
    width: Option<usize>,
    rows: S,
) -> Result<Written, ArchiveError>
where
    S: Stream<Item = Result<Vec<Row>, ArchiveError>>,
{
    let sink = tx
        .copy_in(
            "COPY rankflow_archive
                 (board, scope, view, period, rank, member, score, rank_competition, rank_dense,
                  fields, hidden)
             FROM STDIN (FORMAT binary)",
        )
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &COLUMNS);
    futures::pin_mut!(writer);
    futures::pin_mut!(rows);
    let mut ranks = Ranks::default();
    let mut hidden = 0;
    while let Some(chunk) = rows.next().await {
        for s in chunk? {
            if s.fields.as_ref().map(Vec::len) != width {
                return Err(ArchiveError::Source(format!(
                    "member {:?} has {:?} fields where the board has {width:?}",
                    s.member,
                    s.fields.as_ref().map(Vec::len)
                )));
            }
            let (rank, competition, dense) = ranks.next(s.score, s.fields.as_deref());
            hidden += u64::from(s.hidden);
            let score = Numeric(s.score);
            writer
                .as_mut()
                .write(&[
                    &key.board,
                    &key.scope,
                    &key.view,
                    &key.period,
                    &rank,
                    &s.member,
                    &score,
                    &competition,
                    &dense,
                    &s.fields,
                    &s.hidden,
                ])
                .await?;
        }
    }
    let rows = writer.finish().await?;
    Ok(Written { rows, hidden })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styled_ranks_follow_the_hand_made_table() {
        let mut ranks = Ranks::default();
        let got: Vec<_> = [50.0, 50.0, 40.0, 40.0, 40.0, 30.0]
            .into_iter()
            .map(|s| ranks.next(s, None))
            .collect();
        assert_eq!(
            got,
            [
                (1, 1, 1),
                (2, 1, 1),
                (3, 3, 2),
                (4, 3, 2),
                (5, 3, 2),
                (6, 6, 3)
            ]
        );
    }

    /// Composite rows tie only when every field is equal: an equal first
    /// field (score) with a different later field is the next rank. A
    /// missing first field (-inf) ties with itself.
    #[test]
    fn composite_ranks_tie_on_every_field() {
        let mut ranks = Ranks::default();
        let inf = f64::NEG_INFINITY;
        let rows: [(f64, [Option<i64>; 2]); 6] = [
            (5.0, [Some(5), Some(1)]),
            (5.0, [Some(5), Some(1)]),
            (5.0, [Some(5), Some(2)]),
            (5.0, [Some(5), None]),
            (inf, [None, None]),
            (inf, [None, None]),
        ];
        let got: Vec<_> = rows.iter().map(|(s, f)| ranks.next(*s, Some(f))).collect();
        assert_eq!(
            got,
            [
                (1, 1, 1),
                (2, 1, 1),
                (3, 3, 2),
                (4, 4, 3),
                (5, 5, 4),
                (6, 5, 4)
            ]
        );
    }
}
