//! The flush queue: the batch being built, the closed batches waiting for
//! a flush slot, and the flushes in flight, in order. A batch closes when
//! it is full or old enough; flushes are started in order, at most
//! [`FLUSHES_IN_FLIGHT`] at once, each chained to the one before it (a
//! partition's batches must reach Redis in order for the offset fences to
//! hold); finished flushes are handed back in order, so offsets are
//! acknowledged in order even when a later flush task ends first.
//!
//! Group commit: a batch that is due while no flush can start keeps
//! growing until one can. Under load a batch then covers what arrived
//! during one flush, so more updates merge per (key, member) and Redis does
//! less per event; the batch could not have been sent any sooner, so no
//! event waits longer.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use super::batch::Batch;
use super::flush::Flushed;
use super::port::Sink;
use crate::source::TopicPartition;

/// Flushes running at once: one applying, one encoding behind it.
pub(crate) const FLUSHES_IN_FLIGHT: usize = 2;

/// What is left at shutdown, in order.
pub(crate) struct Leftover {
    pub(crate) inflight: VecDeque<JoinHandle<Flushed>>,
    /// Closed batches, then the one being built.
    pub(crate) closed: VecDeque<Batch>,
    pub(crate) previous: Option<oneshot::Receiver<bool>>,
}

pub(crate) struct FlushQueue {
    building: Batch,
    closed: VecDeque<Batch>,
    /// The front one is being applied; the one behind it encodes its calls
    /// meanwhile and waits for it before sending.
    inflight: VecDeque<JoinHandle<Flushed>>,
    /// Tells the next flush whether the last one started was applied.
    previous: Option<oneshot::Receiver<bool>>,
    /// The building batch reached `max_delay` while no flush could start.
    due: bool,
    max_events: usize,
    max_delay: Duration,
}

impl FlushQueue {
    pub fn new(max_events: usize, max_delay: Duration) -> FlushQueue {
        FlushQueue {
            building: Batch::default(),
            closed: VecDeque::new(),
            inflight: VecDeque::new(),
            previous: None,
            due: false,
            max_events,
            max_delay,
        }
    }

    pub(crate) fn building(&mut self) -> &mut Batch {
        &mut self.building
    }

    /// Closes the building batch once it holds `max_events` messages.
    pub(crate) fn message_taken(&mut self) {
        if self.building.messages() >= self.max_events {
            self.close();
            self.due = false;
        }
    }

    fn close(&mut self) {
        if !self.building.is_empty() {
            let next = self.building.sized_like();
            self.closed
                .push_back(std::mem::replace(&mut self.building, next));
        }
    }

    /// When the building batch must close (`None` while it is empty or
    /// already due and waiting for a flush slot).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.building.opened_at() {
            Some(opened) if !self.due => Some(opened + self.max_delay),
            _ => None,
        }
    }

    /// The building batch is `max_delay` old: it closes now if a flush can
    /// start at once, otherwise it is due and keeps growing (group commit).
    pub(crate) fn timer_fired(&mut self) {
        if self.building.is_empty() {
            return;
        }
        if self.inflight.len() < FLUSHES_IN_FLIGHT && self.closed.is_empty() {
            self.close();
        } else {
            self.due = true;
        }
    }

    /// Closes a due batch once a slot is free and starts the flushes that
    /// fit, in order.
    pub(crate) fn start_flushes(&mut self, sink: &dyn Sink, shutdown: &watch::Receiver<bool>) {
        if self.due && (self.building.is_empty() || self.inflight.len() < FLUSHES_IN_FLIGHT) {
            self.due = false;
            self.close();
        }
        while self.inflight.len() < FLUSHES_IN_FLIGHT
            && let Some(batch) = self.closed.pop_front()
        {
            let (handle, done) = sink.start(batch, self.previous.take(), shutdown);
            self.inflight.push_back(handle);
            self.previous = Some(done);
        }
    }

    /// Messages held in memory and not yet handed to a flush.
    pub(crate) fn backlog(&self) -> usize {
        self.building.messages() + self.closed.iter().map(Batch::messages).sum::<usize>()
    }

    pub(crate) fn has_inflight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// The oldest flush's result, once it is done (pending forever when
    /// none is in flight: the loop's `select!` guards that branch).
    pub(crate) async fn next_done(&mut self) -> Result<Flushed, JoinError> {
        let result = match self.inflight.front_mut() {
            Some(h) => h.await,
            None => std::future::pending().await,
        };
        self.inflight.pop_front();
        result
    }

    /// A flush was not applied (Redis lost state, or the task failed): the
    /// flushes behind it give up on their own, and the next one waits for
    /// nothing before it.
    pub(crate) fn break_chain(&mut self) {
        self.previous = None;
    }

    /// Revoked partitions: their unacknowledged messages will be read (and
    /// counted) again by the next owner; applying them here too would only
    /// be skipped by the fences, so they leave the batches not yet sent.
    pub(crate) fn drop_partitions(&mut self, parts: &[TopicPartition]) {
        self.building.drop_partitions(parts);
        for b in self.closed.iter_mut() {
            b.drop_partitions(parts);
        }
    }

    /// A rewind: everything not yet sent is read again.
    pub(crate) fn discard_unsent(&mut self) {
        self.building = Batch::default();
        self.closed.clear();
        self.due = false;
    }

    /// Shutdown: what is in flight and in hand, in order.
    pub(crate) fn into_leftover(mut self) -> Leftover {
        self.close();
        Leftover {
            inflight: self.inflight,
            closed: self.closed,
            previous: self.previous,
        }
    }
}
