//! The Redis side of rate checks (docs/checks.md): a batch's events that
//! passed the rule checks and have rate checks are grouped by member state
//! (`<prefix>:rate:{<bucket>}:<type>:<member>`, docs/redis-layout.md); the
//! states are read (`MGET`), the events decided from them here
//! ([`crate::checks::state`]), and the changed states written back by
//! compare-and-set (`lua/rates.lua`). A state another consumer changed in
//! between is read again and its events decided anew, so each event is
//! decided once, from the state as the fleet left it. The consumer
//! remembers the states it last read or wrote ([`Known`]) and reads only
//! the others: a remembered state that changed meanwhile fails its
//! compare-and-set, and is read then.
//!
//! What a batch knows applied is everything before its first offset of
//! each partition: its flush starts after the batch before it was applied,
//! and a partition resumes at a position that Redis recorded as applied.

use std::collections::HashMap;
use std::sync::Arc;

use crate::board::keys;
use crate::checks::CheckSet;
use crate::checks::state::{Event, MemberState};
use crate::event::EventType;

pub use crate::checks::Decision;

use super::store::{Scripts, Store, StoreError, server_error};
use super::updates::FastMap;

/// Member states per command: a Redis Cluster needs one command per
/// bucket anyway, and a single node takes them in a few round trips.
const KEYS_PER_CALL: usize = 1_000;

/// Reads and writes before a batch gives up on states that keep changing
/// under it (each round means another consumer decided the same member's
/// events in between).
const MAX_ROUNDS: usize = 16;

/// How long a member's state outlives its last change, beyond its longest
/// length, in wall-clock time: long enough for a consumer that was down a
/// while to find the decisions it made before.
pub(crate) const KEEP_AFTER_MS: i64 = 3_600_000;

/// States remembered at most; past it the memory starts over, which only
/// costs reads.
const MAX_KNOWN: usize = 200_000;

/// The states this consumer last read or wrote, by key, for the Redis
/// state epoch they belong to.
#[derive(Debug, Default)]
pub struct Known {
    states: FastMap<String, Vec<u8>>,
    epoch: u64,
}

impl Known {
    /// Forgets everything if Redis lost its state since.
    pub(crate) fn sync_epoch(&mut self, epoch: u64) {
        if epoch != self.epoch {
            self.states.clear();
            self.epoch = epoch;
        }
    }

    fn remember(&mut self, key: String, state: Vec<u8>) {
        if self.states.len() >= MAX_KNOWN && !self.states.contains_key(&key) {
            self.states.clear();
        }
        self.states.insert(key, state);
    }
}

/// One event to decide.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index of its partition in the batch (`Updates::fields`).
    pub part: u16,
    /// Its offset in that partition.
    pub offset: i64,
    /// Its event time (ms).
    pub ts: i64,
    /// Its type: which rate checks count it.
    pub kind: EventType,
    /// Whose rate counts it (shared by a batch's events of one member).
    pub member: Arc<str>,
}

/// Decides `candidates` (in their order, which is the partitions' order).
/// `fields` names the batch's partitions and `applied` gives, per
/// partition, the highest offset known applied; `known` is this consumer's
/// memory of states. (Public for the tests that drive it against a real
/// Redis.)
pub async fn decide(
    store: &Store,
    scripts: &Scripts,
    prefix: &str,
    checks: &CheckSet,
    (fields, applied): (&[String], &[i64]),
    candidates: &[Candidate],
    known: &mut Known,
) -> Result<Vec<Decision>, StoreError> {
    let mut states = by_state(prefix, candidates);
    let field_index: FastMap<&str, usize> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| (f.as_str(), i))
        .collect();
    let applied_of = |name: &str| field_index.get(name).map(|&i| applied[i]);
    let mut events: Vec<Event<'_>> = Vec::new();
    let mut out = vec![Decision::Pass; candidates.len()];
    let mut pending: Vec<usize> = (0..states.len()).collect();
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            return Ok(out);
        }
        let read = read(store, &states, &pending, &mut *known).await?;
        let mut writes = Vec::new();
        for (&s, before) in pending.iter().zip(read) {
            let state = &mut states[s];
            let Some(group) = checks.rates(state.kind) else {
                continue;
            };
            let mut member = before
                .as_deref()
                .and_then(MemberState::decode)
                .unwrap_or_default();
            events.clear();
            events.extend(state.events.iter().map(|&e| Event {
                ts: candidates[e].ts,
                partition: &fields[usize::from(candidates[e].part)],
                offset: candidates[e].offset,
            }));
            let decided = member.decide(&group.limits, group.longest_ms(), &events, &applied_of);
            for (&e, d) in state.events.iter().zip(decided) {
                out[e] = d;
            }
            let after = member.encode();
            if before.as_deref() != Some(after.as_slice()) {
                let ttl = group.longest_ms() + KEEP_AFTER_MS;
                writes.push((s, before.unwrap_or_default(), after, ttl));
            } else if let Some(before) = before {
                // Decided: its key is not needed again.
                known.remember(std::mem::take(&mut state.key), before);
            }
        }
        pending = write(store, scripts, &states, &writes).await?;
        let mut again = vec![false; states.len()];
        for &s in &pending {
            again[s] = true;
        }
        for (s, _, after, _) in writes {
            // A state that changed meanwhile is read again (it is no longer
            // in `known`: `read` took it out).
            if !again[s] {
                known.remember(std::mem::take(&mut states[s].key), after);
            }
        }
    }
    Err(StoreError::Protocol(format!(
        "{} rate states kept changing under this consumer through {MAX_ROUNDS} reads",
        pending.len()
    )))
}

/// A state to write: its index, the bytes read (empty when there was no
/// state), the bytes to store and their time to live (ms).
type Write = (usize, Vec<u8>, Vec<u8>, i64);

/// One member state's events in a batch.
struct State {
    key: String,
    kind: EventType,
    /// Indices into the candidates, in order.
    events: Vec<usize>,
    /// The key's Redis Cluster bucket (its hash tag).
    bucket: u32,
}

fn by_state(prefix: &str, candidates: &[Candidate]) -> Vec<State> {
    let mut index: FastMap<(EventType, &str), usize> = FastMap::default();
    let mut states: Vec<State> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let s = *index.entry((c.kind, &*c.member)).or_insert_with(|| {
            states.push(State {
                key: keys::rate_key(prefix, c.kind.name(), &c.member),
                kind: c.kind,
                events: Vec::new(),
                bucket: keys::rate_bucket(&c.member),
            });
            states.len() - 1
        });
        states[s].events.push(i);
    }
    states
}

/// Positions 0..n, of items in the buckets given, cut into commands: on a
/// Redis Cluster each holds one bucket's.
fn chunks(cluster: bool, buckets: impl ExactSizeIterator<Item = u32>) -> Vec<Vec<usize>> {
    if !cluster {
        let all: Vec<usize> = (0..buckets.len()).collect();
        return all.chunks(KEYS_PER_CALL).map(<[usize]>::to_vec).collect();
    }
    let mut by_bucket: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, b) in buckets.enumerate() {
        by_bucket.entry(b).or_default().push(i);
    }
    by_bucket
        .into_values()
        .flat_map(|s| {
            s.chunks(KEYS_PER_CALL)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The stored states of `wanted`, in its order: those `known` remembers
/// taken from there (the caller remembers them again once decided), the
/// others read.
async fn read(
    store: &Store,
    states: &[State],
    wanted: &[usize],
    known: &mut Known,
) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    let mut out: Vec<Option<Vec<u8>>> = wanted
        .iter()
        .map(|&s| known.states.remove(&states[s].key))
        .collect();
    let unknown: Vec<usize> = (0..wanted.len()).filter(|&i| out[i].is_none()).collect();
    let chunks = chunks(
        store.is_cluster(),
        unknown.iter().map(|&i| states[wanted[i]].bucket),
    );
    let cmds: Vec<redis::Cmd> = chunks
        .iter()
        .map(|chunk| {
            let keys: usize = chunk
                .iter()
                .map(|&c| states[wanted[unknown[c]]].key.len())
                .sum();
            let mut mget = redis::Cmd::with_capacity(1 + chunk.len(), 4 + keys);
            mget.arg("MGET");
            for &c in chunk {
                mget.arg(&states[wanted[unknown[c]]].key);
            }
            mget
        })
        .collect();
    let replies = store.pipeline(&cmds, store.epoch()).await?;
    for (chunk, reply) in chunks.iter().zip(replies) {
        if let Some(e) = server_error(&reply) {
            return Err(e);
        }
        let values: Vec<Option<Vec<u8>>> =
            redis::from_redis_value(reply).map_err(|e| StoreError::Protocol(e.to_string()))?;
        for (&c, v) in chunk.iter().zip(values) {
            out[unknown[c]] = v;
        }
    }
    Ok(out)
}

/// Writes the changed states by compare-and-set; answers the states that
/// had changed meanwhile (not written).
async fn write(
    store: &Store,
    scripts: &Scripts,
    states: &[State],
    writes: &[Write],
) -> Result<Vec<usize>, StoreError> {
    let chunks = chunks(
        store.is_cluster(),
        writes.iter().map(|w| states[w.0].bucket),
    );
    let cmds: Vec<redis::Cmd> = chunks
        .iter()
        .map(|chunk| {
            let data: usize = chunk
                .iter()
                .map(|&w| {
                    let (s, before, after, _) = &writes[w];
                    states[*s].key.len() + before.len() + after.len() + 20
                })
                .sum();
            let mut cmd = redis::Cmd::with_capacity(3 + 4 * chunk.len(), 64 + data);
            cmd.arg("EVALSHA").arg(&scripts.rates).arg(chunk.len());
            for &w in chunk {
                cmd.arg(&states[writes[w].0].key);
            }
            for &w in chunk {
                let (_, before, after, ttl) = &writes[w];
                cmd.arg(before.as_slice()).arg(after.as_slice()).arg(*ttl);
            }
            cmd
        })
        .collect();
    let replies = store.pipeline(&cmds, scripts.epoch).await?;
    let mut changed = Vec::new();
    for (chunk, reply) in chunks.iter().zip(replies) {
        if let Some(e) = server_error(&reply) {
            return Err(e);
        }
        let indices: Vec<usize> =
            redis::from_redis_value(reply).map_err(|e| StoreError::Protocol(e.to_string()))?;
        changed.extend(
            indices
                .into_iter()
                .filter_map(|i| Some(writes[*chunk.get(i.checked_sub(1)?)?].0)),
        );
    }
    Ok(changed)
}
