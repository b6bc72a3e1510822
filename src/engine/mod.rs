//! The consumer loop: takes messages from Kafka, decodes them, runs the board
//! rules and collects the updates into a batch; flushes a batch when it is
//! full (`batch.max_events`) or old enough (`batch.max_delay_ms`); stores a
//! partition's offsets only after Redis acknowledged its batch.
//!
//! One batch is in flight at a time (batches of a partition must reach Redis
//! in order for the offset fences to hold) while the next ones are built and
//! wait in order. When the waiting messages reach [`backlog_limit`], the loop
//! stops taking messages (librdkafka's bounded prefetch then stops the
//! fetcher); if that lasts, the assigned partitions are paused so the loop
//! can keep polling (the consumer stays in its group) while nothing more is
//! fetched. Memory stays bounded during a Redis outage or slowdown. A failed
//! flush is retried with capped exponential backoff until it succeeds or the
//! process shuts down; retries are safe because every script call is fenced.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::BorrowedMessage;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use crate::board::BoardSet;
use crate::board::resolve::Resolver;
use crate::clock::SharedClock;
use crate::config::BatchConfig;
use crate::event::Decoder;
use crate::health::Health;
use crate::rules;
use crate::sink::FlushReport;
use crate::sink::batch::{Batch, Outcome};
use crate::sink::positions;
use crate::source::{KafkaConsumer, RebalanceEvent, TopicPartition, offsets_list};
use crate::telemetry::{DlqReason, events};

mod flush;

use flush::Flushed;
pub use flush::Flusher;

/// Part of the 10 s shutdown budget spent waiting for Redis...
const SHUTDOWN_FLUSH_BUDGET: Duration = Duration::from_secs(7);
/// ...and for the final offset commit.
const COMMIT_BUDGET: Duration = Duration::from_secs(2);
/// How long a full backlog may stop the loop from polling Kafka before the
/// partitions are paused and polling resumes (well below any sensible
/// `max.poll.interval.ms`).
const PAUSE_AFTER: Duration = Duration::from_millis(1000);
/// Flushes running at once: one applying, one encoding behind it.
const FLUSHES_IN_FLIGHT: usize = 2;
/// Most messages taken from the consumer per loop iteration.
const MAX_CHUNK: usize = 1024;
/// Batches' worth of messages that may wait for Redis before fetching
/// pauses (the one being built and the closed ones)...
const BACKLOG_BATCHES: usize = 2;
/// ...but never fewer messages than this, so that small batches (down to
/// one event) do not pause and resume the fetcher on every flush.
const MIN_BACKLOG_MESSAGES: usize = 10_000;

/// Messages held in memory (closed batches plus the one being built) at
/// which fetching pauses; it resumes below half. This, with librdkafka's
/// `queued.max.messages.kbytes`, bounds the consumer's memory while Redis is
/// slow or down.
pub fn backlog_limit(max_events: usize) -> usize {
    (max_events * BACKLOG_BATCHES).max(MIN_BACKLOG_MESSAGES)
}

/// What the loop needs, built by the application wiring (`app`).
pub struct Engine {
    pub boards: Arc<BoardSet>,
    pub decoder: Arc<Decoder>,
    pub consumer: Arc<KafkaConsumer>,
    pub rebalances: UnboundedReceiver<RebalanceEvent>,
    pub clock: SharedClock,
    pub health: Arc<Health>,
    pub batch: BatchConfig,
    /// Longest payload copied into a dead letter.
    pub max_event_bytes: usize,
    /// Woken when a flush reports window evictions left over.
    pub trim_wanted: Arc<Notify>,
    /// Applies batches (and writes dead letters and positions).
    pub flusher: Flusher,
}

/// Where a partition's reading restarts, looked up in Redis.
struct Resume {
    /// Assignment generation the lookup belongs to.
    generation: u64,
    /// Partition → where to read from: the position recorded in Redis, or
    /// the fallback.
    offsets: Vec<(TopicPartition, Option<rdkafka::Offset>)>,
}

/// Mutable loop state.
struct State {
    resolver: Resolver,
    assigned: HashSet<TopicPartition>,
    /// Assigned partitions kept paused until their resume position is known.
    awaiting: HashSet<TopicPartition>,
    /// Bumped per assignment (and rewind), so late lookups are ignored.
    generation: u64,
    /// The store's epoch last seen; a change means Redis lost state.
    epoch: u64,
    topics: Vec<Arc<str>>,
    paused: bool,
}

impl Engine {
    /// Runs until `shutdown` turns true; then drains the batches in hand,
    /// commits and returns.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut state = State {
            resolver: Resolver::new(&self.boards),
            assigned: HashSet::new(),
            awaiting: HashSet::new(),
            generation: 0,
            epoch: self.flusher.store.epoch(),
            topics: Vec::new(),
            paused: false,
        };
        let (resume_tx, mut resumes) = tokio::sync::mpsc::unbounded_channel::<Resume>();
        let (_, idle) = tokio::sync::mpsc::unbounded_channel();
        let mut rebalances = std::mem::replace(&mut self.rebalances, idle);
        let consumer = self.consumer.clone();
        // Messages that are already fetched are taken in chunks, so the
        // select below runs once per chunk rather than once per message.
        let mut messages = consumer.stream().ready_chunks(MAX_CHUNK);
        let max_delay = Duration::from_millis(self.batch.max_delay_ms);
        let backlog_limit = backlog_limit(self.batch.max_events);
        let mut building = Batch::default();
        let mut closed: VecDeque<Batch> = VecDeque::new();
        // Flushes in order: the front one is being applied; the one behind
        // it encodes its calls meanwhile and waits for it before sending.
        let mut inflight: VecDeque<JoinHandle<Flushed>> = VecDeque::new();
        let mut previous: Option<oneshot::Receiver<bool>> = None;
        let timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(timer);
        let mut timer_armed = false;
        // The building batch reached max_delay while no flush could start:
        // it keeps growing until one can (group commit). Under load a batch
        // then covers what arrived during one flush, so more updates merge
        // per (key, member) and Redis does less per event; the batch could
        // not have been sent any sooner, so no event waits longer.
        let mut due = false;
        let mut throttled_since: Option<Instant> = None;
        self.health.set_consuming(true);
        loop {
            if due && (building.is_empty() || inflight.len() < FLUSHES_IN_FLIGHT) {
                due = false;
                if !building.is_empty() {
                    closed.push_back(std::mem::take(&mut building));
                }
            }
            while inflight.len() < FLUSHES_IN_FLIGHT
                && let Some(batch) = closed.pop_front()
            {
                let (handle, done) = self.flusher.start(batch, previous.take(), &shutdown);
                inflight.push_back(handle);
                previous = Some(done);
            }
            // Backpressure, in two steps. A full backlog first only stops
            // taking messages: librdkafka's bounded prefetch queue then
            // stops the fetcher without dropping what it holds. Only if
            // Redis stays behind for PAUSE_AFTER are the partitions paused,
            // so that polling can go on (group membership) without
            // fetching; pausing drops the prefetch, so it is kept for real
            // stalls.
            let backlog = building.messages + closed.iter().map(|b| b.messages).sum::<usize>();
            if backlog >= backlog_limit {
                let since = *throttled_since.get_or_insert_with(Instant::now);
                if !state.paused && since.elapsed() >= PAUSE_AFTER {
                    self.set_paused(&mut state, true);
                }
            } else if backlog < backlog_limit / 2 && throttled_since.is_some() {
                throttled_since = None;
                if state.paused {
                    self.set_paused(&mut state, false);
                }
            }
            let take_messages = throttled_since.is_none() || state.paused;
            if !timer_armed
                && !due
                && let Some(opened) = building.opened_at
            {
                timer
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(opened + max_delay));
                timer_armed = true;
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(ev) = rebalances.recv() => {
                    self.on_rebalance(&mut state, &mut building, &mut closed, ev, &resume_tx, &shutdown);
                }
                Some(resume) = resumes.recv() => self.on_resume(&mut state, resume),
                done = wait_flush(&mut inflight), if !inflight.is_empty() => {
                    inflight.pop_front();
                    let lost = match done {
                        Ok(Flushed::Applied(batch, report, took)) => {
                            self.on_flushed(&mut state, *batch, report, took);
                            false
                        }
                        Ok(Flushed::Abandoned) => false,
                        Ok(Flushed::LostState(batch)) => {
                            // Not applied: it is read again with the rest.
                            // The flush behind it gives up (it waits for
                            // this one), so the chain starts afresh: the
                            // next flush waits for nothing before it.
                            closed.push_front(*batch);
                            previous = None;
                            true
                        }
                        Err(e) => {
                            // Its batch was not applied and the flush behind
                            // it gives up too: read everything again.
                            tracing::error!(error = %e, "A flush task failed unexpectedly; re-reading from the positions in Redis.");
                            previous = None;
                            true
                        }
                    };
                    let epoch = self.flusher.store.epoch();
                    if lost || epoch != state.epoch {
                        state.epoch = epoch;
                        // The flushes behind this one give up on their own
                        // (each waits for the one before it).
                        self.rewind(&mut state, &mut building, &mut closed, &resume_tx, &shutdown);
                    }
                }
                () = &mut timer, if timer_armed => {
                    timer_armed = false;
                    if !building.is_empty() {
                        if inflight.len() < FLUSHES_IN_FLIGHT && closed.is_empty() {
                            closed.push_back(std::mem::take(&mut building));
                        } else {
                            due = true;
                        }
                    }
                }
                _ = tokio::time::sleep(PAUSE_AFTER), if !take_messages => {}
                Some(chunk) = messages.next(), if take_messages => {
                    // One clock reading per chunk: the chunk was fetched at once.
                    let now = self.clock.now_ms();
                    for msg in chunk {
                        match msg {
                            Ok(m) => self.take(&mut state, &mut building, &m, now),
                            Err(e) => {
                                // The client callbacks see the same errors;
                                // one rate-limited reporter writes the lines.
                                if self.consumer.context().reports.error(&e, "consumer stream") {
                                    self.health.kafka_failed(&e.to_string());
                                }
                            }
                        }
                        if building.messages >= self.batch.max_events {
                            closed.push_back(std::mem::take(&mut building));
                            timer_armed = false;
                            due = false;
                        }
                    }
                    // librdkafka's stream is always ready while messages are
                    // buffered and does not count against tokio's budget, so
                    // without a yield this task would keep its worker and
                    // starve the flush task it spawned (which waits in that
                    // worker's LIFO slot, where no other worker can take it).
                    tokio::task::yield_now().await;
                }
            }
        }
        if !building.is_empty() {
            closed.push_back(building);
        }
        self.drain(&mut state, closed, inflight, previous).await;
        self.health.set_consuming(false);
    }

    /// Pauses or resumes fetching of the assigned partitions (those still
    /// waiting for their resume position stay paused either way).
    fn set_paused(&self, state: &mut State, pause: bool) {
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in state.assigned.difference(&state.awaiting) {
            tpl.add_partition(t, *p);
        }
        let result = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        match result {
            Ok(()) => {
                state.paused = pause;
                if pause {
                    tracing::info!(
                        partitions = state.assigned.len(),
                        "Fetching paused: Redis has not taken the waiting batches for a while."
                    );
                } else {
                    tracing::info!(partitions = state.assigned.len(), "Fetching resumed.");
                }
            }
            Err(e) => tracing::warn!(error = %e, pause, "Could not pause or resume partitions."),
        }
    }

    fn intern(state: &mut State, topic: &str) -> Arc<str> {
        if let Some(t) = state.topics.iter().find(|t| t.as_ref() == topic) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(topic);
        state.topics.push(t.clone());
        t
    }

    /// Decodes one message and adds its updates to the batch.
    fn take(&self, state: &mut State, batch: &mut Batch, msg: &BorrowedMessage<'_>, now: i64) {
        let topic = Self::intern(state, msg.topic());
        let part = batch.take_message(&topic, msg.partition(), msg.offset());
        let payload = msg.payload().unwrap_or(&[]);
        let event = match self.decoder.decode(payload) {
            Ok(e) => e,
            Err(e) => {
                self.reject(batch, &topic, msg, None, e.reason(), e.to_string());
                return;
            }
        };
        if event.ts > now.saturating_add(self.boards.future_skew_ms) {
            let detail = format!(
                "event time {} is {} ms ahead of the clock (max_future_skew is {} ms)",
                event.ts,
                event.ts - now,
                self.boards.future_skew_ms
            );
            self.reject(
                batch,
                &topic,
                msg,
                Some(event.kind),
                DlqReason::FutureTs,
                detail,
            );
            return;
        }
        let mut updates = Vec::new();
        if let Err(e) = rules::evaluate(&self.boards, &event, &mut updates) {
            self.reject(
                batch,
                &topic,
                msg,
                Some(event.kind),
                e.reason(),
                e.to_string(),
            );
            return;
        }
        let outcome = batch.add_updates(
            &self.boards,
            &mut state.resolver,
            part,
            msg.offset(),
            event.ts,
            &updates,
            now,
        );
        batch.count(&topic, Some(event.kind), outcome);
    }

    fn reject(
        &self,
        batch: &mut Batch,
        topic: &Arc<str>,
        msg: &BorrowedMessage<'_>,
        kind: Option<crate::event::EventType>,
        reason: DlqReason,
        detail: String,
    ) {
        batch.count(topic, kind, Outcome::Invalid);
        tracing::debug!(topic = %topic, partition = msg.partition(), offset = msg.offset(), reason = %reason, detail = %detail, "Invalid event skipped.");
        batch.dead_letters.push(crate::deadletter::DeadLetter {
            topic: topic.clone(),
            partition: msg.partition(),
            offset: msg.offset(),
            key: msg.key().map(<[u8]>::to_vec),
            // Kept for the dead-letter topic, up to the size limit (the
            // source coordinates find the rest).
            payload: if self.flusher.dead_letters.is_some() {
                let p = msg.payload().unwrap_or(&[]);
                p[..p.len().min(self.max_event_bytes)].to_vec()
            } else {
                Vec::new()
            },
            reason,
            detail,
        });
    }

    fn on_rebalance(
        &self,
        state: &mut State,
        building: &mut Batch,
        closed: &mut VecDeque<Batch>,
        ev: RebalanceEvent,
        resume_tx: &tokio::sync::mpsc::UnboundedSender<Resume>,
        shutdown: &watch::Receiver<bool>,
    ) {
        match ev {
            RebalanceEvent::Assigned(parts) => {
                // The rebalance callback paused them: they start reading
                // where Redis says once that is known.
                state.assigned.extend(parts.iter().cloned());
                state.awaiting.extend(parts.iter().cloned());
                state.generation += 1;
                let with_fallback = parts.into_iter().map(|p| (p, None)).collect();
                self.look_up_positions(state.generation, with_fallback, resume_tx, shutdown);
            }
            RebalanceEvent::Revoked(parts) => {
                for p in &parts {
                    state.assigned.remove(p);
                    state.awaiting.remove(p);
                }
                // Their unacknowledged messages will be read again by the
                // next owner; applying them here too would only be skipped
                // by the fences, so drop them.
                building.drop_partitions(&parts);
                for b in closed.iter_mut() {
                    b.drop_partitions(&parts);
                }
            }
        }
    }

    /// Reads the positions of `parts` from Redis (retrying while Redis is
    /// unreachable) and reports them to the loop. A partition without a
    /// position in Redis resumes at its fallback, or where Kafka has it.
    fn look_up_positions(
        &self,
        generation: u64,
        parts: Vec<(TopicPartition, Option<rdkafka::Offset>)>,
        resume_tx: &tokio::sync::mpsc::UnboundedSender<Resume>,
        shutdown: &watch::Receiver<bool>,
    ) {
        let store = self.flusher.store.clone();
        let prefix = self.boards.key_prefix.clone();
        let tx = resume_tx.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let keys: Vec<TopicPartition> = parts.iter().map(|(p, _)| p.clone()).collect();
            let mut delay = Duration::from_millis(100);
            loop {
                match positions::load(&store, &prefix, &keys).await {
                    Ok(found) => {
                        let offsets = parts
                            .into_iter()
                            .map(|(p, fallback)| {
                                let recorded = found.get(&p).copied().map(rdkafka::Offset::Offset);
                                let at = recorded.or(fallback);
                                (p, at)
                            })
                            .collect();
                        let _ = tx.send(Resume {
                            generation,
                            offsets,
                        });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "Cannot read partition positions from Redis; the partitions wait.");
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.changed() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
    }

    /// Seeks the partitions that waited for their positions and lets them fetch.
    fn on_resume(&self, state: &mut State, resume: Resume) {
        if resume.generation != state.generation {
            // A newer assignment or rewind asked again; its answer counts.
            return;
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        for ((topic, partition), at) in resume.offsets {
            if !state.awaiting.remove(&(topic.clone(), partition)) {
                continue;
            }
            if let Some(at) = at {
                // Asynchronous (no timeout): the fetcher restarts there.
                match self.consumer.seek(&topic, partition, at, Duration::ZERO) {
                    Ok(()) => tracing::info!(
                        topic = %topic,
                        partition,
                        offset = ?at,
                        "Partition resumes at the position recorded in Redis (the log start if Redis has none after losing state)."
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        topic = %topic,
                        partition,
                        offset = ?at,
                        "Could not move to the resume position; reading from Kafka's committed offset."
                    ),
                }
            }
            tpl.add_partition(&topic, partition);
        }
        if !state.paused
            && tpl.count() > 0
            && let Err(e) = self.consumer.resume(&tpl)
        {
            tracing::warn!(error = %e, "Could not resume partitions.");
        }
    }

    /// Redis lost state (restart without its last writes, or a failover):
    /// drop the batches not yet sent and read every assigned partition again
    /// from the position Redis now has. The fences skip whatever Redis kept.
    fn rewind(
        &self,
        state: &mut State,
        building: &mut Batch,
        closed: &mut VecDeque<Batch>,
        resume_tx: &tokio::sync::mpsc::UnboundedSender<Resume>,
        shutdown: &watch::Receiver<bool>,
    ) {
        // A partition Redis has no position for lost everything it had
        // (or never had any): it is read again from the beginning of the
        // log, and the fences skip whatever Redis still has.
        *building = Batch::default();
        closed.clear();
        let parts: Vec<TopicPartition> = state.assigned.iter().cloned().collect();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in &parts {
            tpl.add_partition(t, *p);
        }
        if let Err(e) = self.consumer.pause(&tpl) {
            tracing::warn!(error = %e, "Could not pause partitions for the rewind.");
        }
        state.awaiting.extend(parts.iter().cloned());
        state.generation += 1;
        tracing::warn!(
            partitions = parts.len(),
            "Redis lost state (its script cache was empty or its run id changed); re-reading every partition from the position Redis has."
        );
        let with_fallback = parts
            .into_iter()
            .map(|p| (p, Some(rdkafka::Offset::Beginning)))
            .collect();
        self.look_up_positions(state.generation, with_fallback, resume_tx, shutdown);
    }

    /// After Redis acknowledged a batch: store its offsets, emit its metrics.
    fn on_flushed(&self, state: &mut State, batch: Batch, report: FlushReport, took: Duration) {
        let offsets: Vec<_> = batch
            .commit_offsets()
            .filter(|(t, p, _)| state.assigned.contains(&((*t).clone(), *p)))
            .collect();
        if !offsets.is_empty()
            && let Err(e) = self
                .consumer
                .store_offsets(&offsets_list(offsets.into_iter()))
        {
            tracing::debug!(error = %e, "Could not store offsets (partition revoked meanwhile); the next owner re-reads them and the fences skip them.");
        }
        emit_batch_metrics(&self.boards, &batch, &report, took, self.clock.now_ms());
        if report.more_trim {
            self.trim_wanted.notify_one();
        }
    }

    /// Shutdown: finish the flushes in flight and the batches in hand, in
    /// order, within the budget, then commit synchronously.
    async fn drain(
        &self,
        state: &mut State,
        closed: VecDeque<Batch>,
        inflight: VecDeque<JoinHandle<Flushed>>,
        mut previous: Option<oneshot::Receiver<bool>>,
    ) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_FLUSH_BUDGET;
        let mut applied_all = true;
        for handle in inflight {
            applied_all &= self.await_flush(state, handle, deadline).await;
        }
        // A receiver that is not shut down lets these last flushes retry
        // until the deadline instead of giving up at the first failure.
        let (_keep, rx) = watch::channel(false);
        for batch in closed {
            if !applied_all {
                // Order matters for the fences: never apply past a gap.
                break;
            }
            let (handle, done) = self.flusher.start(batch, previous.take(), &rx);
            previous = Some(done);
            applied_all &= self.await_flush(state, handle, deadline).await;
        }
        // A synchronous commit waits for the group coordinator; with the
        // broker unreachable that could outlast the shutdown budget, so it
        // runs on its own thread and is given COMMIT_BUDGET.
        let consumer = self.consumer.clone();
        let (tx, rx) = oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(consumer.commit_consumer_state(CommitMode::Sync));
        });
        match tokio::time::timeout(COMMIT_BUDGET, rx).await {
            Ok(Ok(Ok(()))) => {
                tracing::info!(all_applied = applied_all, "Offsets committed on shutdown.")
            }
            Ok(Ok(Err(e))) => tracing::info!(error = %e, "No offsets to commit on shutdown."),
            _ => tracing::warn!(
                "The final commit did not finish in time (broker unreachable?); the group keeps the last committed offsets and the fences skip what is re-read."
            ),
        }
    }

    async fn await_flush(
        &self,
        state: &mut State,
        mut handle: JoinHandle<Flushed>,
        deadline: tokio::time::Instant,
    ) -> bool {
        match tokio::time::timeout_at(deadline, &mut handle).await {
            Ok(Ok(Flushed::Applied(batch, report, took))) => {
                self.on_flushed(state, *batch, report, took);
                true
            }
            Ok(_) => false,
            Err(_) => {
                handle.abort();
                tracing::warn!(
                    "Redis did not acknowledge the last batch before the shutdown deadline; its offsets stay uncommitted and will be consumed again."
                );
                false
            }
        }
    }
}

/// Awaits the flush in flight; pending forever when there is none (the
/// `select!` guard keeps that branch off then).
async fn wait_flush(
    inflight: &mut VecDeque<JoinHandle<Flushed>>,
) -> Result<Flushed, tokio::task::JoinError> {
    match inflight.front_mut() {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}

/// All of a batch's metrics and log lines, once per batch.
fn emit_batch_metrics(
    boards: &BoardSet,
    batch: &Batch,
    report: &FlushReport,
    took: Duration,
    now: i64,
) {
    for ((topic, kind, outcome), n) in &batch.outcomes {
        events::EventsCounted {
            topic,
            kind: kind.map_or("unknown", |k| k.name()),
            outcome: *outcome,
            count: *n,
        }
        .emit();
    }
    for (i, c) in report.boards.iter().enumerate() {
        events::BoardWritten {
            board: &boards.boards[i].name,
            updates: c.applied,
            evicted: c.evicted,
            overflow: c.overflow,
        }
        .emit();
    }
    events::DuplicatesSkipped {
        ranges: report.conflicts,
    }
    .emit();
    if let Some(first) = batch.dead_letters.first() {
        events::InvalidSkipped {
            count: batch.dead_letters.len(),
            first_reason: first.reason,
            first_detail: &first.detail,
            first_source: format!("{}/{}/{}", first.topic, first.partition, first.offset),
        }
        .emit();
    }
    events::BatchFlushed {
        messages: batch.messages,
        took,
    }
    .emit();
    events::EventLags {
        now_ms: now,
        event_ts: &batch.applied_ts,
    }
    .emit();
}
