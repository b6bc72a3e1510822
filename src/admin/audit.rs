//! The audit trail of admin actions (docs/admin.md): every action that took
//! effect is logged with the actor (a token's name, or `cli`) and, with
//! `[admin] audit_topic`, published as one JSON message
//! `{"at", "actor", "action", "target", "detail"}` keyed by the target.
//! Published after the action took effect and awaited before it is
//! answered: an action answered 200 has been announced (at least once: a
//! repeated action is announced again).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::KafkaConfig;
use crate::source::client;
use crate::source::producer::{Producer, Record};

/// How long the delivery of one audit message may take before the action
/// answers 503 (it took effect; repeating it announces it again).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// One audit message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditEntry {
    /// When the action took effect (RFC 3339, UTC).
    pub at: String,
    /// The token's name, or `cli`.
    pub actor: String,
    /// `member.hide`, `member.restore`, `member.erase`.
    pub action: String,
    /// What it acted on: `member:<id>`, or for an erasure
    /// `member-hash:<keyed hash>` (never the id).
    pub target: String,
    /// The request's details (boards, reason) and what was done.
    pub detail: serde_json::Value,
}

/// Why an audit message could not be published.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The producer could not be created from `[kafka.client]`.
    #[error("cannot create the audit producer: {0}")]
    Client(String),
    /// The broker did not take the message in time.
    #[error("cannot publish the audit message to topic {topic}: {reason}")]
    Delivery {
        /// The audit topic.
        topic: String,
        /// librdkafka's reason.
        reason: String,
    },
}

/// Logs actions, and publishes them when a topic is configured.
#[derive(Clone)]
pub struct Audit {
    publish: Option<(Producer, String)>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("topic", &self.publish.as_ref().map(|(_, t)| t))
            .finish()
    }
}

impl Audit {
    /// Logging only.
    pub fn log_only() -> Audit {
        Audit { publish: None }
    }

    /// Logging, and publishing on `topic` when it is set.
    pub fn new(kafka: &KafkaConfig, topic: Option<&str>) -> Result<Audit, AuditError> {
        let Some(topic) = topic else {
            return Ok(Audit::log_only());
        };
        let producer = client::audit_properties(kafka)
            .and_then(|p| p.create_producer())
            .map_err(|e| AuditError::Client(e.to_string()))?;
        Ok(Audit {
            publish: Some((producer, topic.to_string())),
        })
    }

    /// Logs `entry` and publishes it (when a topic is configured), waiting
    /// for the broker's acknowledgement.
    pub async fn record(&self, entry: &AuditEntry) -> Result<(), AuditError> {
        tracing::info!(
            actor = %entry.actor,
            action = %entry.action,
            target = %entry.target,
            detail = %entry.detail,
            "Admin action done."
        );
        let Some((producer, topic)) = &self.publish else {
            return Ok(());
        };
        // Serializing a struct of strings and a JSON value cannot fail.
        let payload = serde_json::to_vec(entry).unwrap_or_default();
        let mut record = Record::to(topic, &payload);
        record.key = Some(entry.target.as_bytes());
        producer
            .send(record, DELIVERY_TIMEOUT)
            .await
            .map(|_| ())
            .map_err(|e| AuditError::Delivery {
                topic: topic.clone(),
                reason: e.to_string(),
            })
    }
}

/// `ms` as RFC 3339 UTC with milliseconds (an audit entry's `at`).
pub(crate) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}
