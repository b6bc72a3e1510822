//! A reader's copy of the serving map (`crate::board::serving`), kept for
//! at most its `FRESH` (`serving.rs` reads and refreshes it).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::board::serving::ServingMap;

/// A reader's copy of the map.
#[derive(Debug, Default)]
pub(crate) struct Serving {
    pub(super) copy: Mutex<Option<(Instant, Arc<ServingMap>)>>,
}
