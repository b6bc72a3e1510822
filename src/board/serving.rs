//! Which board's data serves a promoted board (docs/rebuilds.md): the
//! entries of `<prefix>:serving` (board → `{"board", "since", "actor"}`),
//! written by a promotion (`crate::admin::promote`), read by every reader
//! (`crate::reader`) and by the archiver, which archives a promoted board's
//! periods from the data that serves it.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::model::BoardSet;

/// How long a reader uses its copy of the map.
pub(crate) const FRESH: Duration = Duration::from_millis(250);

/// One entry of the map: the board whose data serves a promoted board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The shadow promoted in the board's place.
    pub board: String,
    /// When it was promoted (ms).
    pub since: i64,
    /// Who promoted it (a token's name).
    #[serde(default)]
    pub actor: String,
}

/// Board → the shadow serving it.
pub(crate) type ServingMap = HashMap<String, Served>;

/// The map from the hash's fields. Entries that do not parse are left
/// out, and so are those the configuration no longer backs: a board that
/// is gone, or served by a board that is no longer its shadow (after a
/// promotion was made permanent, docs/rebuilds.md, the board itself
/// carries the shadow's keys, and a later board of the shadow's name must
/// not take its place).
pub(crate) fn parse(raw: HashMap<String, String>, boards: &BoardSet) -> ServingMap {
    let backed = |board: &str, s: &Served| {
        boards.get(board).is_some()
            && (s.board == board
                || boards
                    .get(&s.board)
                    .and_then(|b| b.shadow.as_ref())
                    .is_some_and(|sh| sh.of == board))
    };
    raw.into_iter()
        .filter_map(|(b, v)| serde_json::from_str::<Served>(&v).ok().map(|s| (b, s)))
        .filter(|(b, s)| backed(b, s))
        .collect()
}
