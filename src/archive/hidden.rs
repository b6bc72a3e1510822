//! What the archive's reads and copies share about hidden rows
//! (docs/moderation.md): the member-action lock and the `hides_group`
//! marks. Kept apart from the actions (`super::members`) so that a copy
//! (`super::copy`) can use them without depending on the actions.
//!
//! An action and a copy of a period must not cross: a copy that read a
//! member from Redis before a hide and commits after the hide's update of
//! the archive would archive it visible. So each action's transaction
//! takes the member-action lock exclusively ([`lock`]), and every copy
//! takes it shared for its whole transaction ([`share_lock`]): an action
//! waits for the copies under way, and its update sees their rows. A copy
//! that overlaps an action's moves in Redis is refused before it commits
//! (see `super::runner`), so what a copy reads agrees with the record.

use tokio_postgres::GenericClient;

use super::ArchiveError;
use super::schema::LOCK_CLASS;

/// The name (hashed with `hashtext`) of the member-action lock, in rankflow's
/// lock class beside the period locks (which are named `board/scope/...`,
/// so never this).
const ACTION_LOCK: &str = "member actions";

/// Takes the member-action lock exclusively, until the transaction ends:
/// what an action does first.
pub(crate) async fn lock(tx: &impl GenericClient) -> Result<(), ArchiveError> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&LOCK_CLASS, &ACTION_LOCK],
    )
    .await?;
    Ok(())
}

/// Takes the member-action lock shared, until the transaction ends: what a
/// copy does first.
pub(crate) async fn share_lock(tx: &impl GenericClient) -> Result<(), ArchiveError> {
    tx.execute(
        "SELECT pg_advisory_xact_lock_shared($1, hashtext($2))",
        &[&LOCK_CLASS, &ACTION_LOCK],
    )
    .await?;
    Ok(())
}

/// Sets `hides_group` on the hidden rows of the periods given as four
/// arrays: true for the first hidden row of a tie group whose rows are all
/// hidden. Tie groups are contiguous in rank order, so a group has a
/// visible row exactly when the nearest visible row above or below the
/// hidden one is in it; each of those is an index scan that skips only
/// hidden rows.
const MARK_GROUPS: &str = "
    UPDATE rankflow_archive h SET hides_group =
           NOT EXISTS (SELECT 1 FROM rankflow_archive g
                        WHERE g.board = h.board AND g.scope = h.scope AND g.view = h.view
                          AND g.period = h.period AND g.hidden AND g.rank < h.rank
                          AND g.rank_dense = h.rank_dense)
       AND coalesce((SELECT b.rank_dense FROM rankflow_archive b
                      WHERE b.board = h.board AND b.scope = h.scope AND b.view = h.view
                        AND b.period = h.period AND b.rank < h.rank AND NOT b.hidden
                      ORDER BY b.rank DESC LIMIT 1), -1) <> h.rank_dense
       AND coalesce((SELECT b.rank_dense FROM rankflow_archive b
                      WHERE b.board = h.board AND b.scope = h.scope AND b.view = h.view
                        AND b.period = h.period AND b.rank > h.rank AND NOT b.hidden
                      ORDER BY b.rank LIMIT 1), -1) <> h.rank_dense
     WHERE h.hidden
       AND (h.board, h.scope, h.view, h.period) IN (
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))";

/// Recomputes `hides_group` in the periods given as four columns (board,
/// scope, view, period), after their hidden rows changed.
pub(crate) async fn mark_groups(
    tx: &impl GenericClient,
    [boards, scopes, views, ids]: [&[&str]; 4],
) -> Result<(), ArchiveError> {
    if boards.is_empty() {
        return Ok(());
    }
    tx.execute(MARK_GROUPS, &[&boards, &scopes, &views, &ids])
        .await?;
    Ok(())
}
