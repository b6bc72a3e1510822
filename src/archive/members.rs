//! The archive's side of member actions (docs/moderation.md): a hide marks
//! the member's archived rows `hidden` (reads skip them and close the
//! others' ranks up), a restore clears the mark, an erasure deletes the
//! rows (the others keep their ranks). Also what `GET
//! /v1/admin/members/{member}` says about the archive.
//!
//! Each action's transaction takes the member-action lock exclusively
//! ([`super::hidden`] says why), so it waits for the copies under way and
//! its update sees their rows.

use std::collections::BTreeMap;

use tokio_postgres::{Client, GenericClient};

use super::ArchiveError;
use super::copy::PeriodKey;
use super::hidden;

/// What an action does to the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveAction {
    /// Mark the member's rows hidden.
    Hide,
    /// Clear the mark.
    Restore,
    /// Delete the member's rows.
    Erase,
}

/// Per board: how many archived periods hold the member, and how many of
/// them hide it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArchiveHolding {
    /// Archived periods with a row of the member.
    pub periods: u64,
    /// Of those, periods where the row is hidden.
    pub hidden: u64,
}

/// Competition and dense ranks for the rows of the member's periods that
/// were archived before those columns existed (NULL): hidden rows need
/// them to close the others' ranks up. The same figures reads compute for
/// such rows (`super::read`), written once.
const FILL_RANKS: &str = "
    WITH touched AS (
        SELECT DISTINCT board, scope, view, period FROM rankflow_archive
         WHERE member = $1 AND board = ANY ($2::text[]) AND rank_competition IS NULL
    ), firsts AS (
        SELECT a.board, a.scope, a.view, a.period, a.rank,
               min(a.rank) OVER (PARTITION BY a.board, a.scope, a.view, a.period,
                                              a.score, a.fields) AS competition
          FROM rankflow_archive a JOIN touched USING (board, scope, view, period)
    ), ranked AS (
        SELECT *, sum((rank = competition)::int) OVER (
                      PARTITION BY board, scope, view, period ORDER BY rank) AS dense
          FROM firsts
    )
    UPDATE rankflow_archive a
       SET rank_competition = r.competition, rank_dense = r.dense
      FROM ranked r
     WHERE a.board = r.board AND a.scope = r.scope AND a.view = r.view
       AND a.period = r.period AND a.rank = r.rank";

/// The periods as four text arrays (board, scope, view, period), for
/// `unnest`.
fn columns(periods: &[PeriodKey]) -> [Vec<&str>; 4] {
    let column = |f: fn(&PeriodKey) -> &String| periods.iter().map(|p| f(p).as_str()).collect();
    [
        column(|p| &p.board),
        column(|p| &p.scope),
        column(|p| &p.view),
        column(|p| &p.period),
    ]
}

/// Recomputes `hides_group` in `periods` (after their hidden rows changed).
async fn mark_groups(tx: &impl GenericClient, periods: &[PeriodKey]) -> Result<(), ArchiveError> {
    let [boards, scopes, views, ids] = columns(periods);
    hidden::mark_groups(tx, [&boards, &scopes, &views, &ids]).await
}

/// Applies `action` to `member`'s rows of `boards` (an erasure: of every
/// board), in one transaction
/// under the member-action lock; answers how many archived periods it
/// changed. Repeating it changes nothing more.
pub async fn apply(
    client: &mut Client,
    action: ArchiveAction,
    member: &str,
    boards: &[String],
) -> Result<u64, ArchiveError> {
    let tx = client.transaction().await?;
    hidden::lock(&tx).await?;
    let changed = match action {
        ArchiveAction::Hide => {
            tx.execute(FILL_RANKS, &[&member, &boards]).await?;
            "UPDATE rankflow_archive SET hidden = true
              WHERE member = $1 AND board = ANY ($2::text[]) AND NOT hidden
              RETURNING board, scope, view, period"
        }
        ArchiveAction::Restore => {
            "UPDATE rankflow_archive SET hidden = false, hides_group = false
              WHERE member = $1 AND board = ANY ($2::text[]) AND hidden
              RETURNING board, scope, view, period"
        }
        // Every board's rows, also of boards no longer configured: a
        // deletion request covers the whole archive.
        ArchiveAction::Erase => {
            "DELETE FROM rankflow_archive WHERE member = $1
              RETURNING board, scope, view, period"
        }
    };
    let rows = match action {
        ArchiveAction::Erase => tx.query(changed, &[&member]).await?,
        _ => tx.query(changed, &[&member, &boards]).await?,
    };
    let mut periods = Vec::with_capacity(rows.len());
    for row in rows {
        periods.push(PeriodKey {
            board: row.try_get(0)?,
            scope: row.try_get(1)?,
            view: row.try_get(2)?,
            period: row.try_get(3)?,
        });
    }
    if action == ArchiveAction::Erase && !periods.is_empty() {
        // The period's member count follows its rows; ranks stay.
        let [boards, scopes, views, ids] = columns(&periods);
        tx.execute(
            "UPDATE rankflow_archived_periods SET members = members - 1
              WHERE (board, scope, view, period) IN (
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))",
            &[&boards, &scopes, &views, &ids],
        )
        .await?;
    }
    mark_groups(&tx, &periods).await?;
    tx.commit().await?;
    Ok(periods.len() as u64)
}

/// Per board, the archived periods holding `member` (boards without any
/// are left out).
pub async fn holdings(
    client: &Client,
    member: &str,
) -> Result<BTreeMap<String, ArchiveHolding>, ArchiveError> {
    let rows = client
        .query(
            "SELECT board, count(*), count(*) FILTER (WHERE hidden)
               FROM rankflow_archive WHERE member = $1 GROUP BY board",
            &[&member],
        )
        .await?;
    let mut out = BTreeMap::new();
    for row in rows {
        let board: String = row.try_get(0)?;
        let periods: i64 = row.try_get(1)?;
        let hidden: i64 = row.try_get(2)?;
        out.insert(
            board,
            ArchiveHolding {
                periods: periods as u64,
                hidden: hidden as u64,
            },
        );
    }
    Ok(out)
}
