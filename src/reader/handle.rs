//! The reader itself ([`Reader`]): what every read needs (the boards, the
//! store, the clock, the archive and the cache of unions). The reads are
//! `impl Reader` blocks beside it: pages and members in `reads`, styled
//! ranks in `styled`, the list of periods in `periods`.

use std::sync::Arc;

use super::compute::Unions;
use crate::archive::read::ArchiveReader;
use crate::board::BoardSet;
use crate::clock::SharedClock;
use crate::sink::store::Store;

/// Reads boards from Redis, and closed periods from the archive.
#[derive(Clone)]
pub struct Reader {
    pub boards: Arc<BoardSet>,
    pub store: Store,
    pub clock: SharedClock,
    /// The archive (`[archive] url`), for periods no longer in Redis.
    pub archive: Option<ArchiveReader>,
    /// Rolling views being computed, and how long a result is reused
    /// (`[http] union_cache`).
    pub unions: Unions,
}
