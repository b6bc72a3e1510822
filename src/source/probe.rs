//! The start-up reachability check of the Kafka brokers. While rankflow
//! waits for Redis it does not join the consumer group yet (a member that
//! is not polled would be timed out of it), but an operator still needs to
//! know whether Kafka is reachable: this asks the brokers for metadata with
//! a throw-away client whose librdkafka logging is silenced, so each attempt
//! gives exactly one log line, written by the caller.

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use super::client::client_config;
use super::error::SourceError;
use crate::config::KafkaConfig;

/// How long one attempt waits for the brokers' metadata.
const METADATA_TIMEOUT: Duration = Duration::from_secs(3);

/// A client context that keeps librdkafka's own lines at debug level.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(target: "librdkafka", facility = fac, "{message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", error = %error, reason, "Probe client error.");
    }
}

impl ConsumerContext for Quiet {}

/// `Ok` when a broker answered a metadata request. Runs the blocking
/// librdkafka call on the blocking pool.
pub(crate) async fn reachable(config: &KafkaConfig) -> Result<(), SourceError> {
    let mut cc = client_config(config)?;
    cc.set("statistics.interval.ms", "0");
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer<Quiet> =
            cc.create_with_context(Quiet).map_err(SourceError::Config)?;
        client
            .fetch_metadata(None, METADATA_TIMEOUT)
            .map(|_| ())
            .map_err(SourceError::Unreachable)
    })
    .await
    // Only a panic or a runtime shutdown ends the blocking task early.
    .map_err(|_| SourceError::Unreachable(KafkaError::Canceled))?
}
