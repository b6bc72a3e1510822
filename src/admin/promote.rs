//! Promoting a shadow board in place of the board it shadows, and rolling
//! back (docs/rebuilds.md): `POST /v1/admin/boards/{board}/promote` with
//! `{"shadow": ...}`. The promotion is one entry of `<prefix>:serving`
//! (board → `{"board", "since", "actor"}`) that every reader consults
//! (`crate::reader::serving`); naming the board itself removes it. Both are
//! idempotent: promoting the shadow already serving keeps its `since`. The
//! answer comes once every reader's copy of the map has expired, so from
//! then on every read of the fleet serves what it says; the action is
//! logged and announced on `[admin] audit_topic` first. If Redis loses
//! the map, `rankflow run` writes it again from those announcements
//! before it serves ([`restore_if_lost`]): the map keeps a marker field
//! (`~`) while it is whole.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::serving::{FRESH, Served};
use crate::config::KafkaConfig;
use crate::sink::store::{Store, StoreError};

use super::audit::{AuditEntry, AuditError, rfc3339};
use super::members::Moderator;
use super::recover::{RecoverError, fold_if_missing};

/// The field that marks the serving map as whole (written at start-up).
const WHOLE: &str = "~";

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

/// Each board's promotion after the last `board.promote` message of it
/// (`None`: rolled back).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Promotions(BTreeMap<String, Option<Served>>);

impl Promotions {
    pub(crate) fn add(&mut self, e: &AuditEntry) {
        let Some(("board", board)) = e
            .target
            .split_once(':')
            .filter(|_| e.action == "board.promote")
        else {
            return;
        };
        let by = e.detail["served_by"].as_str().unwrap_or(board);
        let since = e.detail["since"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_millis());
        let served = match (by == board, since) {
            (false, Some(since)) => Some(Served {
                board: by.to_string(),
                since,
                actor: e.actor.clone(),
            }),
            _ => None,
        };
        self.0.insert(board.to_string(), served);
    }
}

/// When the serving map under the boards' prefix is not marked whole
/// (Redis lost it, or it was never written), writes the promotions in
/// force again from the audit topic, then the marker; answers how many it
/// wrote (`None`: it was whole). A promotion written meanwhile is kept.
pub async fn restore_if_lost(
    store: &Store,
    boards: &BoardSet,
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<Option<usize>, RecoverError> {
    let key = keys::serving_key(&boards.key_prefix);
    let folded = fold_if_missing(store, (&key, WHOLE), kafka, topic, Promotions::add).await?;
    let Some(folded) = folded else {
        return Ok(None);
    };
    let mut written = 0;
    for (board, served) in folded.0 {
        let Some(served) = served.filter(|s| boards.get(&s.board).is_some()) else {
            continue;
        };
        let json = serde_json::to_string(&served).unwrap_or_default();
        let set: i64 = store
            .query(redis::cmd("HSETNX").arg(&key).arg(&board).arg(json))
            .await?;
        written += set as usize;
    }
    let _: i64 = store
        .query(redis::cmd("HSETNX").arg(&key).arg(WHOLE).arg(1))
        .await?;
    Ok(Some(written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn promoted(board: &str, by: &str, since: Option<&str>) -> AuditEntry {
        AuditEntry {
            at: "2026-11-26T00:00:00.000Z".into(),
            actor: "ops".into(),
            action: "board.promote".into(),
            target: format!("board:{board}"),
            detail: serde_json::json!({"shadow": by, "served_by": by, "since": since}),
        }
    }

    #[test]
    fn the_last_promotion_of_each_board_counts_and_a_rollback_clears_it() {
        let mut p = Promotions::default();
        for e in [
            promoted("a", "a_v2", Some("2026-11-26T10:00:00.000Z")),
            promoted("b", "b_v2", Some("2026-11-26T10:00:01.000Z")),
            promoted("a", "a", None),
            promoted("c", "c_v2", Some("2026-11-26T10:00:02.000Z")),
            promoted("c", "c_v3", Some("2026-11-26T10:00:03.000Z")),
            AuditEntry {
                action: "member.hide".into(),
                ..promoted("d", "d_v2", Some("2026-11-26T10:00:00.000Z"))
            },
        ] {
            p.add(&e);
        }
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .map(|t| t.timestamp_millis())
                .unwrap_or(0)
        };
        let served = |board: &str, since: &str| {
            Some(Served {
                board: board.into(),
                since: at(since),
                actor: "ops".into(),
            })
        };
        let want: BTreeMap<String, Option<Served>> = [
            ("a".to_string(), None),
            ("b".to_string(), served("b_v2", "2026-11-26T10:00:01.000Z")),
            ("c".to_string(), served("c_v3", "2026-11-26T10:00:03.000Z")),
        ]
        .into_iter()
        .collect();
        assert_eq!(p, Promotions(want));
    }
}
