//! The engine's record of one batch: which messages it took (offsets per
//! partition, to commit once Redis acknowledged it), what became of each
//! (outcome counts, the events headed for `applied`, dead letters), and
//! when it opened. The board updates themselves are the sink's
//! ([`crate::sink::updates::Updates`]).
//!
//! Outcome counts are kept per partition, so that a revoked partition's
//! share leaves the batch whole (its next owner counts those events).
//! Events headed for `applied` are kept one by one until Redis answered:
//! an event whose every update the script found late (its window bucket
//! left the window meanwhile, or its archived period had been closed by the
//! archiver's `K:closed` marker) is counted `late`, and one whose every
//! update the fences showed applied already is not counted here at all
//! (whoever applied it counted it); see [`Record::settle`].

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::deadletter::DeadLetter;
use crate::event::EventType;
use crate::sink::updates::{EventSet, FastMap, Fates};
use crate::source::TopicPartition;
use crate::telemetry::Outcome;

/// A partition's share of the batch.
#[derive(Debug, Clone)]
pub(crate) struct PartState {
    /// The partition's topic.
    pub(crate) topic: Arc<str>,
    /// The partition's number.
    pub(crate) partition: i32,
    /// Lowest and highest offset taken into the batch (applied, filtered
    /// or invalid); `last_offset` is -1 once the partition was revoked.
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
}

/// Counts per (partition index, event type, outcome) for
/// `rankflow_events_total`: filtered, invalid and late-on-arrival events
/// (applied ones are settled after the flush, from [`Record::applied`]).
pub(crate) type OutcomeCounts = FastMap<(u16, Option<EventType>, Outcome), u64>;

/// An event with at least one update in the batch: `applied` if Redis
/// takes one of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppliedEvent {
    /// Index of its partition in [`Record::parts`].
    pub(crate) part: u16,
    /// Its offset, to find what became of its updates.
    pub(crate) offset: i64,
    /// Event time, for the lag histogram.
    pub(crate) ts: i64,
    /// Its type, a label of `rankflow_events_total`.
    pub(crate) kind: EventType,
}

/// A batch's final counts once Redis acknowledged it.
#[derive(Debug, Default, PartialEq)]
pub struct Settled {
    /// (topic, event type, outcome) → events.
    pub outcomes: Vec<(Arc<str>, Option<EventType>, Outcome, u64)>,
    /// Event times of the events counted `applied`.
    pub(crate) applied_ts: Vec<i64>,
}

/// The engine's record of one batch.
#[derive(Debug, Default)]
pub struct Record {
    /// Messages taken (the `max_events` measure).
    pub(crate) messages: usize,
    /// When the first message arrived (the `max_delay_ms` measure).
    pub(crate) opened_at: Option<Instant>,
    /// Every partition the batch took a message of, by index.
    pub(crate) parts: Vec<PartState>,
    part_index: HashMap<TopicPartition, u16>,
    /// The partition of the message taken last.
    last_part: u16,
    /// Events that will not reach Redis, counted as they were taken.
    pub(crate) outcomes: OutcomeCounts,
    /// Events with at least one update, in arrival order.
    pub(crate) applied: Vec<AppliedEvent>,
    /// Messages that are not valid events, for the dead-letter topic.
    pub(crate) dead_letters: Vec<DeadLetter>,
}

impl Record {
    /// Registers a message of `topic/partition` at `offset`; every message
    /// taken must be registered so its offset is committed with the batch.
    /// Returns the partition's index, and whether the batch just met it.
    pub(crate) fn take_message(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
    ) -> (u16, bool) {
        self.messages += 1;
        if self.opened_at.is_none() {
            self.opened_at = Some(Instant::now());
        }
        // Messages come in runs of one partition: the last one is tried
        // first (by the topic's address: the intake interns topics), before
        // hashing the topic's name.
        let last = self
            .parts
            .get(usize::from(self.last_part))
            .is_some_and(|p| p.partition == partition && Arc::ptr_eq(&p.topic, topic));
        let found = match last {
            true => Some(self.last_part),
            false => self.part_index.get(&(topic.clone(), partition)).copied(),
        };
        let (idx, new) = match found {
            Some(i) => (i, false),
            None => {
                let i = self.parts.len() as u16;
                self.parts.push(PartState {
                    topic: topic.clone(),
                    partition,
                    first_offset: offset,
                    last_offset: offset,
                });
                self.part_index.insert((topic.clone(), partition), i);
                (i, true)
            }
        };
        self.last_part = idx;
        let p = &mut self.parts[idx as usize];
        p.first_offset = p.first_offset.min(offset);
        p.last_offset = p.last_offset.max(offset);
        (idx, new)
    }

    /// The index of a partition the batch took messages of.
    pub(crate) fn index_of(&self, part: &TopicPartition) -> Option<u16> {
        self.part_index.get(part).copied()
    }

    /// Counts an event of partition `part` that will not reach Redis
    /// (filtered, invalid, late on arrival).
    pub(crate) fn count(&mut self, part: u16, kind: Option<EventType>, outcome: Outcome) {
        *self.outcomes.entry((part, kind, outcome)).or_insert(0) += 1;
    }

    /// Takes back the count of an event of partition `part` taken with
    /// `outcome`: it was quarantined after it was taken. (One taken as
    /// `Applied` waits among the events for Redis instead: see
    /// [`Record::drop_applied`].)
    pub(crate) fn uncount(&mut self, kind: EventType, outcome: Outcome, part: u16) {
        if outcome != Outcome::Applied
            && let Some(n) = self.outcomes.get_mut(&(part, Some(kind), outcome))
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Drops the events `gone` (partition index, offset) from those waiting
    /// for Redis, in one pass.
    pub(crate) fn drop_applied(&mut self, gone: &EventSet) {
        self.applied.retain(|e| !gone.contains(&(e.part, e.offset)));
    }

    /// Per partition index the batch still holds: its last offset.
    pub(crate) fn last_offsets(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.last_offset >= 0)
            .map(|(i, p)| (i, p.last_offset))
    }

    /// Keeps an event with updates in the batch until Redis answered.
    pub(crate) fn applying(&mut self, event: AppliedEvent) {
        self.applied.push(event);
    }

    /// Drops everything of the given partitions (they were revoked: their
    /// uncommitted messages will be read again, and counted, by the next
    /// owner); returns the indices they had.
    pub(crate) fn drop_partitions(&mut self, revoked: &[TopicPartition]) -> Vec<u16> {
        let gone: Vec<u16> = revoked
            .iter()
            .filter_map(|k| self.part_index.get(k).copied())
            .collect();
        if gone.is_empty() {
            return gone;
        }
        for &g in &gone {
            // Keep indices stable; a dropped partition commits nothing.
            self.parts[g as usize].last_offset = -1;
        }
        self.outcomes.retain(|(part, _, _), _| !gone.contains(part));
        self.applied.retain(|e| !gone.contains(&e.part));
        self.dead_letters.retain(|d| {
            !revoked
                .iter()
                .any(|(t, p)| *t == d.topic && *p == d.partition)
        });
        gone
    }

    /// Offsets to commit once the batch is acknowledged: next offset per partition.
    pub(crate) fn commit_offsets(&self) -> impl Iterator<Item = (&Arc<str>, i32, i64)> {
        self.parts
            .iter()
            .filter(|p| p.last_offset >= 0)
            .map(|p| (&p.topic, p.partition, p.last_offset + 1))
    }

    /// The batch's final counts, given what became of its events' updates
    /// (`None`: Redis took every update sent): an event counts `applied`
    /// if Redis took at least one of its updates, `late` if the script
    /// found all of those it was sent late, and not at all if the fences
    /// showed every one of them applied already; `hidden` when all it took
    /// went to twins, `erased` when its updates were left out for an
    /// erased member.
    pub(crate) fn settle(&self, fates: Option<&Fates>) -> Settled {
        let mut counts = self.outcomes.clone();
        let mut applied_ts = Vec::with_capacity(self.applied.len());
        for e in &self.applied {
            let outcome = match fates.and_then(|f| f.get(&(e.part, e.offset))) {
                None => Some(Outcome::Applied),
                Some(f) if f.taken && !f.visible => Some(Outcome::Hidden),
                Some(f) if f.taken => Some(Outcome::Applied),
                Some(f) if f.late => Some(Outcome::Late),
                Some(f) if f.erased => Some(Outcome::Erased),
                Some(_) => None,
            };
            if let Some(outcome) = outcome {
                *counts.entry((e.part, Some(e.kind), outcome)).or_insert(0) += 1;
                if outcome == Outcome::Applied {
                    applied_ts.push(e.ts);
                }
            }
        }
        let mut outcomes: Vec<_> = counts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|((part, kind, outcome), n)| {
                (self.parts[part as usize].topic.clone(), kind, outcome, n)
            })
            .collect();
        outcomes.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        Settled {
            outcomes,
            applied_ts,
        }
    }
}
