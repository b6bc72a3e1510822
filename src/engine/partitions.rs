//! Which partitions this consumer holds and in what state: assigned,
//! waiting for their resume position from Redis (kept paused until it is
//! known), positioned but waiting for librdkafka to start their fetcher,
//! paused for backpressure, and the generation that tells a position
//! lookup's answer from a stale one. Pure bookkeeping: the loop makes the
//! consumer calls.
//!
//! Why wait for the fetcher: librdkafka starts a newly assigned
//! partition's fetcher with a versioned op once the committed offsets are
//! known, and an application op on the partition (pause, resume, seek) that
//! takes a newer version and is served first makes the start op "outdated":
//! it is dropped, and the partition is never fetched, with no error
//! (librdkafka #2190, #5591). A position lookup in Redis takes about as long
//! as the committed-offset fetch, so a seek or resume sent as soon as the
//! position is known could land in that window: one partition in about 35
//! benchmark runs never delivered a message. A partition is sought and
//! resumed only once librdkafka reports its fetcher started. A partition
//! whose fetcher has not started long after its assignment is reported
//! (once per assignment), so that a start lost some other way is seen.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::Offset;

use crate::source::TopicPartition;

/// Where each partition of a lookup restarts: the position recorded in
/// Redis, or the lookup's fallback (`None`: where Kafka has it).
pub(crate) type ResumeAt = Vec<(TopicPartition, Option<Offset>)>;

#[derive(Debug, Default)]
pub(crate) struct Partitions {
    assigned: HashSet<TopicPartition>,
    /// Assigned partitions kept paused until their resume position is known,
    /// with the fallback their lookup uses when Redis has no position.
    awaiting: HashMap<TopicPartition, Option<Offset>>,
    /// Positioned partitions kept paused until their fetcher has started,
    /// with the position to seek to.
    held: HashMap<TopicPartition, Option<Offset>>,
    /// Assigned partitions whose fetcher librdkafka has not reported
    /// started since they were assigned (every other assigned partition's
    /// has), with when they were assigned and whether that was reported as
    /// overdue.
    unstarted: HashMap<TopicPartition, (Instant, bool)>,
    /// Positioned partitions a shadow's backfill left to the live
    /// consumers (docs/rebuilds.md): kept paused until it takes them back.
    handed: HashSet<TopicPartition>,
    /// Fetching is paused for backpressure.
    paused: bool,
    /// Bumped per assignment (and rewind), so late lookups are ignored.
    generation: u64,
}

impl Partitions {
    /// Newly assigned partitions (paused by the rebalance callback): they
    /// await their positions. Returns the lookup's generation and what it
    /// must look up: every partition still awaiting, not only the new ones,
    /// since the new generation makes the answer of any lookup still in
    /// flight stale (a partition it covered would otherwise wait forever).
    pub(crate) fn assign(&mut self, parts: &[TopicPartition], now: Instant) -> (u64, ResumeAt) {
        self.assigned.extend(parts.iter().cloned());
        for p in parts {
            self.awaiting.entry(p.clone()).or_insert(None);
            // A fresh assignment starts a fresh fetcher.
            self.held.remove(p);
            self.handed.remove(p);
            self.unstarted.insert(p.clone(), (now, false));
        }
        self.generation += 1;
        (self.generation, self.awaiting_lookup())
    }

    /// The lookup of every awaiting partition, with its fallback.
    fn awaiting_lookup(&self) -> ResumeAt {
        self.awaiting.iter().map(|(p, f)| (p.clone(), *f)).collect()
    }

    pub(crate) fn revoke(&mut self, parts: &[TopicPartition]) {
        for p in parts {
            self.assigned.remove(p);
            self.awaiting.remove(p);
            self.held.remove(p);
            self.handed.remove(p);
            self.unstarted.remove(p);
        }
    }

    /// Every assigned partition awaits its position again, falling back to
    /// `fallback` where Redis has none. Returns the lookup's generation and
    /// the partitions to pause and look up.
    pub(crate) fn rewind(&mut self, fallback: Option<Offset>) -> (u64, ResumeAt) {
        for p in &self.assigned {
            self.awaiting.insert(p.clone(), fallback);
        }
        self.held.clear();
        self.handed.clear();
        self.generation += 1;
        (self.generation, self.awaiting_lookup())
    }

    /// A lookup's answer: the partitions of it that still await their
    /// position and whose fetcher has started, to seek and resume now (no
    /// longer awaiting from now on; the others are held until it starts),
    /// or nothing when a newer assignment or rewind asked again (its answer
    /// counts).
    pub(crate) fn resumed(&mut self, generation: u64, offsets: ResumeAt) -> ResumeAt {
        if generation != self.generation {
            return Vec::new();
        }
        let mut ready = Vec::new();
        for (p, at) in offsets {
            if self.awaiting.remove(&p).is_none() {
                continue;
            }
            // Awaiting, hence assigned: started unless still unstarted.
            if !self.unstarted.contains_key(&p) {
                ready.push((p, at));
            } else {
                self.held.insert(p, at);
            }
        }
        ready
    }

    /// librdkafka reports the fetchers of `parts` started: the held ones
    /// among them are ready to seek and resume.
    pub(crate) fn fetchers_started(&mut self, parts: &[TopicPartition]) -> ResumeAt {
        let mut ready = Vec::new();
        for p in parts {
            if !self.assigned.contains(p) {
                continue;
            }
            self.unstarted.remove(p);
            if let Some(at) = self.held.remove(p) {
                ready.push((p.clone(), at));
            }
        }
        ready
    }

    /// Assigned partitions whose fetcher has not started `after` their
    /// assignment (at `now`), with how long they have waited; each is
    /// returned once per assignment.
    pub(crate) fn overdue_starts(
        &mut self,
        now: Instant,
        after: Duration,
    ) -> Vec<(TopicPartition, Duration)> {
        let mut overdue = Vec::new();
        for (p, (since, reported)) in &mut self.unstarted {
            let waited = now.saturating_duration_since(*since);
            if !*reported && waited >= after {
                *reported = true;
                overdue.push((p.clone(), waited));
            }
        }
        overdue
    }

    /// Partitions that fetch unless paused: assigned, positioned, with
    /// their fetcher started, and not handed to the live consumers.
    pub(crate) fn fetching(&self) -> Vec<TopicPartition> {
        self.positioned()
            .filter(|p| !self.handed.contains(*p))
            .cloned()
            .collect()
    }

    /// Assigned partitions that are positioned and whose fetcher started,
    /// handed to the live consumers or not.
    fn positioned(&self) -> impl Iterator<Item = &TopicPartition> {
        self.assigned
            .iter()
            .filter(|p| !self.awaiting.contains_key(*p) && !self.held.contains_key(*p))
    }

    /// The positioned partitions, each with whether it is handed to the
    /// live consumers.
    pub(crate) fn handover_states(&self) -> Vec<(TopicPartition, bool)> {
        self.positioned()
            .map(|p| (p.clone(), self.handed.contains(p)))
            .collect()
    }

    /// Marks a positioned partition handed to the live consumers (true) or
    /// taken back (false); answers whether that changed anything.
    pub(crate) fn set_handed(&mut self, part: &TopicPartition, handed: bool) -> bool {
        if handed {
            self.positioned().any(|p| p == part) && self.handed.insert(part.clone())
        } else {
            self.handed.remove(part)
        }
    }

    pub(crate) fn is_assigned(&self, part: &TopicPartition) -> bool {
        self.assigned.contains(part)
    }

    pub(crate) fn assigned_count(&self) -> usize {
        self.assigned.len()
    }

    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    pub(crate) fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tp(p: i32) -> TopicPartition {
        (Arc::from("t"), p)
    }

    #[test]
    fn a_stale_lookup_is_ignored_and_a_current_one_resumes_once() {
        let mut parts = Partitions::default();
        let (first, _) = parts.assign(&[tp(0), tp(1)], Instant::now());
        let (second, lookup) = parts.assign(&[tp(2)], Instant::now());
        let mut asked: Vec<_> = lookup.into_iter().map(|(p, _)| p).collect();
        asked.sort();
        assert_eq!(
            asked,
            vec![tp(0), tp(1), tp(2)],
            "the second lookup covers the partitions the stale first one was for"
        );
        assert!(parts.fetching().is_empty());
        assert!(parts.fetchers_started(&[tp(0), tp(1), tp(2)]).is_empty());
        assert!(
            parts
                .resumed(first, vec![(tp(0), Some(Offset::Offset(5)))])
                .is_empty()
        );
        let answer = vec![(tp(0), Some(Offset::Offset(5))), (tp(2), None)];
        assert_eq!(parts.resumed(second, answer.clone()), answer);
        assert!(parts.resumed(second, answer).is_empty(), "only once");
        let mut fetching = parts.fetching();
        fetching.sort();
        assert_eq!(fetching, vec![tp(0), tp(2)]);
    }

    #[test]
    fn a_rewind_makes_every_assigned_partition_wait_and_a_revoke_forgets() {
        let mut parts = Partitions::default();
        let (g, _) = parts.assign(&[tp(0), tp(1)], Instant::now());
        parts.fetchers_started(&[tp(0), tp(1)]);
        parts.resumed(g, vec![(tp(0), None), (tp(1), None)]);
        parts.revoke(&[tp(1)]);
        let (g2, waiting) = parts.rewind(Some(Offset::Beginning));
        assert_eq!(waiting, vec![(tp(0), Some(Offset::Beginning))]);
        assert!(g2 > g);
        assert!(parts.fetching().is_empty());
        assert!(!parts.is_assigned(&tp(1)));
        // A partition assigned during the rewind's lookup: the new lookup
        // keeps the rewound partition's fallback.
        let (_, lookup) = parts.assign(&[tp(2)], Instant::now());
        let mut lookup = lookup;
        lookup.sort_by_key(|(p, _)| p.clone());
        assert_eq!(
            lookup,
            vec![(tp(0), Some(Offset::Beginning)), (tp(2), None)]
        );
    }

    #[test]
    fn a_positioned_partition_waits_for_its_fetcher_to_start() {
        let mut parts = Partitions::default();
        let (g, _) = parts.assign(&[tp(0), tp(1)], Instant::now());
        // Partition 1's fetcher starts before its position is known, 0's after.
        assert!(parts.fetchers_started(&[tp(1)]).is_empty());
        let answer = vec![(tp(0), Some(Offset::Offset(7))), (tp(1), None)];
        assert_eq!(parts.resumed(g, answer), vec![(tp(1), None)]);
        assert_eq!(
            parts.fetching(),
            vec![tp(1)],
            "a held partition stays paused"
        );
        assert_eq!(
            parts.fetchers_started(&[tp(0), tp(1)]),
            vec![(tp(0), Some(Offset::Offset(7)))],
            "released once, with its position"
        );
        assert!(parts.fetchers_started(&[tp(0)]).is_empty());
        let mut fetching = parts.fetching();
        fetching.sort();
        assert_eq!(fetching, vec![tp(0), tp(1)]);
        // Reassigned, a partition waits for its new fetcher; revoked, its
        // start reports no longer count.
        let (g2, _) = parts.assign(&[tp(0)], Instant::now());
        assert_eq!(parts.resumed(g2, vec![(tp(0), None)]), Vec::new());
        parts.revoke(&[tp(0)]);
        assert!(parts.fetchers_started(&[tp(0)]).is_empty());
        assert!(!parts.is_assigned(&tp(0)));
    }

    #[test]
    fn a_handed_partition_does_not_fetch_until_taken_back_or_assigned_again() {
        let mut parts = Partitions::default();
        let (g, _) = parts.assign(&[tp(0), tp(1), tp(2)], Instant::now());
        parts.fetchers_started(&[tp(0), tp(1), tp(2)]);
        parts.resumed(g, vec![(tp(0), None), (tp(1), None)]);
        assert!(!parts.set_handed(&tp(2), true), "not positioned yet");
        assert!(parts.set_handed(&tp(1), true));
        assert!(!parts.set_handed(&tp(1), true), "once");
        assert_eq!(parts.fetching(), vec![tp(0)]);
        let mut states = parts.handover_states();
        states.sort();
        assert_eq!(states, vec![(tp(0), false), (tp(1), true)]);
        assert!(parts.set_handed(&tp(1), false));
        let mut fetching = parts.fetching();
        fetching.sort();
        assert_eq!(fetching, vec![tp(0), tp(1)]);
        // A rewind, a revoke or a new assignment forgets the hand-over.
        parts.set_handed(&tp(0), true);
        parts.set_handed(&tp(1), true);
        parts.revoke(&[tp(1)]);
        let (g2, _) = parts.rewind(None);
        parts.resumed(g2, vec![(tp(0), None)]);
        assert_eq!(parts.fetching(), vec![tp(0)]);
        let (g3, _) = parts.assign(&[tp(1)], Instant::now());
        parts.fetchers_started(&[tp(1)]);
        parts.resumed(g3, vec![(tp(1), None)]);
        let mut fetching = parts.fetching();
        fetching.sort();
        assert_eq!(fetching, vec![tp(0), tp(1)]);
    }

    #[test]
    fn a_fetcher_that_does_not_start_is_reported_once_per_assignment() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut parts = Partitions::default();
        parts.assign(&[tp(0), tp(1), tp(2)], t0);
        parts.fetchers_started(&[tp(0)]);
        assert!(parts.overdue_starts(t0 + 29 * s, 30 * s).is_empty());
        parts.revoke(&[tp(2)]);
        assert_eq!(
            parts.overdue_starts(t0 + 31 * s, 30 * s),
            vec![(tp(1), 31 * s)],
            "started and revoked partitions are not overdue"
        );
        assert!(
            parts.overdue_starts(t0 + 90 * s, 30 * s).is_empty(),
            "reported once"
        );
        // Assigned again, it is watched again from the new assignment; a
        // start ends the watch.
        parts.assign(&[tp(1), tp(3)], t0 + 100 * s);
        assert!(parts.overdue_starts(t0 + 120 * s, 30 * s).is_empty());
        parts.fetchers_started(&[tp(3)]);
        assert_eq!(
            parts.overdue_starts(t0 + 130 * s, 30 * s),
            vec![(tp(1), 30 * s)]
        );
    }
}
