//! The Redis side of the pipeline: a [`batch::Batch`] becomes one call of the
//! apply script per board instance ([`call`]), all sent in one pipelined
//! round trip ([`store`]). Fence conflicts (another consumer applied part of
//! a partition's range) are resolved here by rebuilding just those calls.
//!
//! [`apply_batch`] makes one attempt; the consumer loop retries a failed
//! attempt with backoff, which is safe because every call is fenced.

pub mod aggregate;
pub mod batch;
pub mod call;
pub mod store;
pub mod trimmer;

use std::collections::HashMap;

use crate::board::BoardSet;
use crate::board::keys;
use batch::Batch;
use call::{Call, Reply};
use store::{Store, StoreError, server_error};

/// Rounds of conflict resolution before giving up on an attempt. Each round
/// only happens when another consumer is applying the same partitions at the
/// same moment, which ends when the group settles.
const MAX_CONFLICT_ROUNDS: usize = 8;

/// Per-board counts from the script replies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoardCounts {
    pub applied: u64,
    pub evicted: u64,
    pub overflow: u64,
    pub late: u64,
}

/// What one successful flush did.
#[derive(Debug, Clone, Default)]
pub struct FlushReport {
    /// Indexed like [`BoardSet::boards`].
    pub boards: Vec<BoardCounts>,
    pub duplicates: u64,
    pub conflicts: u64,
    /// Some window eviction stopped at its budget.
    pub more_trim: bool,
}

impl FlushReport {
    fn new(boards: usize) -> FlushReport {
        FlushReport {
            boards: vec![BoardCounts::default(); boards],
            ..FlushReport::default()
        }
    }

    fn add(&mut self, board: usize, reply: &Reply) {
        if let Reply::Done {
            applied,
            evicted,
            overflow,
            late,
            more,
            duplicates,
        } = reply
        {
            let c = &mut self.boards[board];
            c.applied += applied;
            c.evicted += evicted;
            c.overflow += overflow;
            c.late += late;
            self.more_trim |= more;
            self.duplicates += duplicates;
        }
    }
}

/// Applies a batch: one pipelined round trip (more only on fence conflicts).
pub async fn apply_batch(
    store: &Store,
    boards: &BoardSet,
    batch: &Batch,
    now: i64,
) -> Result<FlushReport, StoreError> {
    let mut report = FlushReport::new(boards.boards.len());
    let part_by_field: HashMap<&str, u16> = batch
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| (p.field.as_str(), i as u16))
        .collect();
    let mut fences: HashMap<u32, HashMap<u16, i64>> = HashMap::new();
    let mut pending: Vec<u32> = (0..batch.instances.len() as u32).collect();
    let no_fences = HashMap::new();
    for round in 0..MAX_CONFLICT_ROUNDS {
        let calls: Vec<Call> = pending
            .iter()
            .filter_map(|&i| {
                let known = fences.get(&i).unwrap_or(&no_fences);
                call::build(
                    boards,
                    &batch.instances[i as usize],
                    i,
                    &batch.parts,
                    known,
                    now,
                )
            })
            .collect();
        let mut cmds: Vec<redis::Cmd> = calls.iter().map(|c| c.command(store.sha())).collect();
        if round == 0 {
            cmds.extend(registry_commands(boards, &calls, now));
        }
        let replies = store.pipeline(&cmds).await?;
        pending.clear();
        for (c, value) in calls.iter().zip(&replies) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
            match Reply::parse(value) {
                Some(Reply::Conflict { field, fence }) => {
                    let part = part_by_field.get(field.as_str()).copied().ok_or_else(|| {
                        StoreError::Protocol(format!("conflict on unknown partition {field}"))
                    })?;
                    fences.entry(c.instance).or_default().insert(part, fence);
                    pending.push(c.instance);
                    report.conflicts += 1;
                }
                Some(done) => report.add(c.board, &done),
                None => {
                    return Err(StoreError::Protocol(format!(
                        "apply script returned {value:?}"
                    )));
                }
            }
        }
        for value in replies.iter().skip(calls.len()) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
        }
        if pending.is_empty() {
            return Ok(report);
        }
        tracing::info!(
            instances = pending.len(),
            round,
            "Another consumer applied part of these partitions already; resending without the applied offsets."
        );
    }
    Err(StoreError::Protocol(format!(
        "fence conflicts did not settle after {MAX_CONFLICT_ROUNDS} rounds"
    )))
}

/// Registers instances with windows for the background trimmer.
fn registry_commands(boards: &BoardSet, calls: &[Call], now: i64) -> Vec<redis::Cmd> {
    let tags: Vec<&str> = calls
        .iter()
        .filter(|c| boards.boards[c.board].has_windows())
        .map(|c| c.tag.as_str())
        .collect();
    if tags.is_empty() {
        return Vec::new();
    }
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(keys::window_registry_key(&boards.key_prefix));
    for t in tags {
        cmd.arg(now).arg(t);
    }
    vec![cmd]
}

/// Trims the windows of the given instances to `now`, repeating calls whose
/// eviction hit its budget, so that a read right after sees exactly the
/// window. Returns the entries evicted per board.
pub async fn trim_instances(
    store: &Store,
    boards: &BoardSet,
    instances: &[(usize, String)],
    now: i64,
) -> Result<Vec<u64>, StoreError> {
    let mut evicted = vec![0u64; boards.boards.len()];
    let mut pending: Vec<Call> = instances
        .iter()
        .filter_map(|(b, tag)| call::trim(boards, *b, tag, now))
        .collect();
    while !pending.is_empty() {
        let cmds: Vec<redis::Cmd> = pending.iter().map(|c| c.command(store.sha())).collect();
        let replies = store.pipeline(&cmds).await?;
        let mut again = Vec::new();
        for (c, value) in pending.into_iter().zip(&replies) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
            match Reply::parse(value) {
                Some(Reply::Done {
                    evicted: n, more, ..
                }) => {
                    evicted[c.board] += n;
                    if more {
                        again.push(c);
                    }
                }
                _ => {
                    return Err(StoreError::Protocol(format!(
                        "trim call returned {value:?}"
                    )));
                }
            }
        }
        pending = again;
    }
    Ok(evicted)
}
