//! The Redis side of rate checks (docs/checks.md): one batch's events that
//! passed the rule checks and have rate checks go to the rates script
//! (`lua/rates.lua`), grouped by member state key, and come back decided.
//!
//! A decision is made once per event, in Redis, from the member's state
//! there, so that it does not depend on which instance sees the event, on
//! batch boundaries or on redeliveries: the state remembers, per partition,
//! the highest offset it decided and the events it passed or quarantined
//! until they are known applied. What a batch knows applied is everything
//! before its first offset of each partition: its flush starts after the
//! batch before it was applied, and a partition resumes at a position that
//! Redis recorded as applied.

use std::collections::HashMap;

use crate::board::keys;
use crate::checks::CheckSet;
use crate::event::EventType;

use super::store::{Scripts, Store, StoreError, server_error};

/// Member states per script call: a call is short (tens of microseconds
/// per state), and a Redis Cluster needs one call per bucket anyway.
const KEYS_PER_CALL: usize = 512;

/// How long a member's state outlives its last event, beyond its longest
/// length, in wall-clock time: long enough for a consumer that was down a
/// while to find the decisions it made before.
pub(crate) const KEEP_AFTER_MS: i64 = 3_600_000;

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
    /// Whose rate counts it.
    pub member: String,
}

/// What the rate checks decided on one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Passed: counted for its member.
    Pass,
    /// Its batch was applied before (a redelivery): the fences skip it.
    Applied,
    /// Failed the check at this index of its type's rate checks.
    Failed(usize),
}

/// Decides `candidates` (in their order, which is the partitions' order).
/// `fields` names the batch's partitions and `applied` gives, per
/// partition, the highest offset known applied. (Public for the tests that
/// drive it against a real Redis.)
pub async fn decide(
    store: &Store,
    scripts: &Scripts,
    prefix: &str,
    checks: &CheckSet,
    fields: &[String],
    applied: &[i64],
    candidates: &[Candidate],
) -> Result<Vec<Decision>, StoreError> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let states = by_state(prefix, candidates);
    let calls = calls(store.is_cluster(), &states);
    let head = head(checks, fields, applied);
    let cmds: Vec<redis::Cmd> = calls
        .iter()
        .map(|call| command(scripts, &head, checks, call, &states, candidates))
        .collect();
    let replies = store.pipeline(&cmds, scripts.epoch).await?;
    let mut out = vec![Decision::Pass; candidates.len()];
    for (call, reply) in calls.iter().zip(&replies) {
        if let Some(e) = server_error(reply) {
            return Err(e);
        }
        let letters: Vec<String> = redis::from_redis_value(reply.clone())
            .map_err(|e| StoreError::Protocol(e.to_string()))?;
        for (&s, word) in call.iter().zip(&letters) {
            let events = &states[s].events;
            if word.len() != events.len() {
                return Err(StoreError::Protocol(format!(
                    "the rates script decided {} events of {}, not {}",
                    word.len(),
                    states[s].key,
                    events.len()
                )));
            }
            for (&e, letter) in events.iter().zip(word.bytes()) {
                out[e] = match letter {
                    b'p' => Decision::Pass,
                    b'd' => Decision::Applied,
                    c => Decision::Failed(usize::from(c.saturating_sub(65))),
                };
            }
        }
    }
    Ok(out)
}

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
    let mut index: HashMap<(EventType, &str), usize> = HashMap::new();
    let mut states: Vec<State> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let s = *index.entry((c.kind, &c.member)).or_insert_with(|| {
            let key = keys::rate_key(prefix, c.kind.name(), &c.member);
            let bucket = keys::rate_bucket(&c.member);
            states.push(State {
                key,
                kind: c.kind,
                events: Vec::new(),
                bucket,
            });
            states.len() - 1
        });
        states[s].events.push(i);
    }
    states
}

/// The states of each call: on a Redis Cluster a call holds one bucket's.
fn calls(cluster: bool, states: &[State]) -> Vec<Vec<usize>> {
    if !cluster {
        let all: Vec<usize> = (0..states.len()).collect();
        return all.chunks(KEYS_PER_CALL).map(<[usize]>::to_vec).collect();
    }
    let mut by_bucket: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, s) in states.iter().enumerate() {
        by_bucket.entry(s.bucket).or_default().push(i);
    }
    let mut buckets: Vec<_> = by_bucket.into_iter().collect();
    buckets.sort_unstable_by_key(|(b, _)| *b);
    buckets
        .into_iter()
        .flat_map(|(_, s)| {
            s.chunks(KEYS_PER_CALL)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The arguments every call starts with: the groups (one per event type
/// with rate checks, in [`CheckSet::rated_types`] order) and the batch's
/// partitions with what is known applied of each.
fn head(checks: &CheckSet, fields: &[String], applied: &[i64]) -> Vec<String> {
    let mut args = Vec::new();
    let groups: Vec<_> = checks
        .rated_types()
        .filter_map(|k| checks.rates(k))
        .collect();
    args.push(groups.len().to_string());
    for g in groups {
        args.push(g.checks.len().to_string());
        for c in &g.checks {
            args.push(c.rate.count.to_string());
            args.push(c.rate.length_ms.to_string());
        }
        args.push((g.longest_ms() + KEEP_AFTER_MS).to_string());
    }
    args.push(fields.len().to_string());
    for (field, applied) in fields.iter().zip(applied) {
        args.push(field.clone());
        args.push(applied.to_string());
    }
    args
}

fn command(
    scripts: &Scripts,
    head: &[String],
    checks: &CheckSet,
    call: &[usize],
    states: &[State],
    candidates: &[Candidate],
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&scripts.rates).arg(call.len());
    for &s in call {
        cmd.arg(&states[s].key);
    }
    cmd.arg(head);
    for &s in call {
        let state = &states[s];
        let group = checks
            .rated_types()
            .position(|k| k == state.kind)
            .map_or(1, |g| g + 1);
        cmd.arg(group).arg(state.events.len());
        for &e in &state.events {
            let c = &candidates[e];
            cmd.arg(c.ts).arg(usize::from(c.part) + 1).arg(c.offset);
        }
    }
    cmd
}
