//! librdkafka client properties for every Kafka client rankflow creates —
//! the consumer, the dead-letter producer and `rankflow produce` — and the
//! start-up check that librdkafka accepts them. `[kafka.client]` (TLS, SASL,
//! timeouts...) passes through to all three, less what a producer cannot
//! take. A property librdkafka rejects is a permanent fault: the error
//! names the `[kafka.client]` key and masks secret values, and the caller
//! exits 2 instead of retrying.

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use super::error::SourceError;
use super::producer::{Deliveries, Producer};
use crate::config::KafkaConfig;
use crate::config::redact;

/// Client properties rankflow sets itself; `[kafka.client]` may not change
/// them, because the offset handling depends on them.
pub(crate) const MANAGED_PROPERTIES: &[&str] = &[
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
    /// The archiver's producer of period-closed messages.
    ClosedProducer,
    /// The admin API's producer of audit messages.
    AuditProducer,
    /// The reader of the audit topic that rebuilds a lost moderation record.
    AuditReader,
    /// `rankflow release`'s reader of the quarantine and events topics.
    ReleaseReader,
    /// A shadow board's backfill reading where its replay starts and what
    /// the checks quarantined.
    BackfillReader,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Consumer => "consumer",
            Role::DeadLetterProducer => "dead-letter producer",
            Role::Producer => "producer of `rankflow produce`",
            Role::ClosedProducer => "period-closed producer ([archive] closed_topic)",
            Role::AuditProducer => "audit producer ([admin] audit_topic)",
            Role::AuditReader => "audit reader ([admin] audit_topic)",
            Role::ReleaseReader => "reader of `rankflow release`",
            Role::BackfillReader => {
                "backfill's reader of offsets for times and the quarantine topic"
            }
        }
    }

    /// The name of a producer's polling thread (at most 15 bytes: what
    /// Linux keeps of a thread's name).
    fn thread(self) -> &'static str {
        match self {
            Role::DeadLetterProducer => "rf-dead-letters",
            Role::ClosedProducer => "rf-closed",
            Role::AuditProducer => "rf-audit",
            _ => "rf-producer",
        }
    }
}

/// librdkafka refused the client properties. Permanent: the same
/// properties fail the same way on every attempt.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("setting `[kafka.client] {key:?}`{}: librdkafka rejects it for the {}: {message}", with_keys(with), role.name())]
    Property {
        role: Role,
        key: String,
        /// Other properties the failure needs (a combination is refused).
        with: Vec<String>,
        message: String,
    },
    #[error("setting `{setting}`: librdkafka rejects it for the {}: {message}", role.name())]
    Setting {
        role: Role,
        setting: &'static str,
        message: String,
    },
    #[error("cannot start the polling thread of the {}: {message}", role.name())]
    Thread { role: Role, message: String },
    #[error(
        "[kafka.client] sets {0:?}, which rankflow manages itself (use kafka.brokers / kafka.group_id)"
    )]
    Managed(String),
}

/// librdkafka's reason, without rdkafka's "Client creation error:" prefix.
fn describe(error: &KafkaError) -> String {
    match error {
        KafkaError::ClientCreation(m) => m.clone(),
        e => e.to_string(),
    }
}

fn with_keys(with: &[String]) -> String {
    if with.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = with.iter().map(|k| format!("{k:?}")).collect();
    format!(" (together with {})", quoted.join(", "))
}

/// A client's properties in three layers: rankflow's defaults, then the
/// user's `[kafka.client]` (which override them), then what rankflow
/// forces. Kept apart so that a rejected configuration can be traced to the
/// user property that breaks it.
#[derive(Clone)]
pub(crate) struct Properties {
    role: Role,
    defaults: Vec<(String, String)>,
    user: Vec<(String, String)>,
    forced: Vec<(String, String)>,
    secrets: Vec<String>,
}

/// Debug without secret values: properties end up in logs.
impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user: Vec<(&str, &str)> = self
            .user
            .iter()
            .map(|(k, v)| (k.as_str(), redact::property(k, v)))
            .collect();
        f.debug_struct("Properties")
            .field("role", &self.role)
            .field("defaults", &self.defaults)
            .field("user", &user)
            .field("forced", &self.forced)
            .finish()
    }
}

impl Properties {
    /// Layers for a client: `defaults`, then the user's properties, then
    /// `forced`.
    pub(crate) fn custom(
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
    /// waiting for a broker (connections start in the background and end
    /// with the client). A rejection names the property: see [`Self::check`].
    pub(crate) fn create<C: FromClientConfig>(&self) -> Result<C, ClientError> {
        self.explained(self.config().create::<C>())
    }

    /// Creates a reader ([`reader_properties`]), as [`Self::create`] does.
    pub(crate) fn create_reader(&self) -> Result<BaseConsumer<Reader>, ClientError> {
        self.explained(self.config().create_with_context(Reader))
    }

    /// Creates a producer whose deliveries are waited for, with its polling
    /// thread (named for the role).
    pub(crate) fn create_producer(&self) -> Result<Producer, ClientError> {
        let base = self.explained(self.config().create_with_context(Deliveries))?;
        Producer::start(base, self.role.thread()).map_err(|e| ClientError::Thread {
            role: self.role,
            message: e.to_string(),
        })
    }

    /// A created client, or why librdkafka refused these properties.
    fn explained<C>(&self, created: Result<C, KafkaError>) -> Result<C, ClientError> {
        created.map_err(|e| self.check().err().unwrap_or_else(|| self.unexplained(&e)))
    }

    /// Creates and drops a client of this role with librdkafka's own log
    /// lines silenced, and on failure names the properties at fault.
    /// librdkafka says which when it refuses a value outright; when only a
    /// combination fails (a SASL mechanism it does not know, idempotence
    /// with `acks=1`), the user's properties are added one at a time until
    /// the client can no longer be created, and each earlier one that the
    /// failure needs is named with it.
    pub fn check(&self) -> Result<(), ClientError> {
        let error = match self.try_create(self.user.len()) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if let KafkaError::ClientConfig(_, desc, key, _) = &error {
            return Err(self.rejected(&[key.as_str()], desc));
        }
        let message = describe(&error);
        let Some(n) = (1..=self.user.len()).find(|&n| self.try_create(n).is_err()) else {
            return Err(self.unexplained(&error));
        };
        let mut keys = vec![self.user[n - 1].0.as_str()];
        for j in 0..n - 1 {
            if self.try_create_without(n, j).is_ok() {
                keys.push(self.user[j].0.as_str());
            }
        }
        // A key whose value librdkafka quotes is the likeliest culprit (a
        // SASL mechanism it does not know fails only once a SASL protocol
        // is set, so the protocol is where the failure shows up): name it
        // first.
        let quoted: Vec<&str> = self.user[..n]
            .iter()
            .filter(|(k, v)| {
                !redact::is_secret_property(k) && v.len() > 1 && message.contains(v.as_str())
            })
            .map(|(k, _)| k.as_str())
            .collect();
        keys.retain(|k| !quoted.contains(k));
        let keys: Vec<&str> = quoted.into_iter().chain(keys).collect();
        Err(self.rejected(&keys, &message))
    }

    fn try_create(&self, user_props: usize) -> Result<(), KafkaError> {
        self.create_quiet(self.build(user_props))
    }

    fn try_create_without(&self, user_props: usize, skip: usize) -> Result<(), KafkaError> {
        let mut p = self.clone();
        p.user = self
            .user
            .iter()
            .take(user_props)
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, kv)| kv.clone())
            .collect();
        p.create_quiet(p.config())
    }

    fn create_quiet(&self, cc: ClientConfig) -> Result<(), KafkaError> {
        match self.role {
            Role::Consumer | Role::AuditReader | Role::ReleaseReader | Role::BackfillReader => cc
                .create_with_context::<_, BaseConsumer<Quiet>>(Quiet)
                .map(drop),
            Role::DeadLetterProducer
            | Role::Producer
            | Role::ClosedProducer
            | Role::AuditProducer => cc
                .create_with_context::<_, BaseProducer<Quiet>>(Quiet)
                .map(drop),
        }
    }

    fn unexplained(&self, error: &KafkaError) -> ClientError {
        ClientError::Setting {
            role: self.role,
            setting: "kafka.brokers",
            message: self.mask(&describe(error)),
        }
    }

    fn mask(&self, text: &str) -> String {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        redact::in_text(text, &secrets)
    }

    fn rejected(&self, keys: &[&str], message: &str) -> ClientError {
        let message = self.mask(message);
        let user: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| self.user.iter().any(|(uk, _)| uk == k))
            .collect();
        match (user.first(), keys.first()) {
            (Some(first), _) => ClientError::Property {
                role: self.role,
                key: first.to_string(),
                with: user[1..].iter().map(|k| k.to_string()).collect(),
                message,
            },
            (None, key) => ClientError::Setting {
                role: self.role,
                setting: if key == Some(&"group.id") {
                    "kafka.group_id"
                } else {
                    "kafka.brokers"
                },
                message,
            },
        }
    }
}

/// The context of a reader ([`reader_properties`]). librdkafka reports a
/// partition's end as an error event, and rdkafka hands every error event
/// to the context as well as to the poller: with the default context each
/// end a reader reached was an error line in the log (one per partition of
/// the quarantine topic before each batch of a shadow board's backfill).
/// The reader expects the end, so only other errors are logged as errors.
pub(crate) struct Reader;

/// Whether `error` is librdkafka saying it reached a partition's end.
fn is_partition_end(error: &KafkaError) -> bool {
    matches!(error, KafkaError::PartitionEOF(_))
        || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
}

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        if is_partition_end(&error) {
            tracing::trace!(target: "librdkafka", reason, "A reader reached a partition's end.");
        } else {
            tracing::error!(target: "librdkafka", error = %error, reason, "A Kafka reader failed.");
        }
    }
}

impl ConsumerContext for Reader {}

/// A client context that turns librdkafka's own log lines into debug
/// lines: a check creates clients that are dropped at once, and their
/// connection attempts and configuration warnings would only add noise to
/// the one error line the check prints.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(target: "librdkafka", facility = fac, "{message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", error = %error, reason, "Check client error.");
    }
}

impl ConsumerContext for Quiet {}

impl ProducerContext for Quiet {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
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
pub(crate) fn consumer_properties(config: &KafkaConfig) -> Result<Properties, ClientError> {
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
pub(crate) fn producer_user_properties(
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
pub(crate) fn producer_properties(
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

/// The dead-letter producer's properties: `[kafka.client]` for producers,
/// then what its guarantees depend on.
pub(crate) fn dead_letter_properties(config: &KafkaConfig) -> Result<Properties, ClientError> {
    producer_properties(
        config,
        Role::DeadLetterProducer,
        &[],
        // A dead letter must not be written twice by a retry inside
        // librdkafka, nor lost: idempotence gives both.
        &[
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "10000"),
            ("linger.ms", "5"),
        ],
    )
}

/// The audit producer's properties (`[admin] audit_topic`): `[kafka.client]`
/// for producers, then idempotence (a retry inside librdkafka neither
/// duplicates nor loses a message).
pub(crate) fn audit_properties(config: &KafkaConfig) -> Result<Properties, ClientError> {
    producer_properties(
        config,
        Role::AuditProducer,
        &[],
        &[
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "10000"),
        ],
    )
}

/// A reader of a whole topic by assignment (`super::scan`): the
/// consumer's connection settings, a group id of its own for `role`, and no
/// commits (it never joins the group).
pub(crate) fn reader_properties(
    config: &KafkaConfig,
    role: Role,
) -> Result<Properties, ClientError> {
    let mut p = consumer_properties(config)?;
    p.role = role;
    let suffix = match role {
        Role::ReleaseReader => "release-reader",
        Role::BackfillReader => "backfill-reader",
        _ => "audit-reader",
    };
    let group = format!("{}-{suffix}", config.group_id);
    p.forced.retain(|(k, _)| k != "group.id");
    p.forced.push(("group.id".to_string(), group));
    p.forced
        .push(("enable.auto.commit".to_string(), "false".to_string()));
    p.forced
        .push(("enable.partition.eof".to_string(), "true".to_string()));
    // A reader reads to the end and stops: the end shows as a fetch that
    // brings nothing, which the broker holds back up to this long waiting
    // for new messages (librdkafka's default is 500 ms). A shadow board's
    // backfill reads the quarantine topic before each of its batches, which
    // seldom has anything new: at 500 ms that wait paced the backfill.
    p.forced.push((
        "fetch.wait.max.ms".to_string(),
        READER_FETCH_WAIT_MS.to_string(),
    ));
    Ok(p)
}

/// How long a reader's fetch waits at the end of a partition (ms).
const READER_FETCH_WAIT_MS: u32 = 10;

/// Checks every client `rankflow run` creates — the consumer and, with a
/// dead-letter topic, its producer — with throw-away quiet clients.
pub(crate) fn check_run_clients(config: &KafkaConfig) -> Result<(), ClientError> {
    consumer_properties(config)?.check()?;
    if config.dead_letter_topic.is_some() {
        dead_letter_properties(config)?.check()?;
    }
    Ok(())
}

fn pairs<'a>(it: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    it.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The consumer's librdkafka configuration.
pub(crate) fn client_config(config: &KafkaConfig) -> Result<ClientConfig, SourceError> {
    match consumer_properties(config) {
        Ok(p) => Ok(p.config()),
        Err(ClientError::Managed(key)) => Err(SourceError::Managed(key)),
        Err(e) => Err(SourceError::Config(KafkaError::ClientCreation(
            e.to_string(),
        ))),
    }
}

/// Creates (and drops) a producer with these properties.
pub(crate) fn check_producer(properties: &Properties) -> Result<(), ClientError> {
    properties.check()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readers_partition_end_is_told_from_its_errors() {
        let ends = [
            KafkaError::PartitionEOF(3),
            KafkaError::Global(RDKafkaErrorCode::PartitionEOF),
            KafkaError::MessageConsumption(RDKafkaErrorCode::PartitionEOF),
        ];
        for e in &ends {
            assert!(is_partition_end(e), "{e}");
        }
        let errors = [
            KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
            KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition),
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
        ];
        for e in &errors {
            assert!(!is_partition_end(e), "{e}");
        }
    }

    fn user(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_refused_combination_names_the_quoted_key_first_and_masks_secrets() {
        let p = Properties::custom(
            Role::Producer,
            &[],
            user(&[
                ("sasl.mechanism", "NOPE"),
                ("sasl.password", "pw-secret"),
                ("security.protocol", "SASL_PLAINTEXT"),
            ]),
            &[("bootstrap.servers", "127.0.0.1:1")],
        );
        let e = p.check().expect_err("refused").to_string();
        assert!(
            e.starts_with(
                "setting `[kafka.client] \"sasl.mechanism\"` (together with \"security.protocol\")"
            ),
            "{e}"
        );
        assert!(
            !e.contains("pw-secret") && !format!("{p:?}").contains("pw-secret"),
            "{e}"
        );
    }

    #[test]
    fn a_refused_value_is_named_by_librdkafka() {
        let p = Properties::custom(
            Role::Consumer,
            &[],
            user(&[("client.id", "x"), ("session.timeout.ms", "soon")]),
            &[("group.id", "g")],
        );
        let e = p.check().expect_err("refused").to_string();
        assert!(
            e.contains("\"session.timeout.ms\"") && e.contains("consumer"),
            "{e}"
        );
        let ok = Properties::custom(
            Role::Consumer,
            &[],
            user(&[("client.id", "x")]),
            &[("group.id", "g")],
        );
        assert!(ok.check().is_ok());
    }
}
