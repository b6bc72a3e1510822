//! A batch's events that wait for their rate checks (docs/checks.md): what
//! the sink needs to decide them ([`Candidate`]) and what the engine needs
//! if one is quarantined (its message, and the outcome it was counted
//! with), kept side by side.

use std::sync::Arc;

use crate::sink::rates::Candidate;
use crate::telemetry::Outcome;

/// A rated event's message, for the quarantine topic.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Vec<u8>,
    /// The outcome the batch counted it with when it was taken
    /// (`Applied`: it is among the events waiting for Redis).
    pub(crate) outcome: Outcome,
}

/// The batch's rated events, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Rated {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) held: Vec<Held>,
}

impl Rated {
    pub(crate) fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    pub(crate) fn push(&mut self, candidate: Candidate, held: Held) {
        self.candidates.push(candidate);
        self.held.push(held);
    }

    /// Drops the events of revoked partitions (their next owner takes them
    /// again).
    pub(crate) fn drop_partitions(&mut self, gone: &[u16]) {
        let mut keep = self.candidates.iter().map(|c| !gone.contains(&c.part));
        self.held.retain(|_| keep.next().unwrap_or(true));
        self.candidates.retain(|c| !gone.contains(&c.part));
    }
}
