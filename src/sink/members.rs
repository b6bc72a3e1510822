//! The write side of moderation (docs/moderation.md): reading the fleet's
//! moderation record into the consumer's [`Cell`], and the member index.
//!
//! The index (`<prefix>:member:{<keyed hash>}`, docs/redis-layout.md) lists,
//! per member, the instances of scoped boards it was written to, so that a
//! hide, restore or erase finds them without scanning. A batch registers the
//! (member, instance) pairs this consumer has not registered before, and
//! waits for that write before its apply calls; then it reads the moderation
//! record's generation. An action raises the generation before it reads the
//! index: if it did so after that read, it finds the registration and stamps
//! the instance; if before, the read shows a newer generation and the batch
//! reads the record again before it writes. Unscoped boards have one instance,
//! which every action visits: they need no entry.
//!
//! Registrations are remembered by a 128-bit hash of (member, instance), up
//! to [`MAX_PAIRS`]; past it the set starts over, which only costs writes
//! sent again (`HSET` of a field already there).

use std::collections::HashSet;
use std::hash::Hasher as _;
use std::sync::atomic::{AtomicBool, Ordering};

use siphasher::sip128::{Hasher128, SipHasher13};

use crate::board::BoardSet;
use crate::board::keys;
use crate::moderation::{Cell, GEN_FIELD, Snapshot};

use super::store::{Store, StoreError};
use super::updates::Updates;

/// Set by benchmarks only, to measure what the index costs.
static INDEX_OFF: AtomicBool = AtomicBool::new(false);

/// Benchmarks only (`benches/moderation.rs`): turns the member index off
/// in this process, so the same run measures the write path without it.
/// Hiding a member of a scoped board then misses its instances.
#[doc(hidden)]
pub fn disable_index_for_benchmarks(off: bool) {
    INDEX_OFF.store(off, Ordering::Relaxed);
}

/// Pairs remembered before the set starts over (16 bytes each).
const MAX_PAIRS: usize = 1 << 20;

/// The member index entry's field holding the member's state (absent:
/// visible), written by the actions for `GET /v1/admin/members/{m}`.
pub(crate) const STATE_FIELD: &str = "s";

/// The prefix of the member index entry's fields naming an instance.
pub(crate) const INSTANCE_PREFIX: &str = "@";

/// The (member, instance) pairs this consumer registered.
#[derive(Debug, Default)]
pub(crate) struct Registered {
    pairs: HashSet<u128, foldhash::fast::FixedState>,
}

impl Registered {
    fn key(member: &str, tag: &str) -> u128 {
        let mut h = SipHasher13::new();
        h.write(member.as_bytes());
        h.write_u8(0xff);
        h.write(tag.as_bytes());
        h.finish128().as_u128()
    }

    /// Forgets every registration (Redis lost its state).
    pub(crate) fn clear(&mut self) {
        self.pairs.clear();
    }

    fn record(&mut self, pairs: impl IntoIterator<Item = u128>) {
        if self.pairs.len() >= MAX_PAIRS {
            self.pairs.clear();
        }
        self.pairs.extend(pairs);
    }
}

/// The index writes one batch needs: per member, its entry's key and the
/// instances to add; and the pair hashes to remember once they are written.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    entries: Vec<(String, Vec<String>)>,
    pairs: Vec<u128>,
}

impl Wanted {
    /// Nothing to register.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The (member, scoped instance) pairs of `updates` that `cache` does not
/// show registered.
pub(crate) fn wanted(
    boards: &BoardSet,
    updates: &Updates,
    cache: &Registered,
    snap: &Snapshot,
) -> Wanted {
    if INDEX_OFF.load(Ordering::Relaxed) {
        return Wanted::default();
    }
    let mut by_member: foldhash::HashMap<u32, Vec<String>> = Default::default();
    let mut pairs = Vec::new();
    // An event's updates of one instance (one per view) name the member
    // again: each (member, instance) is looked at once.
    let mut seen: HashSet<(u32, usize), foldhash::fast::FixedState> = HashSet::default();
    for (i, inst) in updates.instances.iter().enumerate() {
        if boards.boards[inst.board].scope.is_none() {
            continue;
        }
        for u in &inst.updates {
            if !seen.insert((u.member, i)) {
                continue;
            }
            let member = &updates.members[u.member as usize];
            let pair = Registered::key(member, &inst.tag);
            if cache.pairs.contains(&pair) {
                continue;
            }
            pairs.push(pair);
            by_member
                .entry(u.member)
                .or_default()
                .push(inst.tag.clone());
        }
    }
    let hasher = snap.hasher();
    let entries = by_member
        .into_iter()
        .map(|(m, tags)| {
            let member = &updates.members[m as usize];
            let key = keys::member_key(&boards.key_prefix, &hasher.hex(member));
            (key, tags)
        })
        .collect();
    Wanted { entries, pairs }
}

/// The registrations of `wanted`: one `HSET` per member's entry.
pub(crate) fn commands(wanted: &Wanted) -> Vec<redis::Cmd> {
    wanted
        .entries
        .iter()
        .map(|(key, tags)| {
            let mut hset = redis::cmd("HSET");
            hset.arg(key);
            for tag in tags {
                hset.arg(format!("{INSTANCE_PREFIX}{tag}")).arg(1);
            }
            hset
        })
        .collect()
}

/// On a cluster: writes the registrations, then reads the moderation record's generation
/// (after them: on one node in the same pipeline, on a cluster once they
/// are acknowledged) and answers it. An action that raised the generation
/// after that read has found these registrations in the index, and stamps
/// their instances; one that raised it before shows in the generation read,
/// and the caller reads the record again before it encodes.
pub(crate) async fn register(
    store: &Store,
    boards: &BoardSet,
    wanted: &Wanted,
) -> Result<Option<i64>, StoreError> {
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut groups: Vec<Vec<redis::Cmd>> = commands(wanted).into_iter().map(|c| vec![c]).collect();
    let generation = redis::cmd("HGET")
        .arg(keys::moderation_key(&boards.key_prefix))
        .arg(GEN_FIELD)
        .clone();
    let cluster = store.is_cluster();
    if !cluster {
        groups.push(vec![generation.clone()]);
    }
    let replies = store.ordered(&groups).await?;
    if let Some(err) = replies.iter().find_map(super::store::server_error) {
        return Err(err);
    }
    let read: Option<String> = if cluster {
        store.query(&generation).await?
    } else {
        match replies.last() {
            Some(v) => redis::from_redis_value(v.clone())
                .map_err(|e| StoreError::Protocol(e.to_string()))?,
            None => None,
        }
    };
    Ok(Some(read.and_then(|g| g.parse().ok()).unwrap_or(0)))
}

/// Records the pairs of `wanted` once Redis acknowledged them.
pub(crate) fn record(cache: &mut Registered, wanted: &Wanted) {
    cache.record(wanted.pairs.iter().copied());
}

/// Reads the moderation record into `cell` (a snapshot at least as new as
/// the one it holds).
pub(crate) async fn load(store: &Store, boards: &BoardSet, cell: &Cell) -> Result<(), StoreError> {
    let fields: Vec<(String, String)> = store
        .query(redis::cmd("HGETALL").arg(keys::moderation_key(&boards.key_prefix)))
        .await?;
    let snap = Snapshot::from_fields(&fields, boards, cell.hasher());
    tracing::debug!(generation = snap.generation, "Read the moderation record.");
    cell.replace(snap);
    Ok(())
}
