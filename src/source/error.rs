//! The error type of the Kafka boundary, [`SourceError`], in a module of
//! its own so the client properties (`client.rs`), the reachability probe
//! (`probe.rs`) and the consumer (`mod.rs`) all name it without importing
//! each other.

use rdkafka::error::KafkaError;

/// Errors of the Kafka boundary.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// librdkafka refused the consumer's properties (`[kafka]` and
    /// `[kafka.client]`); a configuration mistake, not retried.
    #[error("invalid Kafka client configuration: {0}")]
    Config(KafkaError),
    /// The consumer could not subscribe to `kafka.topics`; not retried.
    #[error("cannot subscribe to {topics:?}: {source}")]
    Subscribe {
        /// The topics of `kafka.topics`, as the subscription named them.
        topics: Vec<String>,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// No broker of `kafka.brokers` answered the start-up probe's metadata
    /// request in time; retried until one does.
    #[error("no broker answered a metadata request: {0}")]
    Unreachable(KafkaError),
    /// `[kafka.client]` sets this property (the key), which rankflow sets
    /// itself (docs/configuration.md); not retried.
    #[error("[kafka.client] sets {0}, which rankflow manages itself")]
    Managed(String),
}

impl SourceError {
    /// Configuration mistakes are permanent; broker trouble is not.
    pub(crate) fn is_retriable(&self) -> bool {
        matches!(self, SourceError::Unreachable(_))
    }
}
