//! Reading a topic by assignment, never as a group member and without
//! commits: each partition from where the caller starts it (its beginning,
//! the first offset at or after a time, one offset, or where an earlier
//! read ended) to its end. The rebuild of a lost moderation record reads the
//! audit topic this way (`crate::admin::recover`), and `rankflow release`
//! the quarantine topic and one original message (`crate::release`), and
//! a shadow board's backfill what the checks quarantined
//! (`crate::backfill::verdicts`).
//! Blocking: callers run it on a blocking thread.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::KafkaConfig;

use super::client::{self, Role};

/// How long one metadata, watermark or offsets-for-times request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the read of each partition starts.
#[derive(Debug, Clone)]
pub(crate) enum Start {
    /// Every partition from its beginning.
    Beginning,
    /// Every partition from its first message at or after this time (ms).
    /// Brokers that answer such a query with the partition's beginning
    /// (tansu does) make this a read from the beginning.
    Time(i64),
    /// Only this partition, from this offset.
    At(i32, i64),
    /// Every partition from the offset listed for it, or from its
    /// beginning: a read that goes on from where the last one ended.
    After(Vec<(i32, i64)>),
}

/// Whether to read on after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    More,
    Stop,
}

/// Reads `topic` from `start` until each partition reports its end
/// (librdkafka's partition EOF, from the fetch responses: tansu's answers
/// to watermark queries cannot be relied on), handing each message to
/// `visit` until it says stop; `timeout` bounds the whole read. The client
/// is the consumer's, under `role`, with a group id of its own.
pub(crate) fn scan(
    kafka: &KafkaConfig,
    role: Role,
    topic: &str,
    start: Start,
    timeout: Duration,
    mut visit: impl FnMut(&BorrowedMessage<'_>) -> Next,
) -> Result<(), String> {
    let consumer: BaseConsumer<client::Reader> = client::reader_properties(kafka, role)
        .and_then(|p| p.create_reader())
        .map_err(|e| e.to_string())?;
    let assignment = assignment(&consumer, topic, &start)?;
    let mut pending: BTreeSet<i32> = assignment
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    consumer.assign(&assignment).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    while !pending.is_empty() {
        if Instant::now() > deadline {
            return Err(format!(
                "not read to its end within {} s",
                timeout.as_secs()
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(message)) if visit(&message) == Next::Stop => return Ok(()),
            Some(Ok(_)) => {}
        }
    }
    Ok(())
}

/// The partitions to read and where each starts; a partition with no
/// message at or after the time asked for is left out.
fn assignment(
    consumer: &BaseConsumer<client::Reader>,
    topic: &str,
    start: &Start,
) -> Result<TopicPartitionList, String> {
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .map_err(|e| e.to_string())?;
    let mut wanted = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            let offset = match *start {
                Start::Beginning => Offset::Beginning,
                Start::Time(ms) => Offset::Offset(ms),
                Start::At(partition, _) if partition != p.id() => continue,
                Start::At(_, offset) => Offset::Offset(offset),
                Start::After(ref read) => read
                    .iter()
                    .find(|(id, _)| *id == p.id())
                    .map_or(Offset::Beginning, |&(_, next)| Offset::Offset(next)),
            };
            wanted
                .add_partition_offset(topic, p.id(), offset)
                .map_err(|e| e.to_string())?;
        }
    }
    if let Start::Time(_) = *start {
        wanted = consumer
            .offsets_for_times(wanted, REQUEST_TIMEOUT)
            .map_err(|e| e.to_string())?;
    }
    let mut assignment = TopicPartitionList::new();
    for e in wanted.elements() {
        let from = match e.offset() {
            Offset::Offset(o) if o >= 0 => Offset::Offset(o),
            Offset::End => continue,
            _ => Offset::Beginning,
        };
        assignment
            .add_partition_offset(topic, e.partition(), from)
            .map_err(|e| e.to_string())?;
    }
    tracing::debug!(topic, ?start, from = ?assignment.to_topic_map(), "Reading a topic by assignment.");
    Ok(assignment)
}
