//! What one successful flush did, from the apply script's replies: counts
//! per board for the metrics, and what the engine needs to settle each
//! event's outcome (fences learnt from conflicts, the cutoffs of calls
//! that found updates late).

use std::collections::HashMap;
use std::sync::Arc;

use crate::moderation::Snapshot;

use super::reply::Counts;

/// Per-board counts from the script replies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoardCounts {
    /// Aggregated updates written (`rankflow_board_updates_total`).
    pub applied: u64,
    /// Window entries evicted (`rankflow_window_evictions_total`).
    pub(crate) evicted: u64,
    /// Updates refused because the total would leave the exact range.
    pub overflow: u64,
    /// Updates the script found late.
    pub late: u64,
}

/// What one successful flush did.
#[derive(Debug, Clone, Default)]
pub struct FlushReport {
    /// Indexed like [`crate::board::BoardSet::boards`].
    pub boards: Vec<BoardCounts>,
    /// (instance, partition) ranges the fences showed already applied, in
    /// full or in part (a redelivery): those events were left out.
    pub conflicts: u64,
    /// Some window eviction stopped at its budget.
    pub(crate) more_trim: bool,
    /// Fences learnt from conflicts: batch instance → partition index →
    /// highest offset already applied (those updates were left out).
    pub(crate) fenced: HashMap<u32, HashMap<u16, i64>>,
    /// Batch instances whose call found updates late: the cutoff the
    /// script used per view (in the instance's view order), so the late
    /// updates can be told from the others.
    pub late_cutoffs: HashMap<u32, Vec<i64>>,
    /// The moderation record the batch's calls were last encoded with,
    /// when someone was hidden or erased in it: which updates went to
    /// twins, or nowhere, to count events `hidden` and `erased`.
    pub(crate) moderation: Option<Arc<Snapshot>>,
}

impl FlushReport {
    /// An empty report for `boards` boards.
    pub fn new(boards: usize) -> FlushReport {
        FlushReport {
            boards: vec![BoardCounts::default(); boards],
            ..FlushReport::default()
        }
    }

    /// Adds the counts of batch instance `instance` of board `board`.
    pub(crate) fn add(&mut self, board: usize, instance: u32, n: Counts) {
        let c = &mut self.boards[board];
        c.applied += n.applied;
        c.evicted += n.evicted;
        c.overflow += n.overflow;
        c.late += n.late;
        if n.late > 0 {
            self.late_cutoffs.insert(instance, n.cutoffs);
        }
    }
}
