//! The consumer loop: takes messages from Kafka, decodes them, runs the board
//! rules and collects the updates into a batch; flushes a batch when it is
//! full (`batch.max_events`) or old enough (`batch.max_delay_ms`); stores a
//! partition's offsets only after Redis acknowledged its batch.
//!
//! One batch is in flight at a time (batches of a partition must reach Redis
//! in order for the offset fences to hold) while the next one is built. When
//! the next one is full too, the assigned partitions are paused: the loop
//! keeps polling (so the consumer stays in its group) but nothing more is
//! fetched, which bounds memory during a Redis outage or slowdown. A failed
//! flush is retried with capped exponential backoff until it succeeds or the
//! process shuts down; retries are safe because every script call is fenced.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::BorrowedMessage;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::board::BoardSet;
use crate::board::resolve::Resolver;
use crate::clock::SharedClock;
use crate::config::BatchConfig;
use crate::event::Decoder;
use crate::health::Health;
use crate::rules;
use crate::sink::batch::{Batch, Outcome};
use crate::sink::store::Store;
use crate::sink::{FlushReport, apply_batch};
use crate::source::{KafkaConsumer, RebalanceEvent, TopicPartition, offsets_list};
use crate::telemetry;

/// First and largest pause between attempts to apply a batch.
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Part of the 10 s shutdown budget spent waiting for Redis.
const SHUTDOWN_FLUSH_BUDGET: Duration = Duration::from_secs(7);

/// What the loop needs, built by [`crate::app`].
pub struct Engine {
    pub boards: Arc<BoardSet>,
    pub decoder: Arc<Decoder>,
    pub store: Store,
    pub consumer: Arc<KafkaConsumer>,
    pub rebalances: UnboundedReceiver<RebalanceEvent>,
    pub clock: SharedClock,
    pub health: Arc<Health>,
    pub batch: BatchConfig,
    /// Woken when a flush reports window evictions left over.
    pub trim_wanted: Arc<Notify>,
}

/// The result of a flush task: the batch back with its report, or `None`
/// when shutdown interrupted the retries (nothing may be committed then).
type Flushed = Option<(Batch, FlushReport, Duration)>;

/// Mutable loop state.
struct State {
    resolver: Resolver,
    assigned: HashSet<TopicPartition>,
    topics: Vec<Arc<str>>,
    paused: bool,
}

impl Engine {
    /// Runs until `shutdown` turns true; then drains the batch in hand,
    /// commits and returns.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut state = State {
            resolver: Resolver::new(&self.boards),
            assigned: HashSet::new(),
            topics: Vec::new(),
            paused: false,
        };
        let mut building = Batch::default();
        let mut inflight: Option<JoinHandle<Flushed>> = None;
        let max_delay = Duration::from_millis(self.batch.max_delay_ms);
        self.health.set_consuming(true);
        loop {
            if inflight.is_none() && self.ready(&building, max_delay) {
                inflight = Some(self.start_flush(std::mem::take(&mut building), &shutdown));
                if state.paused {
                    self.set_paused(&mut state, false);
                }
            }
            let deadline = building
                .opened_at
                .map(|t| tokio::time::Instant::from_std(t + max_delay));
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                Some(ev) = self.rebalances.recv() => self.on_rebalance(&mut state, &mut building, ev),
                done = wait_flush(&mut inflight), if inflight.is_some() => {
                    inflight = None;
                    match done {
                        Ok(Some((batch, report, took))) => self.on_flushed(&state, batch, report, took),
                        Ok(None) => {}
                        Err(e) => tracing::error!(error = %e, "A flush task failed unexpectedly; its offsets stay uncommitted and will be consumed again."),
                    }
                }
                _ = sleep_until(deadline), if inflight.is_none() && deadline.is_some() => {}
                msg = self.consumer.recv() => {
                    match msg {
                        Ok(m) => self.take(&mut state, &mut building, &m),
                        Err(e) => {
                            tracing::warn!(error = %e, "Kafka consumer error; librdkafka keeps retrying.");
                            self.health.kafka_failed(&e.to_string());
                        }
                    }
                    if building.messages >= self.batch.max_events && inflight.is_some() && !state.paused {
                        self.set_paused(&mut state, true);
                    }
                }
            }
        }
        self.drain(&state, building, inflight).await;
        self.health.set_consuming(false);
    }

    fn ready(&self, b: &Batch, max_delay: Duration) -> bool {
        !b.is_empty()
            && (b.messages >= self.batch.max_events
                || b.opened_at.is_some_and(|t| t.elapsed() >= max_delay))
    }

    fn start_flush(
        &self,
        mut batch: Batch,
        shutdown: &watch::Receiver<bool>,
    ) -> JoinHandle<Flushed> {
        let store = self.store.clone();
        let boards = self.boards.clone();
        let clock = self.clock.clone();
        let health = self.health.clone();
        let mut shutdown = shutdown.clone();
        batch.dead_letters.shrink_to_fit();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut backoff = BACKOFF_START;
            loop {
                match apply_batch(&store, &boards, &batch, clock.now_ms()).await {
                    Ok(report) => {
                        health.redis_ok();
                        metrics::gauge!(telemetry::REDIS_UP).set(1.0);
                        return Some((batch, report, started.elapsed()));
                    }
                    Err(e) => {
                        metrics::counter!(telemetry::REDIS_ERRORS, "kind" => e.kind()).increment(1);
                        metrics::gauge!(telemetry::REDIS_UP).set(0.0);
                        health.redis_failed(&e.to_string());
                        tracing::warn!(
                            error = %e,
                            kind = e.kind(),
                            retriable = e.is_retriable(),
                            events = batch.messages,
                            retry_in_ms = backoff.as_millis() as u64,
                            "Could not apply a batch to Redis; fetching is paused once the next batch fills, and the batch is retried."
                        );
                        if *shutdown.borrow() {
                            return None;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shutdown.changed() => return None,
                        }
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
        })
    }

    fn set_paused(&self, state: &mut State, pause: bool) {
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in &state.assigned {
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
                        "Fetching paused: a batch is in flight and the next one is full."
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
    fn take(&self, state: &mut State, batch: &mut Batch, msg: &BorrowedMessage<'_>) {
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
        let now = self.clock.now_ms();
        if event.ts > now.saturating_add(self.boards.future_skew_ms) {
            let detail = format!(
                "event time {} is {} ms ahead of the clock (max_future_skew is {} ms)",
                event.ts,
                event.ts - now,
                self.boards.future_skew_ms
            );
            self.reject(batch, &topic, msg, Some(event.kind), "future_ts", detail);
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
        reason: &'static str,
        detail: String,
    ) {
        batch.count(topic, kind, Outcome::Invalid);
        tracing::debug!(topic = %topic, partition = msg.partition(), offset = msg.offset(), reason, detail = %detail, "Invalid event skipped.");
        batch.dead_letters.push(crate::sink::batch::DeadLetter {
            topic: topic.clone(),
            partition: msg.partition(),
            offset: msg.offset(),
            key: msg.key().map(<[u8]>::to_vec),
            payload: Vec::new(),
            reason,
            detail,
        });
    }

    fn on_rebalance(&self, state: &mut State, batch: &mut Batch, ev: RebalanceEvent) {
        match ev {
            RebalanceEvent::Assigned(parts) => {
                state.assigned.extend(parts);
                if state.paused {
                    // New partitions start unpaused; keep the invariant
                    // that everything is paused while we are full.
                    self.set_paused(state, true);
                }
            }
            RebalanceEvent::Revoked(parts) => {
                for p in &parts {
                    state.assigned.remove(p);
                }
                // Their unacknowledged messages will be read again by the
                // next owner; applying them here too would only be skipped
                // by the fences, so drop them.
                batch.drop_partitions(&parts);
            }
        }
    }

    /// After Redis acknowledged a batch: store its offsets, emit its metrics.
    fn on_flushed(&self, state: &State, batch: Batch, report: FlushReport, took: Duration) {
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

    /// Shutdown: finish the batch in flight and the one in hand within the
    /// budget, then commit synchronously.
    async fn drain(&self, state: &State, building: Batch, inflight: Option<JoinHandle<Flushed>>) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_FLUSH_BUDGET;
        let mut applied_all = true;
        if let Some(handle) = inflight {
            applied_all &= self.await_flush(state, handle, deadline).await;
        }
        if applied_all && !building.is_empty() {
            // A fresh receiver that is not yet shut down lets this last flush
            // retry until the deadline instead of giving up at once.
            let (_keep, rx) = watch::channel(false);
            let handle = self.start_flush(building, &rx);
            applied_all &= self.await_flush(state, handle, deadline).await;
        }
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => tracing::info!(all_applied = applied_all, "Offsets committed on shutdown."),
            Err(e) => tracing::info!(error = %e, "No offsets to commit on shutdown."),
        }
        self.consumer.unsubscribe();
    }

    async fn await_flush(
        &self,
        state: &State,
        mut handle: JoinHandle<Flushed>,
        deadline: tokio::time::Instant,
    ) -> bool {
        match tokio::time::timeout_at(deadline, &mut handle).await {
            Ok(Ok(Some((batch, report, took)))) => {
                self.on_flushed(state, batch, report, took);
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
    inflight: &mut Option<JoinHandle<Flushed>>,
) -> Result<Flushed, tokio::task::JoinError> {
    match inflight {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// All of a batch's metrics, once per batch.
fn emit_batch_metrics(
    boards: &BoardSet,
    batch: &Batch,
    report: &FlushReport,
    took: Duration,
    now: i64,
) {
    for ((topic, kind, outcome), n) in &batch.outcomes {
        metrics::counter!(
            telemetry::EVENTS,
            "topic" => topic.to_string(),
            "type" => kind.map_or("unknown", |k| k.name()),
            "outcome" => outcome.label()
        )
        .increment(*n);
    }
    for (i, c) in report.boards.iter().enumerate() {
        let name = &boards.boards[i].name;
        if c.applied > 0 {
            metrics::counter!(telemetry::BOARD_UPDATES, "board" => name.clone())
                .increment(c.applied);
        }
        if c.evicted > 0 {
            metrics::counter!(telemetry::WINDOW_EVICTIONS, "board" => name.clone())
                .increment(c.evicted);
        }
        if c.overflow > 0 {
            metrics::counter!(telemetry::SCORE_OVERFLOW, "board" => name.clone())
                .increment(c.overflow);
            tracing::error!(board = %name, updates = c.overflow, "Updates refused: the total would leave the exact range ±2^53.");
        }
    }
    if report.duplicates > 0 {
        metrics::counter!(telemetry::DUPLICATES).increment(report.duplicates);
        tracing::info!(
            groups = report.duplicates,
            "Skipped partition ranges that were already applied (redelivery after a restart or rebalance)."
        );
    }
    let invalid: Vec<_> = batch.dead_letters.iter().take(1).collect();
    if let Some(first) = invalid.first() {
        tracing::warn!(
            count = batch.dead_letters.len(),
            first_reason = first.reason,
            first_detail = %first.detail,
            first_source = %format!("{}/{}/{}", first.topic, first.partition, first.offset),
            "Invalid events were skipped."
        );
    }
    metrics::histogram!(telemetry::BATCH_EVENTS).record(batch.messages as f64);
    metrics::histogram!(telemetry::BATCH_FLUSH_SECONDS).record(took.as_secs_f64());
    telemetry::record_event_lags(now, &batch.applied_ts);
}
