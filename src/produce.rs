//! `rankflow produce`: a synthetic event generator for demos and benchmarks.
//! Members, receivers and games are drawn from Zipf distributions, as real
//! traffic is skewed (a few stars get most gifts); each message is keyed by
//! its sender or user so one user's events stay in order on one partition.
//! `[kafka.client]` (TLS, SASL...) applies here as it does to the consumer.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use crate::clock::SharedClock;
use crate::config::KafkaConfig;
use crate::event::EventType;
use crate::source::client::{self, ClientError, Properties, Role};

/// What to generate.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bootstrap servers (`kafka.brokers`).
    pub brokers: String,
    /// The topic written to (`--topic`; the first of `kafka.topics` by default).
    pub topic: String,
    /// Events to send; 0 = until stopped.
    pub events: u64,
    /// Events per second; 0 = as fast as the broker takes them.
    pub rate: u64,
    /// Distinct senders / players.
    pub members: u64,
    /// Distinct gift receivers (stars).
    pub receivers: u64,
    /// Distinct games.
    pub games: u64,
    /// The event types to send, each event's type drawn uniformly from them;
    /// not empty.
    pub types: Vec<EventType>,
    /// Zipf exponent of every id distribution.
    pub skew: f64,
    /// What each message is keyed by, so what spreads it over partitions.
    pub key: Key,
    /// Seeds the random draws, and starts every `event_id` (`<seed>-<n>`):
    /// one seed gives the same events again, distinct seeds distinct ids.
    pub seed: u64,
    /// Extra librdkafka properties (`[kafka.client]` less the consumer-only
    /// ones, see [`client::producer_user_properties`]).
    pub client: Vec<(String, String)>,
}

/// What a message's key is. rankflow's results do not depend on it (sums
/// commute; `last`, ties and rate checks go by event time); it decides only
/// how the events spread over partitions, so how evenly a fleet shares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Key {
    /// The sender or user: one user's events stay in order on one
    /// partition, and a user who sends a large share of the events makes
    /// that partition as large.
    #[default]
    User,
    /// The event's `event_id`: partitions even whatever the users do.
    Event,
}

/// Why `rankflow produce` could not start or stopped before sending them all.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The options cannot generate events: no event type, or a skew the
    /// Zipf distribution refuses (the message names the distribution).
    #[error("invalid producer option: {0}")]
    Options(String),
    /// A permanent fault: librdkafka refused the properties.
    #[error("cannot create the Kafka producer: {0}")]
    Client(#[from] ClientError),
    /// The producer refused an event (other than a full local queue, which
    /// is waited out), or the final flush (up to 60 s) failed.
    #[error("Kafka did not accept the events: {0}")]
    Send(KafkaError),
}

const GIFTS: [(&str, f64, u32); 5] = [
    ("flower", 1.0, 60),
    ("heart", 2.0, 20),
    ("rose", 5.0, 12),
    ("rocket", 100.0, 6),
    ("castle", 1000.0, 2),
];

/// Generates events; one per call.
pub struct Generator {
    rng: SmallRng,
    members: Zipf<f64>,
    receivers: Zipf<f64>,
    games: Zipf<f64>,
    types: Vec<EventType>,
    key: Key,
    seed: u64,
    n: u64,
}

impl Generator {
    /// A generator of `o.types` over `o`'s id distributions, seeded with
    /// `o.seed`; [`ProduceError::Options`] when there is no type or the
    /// skew is refused. Used by [`run`] and the benchmarks.
    pub fn new(o: &Options) -> Result<Generator, ProduceError> {
        let zipf = |n: u64, what: &str| {
            Zipf::new(n.max(1) as f64, o.skew)
                .map_err(|e| ProduceError::Options(format!("{what}: {e}")))
        };
        if o.types.is_empty() {
            return Err(ProduceError::Options("no event types to produce".into()));
        }
        Ok(Generator {
            rng: SmallRng::seed_from_u64(o.seed),
            members: zipf(o.members, "members")?,
            receivers: zipf(o.receivers, "receivers")?,
            games: zipf(o.games, "games")?,
            types: o.types.clone(),
            key: o.key,
            seed: o.seed,
            n: 0,
        })
    }

    /// The next event as (key, JSON payload).
    pub fn next(&mut self, ts: i64) -> (String, String) {
        self.n += 1;
        let kind = self.types[self.rng.random_range(0..self.types.len())];
        let event_id = format!("{}-{}", self.seed, self.n);
        let user = format!("u{}", self.members.sample(&mut self.rng) as u64);
        let game = format!("g{}", self.games.sample(&mut self.rng) as u64);
        let value = match kind {
            EventType::Gift => {
                let receiver = self.receivers.sample(&mut self.rng) as u64;
                let total: u32 = GIFTS.iter().map(|g| g.2).sum();
                let mut pick = self.rng.random_range(0..total);
                let mut gift = GIFTS[0];
                for g in GIFTS {
                    if pick < g.2 {
                        gift = g;
                        break;
                    }
                    pick -= g.2;
                }
                let count = if self.rng.random_range(0..10) == 0 {
                    self.rng.random_range(2..100)
                } else {
                    1
                };
                serde_json::json!({
                    "type": "gift", "event_id": &event_id, "ts": ts,
                    "sender_id": &user, "receiver_id": format!("s{receiver}"),
                    "gift_id": gift.0, "count": count, "value": gift.1,
                    "room_id": format!("room{}", receiver % 50),
                })
            }
            EventType::Score => {
                let points: i64 = self.rng.random_range(-50..1000);
                serde_json::json!({
                    "type": "score", "event_id": &event_id, "ts": ts,
                    "user_id": &user, "game_id": game, "points": points,
                    "duration_ms": self.rng.random_range(10_000..600_000),
                    "revives": self.rng.random_range(0..4),
                    "cleared": self.rng.random_range(0..3) == 0,
                })
            }
            EventType::Play => serde_json::json!({
                "type": "play", "event_id": &event_id, "ts": ts,
                "user_id": &user, "game_id": game,
                "duration_ms": self.rng.random_range(1_000..3_600_000),
            }),
        };
        let key = match self.key {
            Key::User => user,
            Key::Event => event_id,
        };
        (key, value.to_string())
    }
}

/// Throughput-minded producer defaults; `[kafka.client]` may override them.
const DEFAULTS: &[(&str, &str)] = &[
    ("linger.ms", "20"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.messages", "500000"),
    ("queue.buffering.max.kbytes", "262144"),
];

/// The producer's properties: the defaults, then `client`, then the brokers.
pub(crate) fn properties(brokers: &str, client: Vec<(String, String)>) -> Properties {
    Properties::custom(
        Role::Producer,
        DEFAULTS,
        client,
        &[("bootstrap.servers", brokers)],
    )
}

/// Whether librdkafka accepts the producer `rankflow produce` would create
/// from this config (used by `check` and before producing).
pub fn check(config: &KafkaConfig) -> Result<(), ClientError> {
    let user = client::producer_user_properties(config)?;
    client::check_producer(&properties(&config.brokers, user))
}

/// Sends events until `opts.events` are out (or forever when 0, until
/// `stop` returns true). Blocking: call from a blocking thread.
pub fn run(
    opts: &Options,
    clock: SharedClock,
    stop: &dyn Fn() -> bool,
) -> Result<u64, ProduceError> {
    let producer: ThreadedProducer<DefaultProducerContext> =
        properties(&opts.brokers, opts.client.clone()).create()?;
    let mut generator = Generator::new(opts)?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut sent = 0u64;
    while (opts.events == 0 || sent < opts.events) && !stop() {
        if opts.rate > 0 {
            let due = started.elapsed().as_secs_f64() * opts.rate as f64;
            if (sent as f64) >= due {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        }
        let (key, payload) = generator.next(clock.now_ms());
        let mut record = BaseRecord::to(&opts.topic).key(&key).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => return Err(ProduceError::Send(e)),
            }
        }
        sent += 1;
        if last_report.elapsed() >= Duration::from_secs(5) {
            tracing::info!(
                sent,
                rate = (sent as f64 / started.elapsed().as_secs_f64()) as u64,
                "Producing."
            );
            last_report = Instant::now();
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(ProduceError::Send)?;
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(key: Key) -> Options {
        Options {
            brokers: String::new(),
            topic: String::new(),
            events: 0,
            rate: 0,
            members: 10_000,
            receivers: 100,
            games: 20,
            types: vec![EventType::Gift, EventType::Score, EventType::Play],
            skew: 1.1,
            key,
            seed: 7,
            client: Vec::new(),
        }
    }

    /// Each message's key read against its payload, and the largest share
    /// one key takes of 20,000 messages.
    fn keys(key: Key, field: fn(&serde_json::Value) -> String) -> f64 {
        let mut g = Generator::new(&options(key)).unwrap();
        let mut counts = std::collections::HashMap::new();
        let n = 20_000;
        for _ in 0..n {
            let (k, payload) = g.next(1_700_000_000_000);
            let v: serde_json::Value = serde_json::from_str(&payload).unwrap();
            assert_eq!(k, field(&v), "{payload}");
            *counts.entry(k).or_insert(0u32) += 1;
        }
        f64::from(counts.into_values().max().unwrap()) / f64::from(n)
    }

    #[test]
    fn a_user_key_is_the_sender_or_user_and_the_busiest_takes_a_large_share() {
        let user = |v: &serde_json::Value| {
            v.get("sender_id")
                .or_else(|| v.get("user_id"))
                .and_then(|u| u.as_str())
                .unwrap()
                .to_string()
        };
        // Zipf(10,000, 1.1): the first member draws about 1/7 of the events.
        let top = keys(Key::User, user);
        assert!((0.10..0.20).contains(&top), "busiest user's share {top}");
    }

    #[test]
    fn an_event_key_is_the_event_id_and_every_key_is_distinct() {
        let id = |v: &serde_json::Value| v["event_id"].as_str().unwrap().to_string();
        assert_eq!(keys(Key::Event, id), 1.0 / 20_000.0);
    }
}
