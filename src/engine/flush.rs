//! One flush: a closed batch's way to Redis. The flush task encodes the
//! batch's calls at once (while the batch before it is still being applied),
//! waits for that batch, delivers the batch's dead letters, applies the
//! calls, and retries either with capped backoff until it succeeds or the
//! process shuts down. A batch with events that have rate checks
//! (docs/checks.md) has them decided once the batch before it had its own
//! decided (`rating.rs`), and is encoded after that, without the
//! quarantined ones. Retrying is safe: every script call is fenced and
//! delivered dead letters are not sent again. After success it records the
//! partitions' positions in Redis.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::backfill::start::Replay;
use crate::backfill::verdicts::Verdicts;
use crate::board::keys;
use crate::checks::CheckSet;
use crate::clock::SharedClock;
use crate::deadletter::DeadLetters;
use crate::health::Health;
use crate::sink::call::Call;
use crate::sink::positions::Ledger;
use crate::sink::rates;
use crate::sink::report::FlushReport;
use crate::sink::store::{Scripts, StoreError};
use crate::sink::updates::EventSet;
use crate::sink::writer::Writer;
use crate::telemetry::events::{self, RedisCall};

use super::batch::Batch;
use super::cover::Covers;
use super::rating::{Rating, Ticket};

/// First and largest pause between attempts to apply a batch.
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The result of a flush task.
pub(crate) enum Flushed {
    /// Applied: the batch back with its report and how long applying took.
    Applied(Box<Batch>, FlushReport, Duration),
    /// Given up (shutdown, or the flush before it was not applied): nothing
    /// of it may be committed.
    Abandoned,
    /// Redis lost state before the batch could be applied: nothing was
    /// applied, and the consumer must re-read from Redis's positions before
    /// applying anything else.
    LostState,
}

/// What flush tasks share.
#[derive(Clone)]
pub(crate) struct Flusher {
    /// Writes the batches' updates to Redis.
    pub(crate) writer: Arc<Writer>,
    /// The `[[check]]` entries, for the rate checks' decisions.
    pub(crate) checks: Arc<CheckSet>,
    /// The order of the rate decisions of this consumer's flushes, and
    /// what they know.
    pub(crate) rating: Arc<Rating>,
    /// The clock a batch is applied at (window cutoffs, closes).
    pub(crate) clock: SharedClock,
    /// Told whether Redis is reachable.
    pub(crate) health: Arc<Health>,
    /// Where invalid messages go, when a dead-letter topic is configured.
    pub(crate) dead_letters: Option<DeadLetters>,
    /// Where the partitions' positions are recorded.
    pub(crate) ledger: Ledger,
    /// A shadow board's backfill with checks configured: what the live
    /// consumers' checks quarantined, to leave out.
    pub(crate) verdicts: Option<Arc<Verdicts>>,
    /// A shadow board's replay: where it starts in partitions that have
    /// no position yet.
    pub(crate) replay: Option<Arc<Replay>>,
    /// The live consumers': the shadow boards they may apply beside their
    /// own (`cover.rs`).
    pub(crate) covers: Option<Arc<Covers>>,
}

impl Flusher {
    /// Spawns the flush of `batch` after `previous`. The returned receiver
    /// tells the next flush whether this one was applied; a flush after one
    /// that was not gives up too, so no batch is applied past a gap.
    pub(crate) fn start(
        &self,
        batch: Batch,
        previous: Option<oneshot::Receiver<bool>>,
        shutdown: &watch::Receiver<bool>,
    ) -> (JoinHandle<Flushed>, oneshot::Receiver<bool>) {
        let this = self.clone();
        let shutdown = shutdown.clone();
        let (done, done_rx) = oneshot::channel();
        // Taken now, in the order batches close: decisions follow it.
        let ticket = (!batch.rated.is_empty()).then(|| self.rating.ticket());
        let handle = tokio::spawn(async move {
            // The epoch the batch is applied in, if it is (see `run`).
            let epoch = this.writer.store().scripts().epoch;
            let flushed = this.run(batch, ticket, previous, done, shutdown).await;
            if let Flushed::Applied(batch, ..) = &flushed {
                let fields = &batch.updates.fields;
                let last = batch.record.last_offsets();
                this.rating
                    .applied(epoch, last.map(|(i, o)| (fields[i].as_str(), o)));
            }
            flushed
        });
        (handle, done_rx)
    }

    async fn run(
        &self,
        mut batch: Batch,
        ticket: Option<Ticket>,
        previous: Option<oneshot::Receiver<bool>>,
        done: oneshot::Sender<bool>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Flushed {
        // The Redis state this batch follows on from; if Redis turns out to
        // have lost state meanwhile, the batch must not be applied.
        let scripts = self.writer.store().scripts();
        let mut prepared = match self
            .decide(&mut batch, ticket, &scripts, &mut shutdown)
            .await
        {
            Ok(prepared) => prepared,
            Err(gave_up) => return gave_up,
        };
        if let Some(previous) = previous
            && previous.await != Ok(true)
        {
            return Flushed::Abandoned;
        }
        if self.check_covers(&mut batch, scripts.epoch) {
            prepared = self.writer.prepare(&batch.updates);
        }
        let started = Instant::now();
        let mut backoff = BACKOFF_START;
        let mut delivered = vec![false; batch.record.dead_letters.len()];
        loop {
            if self.writer.store().epoch() != scripts.epoch {
                return Flushed::LostState;
            }
            match self
                .attempt(&batch, &prepared, &scripts, &mut delivered)
                .await
            {
                Ok(report) => {
                    self.health.redis_ok();
                    events::RedisReachable.emit();
                    let took = started.elapsed();
                    // Before the next batch checks where its shadows are
                    // complete.
                    let covered = self
                        .covers
                        .as_ref()
                        .map(|c| c.applied(&batch, scripts.epoch))
                        .unwrap_or_default();
                    let _ = done.send(true);
                    self.record_positions(&batch, &scripts, &covered).await;
                    return Flushed::Applied(Box::new(batch), report, took);
                }
                Err(Failure::Redis(e @ StoreError::LostState)) => {
                    self.failed(&e, RedisCall::LostState, batch.messages(), Duration::ZERO);
                    return Flushed::LostState;
                }
                Err(Failure::Redis(e)) => {
                    self.health.redis_failed(&e.to_string());
                    self.failed(&e, RedisCall::Batch, batch.messages(), backoff);
                }
                Err(Failure::DeadLetters(e)) => events::DeadLetterWriteFailed {
                    error: &e,
                    letters: delivered.iter().filter(|d| !**d).count(),
                    retry_in: backoff,
                }
                .emit(),
            }
            if *shutdown.borrow() {
                return Flushed::Abandoned;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return Flushed::Abandoned,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Once the batch before it was applied: the shadows the batch applies
    /// beside the live boards must be complete where it starts
    /// (`cover.rs`); answers whether that took any out.
    fn check_covers(&self, batch: &mut Batch, epoch: u64) -> bool {
        match &self.covers {
            Some(covers) if batch.covered.iter().any(|&bits| bits != 0) => {
                covers.check(batch, epoch)
            }
            _ => false,
        }
    }

    /// Encodes the batch's calls, then takes out what checks keep from the
    /// boards: the live consumer's rate decisions, a backfill's record of
    /// the live checks; encodes again if that took any events out.
    async fn decide(
        &self,
        batch: &mut Batch,
        ticket: Option<Ticket>,
        scripts: &Scripts,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Vec<Call>, Flushed> {
        // Encoded before the rate decisions, which seldom take events out:
        // the encoding is then off the path between the previous batch's
        // writes and this one's.
        let prepared = self.writer.prepare(&batch.updates);
        let mut took_out = false;
        if let Some(ticket) = ticket {
            // After the batch before this one had its decisions made, while
            // it may still be being applied.
            tokio::select! {
                _ = ticket.turn() => {}
                _ = shutdown.wait_for(|s| *s) => return Err(Flushed::Abandoned),
            }
            took_out |= self.decide_rates(batch, scripts, shutdown).await?;
        }
        if let Some(verdicts) = &self.verdicts {
            took_out |= follow_verdicts(verdicts, batch, shutdown)
                .await
                .ok_or(Flushed::Abandoned)?;
        }
        Ok(match took_out {
            true => self.writer.prepare(&batch.updates),
            false => prepared,
        })
    }

    /// Has the batch's rate checks decided (retried like the batch), and
    /// takes the quarantined events out of it; answers whether it took any.
    async fn decide_rates(
        &self,
        batch: &mut Batch,
        scripts: &Scripts,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool, Flushed> {
        let store = self.writer.store();
        let prefix = &self.writer.boards().key_prefix;
        let applied = self.rating.marks(scripts.epoch, &batch.updates.fields);
        let mut backoff = BACKOFF_START;
        loop {
            if store.epoch() != scripts.epoch {
                return Err(Flushed::LostState);
            }
            let fields = &batch.updates.fields;
            let candidates = &batch.rated.candidates;
            let mut known = self.rating.take_known();
            known.sync_epoch(scripts.epoch);
            let partitions = (fields.as_slice(), applied.as_slice());
            let decided = rates::decide(
                store,
                scripts,
                prefix,
                &self.checks,
                partitions,
                candidates,
                &mut known,
            )
            .await;
            self.rating.put_known(known);
            match decided {
                Ok(decisions) => {
                    let took = batch.quarantine_rated(&self.checks, &decisions);
                    let left = self
                        .settle_redelivered(batch, &decisions, scripts.epoch)
                        .await;
                    return Ok(took | left);
                }
                Err(e @ StoreError::LostState) => {
                    self.failed(&e, RedisCall::LostState, batch.messages(), Duration::ZERO);
                    return Err(Flushed::LostState);
                }
                Err(e) => {
                    self.health.redis_failed(&e.to_string());
                    self.failed(&e, RedisCall::Batch, batch.messages(), backoff);
                }
            }
            if *shutdown.borrow() {
                return Err(Flushed::Abandoned);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return Err(Flushed::Abandoned),
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// The shadows applied beside the live boards and the events a rate
    /// check found dealt with by a batch that got through (`Applied`):
    /// they stay for the shadows unless the quarantine record names them,
    /// where it is complete for them already (the live positions passed
    /// them); otherwise the batch leaves the shadows of their partitions
    /// to the backfill (`cover.rs`). Answers whether it took anything out.
    async fn settle_redelivered(
        &self,
        batch: &mut Batch,
        decisions: &[rates::Decision],
        epoch: u64,
    ) -> bool {
        let Some(covers) = &self.covers else {
            return false;
        };
        let dealt: EventSet = batch
            .rated
            .candidates
            .iter()
            .zip(decisions)
            .filter(|(c, d)| {
                **d == rates::Decision::Applied
                    && batch
                        .covered
                        .get(usize::from(c.part))
                        .is_some_and(|&b| b != 0)
            })
            .map(|(c, _)| (c.part, c.offset))
            .collect();
        if dealt.is_empty() {
            return false;
        }
        let fields = &batch.updates.fields;
        let mut ends: Vec<(String, i64)> = Vec::new();
        for &(part, offset) in &dealt {
            let field = &fields[usize::from(part)];
            match ends.iter_mut().find(|(f, _)| f == field) {
                Some((_, end)) => *end = (*end).max(offset + 1),
                None => ends.push((field.clone(), offset + 1)),
            }
        }
        let known = match &covers.verdicts {
            Some(v) => v.quarantined_now(&ends, fields, dealt.clone()).await,
            None => None,
        };
        match known {
            Some(quarantined) => {
                batch.drop_events(&quarantined);
                !quarantined.is_empty()
            }
            None => {
                let parts: HashSet<u16> = dealt.iter().map(|&(part, _)| part).collect();
                covers.leave(batch, &parts, epoch)
            }
        }
    }

    fn failed(&self, e: &StoreError, call: RedisCall, events: usize, retry_in: Duration) {
        events::RedisFailed {
            call,
            kind: e.kind(),
            error: e,
            attempt: 0,
            events,
            retry_in,
        }
        .emit();
    }

    /// Best effort: a position that is not recorded only means more events
    /// are re-read (and skipped by the fences) after a restart. With it,
    /// where the shadows applied beside the live boards are complete
    /// (`covered`), and then what Redis says of all of them.
    async fn record_positions(
        &self,
        batch: &Batch,
        scripts: &Scripts,
        covered: &[(&str, Vec<(String, i64)>)],
    ) {
        let store = self.writer.store();
        // The shadows' first: a backfill that sees the live positions pass
        // its shadow's takes the partition back.
        if let Err(e) = Ledger::save_covered(store, scripts, covered).await {
            tracing::debug!(error = %e, "Could not record where shadow boards are complete; their backfill reads on from where they were.");
        }
        let offsets = batch.record.commit_offsets();
        if let Err(e) = self.ledger.save(store, scripts, offsets).await {
            tracing::debug!(error = %e, "Could not record partition positions; the next batch records them.");
        }
        let Some(covers) = &self.covers else {
            return;
        };
        if let Err(e) = covers.refresh(store, scripts.epoch).await {
            tracing::debug!(error = %e, "Could not read where shadow boards are complete; the next batch reads it.");
        }
    }

    async fn attempt(
        &self,
        batch: &Batch,
        prepared: &[Call],
        scripts: &Scripts,
        delivered: &mut [bool],
    ) -> Result<FlushReport, Failure> {
        if let Some(dl) = &self.dead_letters {
            dl.deliver(&batch.record.dead_letters, delivered)
                .await
                .map_err(Failure::DeadLetters)?;
        }
        let now = self.clock.now_ms();
        self.writer
            .apply(&batch.updates, prepared, scripts, now)
            .await
            .map_err(Failure::Redis)
    }
}

/// Leaves out of a backfill's batch the events the live consumers'
/// checks quarantined (`backfill::verdicts`); answers whether it left any
/// out, `None` at shutdown.
async fn follow_verdicts(
    verdicts: &Verdicts,
    batch: &mut Batch,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<bool> {
    let events = batch.updates.events();
    if events.is_empty() {
        return Some(false);
    }
    let ends: Vec<(String, i64)> = batch
        .record
        .commit_offsets()
        .map(|(t, p, next)| (keys::partition_field(t, p), next))
        .collect();
    let gone = verdicts
        .quarantined(&ends, &batch.updates.fields, events, shutdown)
        .await?;
    if gone.is_empty() {
        return Some(false);
    }
    batch.drop_events(&gone);
    Some(true)
}

/// Why an attempt failed.
enum Failure {
    Redis(StoreError),
    DeadLetters(crate::deadletter::DeadLetterError),
}
