//! The reader itself ([`Reader`]): what every read needs (the boards, the
//! store, the clock, the archive, the cache of unions and the bound on what
//! one read may walk), and the one way to make one ([`Reader::new`],
//! [`Reader::with_unions`], [`Reader::with_max_read_entries`]). The reads are
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
    pub(super) boards: Arc<BoardSet>,
    pub(super) store: Store,
    pub(super) clock: SharedClock,
    /// The archive (`[archive] url`), for periods no longer in Redis.
    pub(super) archive: Option<ArchiveReader>,
    /// Rolling views being computed, and how long a result is reused
    /// (`[http] union_cache`).
    pub(super) unions: Unions,
    /// Most sorted-set entries one read may make Redis walk (`[http]
    /// max_read_entries`): the boards a union combines, the steps of a
    /// dense rank without its index. A read that would walk more is
    /// refused (400), never computed unboundedly.
    pub(super) max_read_entries: u64,
    /// The topics the boards are computed from: a shadow board's backfill
    /// progress counts their partitions.
    pub(super) topics: Vec<String>,
    /// Which shadow serves a promoted board (`served.rs`, `serving.rs`).
    pub(super) serving: std::sync::Arc<super::served::Serving>,
}

/// The default of `[http] max_read_entries`.
pub(crate) const DEFAULT_MAX_READ_ENTRIES: u64 = 2_000_000;

impl Reader {
    /// A reader of `boards` in `store` on `clock`, falling back to
    /// `archive` (if any) for periods no longer in Redis; unions are
    /// cached for the default `[http] union_cache`
    /// ([`super::compute::DEFAULT_UNION_CACHE_MS`]).
    pub fn new(
        boards: Arc<BoardSet>,
        store: Store,
        clock: SharedClock,
        archive: Option<ArchiveReader>,
    ) -> Reader {
        Reader {
            boards,
            store,
            clock,
            archive,
            unions: Unions::default(),
            max_read_entries: DEFAULT_MAX_READ_ENTRIES,
            topics: Vec::new(),
            serving: Default::default(),
        }
    }

    /// The same reader refusing reads that would make Redis walk more than
    /// `entries` sorted-set entries (`[http] max_read_entries`; at least 1).
    pub fn with_max_read_entries(mut self, entries: usize) -> Reader {
        self.max_read_entries = (entries as u64).max(1);
        self
    }

    /// Most sorted-set entries one read may make Redis walk (`[http]
    /// max_read_entries`).
    pub(crate) fn max_read_entries(&self) -> u64 {
        self.max_read_entries
    }

    /// The same reader computing unions with `unions` (its cache time,
    /// `[http] union_cache`, and its slicing).
    pub fn with_unions(mut self, unions: Unions) -> Reader {
        self.unions = unions;
        self
    }

    /// The same reader counting a backfill's lag over `topics`
    /// (`kafka.topics`).
    pub fn with_topics(mut self, topics: Vec<String>) -> Reader {
        self.topics = topics;
        self
    }

    /// How far a shadow board's backfill is (docs/rebuilds.md); read only.
    pub(crate) async fn backfill(
        &self,
        board: &str,
    ) -> Result<crate::backfill::progress::Progress, crate::sink::store::StoreError> {
        crate::backfill::progress::read(&self.store, &self.boards.key_prefix, board, &self.topics)
            .await
    }

    /// The same reader falling back to `archive` for periods no longer in
    /// Redis.
    pub fn with_archive(mut self, archive: ArchiveReader) -> Reader {
        self.archive = Some(archive);
        self
    }
}
