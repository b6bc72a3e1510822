//! The error type of the Kafka boundary, [`SourceError`], in a module of
//! its own so the client properties (`client.rs`), the reachability probe
//! (`probe.rs`) and the consumer (`mod.rs`) all name it without importing
//! each other.

use rdkafka::error::KafkaError;

/// Errors of the Kafka boundary.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("invalid Kafka client configuration: {0}")]
    Config(KafkaError),
    #[error("cannot subscribe to {topics:?}: {source}")]
    Subscribe {
        topics: Vec<String>,
        source: KafkaError,
    },
    #[error("Kafka consumer failed: {0}")]
    Consume(KafkaError),
    #[error("no broker answered a metadata request: {0}")]
    Unreachable(KafkaError),
    #[error("[kafka.client] sets {0}, which rankflow manages itself")]
    Managed(String),
}

impl SourceError {
    /// Configuration mistakes are permanent; broker trouble is not.
    pub(crate) fn is_retriable(&self) -> bool {
        matches!(self, SourceError::Consume(_) | SourceError::Unreachable(_))
    }
}
