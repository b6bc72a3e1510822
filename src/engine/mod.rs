//! The consumer loop: takes messages from Kafka, decodes them, runs the board
//! rules and collects the updates into a batch; flushes a batch when it is
//! full (`batch.max_events`) or old enough (`batch.max_delay_ms`); stores a
//! partition's offsets only after Redis acknowledged its batch.
//!
//! The loop (`run.rs`) is composed of parts with one job each: the flush
//! queue (`queue.rs`: building, closed and in-flight batches, group commit,
//! ordered acknowledgements), the partition tracker (`partitions.rs`),
//! backpressure (`backpressure.rs`), the intake of one message
//! (`intake.rs`), the position lookups (`resume.rs`), the batch report
//! (`report.rs`) and the shutdown drain (`drain.rs`). It reaches Kafka and
//! Redis only through the narrow interfaces of [`port`], so its logic is
//! unit-tested with fakes and a paused clock (`tests.rs`).
//!
//! Batches of a partition must reach Redis in order for the offset fences
//! to hold, so flushes are chained (see [`Flusher`]). When the waiting
//! messages reach [`backlog_limit`], the loop stops taking messages
//! (librdkafka's bounded prefetch then stops the fetcher); if that lasts,
//! the assigned partitions are paused so the loop can keep polling (the
//! consumer stays in its group) while nothing more is fetched. Memory stays
//! bounded during a Redis outage or slowdown. A failed flush is retried
//! with capped exponential backoff until it succeeds or the process shuts
//! down; retries are safe because every script call is fenced.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use rdkafka::Message;
use rdkafka::error::KafkaResult;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{Notify, watch};

use crate::board::BoardSet;
use crate::clock::SharedClock;
use crate::config::BatchConfig;
use crate::event::Decoder;
use crate::health::Health;
use crate::source::{KafkaConsumer, RebalanceEvent};

mod backpressure;
pub mod batch;
mod drain;
mod flush;
mod intake;
mod partitions;
pub mod port;
mod queue;
pub mod record;
mod report;
mod resume;
mod run;
#[cfg(test)]
mod tests;

pub use flush::{Flushed, Flusher};
use port::{Sink, Source};

/// Most messages taken from the consumer per loop iteration.
const MAX_CHUNK: usize = 1024;
/// Batches' worth of messages that may wait for Redis before fetching
/// pauses (the one being built and the closed ones)... One is enough to
/// keep Redis busy: taking and encoding a batch is several times faster
/// than applying it, so the next batch is ready before the one in Redis
/// is done. (Two were kept with 20,000-event batches; with the default of
/// 100,000 a second one only held memory: same events/s, 90 MB less RSS
/// in the window benchmark, BENCHMARKS.md round 6.)
const BACKLOG_BATCHES: usize = 1;
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

/// What the loop needs, built by the application wiring (`app`): by default
/// the librdkafka consumer and the Redis [`Flusher`].
pub struct Engine<Src: Source = KafkaConsumer, Snk: Sink = Flusher> {
    pub boards: Arc<BoardSet>,
    pub decoder: Arc<Decoder>,
    pub consumer: Arc<Src>,
    pub rebalances: UnboundedReceiver<RebalanceEvent>,
    pub clock: SharedClock,
    pub health: Arc<Health>,
    pub batch: BatchConfig,
    /// Longest payload copied into a dead letter.
    pub max_event_bytes: usize,
    /// Woken when a flush reports window evictions left over.
    pub trim_wanted: Arc<Notify>,
    /// Applies batches (and writes dead letters and positions).
    pub flusher: Snk,
}

impl Engine {
    /// Runs until `shutdown` turns true; then drains the batches in hand,
    /// commits and returns.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let consumer = self.consumer.clone();
        // Messages that are already fetched are taken in chunks, so the
        // loop's select runs once per chunk rather than once per message.
        let messages = consumer.stream().ready_chunks(MAX_CHUNK);
        self.run_on(messages, shutdown).await;
    }
}

impl<Src: Source, Snk: Sink> Engine<Src, Snk> {
    /// Runs the loop on the given message stream (chunks of messages).
    pub async fn run_on<M, St>(self, messages: St, shutdown: watch::Receiver<bool>)
    where
        M: Message,
        St: Stream<Item = Vec<KafkaResult<M>>> + Unpin,
    {
        run::ConsumerLoop::new(self, shutdown).run(messages).await;
    }
}
