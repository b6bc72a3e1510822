//! What Kafka says about a consumer group's progress: its committed
//! offsets against the log end of every partition of its topic, read
//! without joining the group. The board check waits for these to meet.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::unique;

/// One partition of a consumer group, as Kafka has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub partition: i32,
    /// The group's committed offset, if it committed one.
    pub committed: Option<i64>,
    /// The log end offset: one past the last message read from the log.
    pub end: i64,
}

/// A consumer group's committed offsets against the log ends of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    pub partitions: Vec<PartitionOffsets>,
    /// Whether every partition was read to its end (the broker said so)
    /// when these were taken; if not, `end` may be short.
    pub settled: bool,
}

impl GroupOffsets {
    /// Whether the group committed the end of every partition (a partition
    /// that never held a message needs no commit).
    pub fn at_end(&self) -> bool {
        self.settled
            && self
                .partitions
                .iter()
                .all(|p| p.committed.unwrap_or(0) == p.end)
    }

    /// Messages in the topic, over all partitions.
    pub fn messages(&self) -> i64 {
        self.partitions.iter().map(|p| p.end).sum()
    }

    /// The log ends, to notice messages arriving.
    pub fn ends(&self) -> Vec<i64> {
        self.partitions.iter().map(|p| p.end).collect()
    }
}

impl std::fmt::Display for GroupOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .partitions
            .iter()
            .map(|p| match p.committed {
                Some(c) => format!("p{} committed {c} of {}", p.partition, p.end),
                None => format!("p{} committed none of {}", p.partition, p.end),
            })
            .collect();
        let settled = if self.settled {
            ""
        } else {
            " (log ends still being read)"
        };
        write!(f, "[{}]{settled}", parts.join(", "))
    }
}

/// Reads a consumer group's committed offsets and the log ends of its
/// topic from Kafka, without joining the group.
///
/// The log ends are found by reading the topic to its end with a consumer
/// of its own (assigned, never committing, fetching on between reads),
/// because ListOffsets(latest), and so `fetch_watermarks`, cannot be
/// trusted on tansu: it answers with the base offset of some record batch
/// plus one, not the log end (5 messages in one batch: "end 1"). With S3
/// storage it can be the first batch the broker wrote since it last
/// started: 20,000 messages over 4 partitions, a restart, 20,000 more, and
/// every partition's "latest" is 5001 of 10000. The high watermark in its
/// fetch responses, which ends a read at `PartitionEOF`, is right.
///
/// A read therefore never starts behind what is known to exist: the
/// group's committed offsets are a floor of the log ends, so a partition
/// whose reader is behind its committed offset jumps there and reads only
/// what follows. Reading forward instead, from a stale "latest" after a
/// broker restart, fell behind for good on a loaded machine (about 3,700
/// messages of a partition in 240 s), so a test waited on a log end while
/// the consumer had long committed it.
pub struct GroupWatch {
    /// Unsubscribed, with the watched group's id: asks the coordinator.
    group: Arc<BaseConsumer<EofIsNews>>,
    tail: Arc<Mutex<Tail>>,
    topic: String,
}

/// The log-end reader and how far it got.
struct Tail {
    consumer: BaseConsumer<EofIsNews>,
    /// Per partition: one past the last offset read, and whether the broker
    /// reported the end since.
    parts: Vec<(i64, bool)>,
}

/// A consumer context for which reaching the end of a partition is the
/// answer sought, not an error to log (as rdkafka's default context does).
pub struct EofIsNews;

impl ClientContext for EofIsNews {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF);
        if !eof {
            eprintln!("offsets reader: {error}: {reason}");
        }
    }
}

impl ConsumerContext for EofIsNews {}

impl GroupWatch {
    pub fn new(brokers: &str, group: &str, topic: &str) -> GroupWatch {
        let client = |group: &str| {
            ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .set("enable.partition.eof", "true")
                .set("fetch.wait.max.ms", "10")
                .set("auto.offset.reset", "earliest")
                .create_with_context::<_, BaseConsumer<EofIsNews>>(EofIsNews)
                .expect("offsets reader")
        };
        let tail = Tail {
            consumer: client(&unique("log-end")),
            parts: Vec::new(),
        };
        GroupWatch {
            group: Arc::new(client(group)),
            tail: Arc::new(Mutex::new(tail)),
            topic: topic.to_string(),
        }
    }

    /// The offsets now, or why Kafka could not say (a broker restarting).
    pub async fn read(&self) -> Result<GroupOffsets, String> {
        let group = self.group.clone();
        let tail = self.tail.clone();
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || {
            let mut tail = tail.lock().map_err(|e| e.to_string())?;
            if tail.parts.is_empty() {
                tail.assign(&topic)?;
            }
            let floor = committed(&group, &topic, tail.parts.len())?;
            tail.catch_up(&topic, &floor)?;
            let settled = tail.read_to_end(Duration::from_secs(2))?;
            let committed = committed(&group, &topic, tail.parts.len())?;
            Ok(against(&tail.parts, &committed, settled))
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

impl Tail {
    /// Reads on until the queue is drained with every partition at its
    /// end (as the broker last reported), or `budget` passed; returns
    /// whether it got there. The consumer keeps fetching between calls (10
    /// ms long polls), so an end reported is at most that old. It is never
    /// sought back: a seek would discard what librdkafka prefetched.
    fn read_to_end(&mut self, budget: Duration) -> Result<bool, String> {
        let deadline = Instant::now() + budget;
        loop {
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    if let Some(p) = self.parts.get_mut(m.partition() as usize) {
                        *p = (m.offset() + 1, false);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(i))) => {
                    if let Some(p) = self.parts.get_mut(i as usize) {
                        p.1 = true;
                    }
                }
                Some(Err(e)) => return Err(format!("reading the log: {e}")),
                None if self.parts.iter().all(|p| p.1) => return Ok(true),
                None => {}
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    fn assign(&mut self, topic: &str) -> Result<(), String> {
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map_err(|e| format!("metadata: {e}"))?;
        let count = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map_or(0, |t| t.partitions().len());
        if count == 0 {
            return Err(format!("topic {topic} has no partitions yet"));
        }
        // Start at the last message ListOffsets knows of: the last one on
        // Kafka, the first of the last batch on tansu (see GroupWatch), at
        // or before the end either way. Reading the whole log from the start
        // instead fell behind for good on tansu with S3 storage after a
        // broker restart (about 4,000 of 10,000 messages per partition
        // after 240 s, beside other tests).
        self.parts = Vec::with_capacity(count);
        for p in 0..count as i32 {
            let (low, high) = self
                .consumer
                .fetch_watermarks(topic, p, Duration::from_secs(5))
                .map_err(|e| format!("watermarks of partition {p}: {e}"))?;
            self.parts.push(((high - 1).max(low).max(0), false));
        }
        self.consumer
            .assign(&self.positions(topic)?)
            .map_err(|e| format!("assign: {e}"))
    }

    /// Moves every partition read short of `floor` (the group's committed
    /// offsets: that many messages exist) to the last message below it,
    /// so the read that follows starts there. Assigning again drops what
    /// librdkafka prefetched, so it is done only when a partition is behind.
    fn catch_up(&mut self, topic: &str, floor: &[Option<i64>]) -> Result<(), String> {
        let mut behind = false;
        for (p, c) in self.parts.iter_mut().zip(floor) {
            if let Some(c) = *c
                && p.0 < c - 1
            {
                *p = (c - 1, false);
                behind = true;
            }
        }
        if behind {
            self.consumer
                .assign(&self.positions(topic)?)
                .map_err(|e| format!("assign: {e}"))?;
        }
        Ok(())
    }

    fn positions(&self, topic: &str) -> Result<TopicPartitionList, String> {
        let mut tpl = TopicPartitionList::new();
        for (p, (next, _)) in self.parts.iter().enumerate() {
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(*next))
                .map_err(|e| e.to_string())?;
        }
        Ok(tpl)
    }
}

/// The group's committed offset of each of the topic's `count` partitions.
fn committed(
    group: &BaseConsumer<EofIsNews>,
    topic: &str,
    count: usize,
) -> Result<Vec<Option<i64>>, String> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..count {
        tpl.add_partition(topic, p as i32);
    }
    let committed = group
        .committed_offsets(tpl, Duration::from_secs(5))
        .map_err(|e| format!("committed offsets: {e}"))?;
    Ok((0..count as i32)
        .map(
            |p| match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            },
        )
        .collect())
}

fn against(ends: &[(i64, bool)], committed: &[Option<i64>], settled: bool) -> GroupOffsets {
    let partitions = ends
        .iter()
        .zip(committed)
        .enumerate()
        .map(|(p, ((end, _), committed))| PartitionOffsets {
            partition: p as i32,
            committed: *committed,
            end: *end,
        })
        .collect();
    GroupOffsets {
        partitions,
        settled,
    }
}
