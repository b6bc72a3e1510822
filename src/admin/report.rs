//! What the member actions (docs/moderation.md) take and answer: the
//! action, its request, the member's state as the API and the CLI show it,
//! and why an action fails. [`super::members`] performs them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::archive::members::ArchiveHolding;
use crate::moderation::HiddenEntry;
use crate::sink::store::StoreError;

use super::audit::AuditError;

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberAction {
    /// Take the member off boards, keeping its data aside.
    Hide,
    /// Bring a hidden member back.
    Restore,
    /// Remove every trace of the member (a deletion request).
    Erase,
}

impl MemberAction {
    /// The action's name (`hide`, `restore`, `erase`).
    pub fn name(self) -> &'static str {
        match self {
            MemberAction::Hide => "hide",
            MemberAction::Restore => "restore",
            MemberAction::Erase => "erase",
        }
    }

    /// The action's name in the audit trail.
    pub fn audit_name(self) -> &'static str {
        match self {
            MemberAction::Hide => "member.hide",
            MemberAction::Restore => "member.restore",
            MemberAction::Erase => "member.erase",
        }
    }
}

/// An action's request.
#[derive(Debug, Clone, Default)]
pub struct ActionRequest {
    /// The member id, as the boards hold it.
    pub member: String,
    /// The boards it applies to; `None`: every board.
    pub boards: Option<Vec<String>>,
    /// Why, for the audit trail.
    pub reason: Option<String>,
}

/// Why an action or a look-up was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The request names something that does not exist (400).
    #[error("{0}")]
    BadRequest(String),
    /// The member's state does not allow the action (409).
    #[error("{0}")]
    Conflict(String),
    /// Redis failed; nothing half-done is shown as done, and repeating the
    /// request finishes it (503).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The action took effect but could not be announced (503; repeating it
    /// announces it).
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The archive (PostgreSQL) could not be changed or read; nothing
    /// half-done is shown as done, and repeating the request finishes it
    /// (503).
    #[error("the archive (PostgreSQL): {0}")]
    Archive(String),
    /// The moderation record was missing (Redis lost its data) and could
    /// not be rebuilt from the audit topic; nothing was done (503).
    #[error("rebuilding the moderation record: {0}")]
    Recover(String),
}

impl MemberError {
    /// Whether repeating the same request may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            MemberError::Store(_)
                | MemberError::Audit(_)
                | MemberError::Archive(_)
                | MemberError::Recover(_)
        )
    }
}

/// A member's state (`GET /v1/admin/members/{member}` and every action's
/// answer).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MemberReport {
    /// The id asked about; absent for an erased member's answer to an
    /// erasure (only its keyed hash is kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// `visible`, `hidden` or `erased`.
    pub state: &'static str,
    /// For a hidden member: the boards it is hidden from (`null`: all),
    /// when, by whom and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<HiddenEntry>,
    /// Per board that holds it: the views and scopes, visible or kept
    /// aside.
    pub boards: Vec<Holding>,
    /// With an archive: per board, the archived periods that hold it and
    /// how many of them hide it (boards without any are left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<BTreeMap<String, ArchiveHolding>>,
    /// An action that started and has not finished (`hide`, `restore`,
    /// `erase`): under way, or its process died. Repeating it finishes it;
    /// until then `state` says what was asked, not what is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

/// Where one board holds a member.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Holding {
    /// The board.
    pub board: String,
    /// Views showing it (`day:2026-11-21`, `win:3h`, `all`).
    pub views: Vec<String>,
    /// Views keeping it aside while it is hidden.
    pub hidden_views: Vec<String>,
    /// Scope values it is held in (scoped boards).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}
