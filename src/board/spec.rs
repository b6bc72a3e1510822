//! A `[[board]]` table as the user writes it (docs/configuration.md): the serde shape that
//! [`crate::board::model::BoardSet::compile`] turns into compiled boards.
//! It lives with the board, not with the rest of the configuration, so that
//! the board code never reaches back into `config` (config → board only).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ranking::{Aggregate, Order, TieBreak};

/// One `[[board]]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BoardSpec {
    pub(crate) name: String,
    pub(crate) event: String,
    #[serde(default)]
    pub(crate) filter: Option<String>,
    pub(crate) member: String,
    /// The value ranked; `None` only for a composite board (`order_by`).
    #[serde(default)]
    pub(crate) score: Option<String>,
    /// Composite ordering (docs/score-encoding.md): the fields ranked in order, instead
    /// of `score`.
    #[serde(default)]
    pub(crate) order_by: Option<Vec<FieldSpec>>,
    #[serde(default)]
    pub(crate) scope: Option<String>,
    #[serde(default)]
    pub(crate) periods: Vec<String>,
    #[serde(default)]
    pub(crate) windows: Vec<String>,
    /// `None` means `sum` (composite boards set it per field instead).
    #[serde(default)]
    pub(crate) aggregate: Option<Aggregate>,
    #[serde(default)]
    pub(crate) tie_break: TieBreak,
    #[serde(default)]
    pub(crate) order: Option<Order>,
    #[serde(default)]
    pub(crate) timezone: Option<String>,
    /// Per period kind (`hour`..`year`): how long after the period ends its
    /// key is kept.
    #[serde(default)]
    pub(crate) retention: BTreeMap<String, String>,
    /// Which of `periods` are archived to PostgreSQL when they close
    /// (docs/history.md): `["week", "month"]`.
    #[serde(default)]
    pub(crate) archive: Vec<String>,
    /// Whether each view keeps a dense-rank index (`K:v`, one entry per
    /// distinct value) so `rank=dense` reads are O(log n); without it dense
    /// reads walk the values. Unset: kept by composite boards only, whose
    /// dense reads cannot walk (`Board::dense_ranks`).
    #[serde(default)]
    pub(crate) dense_ranks: Option<bool>,
    /// Scoped boards: `"scope"` (default, docs/redis-layout.md: each scope in its own
    /// cluster slot) or `"board"` (every scope in the board's slot, so
    /// unions of scopes work on a Redis Cluster).
    #[serde(default)]
    pub(crate) scope_slot: Option<String>,
    /// Scoped boards: how many scope values the registry of each view
    /// keeps for `scope=*` (0: no registry, `scope=*` is refused).
    #[serde(default)]
    pub(crate) scope_registry: Option<u64>,
    /// The board this one is a candidate replacement of (`shadow::Shadow`).
    #[serde(default)]
    pub(crate) shadow_of: Option<String>,
    /// The event time (RFC 3339) a shadow's backfill replays from.
    #[serde(default)]
    pub(crate) backfill_from: Option<String>,
    /// The name the board's Redis keys carry, when not its own: the
    /// shadow whose keys it took over when a promotion was made permanent
    /// (docs/rebuilds.md).
    #[serde(default)]
    pub(crate) stored_as: Option<String>,
}

/// One `order_by` entry as written. Keys other than these are collected in
/// `unknown` so the compiler can name them with the entry's position.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(crate) struct FieldSpec {
    #[serde(default)]
    pub(crate) field: Option<String>,
    #[serde(default)]
    pub(crate) score: Option<String>,
    #[serde(default)]
    pub(crate) filter: Option<String>,
    #[serde(default)]
    pub(crate) aggregate: Option<String>,
    #[serde(default)]
    pub(crate) order: Option<String>,
    #[serde(flatten)]
    pub(crate) unknown: BTreeMap<String, toml::Value>,
}

/// The settings outside `[[board]]` that compiling boards needs, already
/// parsed by the caller (the configuration names and checks them).
#[derive(Debug, Clone)]
pub(crate) struct Globals {
    /// Zone of boards that do not name their own.
    pub(crate) timezone: chrono_tz::Tz,
    /// Prefix of every Redis key.
    pub(crate) key_prefix: String,
    /// Events further ahead of the clock than this many ms are invalid.
    pub(crate) future_skew_ms: i64,
    /// `[archive] grace` in ms when an archive is configured; `None` when
    /// there is none (then no board may list `archive`).
    pub(crate) archive_grace_ms: Option<i64>,
}

/// A board definition that cannot be compiled. Messages name the board (by
/// name and position) and the field, or the global setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BoardError {
    #[error("{location}: {message}")]
    Invalid { location: String, message: String },
    /// The Redis key prefix cannot delimit keys (empty, or has a brace).
    #[error(
        "key prefix {0:?} must be non-empty and must not contain `{{` or `}}` (they delimit the hash tag)"
    )]
    KeyPrefix(String),
    #[error("no boards are defined; add at least one [[board]] table")]
    NoBoards,
}

impl BoardError {
    pub(crate) fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        BoardError::Invalid {
            location: location.into(),
            message: message.into(),
        }
    }
}
