//! The write side of moderation (docs/moderation.md): reading the fleet's
//! moderation record into the consumer's [`Cell`], and the member index.
//!
//! The index (`<prefix>:members:{<bucket>}`, docs/redis-layout.md) lists,
//! per member (by the keyed hash of its id), the instances of scoped boards
//! it was written to, so that a
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

/// The field registering instance `tag` for the member whose keyed hash is
/// `hex`.
fn instance_field(hex: &str, tag: &str) -> String {
    format!("{hex}@{tag}")
}

/// One member's entry in the member index: fields `<hash>@<tag>` per
/// scoped instance it was written to, `<hash>:s` its state while hidden
/// or erased (for `GET /v1/admin/members/{m}`), `<hash>:p` an action under
/// way; all in its bucket's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The bucket's key.
    pub(crate) key: String,
    hex: String,
}

impl Entry {
    /// The entry of the member whose keyed hash is `hex`.
    pub(crate) fn new(prefix: &str, hex: &str) -> Entry {
        Entry {
            key: keys::member_index_key(prefix, hex),
            hex: hex.to_string(),
        }
    }

    /// The field registering instance `tag`.
    pub(crate) fn instance_field(&self, tag: &str) -> String {
        instance_field(&self.hex, tag)
    }

    /// The field of the member's state.
    pub(crate) fn state_field(&self) -> String {
        format!("{}:s", self.hex)
    }

    /// The field of an action under way.
    pub(crate) fn pending_field(&self) -> String {
        format!("{}:p", self.hex)
    }

    /// The instance a field of this entry registers, if it is one.
    pub(crate) fn instance_of<'f>(&self, field: &'f str) -> Option<&'f str> {
        field.strip_prefix(&self.hex)?.strip_prefix('@')
    }

    /// Every field of the entry, with its value: an `HSCAN` of its bucket
    /// matching the member's hash (a bucket holds a 4,096th of the index).
    pub(crate) async fn fields(&self, store: &Store) -> Result<Vec<(String, String)>, StoreError> {
        let mut out = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let (next, page): (String, Vec<(String, String)>) = store
                .query(
                    redis::cmd("HSCAN")
                        .arg(&self.key)
                        .arg(&cursor)
                        .arg("MATCH")
                        .arg(format!("{}*", self.hex))
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            out.extend(page);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// The (member, instance) pairs this consumer registered.
#[derive(Debug, Default)]
pub(crate) struct Registered {
    pairs: HashSet<u128, foldhash::fast::FixedState>,
}

impl Registered {
    /// The hasher of an instance's pairs: its tag hashed once, each member
    /// hashed on from a copy of it.
    fn instance_hasher(tag: &str) -> SipHasher13 {
        let mut h = SipHasher13::new();
        h.write(tag.as_bytes());
        h.write_u8(0xff);
        h
    }

    fn key(instance: &SipHasher13, member: &str) -> u128 {
        let mut h = *instance;
        h.write(member.as_bytes());
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

/// The index writes one batch needs: one `HSET` per bucket with new
/// fields; and the pair hashes to remember once they are written.
#[derive(Debug, Default)]
pub struct Wanted {
    commands: Vec<redis::Cmd>,
    pairs: Vec<u128>,
}

impl Wanted {
    /// Nothing to register.
    pub(crate) fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The registrations: one `HSET` per bucket (taken: sent once).
    pub(crate) fn take_commands(&mut self) -> Vec<redis::Cmd> {
        std::mem::take(&mut self.commands)
    }
}

/// The (member, scoped instance) pairs of `updates` that `cache` does not
/// show registered, as the `HSET`s that register them. Built without a
/// string per member or per pair: a member's keyed hash picks its bucket
/// (its first 12 bits are the bucket's 3 hex digits), and each field is
/// written straight into its command.
pub(crate) fn wanted(
    boards: &BoardSet,
    updates: &Updates,
    cache: &Registered,
    snap: &Snapshot,
) -> Wanted {
    if INDEX_OFF.load(Ordering::Relaxed) {
        return Wanted::default();
    }
    let mut by_member: foldhash::HashMap<u32, Vec<&str>> = Default::default();
    let mut pairs = Vec::new();
    // Unscoped boards need no entry (see the module's header).
    let scoped: Vec<(usize, &super::updates::Instance)> = updates
        .instances
        .iter()
        .enumerate()
        .filter(|(_, inst)| boards.boards[inst.board].scope.is_some())
        .collect();
    let most = scoped.iter().map(|(_, inst)| inst.updates.len()).sum();
    // An event's updates of one instance (one per view) come one after the
    // other and name the member again: each (member, instance) is looked
    // at once.
    let mut seen: HashSet<(u32, usize), foldhash::fast::FixedState> =
        HashSet::with_capacity_and_hasher(most, Default::default());
    for (i, inst) in scoped {
        let base = Registered::instance_hasher(&inst.tag);
        let mut last = None;
        for u in &inst.updates {
            if last == Some(u.member) || !seen.insert((u.member, i)) {
                continue;
            }
            last = Some(u.member);
            let pair = Registered::key(&base, &updates.members[u.member as usize]);
            if cache.pairs.contains(&pair) {
                continue;
            }
            pairs.push(pair);
            by_member.entry(u.member).or_default().push(&inst.tag);
        }
    }
    let hasher = snap.hasher();
    let mut by_bucket: foldhash::HashMap<u16, Vec<(u128, &str)>> = Default::default();
    for (m, tags) in by_member {
        let hash = hasher.hash(&updates.members[m as usize]);
        let fields = by_bucket.entry(bucket_of(hash)).or_default();
        fields.extend(tags.into_iter().map(|t| (hash, t)));
    }
    let mut field = String::new();
    let commands = by_bucket
        .into_values()
        .map(|fields| {
            let mut hset = redis::cmd("HSET");
            let hex = format!("{:032x}", fields[0].0);
            hset.arg(keys::member_index_key(&boards.key_prefix, &hex));
            for (hash, tag) in fields {
                use std::fmt::Write as _;
                field.clear();
                // Writing into a String cannot fail.
                let _ = write!(field, "{hash:032x}@{tag}");
                hset.arg(field.as_str()).arg(1);
            }
            hset
        })
        .collect();
    Wanted { commands, pairs }
}

/// The bucket of a keyed hash: its first three hex digits as a number.
fn bucket_of(hash: u128) -> u16 {
    (hash >> 116) as u16
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
    wanted: &mut Wanted,
) -> Result<Option<i64>, StoreError> {
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut groups: Vec<Vec<redis::Cmd>> = wanted
        .take_commands()
        .into_iter()
        .map(|c| vec![c])
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash's bucket is the first three hex digits of the hash as key
    /// names write it (docs/redis-layout.md), at the edges and between.
    #[test]
    fn the_bucket_is_the_first_three_hex_digits() {
        let between = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;
        for h in [
            0u128,
            1,
            u128::MAX,
            0xabc << 116,
            (0xabc << 116) - 1,
            between,
        ] {
            let hex = format!("{h:032x}");
            assert_eq!(format!("{:03x}", bucket_of(h)), hex[..3], "{hex}");
            assert_eq!(
                keys::member_index_key("p", &hex),
                format!("p:members:{{{:03x}}}", bucket_of(h))
            );
        }
    }
}
