//! What the log says about Kafka trouble. librdkafka reports every failed
//! connection of every broker and coordinator link, and the consumer stream
//! repeats them: during an outage that is several lines a second. An
//! operator wants one line when Kafka becomes unreachable, one per retry
//! interval while it stays so, and one when it is back; other errors at most
//! once per interval per error code, with how many were held back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// At most one line per this interval and error kind; librdkafka's own
/// reconnect backoff tops out at 10 s (`reconnect.backoff.max.ms`).
const REPEAT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    /// Start of the current all-brokers-down outage.
    down_since: Option<Instant>,
    /// Failures reported during the current outage.
    failures: u64,
    /// Per error code: when its last line was written and how many
    /// reports were held back since.
    lines: HashMap<String, (Instant, u64)>,
}

/// The rate-limited reporter; shared by the client callbacks and the
/// consumer loop.
#[derive(Default)]
pub(crate) struct KafkaReports {
    state: Mutex<State>,
}

/// Whether an error says the brokers cannot be reached (rather than that
/// a request failed).
pub(crate) fn is_unreachable(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
        )
    )
}

fn all_down(error: &KafkaError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
}

impl KafkaReports {
    /// Records one error; writes a line only when one is due. Returns
    /// whether this error means no broker is reachable.
    pub(crate) fn error(&self, error: &KafkaError, reason: &str) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let now = Instant::now();
        let unreachable = is_unreachable(error);
        if all_down(error) && s.down_since.is_none() {
            s.down_since = Some(now);
            s.failures = 0;
            s.lines.clear();
            tracing::warn!(error = %error, reason, "Kafka is not reachable; librdkafka keeps retrying.");
            s.lines.insert("outage".into(), (now, 0));
            return true;
        }
        if let Some(since) = s.down_since {
            s.failures += 1;
            // During an outage every connectivity error is the same news.
            if unreachable {
                let failures = s.failures;
                let entry = s.lines.entry("outage".into()).or_insert((now, 0));
                if now.duration_since(entry.0) >= REPEAT {
                    *entry = (now, 0);
                    tracing::warn!(
                        down_for_s = since.elapsed().as_secs(),
                        failures,
                        error = %error,
                        reason,
                        "Kafka is still not reachable; retrying."
                    );
                } else {
                    entry.1 += 1;
                    tracing::debug!(error = %error, reason, "Kafka is still not reachable.");
                }
                return all_down(error);
            }
        }
        let key = format!("{:?}", error.rdkafka_error_code());
        match s.lines.get_mut(&key) {
            Some((last, held)) if now.duration_since(*last) < REPEAT => {
                *held += 1;
                tracing::debug!(error = %error, reason, "Kafka error (repeated).");
            }
            Some((last, held)) => {
                let repeated = *held;
                *last = now;
                *held = 0;
                tracing::warn!(error = %error, reason, repeated, "Kafka reported an error; librdkafka keeps retrying.");
            }
            None => {
                s.lines.insert(key, (now, 0));
                tracing::warn!(error = %error, reason, "Kafka reported an error; librdkafka keeps retrying.");
            }
        }
        all_down(error)
    }

    /// A broker is up again: ends the outage with one line.
    pub(crate) fn reachable(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if let Some(since) = s.down_since.take() {
            tracing::info!(
                down_for_s = since.elapsed().as_secs(),
                failures = s.failures,
                "Kafka is reachable again."
            );
            s.lines.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_reported_once_then_rate_limited_and_ended_once() {
        let r = KafkaReports::default();
        let down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        let transport = KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure);
        assert!(r.error(&down, "1/1 brokers are down"));
        assert!(!r.error(&transport, "connect failed"));
        assert!(r.error(&down, "1/1 brokers are down"));
        {
            let s = r.state.lock().expect("lock");
            assert!(s.down_since.is_some());
            assert_eq!(s.failures, 2);
            // Both repeats were held back, not written.
            assert_eq!(s.lines["outage"].1, 2);
        }
        r.reachable();
        assert!(r.state.lock().expect("lock").down_since.is_none());
    }

    #[test]
    fn other_errors_are_written_once_per_interval_per_code() {
        let r = KafkaReports::default();
        let e = KafkaError::Global(RDKafkaErrorCode::UnknownTopicOrPartition);
        for _ in 0..5 {
            assert!(!r.error(&e, "no such topic"));
        }
        let s = r.state.lock().expect("lock");
        assert!(s.down_since.is_none());
        assert_eq!(s.lines.values().map(|(_, held)| held).sum::<u64>(), 4);
    }
}
