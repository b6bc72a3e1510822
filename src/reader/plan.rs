//! One union to compute ([`UnionPlan`]): the boards it combines, its result
//! key, freshness marker and aggregate, and for `scope=*` where to find the
//! scopes when it is computed ([`Registered`]). Made by the plans of rolling
//! views (`union`) and of unions of scopes (`scopes`), read by computing
//! (`compute`, `build`) and by locating a read (`locate`).

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::board::keys;
use crate::board::model::{Aggregate, Board};

/// One union to compute: where its inputs and its result live.
#[derive(Debug, Clone)]
pub(super) struct UnionPlan {
    /// The result sorted set (the key every read of the view uses).
    pub(crate) result: String,
    /// Its tie time hash (tie-break boards; else unused).
    pub(crate) times: String,
    /// Exists while the result is fresh (lives `union_cache`; the result
    /// a grace longer).
    pub(crate) fresh: String,
    /// The boards to combine: period boards newest first, then scope by
    /// scope for a union of scopes.
    pub(crate) sources: Vec<String>,
    /// `scope=*`: the sources are every registered scope of these views,
    /// found when the union is computed ([`super::scopes`]).
    pub(crate) registered: Option<Registered>,
    /// Window instances (tags) to trim to the reader's clock first.
    pub(crate) trims: Vec<String>,
    /// Whether the sources lie in several cluster slots (a union of scopes
    /// of a board in the default layout): refused on a Redis Cluster.
    pub(crate) cross_slot: bool,
    pub(crate) aggregate: &'static str,
    pub(crate) tie: &'static str,
    /// The request parameter that asked for this union (`view` for a
    /// rolling view, `scope` for a union of scopes): the one a refusal
    /// names.
    pub(crate) param: &'static str,
    /// Whether the result is one read's own ([`UnionPlan::private`]).
    pub(crate) private: bool,
}

impl UnionPlan {
    /// A union of `sources` into `result`, with the board's aggregate.
    pub(super) fn new(board: &Board, result: String, sources: Vec<String>) -> UnionPlan {
        UnionPlan {
            times: keys::helper(&result, "t"),
            fresh: keys::helper(&result, "fresh"),
            result,
            sources,
            registered: None,
            trims: Vec::new(),
            cross_slot: false,
            aggregate: match board.aggregate {
                Aggregate::Max => "max",
                Aggregate::Min => "min",
                Aggregate::Sum | Aggregate::Last => "sum",
            },
            tie: board.tie_key.code(),
            param: "view",
            private: false,
        }
    }

    /// The same union into a result key of one read's own, beside the
    /// shared one: computed whatever is cached, living until the read
    /// deletes it (or [`PRIVATE_TTL_MS`] if the process dies first).
    pub(super) fn private(&self) -> UnionPlan {
        let result = keys::helper(&self.result, &format!("read:{}", nonce()));
        UnionPlan {
            times: keys::helper(&result, "t"),
            fresh: keys::helper(&result, "fresh"),
            result,
            private: true,
            ..self.clone()
        }
    }
}

/// How long a read's own union result may outlive a read that died, ms.
pub(super) const PRIVATE_TTL_MS: i64 = 60_000;

/// `scope=*`: where to find the scopes, when the union is computed.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    pub(super) prefix: String,
    pub(super) board: String,
    /// The name in the board's keys ([`crate::board::model::Board::stored`]).
    pub(super) stored: String,
    pub(super) board_slot: bool,
    /// Most scope values a registry keeps; a registry holding more knows
    /// it has lost some.
    pub(super) keep: u64,
    /// The view ids combined, each with its registry key.
    pub(super) views: Vec<(String, String)>,
    pub(super) window: bool,
}

/// A name no other build or read of this or another process uses at once
/// (temporary keys beside a union key).
pub(super) fn nonce() -> String {
    static BUILDS: AtomicU64 = AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:016x}",
        RandomState::new().hash_one((n, std::process::id()))
    )
}
