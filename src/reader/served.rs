//! The serving map's types (`serving.rs` reads it, `crate::admin::promote`
//! writes it): which shadow board serves a promoted board, and a reader's
//! copy of the map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// A reader's copy of the map.
#[derive(Debug, Default)]
pub(crate) struct Serving {
    pub(super) copy: Mutex<Option<(Instant, Arc<ServingMap>)>>,
}
