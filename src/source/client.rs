//! librdkafka client properties for every Kafka client rankflow creates —
//! the consumer, the dead-letter producer and `rankflow produce` — and the
//! start-up check that librdkafka accepts them. `[kafka.client]` (TLS, SASL,
//! timeouts...) passes through to all three, less what a producer cannot
//! take. A property librdkafka rejects is a permanent fault: the error
//! names the `[kafka.client]` key and masks secret values, and the caller
//! exits 2 instead of retrying.

use rdkafka::config::{ClientConfig, FromClientConfig};
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

use super::SourceError;
use crate::config::KafkaConfig;
use crate::config::redact;

/// Client properties rankflow sets itself; `[kafka.client]` may not change
/// them, because the offset handling depends on them.
pub const MANAGED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "enable.auto.offset.store",
    "enable.partition.eof",
];

/// librdkafka properties that only make sense for a consumer; producers get
/// every other `[kafka.client]` property (TLS, SASL, client id...).
const CONSUMER_ONLY: &[&str] = &[
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "partition.assignment.strategy",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "isolation.level",
    "check.crcs",
    "coordinator.query.interval.ms",
];
const CONSUMER_ONLY_PREFIXES: &[&str] = &["fetch.", "queued.", "consume."];

/// Which client a property was rejected for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Consumer,
    DeadLetterProducer,
    Producer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Consumer => "consumer",
            Role::DeadLetterProducer => "dead-letter producer",
            Role::Producer => "producer of `rankflow produce`",
        }
    }
}

/// librdkafka refused the client properties. Permanent: the same
/// properties fail the same way on every attempt.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("setting `[kafka.client] {key:?}`: librdkafka rejects it for the {}: {message}", role.name())]
    Property {
        role: Role,
        key: String,
        message: String,
    },
    #[error("setting `{setting}`: librdkafka rejects it for the {}: {message}", role.name())]
    Setting {
        role: Role,
        setting: &'static str,
        message: String,
    },
    #[error(
        "[kafka.client] sets {0:?}, which rankflow manages itself (use kafka.brokers / kafka.group_id)"
    )]
    Managed(String),
}

/// A client's properties in three layers: rankflow's defaults, then the
/// user's `[kafka.client]` (which override them), then what rankflow
/// forces. Kept apart so that a rejected configuration can be traced to the
/// user property that breaks it.
#[derive(Debug, Clone)]
pub struct Properties {
    role: Role,
    defaults: Vec<(String, String)>,
    user: Vec<(String, String)>,
    forced: Vec<(String, String)>,
    secrets: Vec<String>,
}

impl Properties {
    /// Layers for a client: `defaults`, then the user's properties, then
    /// `forced`.
    pub fn custom(
        role: Role,
        defaults: &[(&str, &str)],
        user: Vec<(String, String)>,
        forced: &[(&str, &str)],
    ) -> Properties {
        let secrets = user
            .iter()
            .filter(|(k, _)| redact::is_secret_property(k))
            .map(|(_, v)| v.clone())
            .collect();
        Properties {
            role,
            defaults: pairs(defaults.iter().copied()),
            user,
            forced: pairs(forced.iter().copied()),
            secrets,
        }
    }

    fn build(&self, user_props: usize) -> ClientConfig {
        let mut cc = ClientConfig::new();
        for (k, v) in &self.defaults {
            cc.set(k, v);
        }
        for (k, v) in self.user.iter().take(user_props) {
            cc.set(k, v);
        }
        for (k, v) in &self.forced {
            cc.set(k, v);
        }
        cc
    }

    /// The complete configuration.
    pub fn config(&self) -> ClientConfig {
        self.build(self.user.len())
    }

    /// Creates the client. librdkafka checks every property here without
    /// connecting (connections start in the background and end with the
    /// client). A rejection names the property: librdkafka says which when
    /// it refuses a value outright; when only the combination fails (e.g. a
    /// SASL mechanism it does not know), the user's properties are added one
    /// at a time until the client can no longer be created.
    pub fn create<C: FromClientConfig>(&self) -> Result<C, ClientError> {
        let error = match self.config().create::<C>() {
            Ok(client) => return Ok(client),
            Err(e) => e,
        };
        if let KafkaError::ClientConfig(_, desc, key, _) = &error {
            return Err(self.rejected(key, desc));
        }
        let message = error.to_string();
        for n in 1..=self.user.len() {
            if self.build(n).create::<C>().is_err() {
                let key = self.user[n - 1].0.clone();
                return Err(self.rejected(&key, &message));
            }
        }
        Err(ClientError::Setting {
            role: self.role,
            setting: "kafka.brokers",
            message: self.mask(&message),
        })
    }

    fn mask(&self, text: &str) -> String {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact::in_text(text, &secrets)
    }

    fn rejected(&self, key: &str, message: &str) -> ClientError {
        let message = self.mask(message);
        match self.user.iter().any(|(k, _)| k == key) {
            true => ClientError::Property {
                role: self.role,
                key: key.to_string(),
                message,
            },
            false => ClientError::Setting {
                role: self.role,
                setting: if key == "group.id" {
                    "kafka.group_id"
                } else {
                    "kafka.brokers"
                },
                message,
            },
        }
    }
}

fn check_managed(config: &KafkaConfig) -> Result<(), ClientError> {
    match config
        .client
        .keys()
        .find(|k| MANAGED_PROPERTIES.contains(&k.as_str()))
    {
        Some(key) => Err(ClientError::Managed(key.clone())),
        None => Ok(()),
    }
}

/// The consumer's properties: rankflow's defaults, `[kafka.client]` as
/// given, then the properties the offset handling depends on.
pub fn consumer_properties(config: &KafkaConfig) -> Result<Properties, ClientError> {
    check_managed(config)?;
    let user = config
        .client
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let defaults = [
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "1000"),
        ("auto.offset.reset", "earliest"),
        ("statistics.interval.ms", "1000"),
        // Bound librdkafka's own prefetch so memory stays bounded while
        // Redis is slow...
        ("queued.max.messages.kbytes", "16384"),
        // ...but when the prefetch is full, look again soon: the default
        // (1 s) leaves a fast consumer without messages for most of that second.
        ("fetch.queue.backoff.ms", "20"),
    ];
    let forced = [
        ("bootstrap.servers", config.brokers.as_str()),
        ("group.id", config.group_id.as_str()),
        ("enable.auto.offset.store", "false"),
        ("enable.partition.eof", "false"),
    ];
    Ok(Properties::custom(Role::Consumer, &defaults, user, &forced))
}

/// `[kafka.client]` less the consumer-only properties: what a producer
/// takes (TLS, SASL, client id...).
pub fn producer_user_properties(
    config: &KafkaConfig,
) -> Result<Vec<(String, String)>, ClientError> {
    check_managed(config)?;
    Ok(config
        .client
        .iter()
        .filter(|(k, _)| {
            !(CONSUMER_ONLY.contains(&k.as_str())
                || CONSUMER_ONLY_PREFIXES.iter().any(|p| k.starts_with(p)))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// A producer's properties: `defaults`, then [`producer_user_properties`],
/// then `bootstrap.servers` and `forced` (which the caller's delivery
/// guarantees depend on).
pub fn producer_properties(
    config: &KafkaConfig,
    role: Role,
    defaults: &[(&str, &str)],
    forced: &[(&str, &str)],
) -> Result<Properties, ClientError> {
    let user = producer_user_properties(config)?;
    let forced: Vec<(&str, &str)> = std::iter::once(("bootstrap.servers", config.brokers.as_str()))
        .chain(forced.iter().copied())
        .collect();
    Ok(Properties::custom(role, defaults, user, &forced))
}

fn pairs<'a>(it: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    it.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The consumer's librdkafka configuration.
pub fn client_config(config: &KafkaConfig) -> Result<ClientConfig, SourceError> {
    match consumer_properties(config) {
        Ok(p) => Ok(p.config()),
        Err(ClientError::Managed(key)) => Err(SourceError::Managed(key)),
        Err(e) => Err(SourceError::Config(KafkaError::ClientCreation(
            e.to_string(),
        ))),
    }
}

/// Creates (and drops) a consumer with these properties: the start-up and
/// `rankflow check` test that librdkafka accepts `[kafka.client]`.
pub fn check_consumer(config: &KafkaConfig) -> Result<(), ClientError> {
    consumer_properties(config)?
        .create::<BaseConsumer>()
        .map(drop)
}

/// Creates (and drops) a producer with these properties.
pub fn check_producer(properties: &Properties) -> Result<(), ClientError> {
    properties.create::<BaseProducer>().map(drop)
}
