//! The Redis side of the pipeline: a [`batch::Batch`] becomes calls of the
//! apply script, each carrying board instances of one slot ([`call`]), all
//! pipelined, 32 per round trip ([`store`]), after the archived periods
//! it touches are registered as due ([`due`]; a round trip of its own only
//! when a batch brings a period this consumer has not registered recently).
//! Fence conflicts (another consumer applied part of a partition's range)
//! are resolved here by rebuilding just those calls.
//!
//! [`apply_batch`] makes one attempt; the consumer loop retries a failed
//! attempt with backoff, which is safe because every call is fenced.

pub mod aggregate;
pub mod batch;
pub mod call;
pub mod due;
pub mod expiry;
pub mod positions;
pub mod scopes;
pub mod store;
pub mod trimmer;

use std::collections::HashMap;

use crate::board::BoardSet;
use crate::board::keys;
use batch::Batch;
use call::{Call, Reply};
use expiry::ExpiryCache;
use store::{Scripts, Store, StoreError, server_error};

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
    /// (instance, partition) ranges the fences showed already applied, in
    /// full or in part (a redelivery): those events were left out.
    pub conflicts: u64,
    /// Some window eviction stopped at its budget.
    pub more_trim: bool,
    /// Fences learnt from conflicts: batch instance → partition index →
    /// highest offset already applied (those updates were left out).
    pub fenced: HashMap<u32, HashMap<u16, i64>>,
    /// Batch instances whose call found updates late: the cutoff the
    /// script used per view (in the instance's view order), so the late
    /// updates can be told from the others.
    pub late_cutoffs: HashMap<u32, Vec<i64>>,
}

impl FlushReport {
    fn new(boards: usize) -> FlushReport {
        FlushReport {
            boards: vec![BoardCounts::default(); boards],
            ..FlushReport::default()
        }
    }

    fn add(&mut self, member: &call::Member, n: call::Counts) {
        let c = &mut self.boards[member.board];
        c.applied += n.applied;
        c.evicted += n.evicted;
        c.overflow += n.overflow;
        c.late += n.late;
        if n.late > 0 {
            self.late_cutoffs.insert(member.instance, n.cutoffs);
        }
    }
}

/// Encodes a batch's calls ahead of sending them (CPU work that can run
/// while the previous batch is still in Redis).
pub fn prepare(
    store: &Store,
    boards: &BoardSet,
    batch: &Batch,
    expiries: &std::sync::Mutex<ExpiryCache>,
) -> Vec<Call> {
    let all: Vec<u32> = (0..batch.instances.len() as u32).collect();
    let none = HashMap::new();
    let build =
        |cache: &ExpiryCache| call::build(boards, batch, &all, &none, store.grouping(), cache);
    match expiries.lock() {
        Ok(mut cache) => {
            cache.sync_epoch(store.epoch());
            build(&cache)
        }
        Err(_) => build(&ExpiryCache::default()),
    }
}

/// Applies a batch whose calls were [`prepare`]d: pipelined round trips of
/// 32 calls (more only on fence conflicts).
pub async fn apply_batch(
    store: &Store,
    boards: &BoardSet,
    batch: &Batch,
    now: i64,
    expiries: &std::sync::Mutex<ExpiryCache>,
    prepared: &[Call],
    scripts: &Scripts,
) -> Result<FlushReport, StoreError> {
    let mut round = Round::new(boards, batch);
    register_due(store, boards, batch, expiries).await?;
    let registered_at = std::time::Instant::now();
    let scope_entries = match expiries.lock() {
        Ok(cache) => scopes::wanted(boards, &batch.instances, &cache.scopes, registered_at),
        Err(_) => Vec::new(),
    };
    for n in 0..MAX_CONFLICT_ROUNDS {
        let rebuilt;
        let calls: &[Call] = if n == 0 {
            prepared
        } else {
            let cache = expiries
                .lock()
                .map_err(|_| StoreError::Protocol("expiry cache poisoned".into()))?;
            rebuilt = call::build(
                boards,
                batch,
                &round.pending,
                &round.fences,
                store.grouping(),
                &cache,
            );
            &rebuilt
        };
        let mut cmds: Vec<redis::Cmd> = calls
            .iter()
            .map(|c| c.command(&scripts.apply, now))
            .collect();
        if n == 0 {
            cmds.extend(registry_commands(boards, calls, now));
            cmds.extend(scopes::commands(&scope_entries, now));
        }
        let replies = store.pipeline(&cmds, scripts.epoch).await?;
        round.read_replies(calls, &replies)?;
        if let Ok(mut cache) = expiries.lock() {
            if n == 0 {
                scopes::record(&mut cache.scopes, &scope_entries, registered_at);
            }
            let applied = calls.iter().filter(|c| {
                c.members
                    .first()
                    .is_some_and(|m| !round.pending.contains(&m.instance))
            });
            cache.record(
                applied.flat_map(|c| c.expiries.iter().cloned()),
                std::time::Instant::now(),
            );
        }
        if round.pending.is_empty() {
            // Not acknowledged before the replicas have it (when asked):
            // a failover then cannot take back what was acknowledged.
            store.wait_replicated().await?;
            round.report.fenced = round.fences;
            return Ok(round.report);
        }
        tracing::debug!(
            instances = round.pending.len(),
            round = n,
            "Fences show part of this batch applied already (a redelivery, or another consumer); resending without it."
        );
    }
    Err(StoreError::Protocol(format!(
        "fence conflicts did not settle after {MAX_CONFLICT_ROUNDS} rounds"
    )))
}

/// Registers the archived periods the batch touches in the due set (those
/// this consumer has not registered recently), before anything of the batch
/// is applied: a period with data is then always known to the archivers.
async fn register_due(
    store: &Store,
    boards: &BoardSet,
    batch: &Batch,
    expiries: &std::sync::Mutex<ExpiryCache>,
) -> Result<(), StoreError> {
    let now = std::time::Instant::now();
    let entries = match expiries.lock() {
        Ok(cache) => due::wanted(&batch.instances, &cache.due, now),
        Err(_) => due::wanted(&batch.instances, &due::Registered::default(), now),
    };
    due::register(store, boards, &entries).await?;
    if let Ok(mut cache) = expiries.lock() {
        cache.due.record(entries.into_iter().map(|(_, m)| m), now);
    }
    Ok(())
}

/// What the rounds of one [`apply_batch`] learn.
struct Round<'a> {
    report: FlushReport,
    part_by_field: HashMap<&'a str, u16>,
    /// Batch instance → partition index → fence learnt from a conflict.
    fences: HashMap<u32, HashMap<u16, i64>>,
    /// Instances to send again (their call met a fence).
    pending: Vec<u32>,
}

impl Round<'_> {
    /// The state of the rounds of one batch, before the first.
    fn new<'b>(boards: &BoardSet, batch: &'b Batch) -> Round<'b> {
        Round {
            report: FlushReport::new(boards.boards.len()),
            part_by_field: batch
                .parts
                .iter()
                .enumerate()
                .map(|(i, p)| (p.field.as_str(), i as u16))
                .collect(),
            fences: HashMap::new(),
            pending: Vec::new(),
        }
    }

    /// Reads a round's replies: counts of the calls that were applied,
    /// fences and instances to resend of those that met a fence. The
    /// registries' replies follow the calls', and a refusal there (an ACL
    /// without the command) fails the batch like a call's would.
    fn read_replies(&mut self, calls: &[Call], replies: &[redis::Value]) -> Result<(), StoreError> {
        if let Some(err) = replies.iter().skip(calls.len()).find_map(server_error) {
            return Err(err);
        }
        self.pending.clear();
        for (c, value) in calls.iter().zip(replies) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
            match Reply::parse(value) {
                Some(Reply::Conflict(conflicts)) => {
                    for (member, field, fence) in conflicts {
                        self.conflict(c, member, &field, fence)?;
                    }
                    // The script wrote nothing of this call: send all of it
                    // again, without what the fences show applied.
                    self.pending.extend(c.members.iter().map(|m| m.instance));
                }
                Some(Reply::Done { more, counts }) => {
                    self.report.more_trim |= more;
                    for (m, n) in c.members.iter().zip(counts) {
                        self.report.add(m, n);
                    }
                }
                None => {
                    return Err(StoreError::Protocol(format!(
                        "apply script returned {value:?}"
                    )));
                }
            }
        }
        // The registry commands after the calls.
        for value in replies.iter().skip(calls.len()) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
        }
        Ok(())
    }

    fn conflict(
        &mut self,
        c: &Call,
        member: usize,
        field: &str,
        fence: i64,
    ) -> Result<(), StoreError> {
        let part = self.part_by_field.get(field).copied().ok_or_else(|| {
            StoreError::Protocol(format!("conflict on unknown partition {field}"))
        })?;
        let instance = c.members.get(member).map(|m| m.instance).ok_or_else(|| {
            StoreError::Protocol(format!("conflict on unknown call member {member}"))
        })?;
        self.fences.entry(instance).or_default().insert(part, fence);
        self.report.conflicts += 1;
        Ok(())
    }
}

/// Registers instances with windows for the background trimmer.
fn registry_commands(boards: &BoardSet, calls: &[Call], now: i64) -> Vec<redis::Cmd> {
    let tags: Vec<&str> = calls
        .iter()
        .flat_map(|c| &c.members)
        .filter(|m| boards.boards[m.board].has_windows())
        .map(|m| m.tag.as_str())
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
/// window. Returns the entries evicted per board (also counted in
/// `rankflow_window_evictions_total`).
pub async fn trim_instances(
    store: &Store,
    boards: &BoardSet,
    instances: &[(usize, String)],
    now: i64,
) -> Result<Vec<u64>, StoreError> {
    let mut evicted = vec![0u64; boards.boards.len()];
    let mut pending = call::trims(boards, instances, store.grouping());
    let mut scripts = store.scripts();
    while !pending.is_empty() {
        let cmds: Vec<redis::Cmd> = pending
            .iter()
            .map(|c| c.command(&scripts.apply, now))
            .collect();
        // Trimming is safe to repeat after Redis restarted (the consumer
        // deals with what it lost), so only the script is reloaded.
        let replies = match store.pipeline(&cmds, scripts.epoch).await {
            Err(StoreError::LostState) => {
                scripts = store.scripts();
                let again: Vec<redis::Cmd> = pending
                    .iter()
                    .map(|c| c.command(&scripts.apply, now))
                    .collect();
                store.pipeline(&again, scripts.epoch).await?
            }
            other => other?,
        };
        let mut again = Vec::new();
        for (c, value) in pending.into_iter().zip(&replies) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
            match Reply::parse(value) {
                Some(Reply::Done { more, counts, .. }) => {
                    for (m, n) in c.members.iter().zip(&counts) {
                        evicted[m.board] += n.evicted;
                    }
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
    for (board, n) in evicted.iter().enumerate() {
        crate::telemetry::events::WindowEvicted {
            board: &boards.boards[board].name,
            entries: *n,
        }
        .emit();
    }
    Ok(evicted)
}
