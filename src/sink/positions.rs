//! Partition positions kept in Redis: `<prefix>:positions`, field
//! `<topic>/<partition>` → the next offset to read (everything before it is
//! applied to every board). Written after a batch is acknowledged, read when
//! partitions are assigned and after Redis lost state. Redis, not Kafka's
//! committed offsets, decides where a partition resumes: if Redis lost its
//! last writes (a crash under `appendfsync everysec`, a failover to a lagging
//! replica), its positions went back with the boards and fences, and the
//! lost events are read again from Kafka; what Redis still has is skipped by
//! the fences.

use std::collections::HashMap;
use std::sync::Arc;

use crate::board::keys;

use super::store::{Scripts, Store, StoreError};

/// Records the positions of an acknowledged batch, unless Redis lost state
/// since the batch was sent with `scripts`: positions
/// must never claim a batch that a restarted Redis no longer has. The write
/// is a script call for the same reason (a restarted Redis answers
/// NOSCRIPT).
pub(crate) async fn save<'a>(
    store: &Store,
    prefix: &str,
    scripts: &Scripts,
    next_offsets: impl Iterator<Item = (&'a Arc<str>, i32, i64)>,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&scripts.positions)
        .arg(1)
        .arg(keys::positions_key(prefix));
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
    prefix: &str,
    partitions: &[(Arc<str>, i32)],
) -> Result<HashMap<(Arc<str>, i32), i64>, StoreError> {
    if partitions.is_empty() {
        return Ok(HashMap::new());
    }
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(keys::positions_key(prefix));
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
