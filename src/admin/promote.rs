//! Promoting a shadow board in place of the board it shadows, and rolling
//! back (docs/rebuilds.md): `POST /v1/admin/boards/{board}/promote` with
//! `{"shadow": ...}`. The promotion is one entry of `<prefix>:serving`
//! (board → `{"board", "since", "actor"}`) that every reader consults
//! (`crate::reader::serving`); naming the board itself removes it. Both are
//! idempotent: promoting the shadow already serving keeps its `since`. The
//! answer comes once every reader's copy of the map has expired, so from
//! then on every read of the fleet serves what it says; the action is
//! logged and announced on `[admin] audit_topic` first.

use serde::Serialize;

use crate::board::keys;
use crate::board::serving::{FRESH, Served};
use crate::sink::store::StoreError;

use super::audit::{AuditEntry, AuditError, rfc3339};
use super::members::Moderator;

/// What a promotion answers.
#[derive(Debug, Clone, Serialize)]
pub struct Promotion {
    /// The board promoted in place of.
    pub board: String,
    /// The board whose data now serves its reads (itself after a
    /// rollback).
    pub served_by: String,
    /// Since when (RFC 3339), for a shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// Why a promotion was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// No such board (404).
    #[error("{0}")]
    NotFound(String),
    /// The board is a shadow, or the shadow named is not one of it (400).
    #[error("{0}")]
    BadRequest(String),
    /// The shadow's backfill is not done (409).
    #[error("{0}")]
    Conflict(String),
    /// Redis failed; repeating the request finishes it (503).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Done, but not announced (503; repeating it announces it).
    #[error(transparent)]
    Audit(#[from] AuditError),
}

impl Moderator {
    /// Serves `board`'s reads from `shadow`'s data, or from its own again
    /// when `shadow` is `board`.
    pub async fn promote(
        &self,
        board: &str,
        shadow: &str,
        actor: &str,
    ) -> Result<Promotion, PromoteError> {
        let live = self
            .boards
            .get(board)
            .ok_or_else(|| PromoteError::NotFound(format!("no board named {board:?}")))?;
        if live.shadow.is_some() {
            return Err(PromoteError::BadRequest(format!(
                "board {board:?} is a shadow board: promote a shadow in place of the board it shadows"
            )));
        }
        let key = keys::serving_key(&self.boards.key_prefix);
        let current: Option<String> = self
            .store
            .query(redis::cmd("HGET").arg(&key).arg(board))
            .await?;
        let current: Option<Served> = current.and_then(|c| serde_json::from_str(&c).ok());
        let served = if shadow == board {
            let _: i64 = self
                .store
                .query(redis::cmd("HDEL").arg(&key).arg(board))
                .await?;
            None
        } else {
            self.check_shadow(board, shadow).await?;
            match current.filter(|c| c.board == shadow) {
                Some(same) => Some(same),
                None => {
                    let served = Served {
                        board: shadow.to_string(),
                        since: self.clock.now_ms(),
                        actor: actor.to_string(),
                    };
                    let json = serde_json::to_string(&served).unwrap_or_default();
                    let _: i64 = self
                        .store
                        .query(redis::cmd("HSET").arg(&key).arg(board).arg(json))
                        .await?;
                    Some(served)
                }
            }
        };
        let answer = Promotion {
            board: board.to_string(),
            served_by: served
                .as_ref()
                .map_or(board, |s| s.board.as_str())
                .to_string(),
            since: served.as_ref().map(|s| rfc3339(s.since)),
        };
        self.audit
            .record(&AuditEntry {
                at: rfc3339(self.clock.now_ms()),
                actor: actor.to_string(),
                action: "board.promote".to_string(),
                target: format!("board:{board}"),
                detail: serde_json::json!({"shadow": shadow, "served_by": answer.served_by, "since": answer.since}),
            })
            .await?;
        // Every reader's copy of the map is now at most this old.
        tokio::time::sleep(FRESH + FRESH / 5).await;
        Ok(answer)
    }

    /// `shadow` is a shadow of `board` whose backfill is done.
    async fn check_shadow(&self, board: &str, shadow: &str) -> Result<(), PromoteError> {
        let of = self
            .boards
            .get(shadow)
            .and_then(|b| b.shadow.as_ref())
            .map(|s| s.of.as_str());
        if of != Some(board) {
            return Err(PromoteError::BadRequest(format!(
                "{shadow:?} is not a shadow board of {board:?} (`shadow_of = \"{board}\"`); name a shadow of it, or {board:?} itself to roll back"
            )));
        }
        let done = crate::backfill::progress::is_done(&self.store, &self.boards.key_prefix, shadow)
            .await?;
        if !done {
            return Err(PromoteError::Conflict(format!(
                "the backfill of {shadow:?} is not done yet (GET /v1/boards shows its lag); promote it once it is"
            )));
        }
        Ok(())
    }
}
