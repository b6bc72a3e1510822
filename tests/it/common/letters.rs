//! Reading a topic of letters (dead letters, quarantined events) back:
//! each message's headers and payload, until a condition holds and then
//! through a quiet spell, so that a letter sent twice shows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};

use super::{Broker, unique};

/// One message of a letters topic.
#[derive(Debug, Clone)]
pub struct Letter {
    pub headers: BTreeMap<String, String>,
    /// The message key (empty when there is none).
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Letter {
    /// The `rankflow-source` header (`topic/partition/offset`).
    pub fn source(&self) -> &str {
        self.headers
            .get("rankflow-source")
            .map_or("", String::as_str)
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// Reads `topic` from the start until `done` holds for what was read, then
/// for `quiet` more; panics after `timeout` with what it read.
pub async fn read_letters(
    broker: &Broker,
    topic: &str,
    timeout: Duration,
    quiet: Duration,
    done: impl Fn(&[Letter]) -> bool,
) -> Vec<Letter> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("letters"))
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut read = Vec::new();
    let deadline = Instant::now() + timeout;
    let mut complete_at: Option<Instant> = None;
    // `done` is asked when reading pauses and every 1,000 letters, not
    // after each one: it may walk everything read.
    let mut ask = true;
    while complete_at.is_none_or(|t| t.elapsed() < quiet) {
        if complete_at.is_none() && (ask || read.len() % 1000 == 0) && done(&read) {
            complete_at = Some(Instant::now());
        }
        ask = false;
        assert!(
            Instant::now() < deadline,
            "{topic}: the letters did not arrive in {timeout:?}; read {}: {:?}",
            read.len(),
            read.iter().map(Letter::source).collect::<Vec<_>>()
        );
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
        else {
            ask = true;
            continue;
        };
        let mut headers = BTreeMap::new();
        if let Some(h) = m.headers() {
            for i in 0..h.count() {
                let hd = h.get(i);
                headers.insert(
                    hd.key.to_string(),
                    String::from_utf8_lossy(hd.value.unwrap_or_default()).to_string(),
                );
            }
        }
        read.push(Letter {
            headers,
            key: m.key().unwrap_or_default().to_vec(),
            payload: m.payload().unwrap_or_default().to_vec(),
        });
    }
    read
}
