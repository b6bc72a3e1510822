//! The dead-letter and quarantine topics (docs/guarantees.md,
//! docs/checks.md): messages that are not valid events, or that make a rule
//! fail, are copied to the dead-letter topic with headers `rankflow-error`
//! (reason code), `rankflow-detail` (human message) and `rankflow-source`
//! (`topic/partition/offset`), then skipped; events that fail a check are
//! copied unchanged to the quarantine topic, with `rankflow-check` (the
//! check's name) instead of `rankflow-error`. A batch is acknowledged — and
//! its offsets committed — only after its letters were delivered, so a
//! topic that cannot be written stops the partition rather than losing a
//! message silently.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};

use crate::config::KafkaConfig;
use crate::source::client;
use crate::source::producer::{Producer, Record};
use crate::telemetry::DlqReason;
use crate::telemetry::events::DeadLettered;

/// A message that could not be applied and must reach the dead-letter topic.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetter {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Vec<u8>,
    pub(crate) why: Verdict,
    pub(crate) detail: String,
}

/// Why a message is not applied, which says where its letter goes.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Not a valid event, or a rule failed on it: the dead-letter topic.
    Invalid(DlqReason),
    /// It failed the named check: the quarantine topic.
    Quarantined(Arc<str>),
}

/// Longest `rankflow-detail` header, in bytes.
const MAX_DETAIL_BYTES: usize = 1024;

/// Why dead letters could not be written: at start-up a configuration
/// mistake; while running, a batch whose dead letters are not delivered is
/// not acknowledged, so its partition stops rather than lose a message.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// librdkafka refused the producer's properties (`[kafka]` and
    /// `[kafka.client]`) when [`DeadLetters::new`] created it.
    #[error("cannot create the dead-letter producer: {0}")]
    Client(KafkaError),
    /// A dead letter was not delivered: the producer's queue stayed full, or
    /// the broker refused or did not confirm the write.
    #[error("could not write to the topic {topic}: {source}")]
    Delivery {
        /// `kafka.dead_letter_topic`, the topic written to.
        topic: String,
        /// librdkafka's reason (the first one, when several letters failed).
        source: KafkaError,
    },
}

/// How long a letter waits for room in librdkafka's full local queue.
const FULL_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// Writes dead letters and quarantined events; cheap to clone.
#[derive(Clone)]
pub struct DeadLetters {
    producer: Producer,
    /// `kafka.dead_letter_topic`: without it invalid messages are only
    /// counted and logged.
    topic: Option<String>,
    /// `kafka.quarantine_topic` (required with checks).
    quarantine: Option<String>,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("topic", &self.topic)
            .field("quarantine", &self.quarantine)
            .finish()
    }
}

impl DeadLetters {
    /// `None` when neither a dead-letter nor a quarantine topic is
    /// configured.
    pub fn new(config: &KafkaConfig) -> Result<Option<DeadLetters>, DeadLetterError> {
        let topic = config.dead_letter_topic.clone();
        let quarantine = config.quarantine_topic.clone();
        if topic.is_none() && quarantine.is_none() {
            return Ok(None);
        }
        // Every `[kafka.client]` property a producer takes (TLS, SASL,
        // client id...) passes through; a rejected one names its key.
        let producer = client::dead_letter_properties(config)
            .and_then(|p| p.create_producer())
            .map_err(|e| DeadLetterError::Client(KafkaError::ClientCreation(e.to_string())))?;
        Ok(Some(DeadLetters {
            producer,
            topic,
            quarantine,
        }))
    }

    /// Sends the dead letters not yet delivered and waits for every
    /// delivery; marks each delivered one, so a retry sends only the rest.
    pub(crate) async fn deliver(
        &self,
        letters: &[DeadLetter],
        delivered: &mut [bool],
    ) -> Result<(), DeadLetterError> {
        let mut pending = Vec::new();
        for (i, d) in letters.iter().enumerate() {
            let (topic, header, value) = match &d.why {
                Verdict::Invalid(reason) => (&self.topic, "rankflow-error", reason.code()),
                Verdict::Quarantined(check) => (&self.quarantine, "rankflow-check", &**check),
            };
            let Some(topic) = topic else {
                // No topic for it: counted and logged only.
                delivered[i] = true;
                continue;
            };
            if delivered[i] {
                continue;
            }
            let headers = headers(d, header, value);
            let mut record = Record::to(topic, &d.payload);
            record.key = d.key.as_deref();
            record.headers = Some(headers);
            // Enqueue now (all of them before awaiting any, so librdkafka
            // batches them); a full local queue is waited out briefly.
            match self
                .producer
                .enqueue_waiting(&record, FULL_QUEUE_WAIT)
                .await
            {
                Ok(delivery) => pending.push((i, delivery)),
                Err(e) => {
                    return Err(DeadLetterError::Delivery {
                        topic: topic.clone(),
                        source: e,
                    });
                }
            }
        }
        let mut first_error = None;
        let mut written = std::collections::BTreeMap::<DlqReason, u64>::new();
        for (i, delivery) in pending {
            match delivery.written().await {
                Ok(_) => {
                    delivered[i] = true;
                    if let Verdict::Invalid(reason) = letters[i].why {
                        *written.entry(reason).or_default() += 1;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert((i, e));
                }
            }
        }
        for (reason, count) in written {
            DeadLettered { reason, count }.emit();
        }
        match first_error {
            None => Ok(()),
            Some((i, source)) => Err(DeadLetterError::Delivery {
                topic: self.topic_of(&letters[i].why).to_string(),
                source,
            }),
        }
    }

    fn topic_of(&self, why: &Verdict) -> &str {
        let topic = match why {
            Verdict::Invalid(_) => &self.topic,
            Verdict::Quarantined(_) => &self.quarantine,
        };
        topic.as_deref().unwrap_or("")
    }
}

/// A letter's headers: why (`header`: `value`), the detail and the source.
fn headers(d: &DeadLetter, header: &str, value: &str) -> OwnedHeaders {
    let source = format!("{}/{}/{}", d.topic, d.partition, d.offset);
    let detail = truncate(&d.detail, MAX_DETAIL_BYTES);
    OwnedHeaders::new()
        .insert(Header {
            key: header,
            value: Some(value),
        })
        .insert(Header {
            key: "rankflow-detail",
            value: Some(detail),
        })
        .insert(Header {
            key: "rankflow-source",
            value: Some(&source),
        })
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}
