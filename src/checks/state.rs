//! A member's rate-check state (docs/checks.md) and the decisions made
//! from it: pure logic, kept in Redis by `crate::sink::rates` as one string
//! per (event type, member) and changed by compare-and-set, so that the
//! fleet decides each event once, whichever instance sees it.
//!
//! The state remembers, per partition the member's events came from, the
//! highest offset decided and the highest known applied to the boards; the
//! passed events (time, partition, offset) while they are within the
//! group's longest length of the newest event or not yet known applied;
//! and the quarantined ones until they are known applied. An event at or
//! below its partition's applied mark was dealt with by a batch that got
//! through; one at or below the decided mark gets its earlier decision
//! back; any other is decided now and remembered.
//!
//! Encoding (little-endian; docs/redis-layout.md): a version byte (1),
//! the newest time (i64); a u16 count of partitions, each a u16 length and
//! its name, then decided and applied offsets (i64 each); a u32 count of
//! passed events, each time (i64), partition index (u16), offset (i64); a
//! u32 count of quarantined events, each partition index (u16), offset
//! (i64), check index (u8).

use super::rate::MaxRate;

const VERSION: u8 = 1;

/// What the rate checks decided on one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Passed: counted for its member.
    Pass,
    /// Its batch was applied before (a redelivery): nothing to do again.
    Applied,
    /// Failed the check at this index of its type's rate checks.
    Failed(usize),
}

/// One partition the member's events came from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    name: String,
    decided: i64,
    applied: i64,
}

/// One member's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberState {
    newest: i64,
    parts: Vec<Part>,
    /// Passed events, sorted by time: (ts, partition index, offset).
    passed: Vec<(i64, u16, i64)>,
    /// Quarantined events not yet known applied: (partition index, offset,
    /// check index).
    quarantined: Vec<(u16, i64, u8)>,
}

impl Default for MemberState {
    fn default() -> Self {
        MemberState {
            newest: i64::MIN,
            parts: Vec::new(),
            passed: Vec::new(),
            quarantined: Vec::new(),
        }
    }
}

/// An event to decide: its time, partition and offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event<'a> {
    pub(crate) ts: i64,
    pub(crate) partition: &'a str,
    pub(crate) offset: i64,
}

impl MemberState {
    /// Decides `events` (in their order) with `checks`, whose longest
    /// length is `longest`; `applied` says, for a partition of the batch,
    /// the highest offset known applied.
    pub(crate) fn decide(
        &mut self,
        checks: &[MaxRate],
        longest: i64,
        events: &[Event<'_>],
        applied: &dyn Fn(&str) -> Option<i64>,
    ) -> Vec<Decision> {
        for p in &mut self.parts {
            if let Some(a) = applied(&p.name) {
                p.applied = p.applied.max(a);
            }
        }
        self.prune(longest);
        // A batch's events of one member come from few partitions, in
        // runs: the last one found is tried first (by address: the events
        // name the batch's own partition strings).
        let mut last: Option<(*const str, u16)> = None;
        events
            .iter()
            .map(|e| {
                let si = match last {
                    Some((at, si)) if std::ptr::eq(at, e.partition) => si,
                    _ => self.index_of(e.partition, applied),
                };
                last = Some((e.partition, si));
                self.decide_one(checks, e.ts, si, e.offset)
            })
            .collect()
    }

    fn index_of(&mut self, name: &str, applied: &dyn Fn(&str) -> Option<i64>) -> u16 {
        if let Some(i) = self.parts.iter().position(|p| p.name == name) {
            return i as u16;
        }
        self.parts.push(Part {
            name: name.to_string(),
            decided: -1,
            applied: applied(name).unwrap_or(-1),
        });
        (self.parts.len() - 1) as u16
    }

    /// Drops what no decision needs any more.
    fn prune(&mut self, longest: i64) {
        let oldest = self.newest.saturating_sub(longest);
        let parts = &self.parts;
        self.passed
            .retain(|&(ts, p, off)| ts > oldest || off > parts[usize::from(p)].applied);
        self.quarantined
            .retain(|&(p, off, _)| off > parts[usize::from(p)].applied);
    }

    fn decide_one(&mut self, checks: &[MaxRate], ts: i64, si: u16, offset: i64) -> Decision {
        let part = &mut self.parts[usize::from(si)];
        if offset <= part.applied {
            return Decision::Applied;
        }
        if offset <= part.decided {
            return self.recall(si, offset);
        }
        part.decided = offset;
        self.newest = self.newest.max(ts);
        // Passed events within (ts - length, ts]: sorted, so two searches.
        let upper = |t: i64| self.passed.partition_point(|&(pts, _, _)| pts <= t);
        let hi = upper(ts);
        let failed = checks.iter().position(|c| {
            let within = hi - upper(ts.saturating_sub(c.length_ms));
            within >= c.count as usize
        });
        match failed {
            Some(c) => {
                self.quarantined.push((si, offset, c as u8));
                Decision::Failed(c)
            }
            None => {
                self.passed.insert(hi, (ts, si, offset));
                Decision::Pass
            }
        }
    }

    /// The earlier decision on (partition `si`, `offset`).
    fn recall(&self, si: u16, offset: i64) -> Decision {
        if self.passed.iter().any(|&(_, p, o)| p == si && o == offset) {
            return Decision::Pass;
        }
        self.quarantined
            .iter()
            .find(|&&(p, o, _)| p == si && o == offset)
            .map_or(Decision::Applied, |&(_, _, c)| {
                Decision::Failed(usize::from(c))
            })
    }

    /// The stored form.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let names: usize = self.parts.iter().map(|p| p.name.len()).sum();
        let mut out = Vec::with_capacity(
            19 + 18 * self.parts.len()
                + names
                + 18 * self.passed.len()
                + 11 * self.quarantined.len(),
        );
        out.push(VERSION);
        out.extend_from_slice(&self.newest.to_le_bytes());
        out.extend_from_slice(&(self.parts.len() as u16).to_le_bytes());
        for p in &self.parts {
            out.extend_from_slice(&(p.name.len() as u16).to_le_bytes());
            out.extend_from_slice(p.name.as_bytes());
            out.extend_from_slice(&p.decided.to_le_bytes());
            out.extend_from_slice(&p.applied.to_le_bytes());
        }
        out.extend_from_slice(&(self.passed.len() as u32).to_le_bytes());
        for &(ts, p, off) in &self.passed {
            out.extend_from_slice(&ts.to_le_bytes());
            out.extend_from_slice(&p.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        out.extend_from_slice(&(self.quarantined.len() as u32).to_le_bytes());
        for &(p, off, c) in &self.quarantined {
            out.extend_from_slice(&p.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
            out.push(c);
        }
        out
    }

    /// Reads the stored form; `None` for bytes it cannot have written.
    pub(crate) fn decode(bytes: &[u8]) -> Option<MemberState> {
        let mut r = Reader(bytes);
        if r.take::<1>()? != [VERSION] {
            return None;
        }
        let newest = i64::from_le_bytes(r.take()?);
        let nparts = u16::from_le_bytes(r.take()?);
        let mut parts = Vec::with_capacity(usize::from(nparts));
        for _ in 0..nparts {
            let len = usize::from(u16::from_le_bytes(r.take()?));
            let name = String::from_utf8(r.bytes(len)?.to_vec()).ok()?;
            let decided = i64::from_le_bytes(r.take()?);
            let applied = i64::from_le_bytes(r.take()?);
            parts.push(Part {
                name,
                decided,
                applied,
            });
        }
        let npassed = u32::from_le_bytes(r.take()?) as usize;
        let mut passed = Vec::with_capacity(npassed.min(bytes.len() / 18));
        for _ in 0..npassed {
            let ts = i64::from_le_bytes(r.take()?);
            let p = u16::from_le_bytes(r.take()?);
            let off = i64::from_le_bytes(r.take()?);
            passed.push((ts, p, off));
        }
        let nq = u32::from_le_bytes(r.take()?) as usize;
        let mut quarantined = Vec::with_capacity(nq.min(bytes.len() / 11));
        for _ in 0..nq {
            let p = u16::from_le_bytes(r.take()?);
            let off = i64::from_le_bytes(r.take()?);
            let [c] = r.take::<1>()?;
            quarantined.push((p, off, c));
        }
        let indices_ok = passed.iter().all(|&(_, p, _)| usize::from(p) < parts.len())
            && quarantined
                .iter()
                .all(|&(p, _, _)| usize::from(p) < parts.len());
        (r.0.is_empty() && indices_ok).then_some(MemberState {
            newest,
            parts,
            passed,
            quarantined,
        })
    }
}

/// A cursor over stored bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn checks(limits: &[(u32, i64)]) -> Vec<MaxRate> {
        limits
            .iter()
            .map(|&(count, length_ms)| MaxRate { count, length_ms })
            .collect()
    }

    fn at(ts: i64, offset: i64) -> Event<'static> {
        Event {
            ts,
            partition: "t/0",
            offset,
        }
    }

    /// A hand-made table: at most 2 events per 10 s; events at the same
    /// time all count; the length is half-open, (ts - 10 s, ts].
    #[test]
    fn decisions_follow_a_hand_made_table() {
        let c = checks(&[(2, 10_000)]);
        let mut st = MemberState::default();
        let events = [
            (0, Decision::Pass),
            (0, Decision::Pass),
            (0, Decision::Failed(0)),
            (9_999, Decision::Failed(0)),
            (10_000, Decision::Pass),
            (10_000, Decision::Pass),
            (15_000, Decision::Failed(0)),
            (20_000, Decision::Pass),
        ];
        let batch: Vec<Event<'_>> = events
            .iter()
            .enumerate()
            .map(|(i, &(ts, _))| at(ts, i as i64))
            .collect();
        let got = st.decide(&c, 10_000, &batch, &|_| Some(-1));
        let want: Vec<Decision> = events.iter().map(|&(_, d)| d).collect();
        assert_eq!(got, want);
        // Delivered again before the batch was applied: the same answers.
        let again = st.decide(&c, 10_000, &batch, &|_| Some(-1));
        assert_eq!(again, want);
        // Once the batch is known applied, each is skipped.
        let later = st.decide(&c, 10_000, &batch[..2], &|_| Some(7));
        assert_eq!(later, vec![Decision::Applied; 2]);
    }

    #[test]
    fn the_stored_form_reads_back_and_refuses_what_it_cannot_have_written() {
        let c = checks(&[(1, 10_000)]);
        let mut st = MemberState::default();
        st.decide(&c, 10_000, &[at(5, 0), at(6, 1)], &|_| Some(-1));
        let bytes = st.encode();
        assert_eq!(MemberState::decode(&bytes), Some(st));
        assert_eq!(MemberState::decode(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(MemberState::decode(&longer), None);
        assert_eq!(MemberState::decode(b"\x02"), None);
        assert_eq!(MemberState::decode(b""), None);
    }

    proptest! {
        /// Against a reference model: one member's events in one partition,
        /// in rising time, decided through random batches of which some are
        /// not applied (and so delivered again), the state stored and read
        /// back between batches. Every first decision is the model's, and
        /// every later one the same.
        #[test]
        fn decisions_equal_the_model_through_batches_and_redeliveries(
            gaps in prop::collection::vec(prop::sample::select(vec![0i64, 0, 5_000, 20_000, 90_000]), 1..150),
            cuts in prop::collection::vec((1usize..12, any::<bool>()), 1..200),
        ) {
            let limits = [(3u32, 60_000i64), (5, 300_000)];
            let c = checks(&limits);
            let mut ts = 0i64;
            let times: Vec<i64> = gaps.iter().map(|g| { ts += g; ts }).collect();
            let mut history: Vec<i64> = Vec::new();
            let mut first: BTreeMap<i64, Decision> = BTreeMap::new();
            let mut model = |offset: i64| -> Decision {
                *first.entry(offset).or_insert_with(|| {
                    let t = times[offset as usize];
                    for (i, &(n, length)) in limits.iter().enumerate() {
                        let within = history.iter().filter(|&&h| h > t - length && h <= t).count();
                        if within >= n as usize {
                            return Decision::Failed(i);
                        }
                    }
                    history.push(t);
                    Decision::Pass
                })
            };
            let mut stored = MemberState::default().encode();
            let mut position = 0usize;
            for (take, applied) in cuts {
                if position >= times.len() {
                    break;
                }
                let end = (position + take).min(times.len());
                let batch: Vec<Event<'_>> = (position..end).map(|o| at(times[o], o as i64)).collect();
                let mut st = MemberState::decode(&stored).expect("stored form");
                let mark = position as i64 - 1;
                let got = st.decide(&c, 300_000, &batch, &|_| Some(mark));
                for (e, d) in batch.iter().zip(&got) {
                    prop_assert_eq!(*d, model(e.offset), "offset {}", e.offset);
                }
                stored = st.encode();
                if applied {
                    position = end;
                }
            }
        }
    }
}
