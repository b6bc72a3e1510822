//! Who is hidden or erased (docs/moderation.md), as the write path sees it:
//! a [`Snapshot`] of the fleet's moderation record (`<prefix>:moderation`
//! in Redis, docs/redis-layout.md) at one generation, and the [`Cell`] the
//! consumer's tasks share it through. A leaf over `board`: the sink routes
//! a hidden member's updates to the twin views with it, the engine counts
//! outcomes with it, the admin actions write the record it is read from.

mod hash;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::board::BoardSet;

pub use hash::MemberHasher;

/// The record's field holding its generation, raised by every action.
pub const GEN_FIELD: &str = "~gen";
/// The record's field holding the fingerprint of the `erase_key` its
/// hashes were made with.
pub const KEY_FIELD: &str = "~key";
/// Prefix of a hidden member's field (`h:<member>`).
pub const HIDDEN_PREFIX: &str = "h:";
/// Prefix of an erased member's field (`e:<keyed hash>`).
pub const ERASED_PREFIX: &str = "e:";

/// What the record keeps of a hidden member (the value of its `h:` field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiddenEntry {
    /// The boards it is hidden from; `None`: every board.
    pub boards: Option<Vec<String>>,
    /// When it was hidden (ms).
    pub at: i64,
    /// The token name (or `cli`) that hid it.
    pub actor: String,
    /// Why, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the record keeps of an erased member (the value of its `e:` field):
/// never the id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErasedEntry {
    /// When it was erased (ms).
    pub at: i64,
    /// The token name (or `cli`) that erased it.
    pub actor: String,
}

/// The boards a member is hidden from, by board index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hidden {
    All,
    Boards(Vec<usize>),
}

impl Hidden {
    fn covers(&self, board: usize) -> bool {
        match self {
            Hidden::All => true,
            Hidden::Boards(b) => b.contains(&board),
        }
    }
}

/// Where one member's update of one board goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To the board's views.
    Visible,
    /// To the views' twins: kept aside for a restore.
    Hidden,
    /// Nowhere.
    Erased,
}

/// The moderation record at one generation.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The record's generation: what apply calls carry, and the fences'
    /// stamps are compared with.
    pub generation: i64,
    hidden: std::collections::HashMap<Box<str>, Hidden, foldhash::fast::RandomState>,
    erased: HashSet<u128, foldhash::fast::FixedState>,
    hasher: MemberHasher,
}

impl Snapshot {
    /// Nobody hidden or erased, at generation 0 (an empty record).
    pub fn empty(hasher: MemberHasher) -> Snapshot {
        Snapshot {
            generation: 0,
            hidden: Default::default(),
            erased: Default::default(),
            hasher,
        }
    }

    /// The snapshot of a record read as (field, value) pairs. Entries that
    /// do not parse, and boards no longer configured, are skipped with a
    /// warning: a record written by a newer version must not stop the fleet.
    pub fn from_fields(
        fields: &[(String, String)],
        boards: &BoardSet,
        hasher: MemberHasher,
    ) -> Snapshot {
        let mut snap = Snapshot::empty(hasher);
        for (field, value) in fields {
            if field == GEN_FIELD {
                snap.generation = value.parse().unwrap_or(0);
            } else if field == KEY_FIELD {
                if *value != snap.hasher.key_id() {
                    tracing::error!(
                        "The moderation record was written with another [admin] erase_key: members erased under the old key are not recognised (docs/moderation.md)."
                    );
                }
            } else if let Some(member) = field.strip_prefix(HIDDEN_PREFIX) {
                match serde_json::from_str::<HiddenEntry>(value) {
                    Ok(entry) => {
                        let hidden = match entry.boards {
                            None => Hidden::All,
                            Some(names) => Hidden::Boards(
                                names
                                    .iter()
                                    .filter_map(|n| boards.boards.iter().position(|b| b.name == *n))
                                    .collect(),
                            ),
                        };
                        snap.hidden.insert(member.into(), hidden);
                    }
                    Err(e) => {
                        tracing::warn!(field = %field, error = %e, "A hidden member's entry in the moderation record does not parse; it is ignored.");
                    }
                }
            } else if let Some(hex) = field.strip_prefix(ERASED_PREFIX) {
                match u128::from_str_radix(hex, 16) {
                    Ok(h) => {
                        snap.erased.insert(h);
                    }
                    Err(_) => {
                        tracing::warn!(field = %field, "An erased member's entry in the moderation record does not parse; it is ignored.");
                    }
                }
            }
        }
        snap
    }

    /// The hasher of member ids the record's hashes were made with.
    pub fn hasher(&self) -> &MemberHasher {
        &self.hasher
    }

    /// Nobody is hidden or erased: every update goes to its board, and the
    /// write path skips every look-up.
    pub fn is_empty(&self) -> bool {
        self.hidden.is_empty() && self.erased.is_empty()
    }

    /// Whether anyone was erased.
    pub fn has_erased(&self) -> bool {
        !self.erased.is_empty()
    }

    /// Whether `member` was erased.
    pub fn is_erased(&self, member: &str) -> bool {
        !self.erased.is_empty() && self.erased.contains(&self.hasher.hash(member))
    }

    /// Where `member`'s update of board `board` goes.
    pub fn route(&self, board: usize, member: &str) -> Route {
        if self.is_erased(member) {
            Route::Erased
        } else if self.hidden.get(member).is_some_and(|h| h.covers(board)) {
            Route::Hidden
        } else {
            Route::Visible
        }
    }

    /// The routes of many members of one batch at once, for an encoder
    /// that looks a member up once per update: per member, whether it is
    /// erased and the boards it is hidden from. `None` when nobody is
    /// hidden or erased.
    pub fn batch_routes(&self, members: &[Arc<str>]) -> Option<BatchRoutes<'_>> {
        if self.is_empty() {
            return None;
        }
        Some(BatchRoutes {
            of: members
                .iter()
                .map(|m| {
                    if self.is_erased(m) {
                        MemberRoute::Erased
                    } else {
                        match self.hidden.get(&**m) {
                            Some(h) => MemberRoute::Hidden(h),
                            None => MemberRoute::Visible,
                        }
                    }
                })
                .collect(),
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum MemberRoute<'a> {
    Visible,
    Hidden(&'a Hidden),
    Erased,
}

/// The routes of a batch's members (see [`Snapshot::batch_routes`]).
#[derive(Debug)]
pub struct BatchRoutes<'a> {
    of: Vec<MemberRoute<'a>>,
}

impl BatchRoutes<'_> {
    /// Where the update of member index `member` for board `board` goes.
    pub fn route(&self, board: usize, member: u32) -> Route {
        match self.of.get(member as usize) {
            Some(MemberRoute::Erased) => Route::Erased,
            Some(MemberRoute::Hidden(h)) if h.covers(board) => Route::Hidden,
            _ => Route::Visible,
        }
    }
}

/// The snapshot a consumer's tasks share: replaced whole when the record
/// is read again, read without a lock by the intake through its
/// generation.
#[derive(Debug)]
pub struct Cell {
    current: RwLock<Arc<Snapshot>>,
    /// The current snapshot's generation; -1 until the record was read.
    generation: AtomicI64,
}

impl Cell {
    /// A cell holding an empty snapshot, not yet read from Redis.
    pub fn new(hasher: MemberHasher) -> Cell {
        Cell {
            current: RwLock::new(Arc::new(Snapshot::empty(hasher))),
            generation: AtomicI64::new(-1),
        }
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The current snapshot's generation (-1 before the record was read).
    pub fn generation(&self) -> i64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the record has been read at least once.
    pub fn loaded(&self) -> bool {
        self.generation() >= 0
    }

    /// Replaces the snapshot, unless the one held is newer (two tasks
    /// reading the record at once).
    pub fn replace(&self, snap: Snapshot) {
        let mut guard = match self.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.loaded() && guard.generation > snap.generation {
            return;
        }
        let generation = snap.generation;
        *guard = Arc::new(snap);
        self.generation.store(generation, Ordering::Release);
    }

    /// The hasher the snapshots use.
    pub fn hasher(&self) -> MemberHasher {
        self.current().hasher.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boards() -> BoardSet {
        crate::config::test_boards(
            r#"
            [[board]]
            name = "a"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["all"]
            [[board]]
            name = "b"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["all"]
            "#,
        )
    }

    #[test]
    fn a_record_routes_hidden_and_erased_members() {
        let hasher = MemberHasher::new(Some("a-long-secret-key-0001"));
        let hidden_b = serde_json::to_string(&HiddenEntry {
            boards: Some(vec!["b".into(), "gone".into()]),
            at: 1,
            actor: "ops".into(),
            reason: None,
        })
        .unwrap();
        let hidden_all = serde_json::to_string(&HiddenEntry {
            boards: None,
            at: 1,
            actor: "ops".into(),
            reason: Some("cheat".into()),
        })
        .unwrap();
        let fields = vec![
            (GEN_FIELD.to_string(), "7".to_string()),
            ("h:u1".to_string(), hidden_b),
            ("h:u2".to_string(), hidden_all),
            (format!("e:{}", hasher.hex("u3")), "{}".to_string()),
            ("h:bad".to_string(), "not json".to_string()),
        ];
        let snap = Snapshot::from_fields(&fields, &boards(), hasher);
        assert_eq!(snap.generation, 7);
        assert_eq!(snap.route(0, "u1"), Route::Visible);
        assert_eq!(snap.route(1, "u1"), Route::Hidden);
        assert_eq!(snap.route(0, "u2"), Route::Hidden);
        assert_eq!(snap.route(1, "u3"), Route::Erased);
        assert_eq!(snap.route(0, "bad"), Route::Visible);
        assert_eq!(snap.route(0, "u4"), Route::Visible);
        let members: Vec<Arc<str>> = vec!["u4".into(), "u1".into(), "u3".into()];
        let routes = snap.batch_routes(&members).unwrap();
        assert_eq!(routes.route(1, 0), Route::Visible);
        assert_eq!(routes.route(1, 1), Route::Hidden);
        assert_eq!(routes.route(0, 1), Route::Visible);
        assert_eq!(routes.route(0, 2), Route::Erased);
    }

    /// The apply script reads the record's generation by this name.
    #[test]
    fn the_apply_script_reads_the_same_generation_field() {
        assert_eq!(GEN_FIELD, "~gen");
        let lua = crate::sink::store::APPLY_LUA;
        assert!(
            lua.contains(&format!("\"{GEN_FIELD}\"")),
            "apply.lua reads {GEN_FIELD}"
        );
    }

    #[test]
    fn a_cell_keeps_the_newest_snapshot() {
        let hasher = MemberHasher::new(None);
        let cell = Cell::new(hasher.clone());
        assert!(!cell.loaded());
        let mut s = Snapshot::empty(hasher.clone());
        s.generation = 5;
        cell.replace(s);
        assert_eq!(cell.generation(), 5);
        let mut older = Snapshot::empty(hasher);
        older.generation = 3;
        cell.replace(older);
        assert_eq!(cell.current().generation, 5);
    }
}
