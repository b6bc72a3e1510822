//! Which board's data serves a promoted board (docs/rebuilds.md): the
//! entries of `<prefix>:serving` (board → `{"board", "since", "actor"}`),
//! written by a promotion (`crate::admin::promote`), read by every reader
//! (`crate::reader`) and by the archiver, which archives a promoted board's
//! periods from the data that serves it.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// The map from the hash's fields; entries that do not parse, or name a
/// board `known` does not know, are left out.
pub(crate) fn parse(raw: HashMap<String, String>, known: impl Fn(&str) -> bool) -> ServingMap {
    raw.into_iter()
        .filter_map(|(b, v)| serde_json::from_str::<Served>(&v).ok().map(|s| (b, s)))
        .filter(|(_, s)| known(&s.board))
        .collect()
}
