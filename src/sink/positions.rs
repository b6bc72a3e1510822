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
//! ([`Ledger::backfill`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::board::keys;

use super::store::{Scripts, Store, StoreError};

/// Where one consumer loop records its positions.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    key: String,
    /// Read for the partitions `key` has no position of: a shadow that
    /// follows live events only starts where the live consumers are.
    otherwise: Option<String>,
}

impl Ledger {
    /// The live consumers' positions.
    pub(crate) fn live(prefix: &str) -> Ledger {
        Ledger {
            key: keys::positions_key(prefix),
            otherwise: None,
        }
    }

    /// A shadow board's backfill: from its own positions, or where it has
    /// none, from the start of the replay (`replays`) or the live
    /// consumers' positions (a shadow without `backfill_from`).
    pub(crate) fn backfill(prefix: &str, board: &str, replays: bool) -> Ledger {
        Ledger {
            key: keys::backfill_positions_key(prefix, board),
            otherwise: (!replays).then(|| keys::positions_key(prefix)),
        }
    }

    /// Records an acknowledged batch's positions ([`save`]).
    pub(crate) async fn save<'a>(
        &self,
        store: &Store,
        scripts: &Scripts,
        next_offsets: impl Iterator<Item = (&'a Arc<str>, i32, i64)>,
    ) -> Result<(), StoreError> {
        save(store, &self.key, scripts, next_offsets).await
    }

    /// The recorded positions of `partitions` ([`load`]).
    pub(crate) async fn load(
        &self,
        store: &Store,
        partitions: &[(Arc<str>, i32)],
    ) -> Result<HashMap<(Arc<str>, i32), i64>, StoreError> {
        let mut found = load(store, &self.key, partitions).await?;
        if let Some(otherwise) = &self.otherwise {
            let missing: Vec<_> = partitions
                .iter()
                .filter(|p| !found.contains_key(*p))
                .cloned()
                .collect();
            found.extend(load(store, otherwise, &missing).await?);
        }
        Ok(found)
    }
}

/// Records the positions of an acknowledged batch, unless Redis lost state
/// since the batch was sent with `scripts`: positions
/// must never claim a batch that a restarted Redis no longer has. The write
/// is a script call for the same reason (a restarted Redis answers
/// NOSCRIPT).
async fn save<'a>(
    store: &Store,
    key: &str,
    scripts: &Scripts,
    next_offsets: impl Iterator<Item = (&'a Arc<str>, i32, i64)>,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&scripts.positions).arg(1).arg(key);
    let mut any = false;
    for (topic, partition, next) in next_offsets {
        cmd.arg(keys::partition_field(topic, partition)).arg(next);
        any = true;
    }
    if !any || store.epoch() != scripts.epoch {
        return Ok(());
    }
    let replies = store
        .pipeline(std::slice::from_ref(&cmd), scripts.epoch)
        .await?;
    match replies.first().and_then(super::store::server_error) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The recorded positions of `partitions` (absent when Redis has none).
pub(crate) async fn load(
    store: &Store,
    key: &str,
    partitions: &[(Arc<str>, i32)],
) -> Result<HashMap<(Arc<str>, i32), i64>, StoreError> {
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
