//! Partition positions kept in Redis: `<prefix>:positions`, field
//! `<topic>/<partition>` → the next offset to read (everything before it is
//! applied to every board). Written after a batch is acknowledged, read when
//! partitions are assigned and after Redis lost state. Redis, not Kafka's
//! committed offsets, decides where a partition resumes: if Redis lost its
//! last writes (a crash under `appendfsync everysec`, a failover to a lagging
//! replica), its positions went back with the boards and fences, and the
//! lost events are read again from Kafka; what Redis still has is skipped by
//! the fences.

//!
//! A shadow board's backfill (docs/rebuilds.md) reads the same partitions
//! in a consumer group of its own, so its positions are kept apart
//! ([`Ledger::backfill`]). They say where that board is complete: every
//! message before them reached it.
//!
//! When the live consumers take such a board over (the promotion made
//! permanent, docs/rebuilds.md), a partition resumes no later than its
//! backfill positions ([`earlier`]), so the messages between where the
//! backfill stopped and where the live consumers are reach it too; and the
//! live consumers keep writing their positions to the board's backfill
//! positions as well, since they too then bring it every message. That
//! holds through a rolling restart, while instances with the old
//! configuration still run the backfill (its writes and theirs both say
//! where the board is complete) and their live consumers still leave the
//! board out (they write no backfill positions); and the backfill
//! positions never fall behind once the backfill is gone, so a rebalance
//! never re-reads more than a batch or two.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::board::keys;

use super::store::{Scripts, Store, StoreError};

/// A partition: topic and number.
type Part = (Arc<str>, i32);

/// Positions by partition: the next offset to read.
type Found = HashMap<Part, i64>;

/// Partition → (where a shadow's backfill positions say it is complete,
/// the live consumers' position), each absent when Redis has none.
pub(crate) type Handover = HashMap<Part, (Option<i64>, Option<i64>)>;

/// Where one consumer loop records its positions.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    key: String,
    /// Read for the partitions `key` has no position of: a shadow that
    /// follows live events only starts where the live consumers are.
    otherwise: Option<String>,
    /// The live consumers': the boards they apply, each with its backfill
    /// positions' key, and whether that key was found holding positions (a
    /// board taken over from its backfill), so that saves go to it too.
    handovers: Arc<[TakenOver]>,
    /// A backfill's: the live consumers' positions (saves to `key` then
    /// only raise positions).
    live: Option<String>,
}

/// A board the live consumers apply, which may have been a shadow.
#[derive(Debug)]
struct TakenOver {
    /// The name in its keys.
    board: String,
    key: String,
    taken: AtomicBool,
}

impl Ledger {
    /// The live consumers' positions, for applying `boards` (the names in
    /// their keys).
    pub(crate) fn live<'a>(prefix: &str, boards: impl Iterator<Item = &'a str>) -> Ledger {
        Ledger {
            key: keys::positions_key(prefix),
            otherwise: None,
            handovers: boards
                .map(|b| TakenOver {
                    board: b.to_string(),
                    key: keys::backfill_positions_key(prefix, b),
                    taken: AtomicBool::new(false),
                })
                .collect(),
            live: None,
        }
    }

    /// A shadow board's backfill: from its own positions, or where it has
    /// none, from the start of the replay (`replays`) or the live
    /// consumers' positions (a shadow without `backfill_from`). Its
    /// positions are only ever raised: the live consumers raise them too
    /// where they apply the shadow beside their boards (`engine::cover`).
    pub(crate) fn backfill(prefix: &str, board: &str, replays: bool) -> Ledger {
        Ledger {
            key: keys::backfill_positions_key(prefix, board),
            otherwise: (!replays).then(|| keys::positions_key(prefix)),
            handovers: Arc::new([]),
            live: Some(keys::positions_key(prefix)),
        }
    }

    /// A backfill's view of `partitions`: where its positions say the
    /// shadow is complete, beside the live consumers' positions; nothing
    /// for the live consumers' own ledger.
    pub(crate) async fn handover(
        &self,
        store: &Store,
        partitions: &[Part],
    ) -> Result<Handover, StoreError> {
        let Some(live) = &self.live else {
            return Ok(Handover::new());
        };
        let complete = load(store, &self.key, partitions).await?;
        let live = load(store, live, partitions).await?;
        Ok(partitions
            .iter()
            .map(|p| (p.clone(), (complete.get(p).copied(), live.get(p).copied())))
            .collect())
    }

    /// Raises shadows' backfill positions to where a live batch brought
    /// them (`engine::cover`): per key, (partition field, next offset).
    pub(crate) async fn save_covered(
        store: &Store,
        scripts: &Scripts,
        saves: &[(&str, Vec<(String, i64)>)],
    ) -> Result<(), StoreError> {
        for (key, fields) in saves {
            save(store, &[key], scripts, (fields.as_slice(), true)).await?;
        }
        Ok(())
    }

    /// Records an acknowledged batch's positions ([`save`]), in the
    /// backfill positions of the boards taken over too, in one round trip.
    pub(crate) async fn save<'a>(
        &self,
        store: &Store,
        scripts: &Scripts,
        next_offsets: impl Iterator<Item = (&'a Arc<str>, i32, i64)>,
    ) -> Result<(), StoreError> {
        let fields: Vec<(String, i64)> = next_offsets
            .map(|(topic, partition, next)| (keys::partition_field(topic, partition), next))
            .collect();
        let taken = self
            .handovers
            .iter()
            .filter(|h| h.taken.load(Ordering::Relaxed));
        let keys: Vec<&str> = std::iter::once(self.key.as_str())
            .chain(taken.map(|h| h.key.as_str()))
            .collect();
        save(store, &keys, scripts, (&fields, self.live.is_some())).await
    }

    /// The recorded positions of `partitions` ([`load`]).
    pub(crate) async fn load(
        &self,
        store: &Store,
        partitions: &[Part],
    ) -> Result<Found, StoreError> {
        let mut found = load(store, &self.key, partitions).await?;
        if let Some(otherwise) = &self.otherwise {
            let missing: Vec<_> = partitions
                .iter()
                .filter(|p| !found.contains_key(*p))
                .cloned()
                .collect();
            found.extend(load(store, otherwise, &missing).await?);
        }
        self.hand_over(store, &mut found).await?;
        Ok(found)
    }

    /// Moves `found`'s positions back to where a taken-over board is
    /// complete, where that is earlier ([`earlier`]), and marks the boards
    /// that have backfill positions as taken over.
    async fn hand_over(&self, store: &Store, found: &mut Found) -> Result<(), StoreError> {
        if found.is_empty() {
            return Ok(());
        }
        let parts: Vec<_> = found.keys().cloned().collect();
        for h in self.handovers.iter() {
            let complete = load(store, &h.key, &parts).await?;
            if !complete.is_empty() && !h.taken.swap(true, Ordering::Relaxed) {
                tracing::info!(board = %h.board, "The live consumers take over a board that was a shadow: they resume each partition no later than where it is complete, and record their positions as its backfill positions too.");
            }
            for ((topic, partition), (live, backfill)) in earlier(found, &complete) {
                tracing::info!(
                    board = %h.board,
                    topic = %topic,
                    partition,
                    live_position = live,
                    backfill_position = backfill,
                    "A partition resumes where a board the live consumers took over is complete, before their own position: the messages in between reach that board, and every other board's fences skip them."
                );
            }
        }
        Ok(())
    }
}

/// Lowers each position of `found` to `stopped`'s for the same partition
/// where that is earlier; returns those lowered, with (was, now). A
/// partition `found` has no position of keeps none: the live consumers
/// never applied it, and resuming at a board's backfill position would
/// skip what is before it for every other board.
fn earlier(found: &mut Found, stopped: &Found) -> Vec<(Part, (i64, i64))> {
    let mut lowered = Vec::new();
    for (part, at) in found.iter_mut() {
        if let Some(&theirs) = stopped.get(part)
            && theirs < *at
        {
            lowered.push((part.clone(), (*at, theirs)));
            *at = theirs;
        }
    }
    lowered.sort();
    lowered
}

/// Records the positions of an acknowledged batch in each of `keys`,
/// pipelined, unless Redis lost state since the batch was sent with
/// `scripts`: positions must never claim a batch that a restarted Redis no
/// longer has. Each write is a script call for the same reason (a
/// restarted Redis answers NOSCRIPT). With `raise`, a position is only
/// ever raised.
async fn save(
    store: &Store,
    keys: &[&str],
    scripts: &Scripts,
    (fields, raise): (&[(String, i64)], bool),
) -> Result<(), StoreError> {
    if fields.is_empty() || store.epoch() != scripts.epoch {
        return Ok(());
    }
    let cmds: Vec<redis::Cmd> = keys
        .iter()
        .map(|key| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&scripts.positions).arg(1).arg(*key);
            if raise {
                cmd.arg("raise");
            }
            for (field, next) in fields {
                cmd.arg(field).arg(*next);
            }
            cmd
        })
        .collect();
    let replies = store.pipeline(&cmds, scripts.epoch).await?;
    match replies.iter().find_map(super::store::server_error) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The recorded positions of `partitions` (absent when Redis has none).
pub(crate) async fn load(
    store: &Store,
    key: &str,
    partitions: &[Part],
) -> Result<Found, StoreError> {
    if partitions.is_empty() {
        return Ok(HashMap::new());
    }
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key);
    for (topic, partition) in partitions {
        cmd.arg(keys::partition_field(topic, *partition));
    }
    let values: Vec<Option<i64>> = store.query(&cmd).await?;
    Ok(partitions
        .iter()
        .cloned()
        .zip(values)
        .filter_map(|(tp, v)| v.map(|v| (tp, v)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(parts: &[(&str, i32, i64)]) -> Found {
        parts
            .iter()
            .map(|(t, p, o)| ((Arc::from(*t), *p), *o))
            .collect()
    }

    /// A hand-made table: the live position, the backfill's, and where the
    /// partition must resume.
    #[test]
    fn a_partition_resumes_no_later_than_the_backfill_stopped() {
        let mut found = at(&[("e", 0, 100), ("e", 1, 50), ("e", 2, 70), ("f", 0, 9)]);
        let stopped = at(&[("e", 0, 80), ("e", 1, 60), ("e", 3, 5), ("f", 0, 9)]);
        let lowered = earlier(&mut found, &stopped);
        // e/0 goes back to 80; e/1 (backfill ahead) and f/0 (equal) stay;
        // e/2 has no backfill position; e/3 was never applied live.
        assert_eq!(
            found,
            at(&[("e", 0, 80), ("e", 1, 50), ("e", 2, 70), ("f", 0, 9)])
        );
        assert_eq!(lowered, vec![((Arc::from("e"), 0), (100, 80))]);
    }
}
