//! The owner of a flush: [`Writer`] holds the Redis store, the boards and
//! the caches a flush consults, and turns a batch's [`Updates`] into
//! applied calls. A flush registers the archived periods the batch touches
//! as due ([`super::due`]; a round trip of its own only when a batch
//! brings a period this consumer has not registered recently), then sends
//! the calls of the apply script, pipelined 32 per round trip
//! ([`super::store`]), with the windows' and scopes' registrations riding
//! along. Fence conflicts (another consumer applied part of a partition's
//! range) are resolved here by rebuilding just those calls.
//!
//! [`Writer::apply`] makes one attempt; the consumer loop retries a failed
//! attempt with backoff, which is safe because every call is fenced.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;
use crate::moderation::{Cell, MemberHasher};

use super::caches::Caches;
use super::call::Call;
use super::due::{self, Registered};
use super::encode;
use super::members;
use super::reply::Reply;
use super::report::FlushReport;
use super::scopes;
use super::store::{Scripts, Store, StoreError, server_error};
use super::updates::Updates;

/// Rounds of conflict resolution before giving up on an attempt. Each round
/// only happens when another consumer is applying the same partitions at the
/// same moment, which ends when the group settles.
const MAX_CONFLICT_ROUNDS: usize = 8;

/// Writes batches to Redis; one per consumer, shared by its flush tasks.
#[derive(Debug)]
pub struct Writer {
    store: Store,
    boards: Arc<BoardSet>,
    /// What this consumer wrote recently (see [`Caches`]).
    caches: Mutex<Caches>,
    /// Who is hidden or erased, as this consumer last read it.
    moderation: Arc<Cell>,
}

impl Writer {
    /// A writer for `boards` through `store`, remembering nothing yet.
    pub fn new(store: Store, boards: Arc<BoardSet>) -> Writer {
        Writer {
            store,
            boards,
            caches: Mutex::new(Caches::default()),
            moderation: Arc::new(Cell::new(MemberHasher::new(None))),
        }
    }

    /// The same writer sharing `cell` (keyed by the configured
    /// `[admin] erase_key`) as its view of the moderation record.
    pub fn with_moderation(mut self, cell: Arc<Cell>) -> Writer {
        self.moderation = cell;
        self
    }

    /// Its view of the moderation record.
    pub fn moderation(&self) -> &Arc<Cell> {
        &self.moderation
    }

    /// Reads the moderation record (at start-up, so that the first batch's
    /// outcomes already know who is hidden or erased).
    pub async fn load_moderation(&self) -> Result<(), StoreError> {
        members::load(&self.store, &self.boards, &self.moderation).await
    }

    /// The Redis store it writes through.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The boards it writes.
    pub(crate) fn boards(&self) -> &Arc<BoardSet> {
        &self.boards
    }

    /// The caches, whatever became of the lock. They only spare Redis
    /// writes it already has, and every write is idempotent, so after a
    /// panic while they were held (a poisoned lock) they are forgotten and
    /// the lock is cleared: the one policy for every use.
    fn caches(&self) -> MutexGuard<'_, Caches> {
        self.caches.lock().unwrap_or_else(|poisoned| {
            let mut caches = poisoned.into_inner();
            caches.forget();
            self.caches.clear_poison();
            caches
        })
    }

    /// Encodes a batch's calls ahead of sending them (CPU work that can run
    /// while the previous batch is still in Redis).
    pub fn prepare(&self, updates: &Updates) -> Vec<Call> {
        let all: Vec<u32> = (0..updates.instances.len() as u32).collect();
        let mut caches = self.caches();
        caches.sync_epoch(self.store.epoch());
        encode::build(
            &self.boards,
            updates,
            &all,
            &HashMap::new(),
            self.store.grouping(),
            &caches.expiries,
            &self.moderation.current(),
        )
    }

    /// Applies a batch whose calls were [`Writer::prepare`]d, at clock
    /// `now`: pipelined round trips of 32 calls (more only on fence
    /// conflicts), all with the script versions of `scripts`.
    pub async fn apply(
        &self,
        updates: &Updates,
        prepared: &[Call],
        scripts: &Scripts,
        now: i64,
    ) -> Result<FlushReport, StoreError> {
        let mut round = Round::new(&self.boards, updates);
        let first = self.register(updates).await?;
        // Calls prepared before the moderation record was read again are
        // encoded again.
        let generation = self.moderation.generation();
        if prepared.iter().any(|c| c.modgen != generation) {
            round.pending = (0..updates.instances.len() as u32).collect();
        }
        for n in 0..MAX_CONFLICT_ROUNDS {
            let rebuilt;
            let calls: &[Call] = if n == 0 && round.pending.is_empty() {
                prepared
            } else {
                rebuilt = encode::build(
                    &self.boards,
                    updates,
                    &round.pending,
                    &round.fences,
                    self.store.grouping(),
                    &self.caches().expiries,
                    &self.moderation.current(),
                );
                &rebuilt
            };
            let lead = (n == 0).then_some(&first);
            let (cmds, registered) = self.commands(calls, lead, scripts, now);
            // Each call weighs its updates; what follows them (registry
            // writes) is light.
            let work: Vec<usize> = (0..registered)
                .map(|_| 0)
                .chain(calls.iter().map(Call::updates))
                .chain(std::iter::repeat(1))
                .take(cmds.len())
                .collect();
            let replies = self
                .store
                .pipeline_led(&cmds, registered, Some(&work), scripts.epoch)
                .await?;
            round.read_replies(calls, &replies[registered..])?;
            if let Some(err) = replies[..registered].iter().find_map(server_error) {
                return Err(err);
            }
            if let Some((_, wanted)) = lead.and_then(|f| f.registrations.as_ref()) {
                members::record(&mut self.caches().members, wanted);
            }
            if let Some(stamp) = round.moderated.take() {
                tracing::info!(
                    generation = stamp,
                    "A member was hidden, restored or erased since this batch was encoded; reading the moderation record again."
                );
                self.load_moderation().await?;
            }
            self.remember(calls, &round.pending, lead);
            if round.pending.is_empty() {
                return self.finish(round).await;
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

    /// A round's commands: with `first` (the first round), the member
    /// registrations in front (on one node) and the registries behind; the
    /// calls check the moderation record when the registrations ride with
    /// them. Answers the commands and how many lead.
    fn commands(
        &self,
        calls: &[Call],
        first: Option<&First>,
        scripts: &Scripts,
        now: i64,
    ) -> (Vec<redis::Cmd>, usize) {
        let mut cmds: Vec<redis::Cmd> = Vec::new();
        let registrations = first.and_then(|f| f.registrations.as_ref());
        if let Some((r, _)) = registrations {
            cmds.extend(r.iter().cloned());
        }
        let registered = cmds.len();
        // On one node the registrations ride in front of the calls, which
        // then check the record's generation themselves (see `members`).
        let record = first
            .filter(|f| f.registrations.is_some())
            .map(|_| keys::moderation_key(&self.boards.key_prefix));
        cmds.extend(
            calls
                .iter()
                .map(|c| c.command_checking(&scripts.apply, now, record.as_deref())),
        );
        if let Some(f) = first {
            cmds.extend(registry_command(&self.boards, &f.windows, now));
            cmds.extend(scopes::commands(&f.scopes, now));
        }
        (cmds, registered)
    }

    /// The report of a batch whose every call was applied, once the replicas
    /// have it (when asked): a failover then cannot take back what was
    /// acknowledged.
    async fn finish(&self, mut round: Round<'_>) -> Result<FlushReport, StoreError> {
        self.store.wait_replicated().await?;
        round.report.fenced = round.fences;
        let snap = self.moderation.current();
        if !snap.is_empty() {
            round.report.moderation = Some(snap);
        }
        Ok(round.report)
    }

    /// Records what Redis acknowledged of a round: the expiries of the
    /// calls applied (not those to send again) and, in the first round, the
    /// scope and window registrations.
    fn remember(&self, calls: &[Call], pending: &[u32], first: Option<&First>) {
        let now = Instant::now();
        let mut caches = self.caches();
        if let Some(f) = first {
            scopes::record(&mut caches.scopes, &f.scopes, now);
            caches.windows.record(f.windows.iter().cloned(), now);
        }
        let applied = calls.iter().filter(|c| {
            c.members
                .first()
                .is_some_and(|m| !pending.contains(&m.instance))
        });
        caches
            .expiries
            .record(applied.flat_map(|c| c.expiries.iter().cloned()), now);
    }

    /// What a batch registers before its apply calls: reads the moderation
    /// record if it never was, registers members (on a cluster) and due
    /// periods; answers what rides with the first round of calls.
    async fn register(&self, updates: &Updates) -> Result<First, StoreError> {
        if !self.moderation.loaded() {
            self.load_moderation().await?;
        }
        let registrations = self.register_members(updates).await?;
        self.register_due(updates).await?;
        let caches = self.caches();
        let scopes = scopes::wanted(
            &self.boards,
            &updates.instances,
            &caches.scopes,
            Instant::now(),
        );
        let windows = windows_wanted(&self.boards, updates, &caches.windows, Instant::now());
        Ok(First {
            scopes,
            windows,
            registrations,
        })
    }

    /// Registers the (member, scoped instance) pairs of the batch this
    /// consumer has not registered before in the member index, before
    /// anything of the batch is applied (see [`members`]). On a cluster it
    /// waits for them and reads the record's generation, reading the record
    /// again when it moved; on one node it answers the commands, which go in
    /// front of the calls in their pipeline (the calls check the
    /// generation), and are remembered once Redis answered them.
    async fn register_members(
        &self,
        updates: &Updates,
    ) -> Result<Option<(Vec<redis::Cmd>, members::Wanted)>, StoreError> {
        let snap = self.moderation.current();
        let mut wanted = members::wanted(&self.boards, updates, &self.caches().members, &snap);
        if wanted.is_empty() {
            return Ok(None);
        }
        if !self.store.is_cluster() {
            return Ok(Some((wanted.take_commands(), wanted)));
        }
        let seen = members::register(&self.store, &self.boards, &mut wanted).await?;
        if seen.is_some_and(|g| g > self.moderation.generation()) {
            self.load_moderation().await?;
        }
        members::record(&mut self.caches().members, &wanted);
        Ok(None)
    }

    /// Registers the archived periods the batch touches in the due set (those
    /// this consumer has not registered recently), before anything of the batch
    /// is applied: a period with data is then always known to the archivers.
    async fn register_due(&self, updates: &Updates) -> Result<(), StoreError> {
        let now = Instant::now();
        let entries = due::wanted(&updates.instances, &self.caches().due, now);
        due::register(&self.store, &self.boards, &entries).await?;
        self.caches()
            .due
            .record(entries.into_iter().map(|(_, m)| m), now);
        Ok(())
    }
}

/// What the first round of a batch's calls carries besides them.
struct First {
    /// Scope registrations, behind the calls.
    scopes: Vec<scopes::ScopeEntries>,
    /// Window instances to register for the trimmer, behind the calls.
    windows: Vec<String>,
    /// On one node: member-index registrations, in front of the calls, and
    /// what to remember once Redis took them.
    registrations: Option<(Vec<redis::Cmd>, members::Wanted)>,
}

/// What the rounds of one [`Writer::apply`] learn.
struct Round<'a> {
    report: FlushReport,
    part_by_field: HashMap<&'a str, u16>,
    /// Batch instance → partition index → fence learnt from a conflict.
    fences: HashMap<u32, HashMap<u16, i64>>,
    /// Instances to send again (their call met a fence, or a moderation
    /// stamp).
    pending: Vec<u32>,
    /// The newest moderation stamp a call was refused for, if any.
    moderated: Option<i64>,
}

impl Round<'_> {
    /// The state of the rounds of one batch, before the first.
    fn new<'b>(boards: &BoardSet, updates: &'b Updates) -> Round<'b> {
        Round {
            report: FlushReport::new(boards.boards.len()),
            part_by_field: updates
                .fields
                .iter()
                .enumerate()
                .map(|(i, field)| (field.as_str(), i as u16))
                .collect(),
            fences: HashMap::new(),
            pending: Vec::new(),
            moderated: None,
        }
    }

    /// Reads a round's replies: counts of the calls that were applied,
    /// fences and instances to resend of those that met a fence. The
    /// registries' replies follow the calls', and a refusal there (an ACL
    /// without the command) fails the batch like a call's would.
    fn read_replies(&mut self, calls: &[Call], replies: &[redis::Value]) -> Result<(), StoreError> {
        if let Some(err) = replies.iter().find_map(server_error) {
            return Err(err);
        }
        self.pending.clear();
        for (c, value) in calls.iter().zip(replies) {
            match Reply::parse(value) {
                Some(Reply::Conflict(conflicts)) => {
                    for (member, field, fence) in conflicts {
                        self.conflict(c, member, &field, fence)?;
                    }
                    // The script wrote nothing of this call: send all of it
                    // again, without what the fences show applied.
                    self.pending.extend(c.members.iter().map(|m| m.instance));
                }
                Some(Reply::Moderated(stamp)) => {
                    // Nothing of this call was written: all of it again,
                    // once the record is read.
                    self.moderated = Some(self.moderated.map_or(stamp, |m| m.max(stamp)));
                    self.pending.extend(c.members.iter().map(|m| m.instance));
                }
                Some(Reply::Done { more, counts }) => {
                    self.report.more_trim |= more;
                    for (m, n) in c.members.iter().zip(counts) {
                        self.report.add(m.board, m.instance, n);
                    }
                }
                None => {
                    return Err(StoreError::Protocol(format!(
                        "apply script returned {value:?}"
                    )));
                }
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

/// The batch's instances with windows that this consumer has not
/// registered for the background trimmer within `expiry::REFRESH`: a batch
/// that brings no new instance registers none (the trimmer keeps an
/// instance that much longer than its windows need, `trimmer::horizon_ms`).
fn windows_wanted(
    boards: &BoardSet,
    updates: &Updates,
    sent: &Registered,
    now: Instant,
) -> Vec<String> {
    let mut tags: Vec<String> = updates
        .instances
        .iter()
        .filter(|i| boards.boards[i.board].has_windows() && sent.wanted(&i.tag, now))
        .map(|i| i.tag.clone())
        .collect();
    tags.sort_unstable();
    tags.dedup();
    tags
}

/// Registers instances with windows for the background trimmer, with the
/// time of this batch.
fn registry_command(boards: &BoardSet, tags: &[String], now: i64) -> Option<redis::Cmd> {
    if tags.is_empty() {
        return None;
    }
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(keys::window_registry_key(&boards.key_prefix));
    for t in tags {
        cmd.arg(now).arg(t);
    }
    Some(cmd)
}
