//! Shadow boards in the live consumers' own pass (docs/rebuilds.md). A
//! shadow's backfill reads the topics in a consumer group of its own; in a
//! partition where it has reached the live consumers, they apply the
//! shadow beside their own boards and the backfill stops reading it
//! (`run.rs`), so that each message is read and decoded once.
//!
//! A shadow's backfill positions (`<prefix>:positions~backfill:<board>`)
//! say where it is complete: every message before them reached it. A live
//! batch applies a shadow in a partition only from a message at or below
//! that position (the shadow's fences skip what it holds already): the
//! intake guesses, and the flush checks once the batch before it was
//! applied, with what this consumer's own batches brought the shadow, and
//! otherwise takes the shadow's updates of that partition out. After the
//! batch is applied the position is raised to the batch's end there (never
//! lowered). Where no live batch can do that (an instance whose
//! configuration lacks the shadow, or a check below), the position stays
//! behind the live consumers' and the backfill reads on from it.
//!
//! Checks make a backfill trail the live consumers (it waits for their
//! verdicts), so it seldom gets ahead of where their next batch starts.
//! A live consumer then takes the partition over: once the backfill is
//! done and the shadow complete up to a little behind the live position
//! (`MAX_TAKEOVER`), it reads the partition again from there, applying
//! the shadow beside its boards (whose fences skip what they hold).
//!
//! An event that a rate check finds dealt with by a batch that got through
//! (`Decision::Applied`) may have been quarantined or passed then, which
//! the rate state no longer tells: the quarantine record does
//! (`backfill::verdicts`), once the live positions have passed it. Where
//! they have not (the batch that dealt with it died before recording its
//! positions), the batch leaves the shadow in that partition to the
//! backfill rather than wait.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::backfill::verdicts::Verdicts;
use crate::board::{BoardSet, keys};
use crate::sink::store::{Store, StoreError};
use crate::source::TopicPartition;

use super::batch::Batch;

/// Shadows that can be applied beside the live boards: one bit each in
/// [`Batch::covered`]. Any others are left to their backfill.
const MAX_SHADOWS: usize = 64;

/// Most messages a live consumer reads again to take a partition over:
/// the live consumers are that much later for it, once.
const MAX_TAKEOVER: i64 = 20_000;

/// Least time between two takeovers of one partition for one shadow.
const TAKEOVER_AGAIN: Duration = Duration::from_secs(10);

/// One shadow board the live consumers may apply.
pub(crate) struct Shadow {
    /// Its index in the boards.
    pub(crate) board: usize,
    pub(crate) name: String,
    /// Its backfill positions.
    key: String,
    /// Its backfill's progress (`done`).
    progress: String,
    /// The boards, with only this one taking events (its rules).
    pub(crate) rules: Arc<BoardSet>,
}

/// The shadow boards of the live consumers' configuration, and where each
/// is complete as far as this consumer knows.
pub(crate) struct Covers {
    shadows: Vec<Shadow>,
    complete: Mutex<Complete>,
    /// The live positions' key.
    live_key: String,
    /// What the live checks quarantined, when checks and a quarantine
    /// topic are configured.
    pub(crate) verdicts: Option<Arc<Verdicts>>,
}

#[derive(Default)]
struct Complete {
    /// The Redis state epoch the positions belong to.
    epoch: u64,
    /// (shadow index, partition field) → the position below which the
    /// shadow holds every message: read from Redis, or brought there by
    /// this consumer's own applied batches.
    at: HashMap<(usize, String), i64>,
    /// (shadow, partition field) a batch stopped applying the shadow in:
    /// the batch after it cannot go on from there.
    broken: HashSet<(usize, String)>,
    /// The live consumers' positions, as last read.
    live: HashMap<String, i64>,
    /// When each (shadow, partition field) was last taken over.
    tried: HashMap<(usize, String), Instant>,
    /// The shadows whose backfill is done (bits).
    done: u64,
}

impl Covers {
    /// The shadows of `boards`, each with its own rules from `rules_of`
    /// (the boards with only that one taking events); `None` when there
    /// are none.
    pub(crate) fn new<E>(
        boards: &BoardSet,
        verdicts: Option<Arc<Verdicts>>,
        mut rules_of: impl FnMut(&str) -> Result<BoardSet, E>,
    ) -> Result<Option<Covers>, E> {
        let mut shadows = Vec::new();
        for (i, b) in boards.boards.iter().enumerate() {
            if b.shadow.is_none() || shadows.len() == MAX_SHADOWS {
                continue;
            }
            shadows.push(Shadow {
                board: i,
                name: b.name.clone(),
                key: keys::backfill_positions_key(&boards.key_prefix, &b.stored),
                progress: keys::backfill_key(&boards.key_prefix, &b.name),
                rules: Arc::new(rules_of(&b.name)?),
            });
        }
        Ok((!shadows.is_empty()).then(|| Covers {
            shadows,
            complete: Mutex::default(),
            live_key: keys::positions_key(&boards.key_prefix),
            verdicts,
        }))
    }

    pub(crate) fn shadows(&self) -> &[Shadow] {
        &self.shadows
    }

    /// What this consumer knows, for Redis state `epoch` (forgotten when
    /// Redis lost state).
    fn complete(&self, epoch: u64) -> MutexGuard<'_, Complete> {
        let mut c = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if c.epoch != epoch {
            c.at.clear();
            c.broken.clear();
            c.live.clear();
            c.done = 0;
            c.epoch = epoch;
        }
        c
    }

    /// The partitions of `parts` (with the shadows a batch there would go
    /// on with, bits) to take over: per partition, the shadows whose
    /// backfill is done (one still replaying catches up faster on its own)
    /// and complete up to no more than [`MAX_TAKEOVER`] messages behind
    /// the live position, with where to read again from (the lowest of
    /// their positions).
    pub(crate) fn takeovers(
        &self,
        parts: &[(TopicPartition, u64)],
    ) -> Vec<(TopicPartition, u64, i64)> {
        let mut c = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let mut out = Vec::new();
        for (part, continuing) in parts {
            let field = keys::partition_field(&part.0, part.1);
            let Some(&live) = c.live.get(&field) else {
                continue;
            };
            let (mut bits, mut from) = (0, i64::MAX);
            for s in 0..self.shadows.len() {
                let key = (s, field.clone());
                let due = c
                    .tried
                    .get(&key)
                    .is_none_or(|t| now.duration_since(*t) >= TAKEOVER_AGAIN);
                if continuing & (1 << s) != 0 || c.done & (1 << s) == 0 || !due {
                    continue;
                }
                // Level with the live position, a batch from there applies
                // the shadow as it is; behind it, nothing but a takeover
                // brings it the messages in between.
                if let Some(&at) = c.at.get(&key)
                    && at < live
                    && live - at <= MAX_TAKEOVER
                {
                    bits |= 1 << s;
                    from = from.min(at);
                    c.tried.insert(key, now);
                }
            }
            if bits != 0 {
                out.push((part.clone(), bits, from));
            }
        }
        out
    }

    /// Whether a batch should apply shadow `s` in partition `field` from
    /// offset `first`: it goes on from the batch before (`continuing`,
    /// unless that batch stopped), or the shadow is known complete there.
    /// A guess (from what is known, whatever its epoch), checked by
    /// [`Covers::check`] before the batch is applied.
    pub(crate) fn applies_from(
        &self,
        (s, field): (usize, &str),
        first: i64,
        continuing: bool,
    ) -> bool {
        let mut c = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (s, field.to_string());
        let broken = c.broken.remove(&key);
        (continuing && !broken) || c.at.get(&key).is_some_and(|&at| at >= first)
    }

    /// Takes out of `batch` the shadows it cannot apply where it meant to:
    /// those not known complete up to its first offset of the partition
    /// (the batch before it, just applied, counts). Answers whether it took
    /// any out.
    pub(crate) fn check(&self, batch: &mut Batch, epoch: u64) -> bool {
        let mut gone = Vec::new();
        {
            let c = self.complete(epoch);
            for (part, (&bits, p)) in batch.covered.iter().zip(&batch.record.parts).enumerate() {
                // Nothing of it left (revoked, or dropped for a takeover).
                if bits == 0 || p.last_offset < 0 {
                    continue;
                }
                let field = keys::partition_field(&p.topic, p.partition);
                for (s, _) in self.bits(bits) {
                    let at = c.at.get(&(s, field.clone())).copied();
                    if at.is_none_or(|at| at < p.first_offset) {
                        gone.push((s, part as u16));
                    }
                }
            }
        }
        self.take_out(batch, &gone, epoch);
        !gone.is_empty()
    }

    /// Takes every shadow out of the partitions `parts` of `batch` (rate
    /// decisions there that a live batch cannot follow).
    pub(crate) fn leave(&self, batch: &mut Batch, parts: &HashSet<u16>, epoch: u64) -> bool {
        let gone: Vec<(usize, u16)> = parts
            .iter()
            .flat_map(|&part| {
                let bits = batch.covered.get(usize::from(part)).copied().unwrap_or(0);
                self.bits(bits).map(move |(s, _)| (s, part))
            })
            .collect();
        self.take_out(batch, &gone, epoch);
        !gone.is_empty()
    }

    fn take_out(&self, batch: &mut Batch, gone: &[(usize, u16)], epoch: u64) {
        if gone.is_empty() {
            return;
        }
        let mut c = self.complete(epoch);
        for &(s, part) in gone {
            batch.uncover((s, self.shadows[s].board), part);
            if let Some(p) = batch.record.parts.get(usize::from(part)) {
                let field = keys::partition_field(&p.topic, p.partition);
                tracing::info!(board = %self.shadows[s].name, partition = %field, "A live batch leaves the shadow board to its backfill in this partition: it cannot show the shadow complete up to the batch.");
                c.broken.insert((s, field));
            }
        }
    }

    /// After `batch` was applied: the shadows it applied are complete up to
    /// its end in those partitions. Answers, per shadow's positions key,
    /// the positions to record there.
    pub(crate) fn applied(&self, batch: &Batch, epoch: u64) -> Vec<(&str, Vec<(String, i64)>)> {
        let mut saves: Vec<(&str, Vec<(String, i64)>)> = Vec::new();
        let mut c = self.complete(epoch);
        for (&bits, p) in batch.covered.iter().zip(&batch.record.parts) {
            if p.last_offset < 0 {
                continue;
            }
            let field = keys::partition_field(&p.topic, p.partition);
            let next = p.last_offset + 1;
            for (s, shadow) in self.bits(bits) {
                let at = c.at.entry((s, field.clone())).or_insert(next);
                *at = (*at).max(next);
                match saves.iter_mut().find(|(k, _)| *k == shadow.key) {
                    Some((_, fields)) => fields.push((field.clone(), next)),
                    None => saves.push((&shadow.key, vec![(field.clone(), next)])),
                }
            }
        }
        saves
    }

    /// Reads where each shadow is complete, as recorded in Redis (by its
    /// backfill or by the live consumers), and the live positions, into
    /// what this consumer knows.
    pub(crate) async fn refresh(&self, store: &Store, epoch: u64) -> Result<(), StoreError> {
        // One round trip: the live positions, then per shadow where it is
        // complete and, until it is done, whether it is.
        let done = self.complete(epoch).done;
        let mut cmds = vec![redis::cmd("HGETALL").arg(&self.live_key).clone()];
        for (s, shadow) in self.shadows.iter().enumerate() {
            cmds.push(redis::cmd("HGETALL").arg(&shadow.key).clone());
            // Done stays done: asked until it is.
            if done & (1 << s) == 0 {
                cmds.push(
                    redis::cmd("HEXISTS")
                        .arg(&shadow.progress)
                        .arg("done")
                        .clone(),
                );
            }
        }
        let mut replies = store.pipeline(&cmds, epoch).await?.into_iter();
        let mut next = || replies.next().unwrap_or(redis::Value::Nil);
        let bad = |e: redis::ParsingError| StoreError::Protocol(format!("shadow positions: {e}"));
        let live: HashMap<String, i64> = redis::from_redis_value(next()).map_err(bad)?;
        self.complete(epoch).live = live;
        for s in 0..self.shadows.len() {
            let found: HashMap<String, i64> = redis::from_redis_value(next()).map_err(bad)?;
            let now_done =
                done & (1 << s) == 0 && redis::from_redis_value::<bool>(next()).map_err(bad)?;
            let mut c = self.complete(epoch);
            if now_done {
                c.done |= 1 << s;
            }
            for (field, next) in found {
                let at = c.at.entry((s, field)).or_insert(next);
                *at = (*at).max(next);
            }
        }
        Ok(())
    }

    /// The shadows of `bits`, with their indices.
    fn bits(&self, bits: u64) -> impl Iterator<Item = (usize, &Shadow)> {
        self.shadows
            .iter()
            .enumerate()
            .filter(move |(s, _)| bits & (1 << s) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::batch::Batch;

    const BOARDS: &str = r#"
[[board]]
name = "coins"
event = "gift"
member = "sender"
score = "count * value"
periods = ["all"]

[[board]]
name = "coins_v2"
event = "gift"
member = "sender"
score = "count * value * 2"
periods = ["all"]
shadow_of = "coins"
"#;

    fn covers() -> Covers {
        let set = crate::config::test_boards(BOARDS);
        Covers::new(&set, None, |name| {
            Ok::<_, ()>(crate::config::test_boards(BOARDS).consuming(|b| b.name == name))
        })
        .expect("compiles")
        .expect("a shadow")
    }

    /// A batch with `t/0` from `first` to `last`, the shadow applied there.
    fn batch(first: i64, last: i64) -> Batch {
        let mut b = Batch::default();
        let topic: Arc<str> = Arc::from("t");
        for o in first..=last {
            b.take_message(&topic, 0, o);
        }
        b.covered.push(1);
        b
    }

    #[test]
    fn a_shadow_is_applied_only_from_where_it_is_complete() {
        let c = covers();
        assert_eq!(c.shadows().len(), 1);
        assert_eq!(c.shadows()[0].name, "coins_v2");
        // Nothing known: no guess, and a batch that guessed is taken out.
        assert!(!c.applies_from((0, "t/0"), 10, false));
        let mut b = batch(10, 19);
        assert!(c.check(&mut b, 1));
        assert_eq!(b.covered, vec![0]);
        // Its backfill is complete up to 10: a batch from 10 applies it,
        // and records 20; the next goes on from there.
        c.complete(1).at.insert((0, "t/0".into()), 10);
        c.complete(1).broken.clear();
        assert!(c.applies_from((0, "t/0"), 10, false));
        assert!(!c.applies_from((0, "t/0"), 11, false), "a gap");
        let mut b = batch(10, 19);
        assert!(!c.check(&mut b, 1));
        let saves = c.applied(&b, 1);
        assert_eq!(
            saves,
            vec![(
                "rankflow:positions~backfill:coins_v2",
                vec![("t/0".to_string(), 20)]
            )]
        );
        let mut next = batch(20, 29);
        assert!(!c.check(&mut next, 1));
        // A batch that stopped: the next cannot go on from it.
        let mut stopped = batch(20, 29);
        c.leave(&mut stopped, &[0].into_iter().collect(), 1);
        assert!(!c.applies_from((0, "t/0"), 30, true));
        assert!(c.applies_from((0, "t/0"), 30, true), "once");
        // Redis lost state: nothing is known any more.
        let mut b = batch(20, 29);
        assert!(c.check(&mut b, 2));
        assert!(!c.applies_from((0, "t/0"), 20, false));
    }

    #[test]
    fn a_partition_is_taken_over_when_the_shadow_is_a_little_behind_the_live_position() {
        let c = covers();
        let p = |n: i32| -> TopicPartition { (Arc::from("t"), n) };
        {
            let mut k = c.complete(1);
            k.done = 1;
            k.live = [
                ("t/0", 500),
                ("t/1", 500),
                ("t/2", 500),
                ("t/3", 200_000),
                ("t/5", 700),
            ]
            .into_iter()
            .map(|(f, o)| (f.to_string(), o))
            .collect();
            for (f, at) in [("t/0", 480), ("t/1", 600), ("t/3", 50_000), ("t/5", 700)] {
                k.at.insert((0, f.to_string()), at);
            }
        }
        let parts = [
            (p(0), 0),
            (p(1), 0),
            (p(2), 0),
            (p(3), 0),
            (p(4), 0),
            (p(5), 0),
        ];
        c.complete(1).done = 0;
        assert!(c.takeovers(&parts).is_empty(), "its backfill still replays");
        c.complete(1).done = 1;
        // t/0 is 20 behind: read again from 480. t/1 is ahead and t/5
        // level (a batch from the live position applies it as it is), t/2
        // has no position, t/3 is too far behind, t/4 has no live position.
        assert_eq!(c.takeovers(&parts), vec![(p(0), 1, 480)]);
        assert!(c.takeovers(&parts).is_empty(), "not again at once");
        // A partition whose batches go on with the shadow is not taken over.
        c.complete(1).tried.clear();
        assert!(c.takeovers(&[(p(0), 1)]).is_empty());
    }
}
