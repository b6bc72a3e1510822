//! Where a replay starts in a partition it has no position for yet: the
//! first message at or after `backfill_from`, by Kafka's offsets for times
//! (message timestamps). The answer is checked against the message found
//! there, since some brokers (tansu) answer every such query with the
//! partition's beginning; the rules skip events older than
//! `backfill_from` in any case, so a wrong answer costs time, not
//! exactness. What could not be done as asked is said in a note (logged,
//! and shown by `/v1/boards`): a broker that cannot answer, or a retention
//! that no longer holds the start of the history.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::board::keys;
use crate::config::KafkaConfig;
use crate::sink::store::Store;
use crate::source::TopicPartition;
use crate::source::client::{self, Role};

/// How long one offsets, watermark or fetch request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The starts found, and what could not be done as asked.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Partition → first offset to replay; a partition left out starts at
    /// its earliest retained message.
    pub(crate) offsets: HashMap<TopicPartition, i64>,
    pub(crate) notes: Vec<String>,
}

/// What the broker said of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Its answer to the offsets-for-times query; `None`: no message at or
    /// after the time.
    pub(crate) offset: Option<i64>,
    /// The earliest offset it retains.
    pub(crate) low: i64,
    /// The timestamp (ms) of the message at `offset`, if one was read.
    pub(crate) found_ms: Option<i64>,
}

/// The start of one partition's replay from `answer`, and a note if it
/// cannot be the one asked for.
pub(crate) fn judge(part: &str, answer: Answer, from_ms: i64) -> (Option<i64>, Option<String>) {
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map_or_else(|| ms.to_string(), |t| t.to_rfc3339())
    };
    match (answer.offset, answer.found_ms) {
        (Some(_), Some(ts)) if ts < from_ms => (
            None,
            Some(format!(
                "{part}: the broker answered offsets for times with a message from {}, before backfill_from; replaying from the earliest retained message and skipping the events before backfill_from",
                time(ts)
            )),
        ),
        (Some(o), Some(ts)) if o == answer.low && answer.low > 0 => (
            Some(o),
            Some(format!(
                "{part}: the oldest retained message (offset {o}) is from {}; what came before it is past the topic's retention and cannot be replayed, so the shadow lacks the events before it",
                time(ts)
            )),
        ),
        (Some(o), _) => (Some(o), None),
        (None, _) => (None, None),
    }
}

/// A shadow board's replay: where it starts in the partitions it has no
/// position for.
#[derive(Debug, Clone)]
pub(crate) struct Replay {
    pub(crate) kafka: KafkaConfig,
    pub(crate) board: String,
    pub(crate) from_ms: i64,
}

impl Replay {
    /// The start of each of `parts` that can be found; the others start at
    /// their earliest retained message. Notes are logged and kept for
    /// `/v1/boards` (`<prefix>:backfill:<board>` field `note`).
    pub(crate) async fn starts(
        &self,
        store: &Store,
        prefix: &str,
        parts: Vec<TopicPartition>,
    ) -> HashMap<TopicPartition, i64> {
        if parts.is_empty() {
            return HashMap::new();
        }
        let this = self.clone();
        let found = tokio::task::spawn_blocking(move || find(&this.kafka, &parts, this.from_ms))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        let found = found.unwrap_or_else(|e| Found {
            offsets: HashMap::new(),
            notes: vec![format!(
                "offsets for times could not be asked ({e}); replaying from the earliest retained messages and skipping the events before backfill_from"
            )],
        });
        for note in &found.notes {
            tracing::warn!(board = %self.board, note = %note, "The backfill cannot start exactly where asked.");
        }
        if let Some(note) = found.notes.first() {
            let _ = store
                .query::<i64>(
                    redis::cmd("HSET")
                        .arg(keys::backfill_key(prefix, &self.board))
                        .arg("note")
                        .arg(note),
                )
                .await;
        }
        tracing::info!(board = %self.board, starts = ?found.offsets, "The backfill starts where offsets for times point.");
        found.offsets
    }
}

/// Finds where the replay of each of `parts` starts (blocking).
pub(crate) fn find(
    kafka: &KafkaConfig,
    parts: &[TopicPartition],
    from_ms: i64,
) -> Result<Found, String> {
    let consumer: BaseConsumer<client::Reader> =
        client::reader_properties(kafka, Role::BackfillReader)
            .and_then(|p| p.create_reader())
            .map_err(|e| e.to_string())?;
    let mut asked = TopicPartitionList::new();
    for (t, p) in parts {
        asked
            .add_partition_offset(t, *p, Offset::Offset(from_ms))
            .map_err(|e| e.to_string())?;
    }
    let answered = consumer
        .offsets_for_times(asked, REQUEST_TIMEOUT)
        .map_err(|e| e.to_string())?;
    let mut answers: HashMap<TopicPartition, Answer> = HashMap::new();
    for e in answered.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) if o >= 0 => Some(o),
            _ => None,
        };
        let (low, _) = consumer
            .fetch_watermarks(e.topic(), e.partition(), REQUEST_TIMEOUT)
            .map_err(|e| e.to_string())?;
        answers.insert(
            (Arc::from(e.topic()), e.partition()),
            Answer {
                offset,
                low,
                found_ms: None,
            },
        );
    }
    read_first(&consumer, &mut answers)?;
    let mut found = Found::default();
    for (part, answer) in answers {
        let name = format!("{}/{}", part.0, part.1);
        let (start, note) = judge(&name, answer, from_ms);
        if let Some(o) = start {
            found.offsets.insert(part, o);
        }
        found.notes.extend(note);
    }
    found.notes.sort();
    Ok(found)
}

/// Reads the timestamp of the message at each answered offset.
fn read_first(
    consumer: &BaseConsumer<client::Reader>,
    answers: &mut HashMap<TopicPartition, Answer>,
) -> Result<(), String> {
    let mut at = TopicPartitionList::new();
    let mut pending = HashSet::new();
    for ((t, p), a) in answers.iter() {
        if let Some(o) = a.offset {
            at.add_partition_offset(t, *p, Offset::Offset(o))
                .map_err(|e| e.to_string())?;
            pending.insert((t.clone(), *p));
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    consumer.assign(&at).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    while !pending.is_empty() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let key: TopicPartition = (Arc::from(m.topic()), m.partition());
                if pending.remove(&key)
                    && let Some(a) = answers.get_mut(&key)
                {
                    a.found_ms = m.timestamp().to_millis();
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => pending.retain(|(_, q)| *q != p),
            Some(Err(e)) => return Err(e.to_string()),
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM: i64 = 1_000_000;

    fn answer(offset: Option<i64>, low: i64, found_ms: Option<i64>) -> Answer {
        Answer {
            offset,
            low,
            found_ms,
        }
    }

    #[test]
    fn answers_are_taken_checked_or_replaced_by_the_beginning() {
        // A hand-made table: (answer, start, a note containing).
        let table = [
            (answer(Some(40), 0, Some(FROM + 5)), Some(40), None),
            (answer(Some(0), 0, Some(FROM)), Some(0), None),
            // tansu: the beginning, whatever the time.
            (
                answer(Some(0), 0, Some(FROM - 1)),
                None,
                Some("before backfill_from"),
            ),
            // Retention took the start of the history.
            (
                answer(Some(70), 70, Some(FROM + 9)),
                Some(70),
                Some("past the topic's retention"),
            ),
            // Retention took some, but the answer is later than that.
            (answer(Some(90), 70, Some(FROM + 9)), Some(90), None),
            // Nothing at or after the time; or not read back.
            (answer(None, 0, None), None, None),
            (answer(Some(5), 0, None), Some(5), None),
        ];
        for (a, start, note) in table {
            let (s, n) = judge("t/0", a, FROM);
            assert_eq!(s, start, "{a:?}");
            match note {
                Some(text) => assert!(
                    n.as_deref()
                        .is_some_and(|n| n.contains(text) && n.starts_with("t/0: ")),
                    "{a:?}: {n:?}"
                ),
                None => assert_eq!(n, None, "{a:?}"),
            }
        }
    }
}
