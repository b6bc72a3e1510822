//! The consumer loop itself: one `select!` over shutdown, rebalances,
//! position lookups, finished flushes, the batch timer and the message
//! stream, each handled by a short method that moves the parts (flush
//! queue, partition tracker, backpressure, intake) and makes the consumer
//! calls.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::error::KafkaResult;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{Notify, watch};
use tokio::task::JoinError;
use tokio::time::Instant;

use crate::board::BoardSet;
use crate::clock::SharedClock;
use crate::health::Health;
use crate::sink::report::FlushReport;
use crate::source::{RebalanceEvent, TopicPartition};

use super::backpressure::{Backpressure, PAUSE_AFTER, Step, backlog_limit};
use super::batch::Batch;
use super::flush::Flushed;
use super::intake::Intake;
use super::partitions::{Partitions, ResumeAt};
use super::port::{Handover, Sink, Source};
use super::queue::FlushQueue;
use super::report;
use super::resume::{self, Resume};
use super::setup::{Engine, Role};

/// How long after its assignment a partition whose fetcher has not started
/// is logged: it normally starts within a second (librdkafka first fetches
/// the committed offsets), so this only fires when the start was lost or
/// the group coordinator is in trouble.
const FETCH_START_OVERDUE: Duration = Duration::from_secs(30);

/// Most messages taken from the consumer per loop iteration.
const MAX_CHUNK: usize = 1024;

/// How often a shadow's backfill looks at where the live consumers are, to
/// leave them the partitions its shadow is complete up to (and take back
/// those where it no longer is).
const HANDOVER_EVERY: Duration = Duration::from_secs(1);

impl Engine {
    /// Runs until `shutdown` turns true; then drains the batches in hand,
    /// commits and returns.
    pub(crate) async fn run(self, shutdown: watch::Receiver<bool>) {
        let consumer = self.consumer.clone();
        // Messages that are already fetched are taken in chunks, so the
        // loop's select runs once per chunk rather than once per message.
        let messages = consumer.stream().ready_chunks(MAX_CHUNK);
        self.run_on(messages, shutdown).await;
    }
}

impl<Src: Source, Snk: Sink> Engine<Src, Snk> {
    /// Runs the loop on the given message stream (chunks of messages).
    pub(crate) async fn run_on<M, St>(self, messages: St, shutdown: watch::Receiver<bool>)
    where
        M: Message,
        St: Stream<Item = Vec<KafkaResult<M>>> + Unpin,
    {
        ConsumerLoop::new(self, shutdown).run(messages).await;
    }
}

pub(super) struct ConsumerLoop<Src: Source, Snk: Sink> {
    pub(super) source: Arc<Src>,
    pub(super) sink: Arc<Snk>,
    boards: Arc<BoardSet>,
    clock: SharedClock,
    pub(super) health: Arc<Health>,
    trim_wanted: Arc<Notify>,
    role: Role,
    intake: Intake,
    pub(super) queue: FlushQueue,
    pub(super) partitions: Partitions,
    backpressure: Backpressure,
    /// The store's epoch last seen; a change means Redis lost state.
    epoch: u64,
    rebalances: UnboundedReceiver<RebalanceEvent>,
    resume_tx: UnboundedSender<Resume>,
    resumes: UnboundedReceiver<Resume>,
    /// A backfill's looks at the live consumers' positions: the answers,
    /// and whether one is awaited.
    handover_tx: UnboundedSender<Result<Handover, String>>,
    handovers: UnboundedReceiver<Result<Handover, String>>,
    looking: bool,
    /// Handed partitions whose shadow the live consumers were seen to have
    /// gone past once: a second look takes them back (the first may have
    /// fallen between a live batch's two position writes).
    behind: std::collections::HashSet<TopicPartition>,
    pub(super) shutdown: watch::Receiver<bool>,
}

impl<Src: Source, Snk: Sink> ConsumerLoop<Src, Snk> {
    pub(super) fn new(engine: Engine<Src, Snk>, shutdown: watch::Receiver<bool>) -> Self {
        let sink = Arc::new(engine.flusher);
        let (resume_tx, resumes) = tokio::sync::mpsc::unbounded_channel();
        let (handover_tx, handovers) = tokio::sync::mpsc::unbounded_channel();
        let intake = Intake::new(
            engine.boards.clone(),
            engine.checks,
            engine.decoder,
            engine.max_event_bytes,
            sink.keeps_payloads(),
            sink.moderation(),
            sink.covers(),
        );
        ConsumerLoop {
            source: engine.consumer,
            epoch: sink.epoch(),
            sink,
            boards: engine.boards,
            clock: engine.clock,
            health: engine.health,
            trim_wanted: engine.trim_wanted,
            role: engine.role,
            intake,
            queue: FlushQueue::new(
                engine.batch.max_events.get(),
                engine.batch.max_delay_ms.duration(),
            ),
            partitions: Partitions::default(),
            backpressure: Backpressure::new(backlog_limit(engine.batch.max_events.get())),
            rebalances: engine.rebalances,
            resume_tx,
            resumes,
            handover_tx,
            handovers,
            looking: false,
            behind: Default::default(),
            shutdown,
        }
    }

    /// Runs until shutdown; then drains the batches in hand and commits.
    pub(super) async fn run<M, St>(mut self, mut messages: St)
    where
        M: Message,
        St: Stream<Item = Vec<KafkaResult<M>>> + Unpin,
    {
        let timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        let mut stop = self.shutdown.clone();
        let mut handover = tokio::time::interval(HANDOVER_EVERY);
        handover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let backfill = self.role == Role::Backfill;
        let covers = self.sink.covers();
        self.health.set_consuming(true);
        loop {
            self.queue.start_flushes(&*self.sink, &self.shutdown);
            self.apply_backpressure();
            let take_messages = self.backpressure.takes_messages(self.partitions.paused());
            let deadline = self.queue.deadline();
            if deadline != armed {
                if let Some(at) = deadline {
                    timer.as_mut().reset(at);
                }
                armed = deadline;
            }
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                Some(ev) = self.rebalances.recv() => self.on_rebalance(ev),
                Some(r) = self.resumes.recv() => self.on_resume(r),
                Some(h) = self.handovers.recv() => self.on_handover(h),
                _ = handover.tick(), if (backfill && !self.looking) || covers.is_some() => {
                    match &covers {
                        Some(covers) => self.take_over(covers),
                        None => self.look_at_live(),
                    }
                }
                done = self.queue.next_done(), if self.queue.has_inflight() => self.on_flush_done(done),
                () = &mut timer, if armed.is_some() => {
                    armed = None;
                    self.queue.timer_fired();
                }
                _ = tokio::time::sleep(PAUSE_AFTER), if !take_messages => {}
                Some(chunk) = messages.next(), if take_messages => self.take_chunk(chunk).await,
            }
        }
        self.drain().await;
        self.health.set_consuming(false);
    }

    fn apply_backpressure(&mut self) {
        match self
            .backpressure
            .observe(self.queue.backlog(), self.partitions.paused())
        {
            Step::Pause => self.set_paused(true),
            Step::Resume => self.set_paused(false),
            Step::Nothing => {}
        }
    }

    /// Takes a chunk of fetched messages into the building batch.
    async fn take_chunk<M: Message>(&mut self, chunk: Vec<KafkaResult<M>>) {
        // One clock reading per chunk: the chunk was fetched at once.
        let now = self.clock.now_ms();
        for msg in chunk {
            match msg {
                Ok(m) => self.intake.take(self.queue.building(), &m, now),
                Err(e) => {
                    if self.source.stream_error(&e) {
                        self.health.kafka_failed(&e.to_string());
                    }
                }
            }
            self.queue.message_taken();
        }
        // librdkafka's stream is always ready while messages are buffered
        // and does not count against tokio's budget, so without a yield
        // this task would keep its worker and starve the flush task it
        // spawned (which waits in that worker's LIFO slot, where no other
        // worker can take it).
        tokio::task::yield_now().await;
    }

    /// Pauses or resumes fetching of the assigned partitions (those still
    /// waiting for their resume position stay paused either way).
    fn set_paused(&mut self, pause: bool) {
        let parts = self.partitions.fetching();
        let result = if pause {
            self.source.pause(&parts)
        } else {
            self.source.resume(&parts)
        };
        let partitions = self.partitions.assigned_count();
        match result {
            Ok(()) => {
                self.partitions.set_paused(pause);
                if pause {
                    tracing::info!(
                        partitions,
                        "Fetching paused: Redis has not taken the waiting batches for a while."
                    );
                } else {
                    tracing::info!(partitions, "Fetching resumed.");
                }
            }
            Err(e) => tracing::warn!(error = %e, pause, "Could not pause or resume partitions."),
        }
    }

    fn on_rebalance(&mut self, ev: RebalanceEvent) {
        match ev {
            RebalanceEvent::Assigned(parts) => {
                self.intake.forget_cover(Some(&parts));
                // The rebalance callback paused them: they start reading
                // where Redis says once that is known.
                let (generation, lookup) =
                    self.partitions.assign(&parts, Instant::now().into_std());
                self.look_up(generation, lookup);
            }
            RebalanceEvent::Revoked(parts) => {
                self.intake.forget_cover(Some(&parts));
                self.partitions.revoke(&parts);
                self.queue.drop_partitions(&parts);
            }
            RebalanceEvent::FetchersStarted(parts) => {
                let ready = self.partitions.fetchers_started(&parts);
                self.seek_and_resume(ready);
                self.report_overdue_starts();
            }
        }
    }

    /// Logs the partitions whose fetcher has not started long after their
    /// assignment: they are paused and read nothing until it does.
    fn report_overdue_starts(&mut self) {
        let overdue = self
            .partitions
            .overdue_starts(Instant::now().into_std(), FETCH_START_OVERDUE);
        for ((topic, partition), waited) in overdue {
            tracing::warn!(
                topic = %topic,
                partition,
                waited_s = waited.as_secs(),
                "Partition assigned but librdkafka has not started fetching it; it reads nothing until then. If this lasts, restart this instance so the partition moves."
            );
        }
    }

    fn look_up(&self, generation: u64, parts: ResumeAt) {
        resume::look_up(
            self.sink.clone(),
            generation,
            parts,
            self.resume_tx.clone(),
            self.shutdown.clone(),
        );
    }

    /// A position lookup's answer: the partitions whose fetchers started
    /// are sought and fetch; the others wait for their start.
    fn on_resume(&mut self, resume: Resume) {
        let ready = self.partitions.resumed(resume.generation, resume.offsets);
        self.seek_and_resume(ready);
    }

    /// Seeks the partitions that waited for their positions (and for their
    /// fetchers to start) and lets them fetch.
    fn seek_and_resume(&mut self, ready: ResumeAt) {
        if ready.is_empty() {
            return;
        }
        let mut fetch = Vec::with_capacity(ready.len());
        for (part, at) in ready {
            if let Some(at) = at {
                match self.source.seek(&part, at) {
                    Ok(()) => {
                        tracing::info!(
                            topic = %part.0,
                            partition = part.1,
                            offset = ?at,
                            "Partition resumes at the position recorded in Redis (the log start if Redis has none after losing state)."
                        );
                        self.commit_resume_position(&part, at);
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        topic = %part.0,
                        partition = part.1,
                        offset = ?at,
                        "Could not move to the resume position; reading from Kafka's committed offset."
                    ),
                }
            }
            fetch.push(part);
        }
        if !self.partitions.paused()
            && !fetch.is_empty()
            && let Err(e) = self.source.resume(&fetch)
        {
            tracing::warn!(error = %e, "Could not resume partitions.");
        }
        // A backfill looks at once whether the live consumers apply its
        // shadow there, rather than read a second's worth first.
        if self.role == Role::Backfill && !self.looking {
            self.look_at_live();
        }
    }

    /// A live consumer takes over the partitions where shadows are complete
    /// up to a little behind it (`cover.rs`): it drops what it holds of
    /// them unsent and reads them again from there, applying the shadows
    /// beside its boards (whose fences skip what they hold).
    fn take_over(&mut self, covers: &crate::engine::cover::Covers) {
        let parts: Vec<(TopicPartition, u64)> = self
            .partitions
            .handover_states()
            .into_iter()
            .map(|(p, _)| {
                let bits = self.intake.cover_bits(&p);
                (p, bits)
            })
            .collect();
        for (part, bits, from) in covers.takeovers(&parts) {
            // Moved first: what is dropped must be read again.
            if let Err(e) = self.source.seek(&part, Offset::Offset(from)) {
                tracing::warn!(error = %e, topic = %part.0, partition = part.1, "Could not move a partition to take shadow boards over; trying again later.");
                continue;
            }
            self.queue.drop_partitions(std::slice::from_ref(&part));
            self.intake.take_over(&part, bits, self.queue.building());
            let boards: Vec<&str> = covers
                .shadows()
                .iter()
                .enumerate()
                .filter(|(s, _)| bits & (1 << s) != 0)
                .map(|(_, sh)| sh.name.as_str())
                .collect();
            tracing::info!(topic = %part.0, partition = part.1, from, boards = ?boards, "The live consumers take this partition over from the shadows' backfill: they read it again from where the shadows are complete and apply them beside their boards.");
        }
    }

    /// A backfill: asks where its shadow is complete and where the live
    /// consumers are, for the partitions it reads or left to them.
    fn look_at_live(&mut self) {
        let parts: Vec<TopicPartition> = self
            .partitions
            .handover_states()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        if parts.is_empty() {
            return;
        }
        self.looking = true;
        let ask = self.sink.handover(parts);
        let tx = self.handover_tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(ask.await);
        });
    }

    /// A backfill leaves the live consumers a partition where its shadow is
    /// complete up to their position: they apply the shadow there beside
    /// their boards (`cover.rs`), so it stops reading the partition. It
    /// takes one back, from where the shadow is complete, once the live
    /// consumers have gone past that without it (an instance whose
    /// configuration lacks the shadow, a batch that could not show it
    /// complete).
    fn on_handover(&mut self, answer: Result<Handover, String>) {
        self.looking = false;
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "Could not read where the live consumers are; looking again shortly.");
                return;
            }
        };
        for (part, handed) in self.partitions.handover_states() {
            let Some(&(complete, live)) = answer.get(&part) else {
                continue;
            };
            let reached = complete.zip(live).is_some_and(|(c, l)| c >= l);
            if reached || !handed {
                self.behind.remove(&part);
            } else if self.behind.insert(part.clone()) {
                continue;
            }
            match (handed, reached, complete) {
                (false, true, Some(at)) => {
                    if let Err(e) = self.source.pause(std::slice::from_ref(&part)) {
                        tracing::warn!(error = %e, "Could not pause a partition left to the live consumers.");
                        continue;
                    }
                    self.partitions.set_handed(&part, true);
                    tracing::info!(topic = %part.0, partition = part.1, complete = at, "The shadow's backfill leaves this partition to the live consumers: the shadow is complete up to their position, and they apply it beside their boards.");
                    self.commit_resume_position(&part, Offset::Offset(at));
                }
                // Its consumer group's committed offset follows the
                // shadow, so Kafka's lag monitors see no backlog.
                (true, true, Some(at)) => self.commit_resume_position(&part, Offset::Offset(at)),
                (true, false, _) => {
                    if let Some(at) = complete
                        && let Err(e) = self.source.seek(&part, Offset::Offset(at))
                    {
                        tracing::warn!(error = %e, topic = %part.0, partition = part.1, "Could not move a partition taken back from the live consumers; looking again shortly.");
                        continue;
                    }
                    self.partitions.set_handed(&part, false);
                    self.behind.remove(&part);
                    if !self.partitions.paused()
                        && let Err(e) = self.source.resume(std::slice::from_ref(&part))
                    {
                        tracing::warn!(error = %e, "Could not resume a partition taken back from the live consumers.");
                    }
                    tracing::info!(topic = %part.0, partition = part.1, from = ?complete, live = ?live, "The shadow's backfill reads this partition again: the live consumers went past where the shadow is complete without applying it.");
                }
                _ => {}
            }
        }
    }

    /// Everything before a position recorded in Redis is applied, so it is
    /// also stored for Kafka's commit: otherwise a partition whose last
    /// batch reached Redis just before its previous owner died, and that
    /// receives nothing new, would keep its old committed offset for good
    /// (a backlog in every Kafka lag monitor, though nothing is missing).
    fn commit_resume_position(&self, part: &TopicPartition, at: Offset) {
        let Offset::Offset(next) = at else {
            return;
        };
        if let Err(e) = self.source.store_offsets(&[(part.0.clone(), part.1, next)]) {
            tracing::debug!(error = %e, topic = %part.0, partition = part.1, "Could not store the resume position for commit; the next batch stores its own.");
        }
    }

    fn on_flush_done(&mut self, done: Result<Flushed, JoinError>) {
        let lost = match done {
            Ok(Flushed::Applied(batch, report, took)) => {
                self.on_flushed(&batch, &report, took);
                false
            }
            Ok(Flushed::Abandoned) => false,
            Ok(Flushed::LostState) => {
                // Not applied: it is read again with the rest. The flush
                // behind it gives up (it waits for this one), so the chain
                // starts afresh.
                self.queue.break_chain();
                true
            }
            Err(e) => {
                // Its batch was not applied and the flush behind it gives
                // up too: read everything again.
                tracing::error!(error = %e, "A flush task failed unexpectedly; re-reading from the positions in Redis.");
                self.queue.break_chain();
                true
            }
        };
        let epoch = self.sink.epoch();
        if lost || epoch != self.epoch {
            self.epoch = epoch;
            // The flushes behind this one give up on their own (each waits
            // for the one before it).
            self.rewind();
        }
    }

    /// Redis lost state (restart without its last writes, or a failover):
    /// drop the batches not yet sent and read every assigned partition again
    /// from the position Redis now has. The fences skip whatever Redis kept.
    fn rewind(&mut self) {
        self.queue.discard_unsent();
        self.intake.forget_cover(None);
        // A partition Redis has no position for lost everything it had (or
        // never had any): it is read again from the beginning of the log,
        // and the fences skip whatever Redis still has.
        let (generation, lookup) = self.partitions.rewind(Some(Offset::Beginning));
        let parts: Vec<TopicPartition> = lookup.iter().map(|(p, _)| p.clone()).collect();
        if let Err(e) = self.source.pause(&parts) {
            tracing::warn!(error = %e, "Could not pause partitions for the rewind.");
        }
        tracing::warn!(
            partitions = parts.len(),
            "Redis lost state (its script cache was empty or its run id changed); re-reading every partition from the position Redis has."
        );
        self.look_up(generation, lookup);
    }

    /// After Redis acknowledged a batch: store the offsets of the
    /// partitions still assigned, emit its metrics.
    pub(super) fn on_flushed(&mut self, batch: &Batch, report: &FlushReport, took: Duration) {
        let offsets: Vec<_> = batch
            .record
            .commit_offsets()
            .filter(|(t, p, _)| self.partitions.is_assigned(&((*t).clone(), *p)))
            .map(|(t, p, o)| (t.clone(), p, o))
            .collect();
        if !offsets.is_empty()
            && let Err(e) = self.source.store_offsets(&offsets)
        {
            tracing::debug!(error = %e, "Could not store offsets (partition revoked meanwhile); the next owner re-reads them and the fences skip them.");
        }
        match self.role {
            Role::Live => {
                report::emit_batch(&self.boards, batch, report, took, self.clock.now_ms())
            }
            Role::Backfill => report::emit_writes(&self.boards, report),
        }
        if report.more_trim {
            self.trim_wanted.notify_one();
        }
    }
}
