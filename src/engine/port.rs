//! The consumer loop's two narrow interfaces: [`Source`], the few calls it
//! makes on the Kafka consumer (the messages themselves arrive as a stream
//! handed to the loop), and [`Sink`], which flushes batches and reads the
//! partition positions recorded in Redis. The real ones are the librdkafka
//! consumer and the [`Flusher`]; the loop's unit tests use fakes, so the
//! loop logic is tested without servers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::Offset;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::batch::Batch;
use super::cover::Covers;
use super::flush::{Flushed, Flusher};
use crate::moderation::Cell;
use crate::source::{KafkaConsumer, TopicPartition, offsets_list};

/// What the loop asks of the Kafka consumer.
pub trait Source: Send + Sync + 'static {
    /// Stops fetching the partitions (polling goes on).
    fn pause(&self, parts: &[TopicPartition]) -> Result<(), KafkaError>;
    fn resume(&self, parts: &[TopicPartition]) -> Result<(), KafkaError>;
    /// Moves a partition's fetch position (asynchronously).
    fn seek(&self, part: &TopicPartition, at: Offset) -> Result<(), KafkaError>;
    /// Stores the next offsets to commit, as (topic, partition, offset).
    fn store_offsets(&self, offsets: &[(Arc<str>, i32, i64)]) -> Result<(), KafkaError>;
    /// Commits the stored offsets synchronously (blocks: run it on a thread).
    fn commit(&self) -> Result<(), KafkaError>;
    /// Reports an error of the message stream; true when health should
    /// hear of it (the reports are rate limited).
    fn stream_error(&self, error: &KafkaError) -> bool;
}

fn list(parts: &[TopicPartition]) -> rdkafka::TopicPartitionList {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for (t, p) in parts {
        tpl.add_partition(t, *p);
    }
    tpl
}

impl Source for KafkaConsumer {
    fn pause(&self, parts: &[TopicPartition]) -> Result<(), KafkaError> {
        Consumer::pause(self, &list(parts))
    }

    fn resume(&self, parts: &[TopicPartition]) -> Result<(), KafkaError> {
        Consumer::resume(self, &list(parts))
    }

    fn seek(&self, (topic, partition): &TopicPartition, at: Offset) -> Result<(), KafkaError> {
        // No timeout: the fetcher restarts there on its own.
        Consumer::seek(self, topic, *partition, at, Duration::ZERO)
    }

    fn store_offsets(&self, offsets: &[(Arc<str>, i32, i64)]) -> Result<(), KafkaError> {
        Consumer::store_offsets(
            self,
            &offsets_list(offsets.iter().map(|(t, p, o)| (t, *p, *o))),
        )
    }

    fn commit(&self) -> Result<(), KafkaError> {
        self.commit_consumer_state(CommitMode::Sync)
    }

    fn stream_error(&self, error: &KafkaError) -> bool {
        // The client callbacks see the same errors; one rate-limited
        // reporter writes the lines.
        self.context().reports.error(error, "consumer stream")
    }
}

/// Partition → the position recorded in Redis (absent when it has none).
pub(crate) type Positions = HashMap<TopicPartition, i64>;

pub(crate) use crate::sink::positions::Handover;

/// What the loop asks of the Redis side.
pub(crate) trait Sink: Send + Sync + 'static {
    /// Spawns the flush of `batch` after the flush that `previous` reports
    /// on; the receiver returned tells the next flush whether this one was
    /// applied (see [`Flusher::start`]).
    fn start(
        &self,
        batch: Batch,
        previous: Option<oneshot::Receiver<bool>>,
        shutdown: &watch::Receiver<bool>,
    ) -> (JoinHandle<Flushed>, oneshot::Receiver<bool>);
    /// The store's epoch: it changes when Redis lost state.
    fn epoch(&self) -> u64;
    /// Reads the positions recorded for `parts`.
    fn positions(
        &self,
        parts: Vec<TopicPartition>,
    ) -> BoxFuture<'static, Result<Positions, String>>;
    /// Whether dead letters go to a topic (and so keep their payloads).
    fn keeps_payloads(&self) -> bool;
    /// Who is hidden or erased, as the sink last read it (the intake counts
    /// outcomes and drops erased members' updates with it).
    fn moderation(&self) -> Arc<Cell>;
    /// The shadow boards a live loop may apply beside its own
    /// (`cover.rs`); none by default.
    fn covers(&self) -> Option<Arc<Covers>> {
        None
    }
    /// A backfill's view of `parts`: where its shadow is complete and where
    /// the live consumers are (docs/rebuilds.md); nothing by default.
    fn handover(&self, parts: Vec<TopicPartition>) -> BoxFuture<'static, Result<Handover, String>> {
        drop(parts);
        Box::pin(async { Ok(Handover::new()) })
    }
}

impl Sink for Flusher {
    fn start(
        &self,
        batch: Batch,
        previous: Option<oneshot::Receiver<bool>>,
        shutdown: &watch::Receiver<bool>,
    ) -> (JoinHandle<Flushed>, oneshot::Receiver<bool>) {
        Flusher::start(self, batch, previous, shutdown)
    }

    fn epoch(&self) -> u64 {
        self.writer.store().epoch()
    }

    fn moderation(&self) -> Arc<Cell> {
        self.writer.moderation().clone()
    }

    fn positions(
        &self,
        parts: Vec<TopicPartition>,
    ) -> BoxFuture<'static, Result<Positions, String>> {
        let writer = self.writer.clone();
        let ledger = self.ledger.clone();
        let replay = self.replay.clone();
        let covers = self.covers.clone();
        Box::pin(async move {
            let mut found = ledger
                .load(writer.store(), &parts)
                .await
                .map_err(|e| e.to_string())?;
            // Where the shadows are complete, before the first batch: a
            // partition resuming where a shadow is complete applies it
            // from its first batch, without a takeover.
            if let Some(covers) = covers {
                let store = writer.store();
                if let Err(e) = covers.refresh(store, store.scripts().epoch).await {
                    tracing::debug!(error = %e, "Could not read where shadow boards are complete; the first batch reads it.");
                }
            }
            if let Some(replay) = replay {
                let missing = parts
                    .into_iter()
                    .filter(|p| !found.contains_key(p))
                    .collect();
                let prefix = &writer.boards().key_prefix;
                found.extend(replay.starts(writer.store(), prefix, missing).await);
            }
            Ok(found)
        })
    }

    fn keeps_payloads(&self) -> bool {
        self.dead_letters.is_some()
    }

    fn covers(&self) -> Option<Arc<Covers>> {
        self.covers.clone()
    }

    fn handover(&self, parts: Vec<TopicPartition>) -> BoxFuture<'static, Result<Handover, String>> {
        let writer = self.writer.clone();
        let ledger = self.ledger.clone();
        Box::pin(async move {
            ledger
                .handover(writer.store(), &parts)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
