//! The configuration file (`rankflow.toml`, docs/configuration.md) as written by the user:
//! its serde structures with typed values ([`values`]), defaults,
//! `RANKFLOW_<SECTION>_<KEY>` environment overrides ([`env`]), the
//! cross-field rules ([`validate`]), the masking of secrets wherever a
//! setting is printed ([`redact`]) and the errors that name the setting.
//!
//! `config` depends on `board` (the `[[board]]` tables and the domain enums
//! are defined there) and never the other way round.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::board::{BoardSet, BoardSpec, Globals};
use crate::checks::{CheckSet, CheckSpec};

mod admin;
pub(crate) mod conninfo;
mod env;
mod error;
pub(crate) mod redact;
mod validate;
pub(crate) mod values;

pub(crate) use admin::AdminConfig;
pub use admin::Secret;
pub use error::ConfigError;
pub use values::TimeZone;
pub use values::{FixedSpan, Millis};

/// The whole file. Unknown keys anywhere are rejected (`deny_unknown_fields`)
/// so that a typo cannot silently fall back to a default.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// IANA zone for boards that do not name their own.
    #[serde(default = "default_timezone")]
    pub timezone: TimeZone,
    /// Events further ahead of the clock than this are invalid (docs/configuration.md).
    #[serde(default = "default_future_skew")]
    pub(crate) max_future_skew: FixedSpan,
    /// `[kafka]`: the brokers, topics and consumer group events come from.
    pub kafka: KafkaConfig,
    /// `[redis]`: where the boards are kept.
    pub redis: RedisConfig,
    #[serde(default)]
    pub(crate) batch: BatchConfig,
    #[serde(default)]
    pub(crate) http: HttpConfig,
    /// History in PostgreSQL (docs/history.md); off without `url`.
    #[serde(default)]
    pub(crate) archive: ArchiveConfig,
    /// The admin API's tokens (docs/admin.md); no admin API without them.
    #[serde(default)]
    pub(crate) admin: AdminConfig,
    /// The `[[board]]` array.
    #[serde(default, rename = "board")]
    pub(crate) boards: Vec<BoardSpec>,
    /// The `[[check]]` array (docs/checks.md).
    #[serde(default, rename = "check")]
    pub(crate) checks: Vec<CheckSpec>,
}

/// `[kafka]` (docs/configuration.md): what the consumer, the dead-letter
/// producer and `rankflow produce` connect to. Debug masks secret
/// `[kafka.client]` values.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma separated (`bootstrap.servers`).
    pub(crate) brokers: String,
    #[serde(default = "default_group_id")]
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    /// Where undecodable or rule-breaking messages go (docs/guarantees.md). Without it
    /// they are only counted and logged.
    #[serde(default)]
    pub(crate) dead_letter_topic: Option<String>,
    /// Where events that fail a `[[check]]` go, unchanged (docs/checks.md);
    /// required when checks are configured.
    #[serde(default)]
    pub(crate) quarantine_topic: Option<String>,
    /// Messages larger than this are rejected as `too_large` before parsing,
    /// so one huge payload cannot cost a JSON parse of unbounded size.
    #[serde(default = "default_max_event_bytes")]
    pub(crate) max_event_bytes: NonZeroUsize,
    /// librdkafka properties passed through as given (to the consumer, the
    /// dead-letter producer and `rankflow produce`).
    #[serde(default)]
    pub(crate) client: BTreeMap<String, String>,
}

impl KafkaConfig {
    /// `[kafka.client]` with secret values masked, for printing.
    pub(crate) fn client_redacted(&self) -> BTreeMap<&str, &str> {
        self.client
            .iter()
            .map(|(k, v)| (k.as_str(), redact::property(k, v)))
            .collect()
    }
}

/// Debug without secrets: configs end up in logs and panic messages.
impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("quarantine_topic", &self.quarantine_topic)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("client", &self.client_redacted())
            .finish()
    }
}

/// `url` is one URL (a single node, or any node of a cluster: the server
/// says which), or a list of node URLs for a cluster.
#[derive(Clone, Deserialize, Serialize)]
#[serde(untagged, expecting = "a redis:// URL, or a list of cluster node URLs")]
pub(crate) enum RedisUrl {
    Single(String),
    Cluster(Vec<String>),
}

impl RedisUrl {
    /// Every URL given, in order.
    pub(crate) fn urls(&self) -> Vec<&str> {
        match self {
            RedisUrl::Single(u) => vec![u.as_str()],
            RedisUrl::Cluster(v) => v.iter().map(String::as_str).collect(),
        }
    }

    /// The URLs with passwords masked, for printing.
    pub(crate) fn redacted(&self) -> String {
        self.urls()
            .into_iter()
            .map(redact::url)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({})", self.redacted())
    }
}

/// `[redis]` (docs/configuration.md): the server or cluster the boards are
/// written to and read from, how long a round trip may take, and TLS.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    pub(crate) url: RedisUrl,
    #[serde(default = "default_key_prefix")]
    pub(crate) key_prefix: String,
    /// How long one pipelined batch may take before it is treated as failed
    /// and retried (a retry is safe: the Lua call is fenced by offset).
    #[serde(default = "default_response_timeout")]
    pub(crate) response_timeout_ms: Millis,
    /// Acknowledge a batch only once this many replicas of every primary
    /// it wrote to have its writes (Redis `WAIT`), so that a failover to a
    /// replica cannot lose acknowledged updates. 0 = do not wait.
    #[serde(default)]
    pub(crate) wait_replicas: u32,
    /// PEM file of the CA that signed the server certificate, for
    /// `rediss://` URLs; without it the system's trust store is used.
    #[serde(default)]
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for servers that require mutual TLS
    /// (`tls-auth-clients yes`); both or neither.
    #[serde(default)]
    pub(crate) tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) tls_key_file: Option<PathBuf>,
}

/// `[batch]` (docs/configuration.md): when the consumer closes a batch and
/// writes it to Redis; defaults 100000 events and 50 ms.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// A batch closes when it holds this many messages... (only reached
    /// above `max_events / max_delay_ms` events per second, e.g. while
    /// catching up; bigger batches aggregate more per member and key)
    #[serde(default = "default_max_events")]
    pub max_events: NonZeroUsize,
    /// ...or when its first message is this old.
    #[serde(default = "default_max_delay")]
    pub max_delay_ms: Millis,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_events: default_max_events(),
            max_delay_ms: default_max_delay(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpConfig {
    /// `host:port` to listen on; `:0` picks a free port.
    #[serde(default = "default_listen")]
    pub(crate) listen: SocketAddr,
    /// How long the result of a query-time union (docs/http-api.md, `last:7d`)
    /// is reused before it is computed again: the staleness a reader of a
    /// union view accepts in exchange for one `ZUNIONSTORE` per this span
    /// instead of one per read.
    #[serde(default = "default_union_cache")]
    pub(crate) union_cache: FixedSpan,
    /// Most Server-Sent Events streams (docs/http-api.md) open at once; one more
    /// is refused with 503. Bounds the sockets and tasks clients can hold.
    #[serde(default = "default_max_streams")]
    pub(crate) max_streams: NonZeroUsize,
    /// Most client connections open at once; past it, new connections wait
    /// in the listen backlog until one closes. Bounds the file descriptors
    /// and memory clients can hold.
    #[serde(default = "default_max_connections")]
    pub(crate) max_connections: NonZeroUsize,
    /// How long a client has to send a complete request head, from
    /// connecting or from its previous response: a slower client is
    /// dropped, and an idle keep-alive connection is closed after it.
    #[serde(default = "default_header_timeout")]
    pub(crate) header_timeout: FixedSpan,
    /// Most distinct live-view pollers (one per board, view, period and
    /// scopes, or per member followed); a stream that would start one more
    /// is refused with 503 and `Retry-After`.
    #[serde(default = "default_max_pollers")]
    pub(crate) max_pollers: NonZeroUsize,
    /// Most sorted-set entries one read may make Redis walk (a union of
    /// periods or scopes, a dense rank without its index); a read that
    /// would walk more is refused with a 4xx that names this setting.
    #[serde(default = "default_max_read_entries")]
    pub(crate) max_read_entries: NonZeroUsize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: default_listen(),
            union_cache: default_union_cache(),
            max_streams: default_max_streams(),
            max_connections: default_max_connections(),
            header_timeout: default_header_timeout(),
            max_pollers: default_max_pollers(),
            max_read_entries: default_max_read_entries(),
        }
    }
}

/// `[archive]` (docs/history.md): where closed periods are kept and when a
/// period closes.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveConfig {
    /// `postgres://user:pass@host:port/db?sslmode=...`, or the same as
    /// keyword/value pairs; no archive without it.
    #[serde(default)]
    pub(crate) url: Option<String>,
    /// PEM file of the CA(s) to check the server's certificate against,
    /// when `url` names none (`sslrootcert`).
    #[serde(default)]
    pub(crate) ca_file: Option<PathBuf>,
    /// A period of an archived view closes this long after its end; events
    /// for it are `late` from then on.
    #[serde(default = "default_grace")]
    pub(crate) grace: FixedSpan,
    /// Kafka topic announcing each completed copy; none without it.
    #[serde(default)]
    pub(crate) closed_topic: Option<String>,
    /// Entries in a period-closed message.
    #[serde(default = "default_closed_top")]
    pub(crate) closed_top: NonZeroUsize,
    /// How often each instance looks for closed periods to archive.
    #[serde(default = "default_archive_interval")]
    pub(crate) interval_ms: Millis,
    /// Members read from Redis and written per step of a copy: what bounds
    /// the archiver's memory, whatever the board's size.
    #[serde(default = "default_archive_chunk")]
    pub(crate) chunk: NonZeroUsize,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            url: None,
            ca_file: None,
            grace: default_grace(),
            closed_topic: None,
            closed_top: default_closed_top(),
            interval_ms: default_archive_interval(),
            chunk: default_archive_chunk(),
        }
    }
}

impl ArchiveConfig {
    /// Whether periods are archived at all.
    pub(crate) fn enabled(&self) -> bool {
        self.url.is_some()
    }

    /// The URL with its password masked (in either form), for printing.
    pub(crate) fn url_redacted(&self) -> Option<String> {
        self.url.as_deref().map(redact::postgres)
    }
}

impl fmt::Debug for ArchiveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArchiveConfig")
            .field("url", &self.url_redacted())
            .field("ca_file", &self.ca_file)
            .field("grace", &self.grace)
            .field("closed_topic", &self.closed_topic)
            .field("closed_top", &self.closed_top)
            .field("interval_ms", &self.interval_ms)
            .field("chunk", &self.chunk)
            .finish()
    }
}

fn default_max_streams() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap_or(NonZeroUsize::MIN)
}
fn default_max_connections() -> NonZeroUsize {
    NonZeroUsize::new(16_384).unwrap_or(NonZeroUsize::MIN)
}
fn default_header_timeout() -> FixedSpan {
    FixedSpan {
        text: "10s".into(),
        ms: 10_000,
    }
}
fn default_max_pollers() -> NonZeroUsize {
    NonZeroUsize::new(1_024).unwrap_or(NonZeroUsize::MIN)
}
fn default_max_read_entries() -> NonZeroUsize {
    NonZeroUsize::new(2_000_000).unwrap_or(NonZeroUsize::MIN)
}
fn default_union_cache() -> FixedSpan {
    FixedSpan {
        text: "1s".into(),
        ms: 1_000,
    }
}
fn default_grace() -> FixedSpan {
    FixedSpan {
        text: "10m".into(),
        ms: 10 * 60_000,
    }
}
fn default_closed_top() -> NonZeroUsize {
    NonZeroUsize::MIN.saturating_add(100 - 1)
}
fn default_archive_interval() -> Millis {
    Millis::from_const(5_000)
}
fn default_archive_chunk() -> NonZeroUsize {
    NonZeroUsize::MIN.saturating_add(10_000 - 1)
}

fn default_timezone() -> TimeZone {
    TimeZone(chrono_tz::Tz::UTC)
}
fn default_future_skew() -> FixedSpan {
    FixedSpan {
        text: "5m".into(),
        ms: 5 * 60_000,
    }
}
fn default_group_id() -> String {
    "rankflow".into()
}
fn default_max_event_bytes() -> NonZeroUsize {
    NonZeroUsize::MIN.saturating_add(64 * 1024 - 1)
}
fn default_key_prefix() -> String {
    "rankflow".into()
}
fn default_response_timeout() -> Millis {
    Millis::from_const(10_000)
}
fn default_max_events() -> NonZeroUsize {
    NonZeroUsize::MIN.saturating_add(100_000 - 1)
}
fn default_max_delay() -> Millis {
    Millis::from_const(50)
}
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9898))
}

/// Every string under `[admin]` (the tokens), to be masked in
/// messages that quote the file.
fn admin_secrets(table: &toml::Table) -> Vec<String> {
    fn strings(v: &toml::Value, out: &mut Vec<String>) {
        match v {
            toml::Value::String(s) if !s.is_empty() => out.push(s.clone()),
            toml::Value::Table(t) => t.values().for_each(|v| strings(v, out)),
            toml::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(admin) = table.get("admin") {
        strings(admin, &mut out);
    }
    out
}

impl Config {
    /// Reads the file, applies the process environment, deserializes and
    /// checks the cross-field rules.
    pub(crate) fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path, std::env::vars())
    }

    /// Parses `text` (named `path` in messages) with the given environment,
    /// then [`Config::validate`]s it.
    pub fn from_toml(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let parse_err = |source: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(source),
        };
        let mut table: toml::Table = text.parse().map_err(parse_err)?;
        let overridden = env::apply_env(&mut table, env)?;
        // A value refused below is quoted with its line: never show a
        // secret of `[admin]` that way.
        let secrets = admin_secrets(&table);
        let parse_err = |source: toml::de::Error| match secrets.is_empty() {
            true => parse_err(source),
            false => ConfigError::Masked {
                path: path.to_path_buf(),
                message: redact::in_text(
                    &source.to_string(),
                    &secrets.iter().map(String::as_str).collect::<Vec<_>>(),
                ),
            },
        };
        let config: Config = if overridden {
            // Spans into the original text would be wrong after an override,
            // so re-serialize: messages then still name the key.
            let merged = toml::to_string(&table).map_err(|e| ConfigError::Env {
                var: "RANKFLOW_*".into(),
                message: e.to_string(),
            })?;
            toml::from_str(&merged).map_err(parse_err)?
        } else {
            toml::from_str(text).map_err(parse_err)?
        };
        config.validate()?;
        Ok(config)
    }

    /// The global settings board compilation needs.
    pub(crate) fn globals(&self) -> Globals {
        Globals {
            timezone: self.timezone.0,
            key_prefix: self.redis.key_prefix.clone(),
            future_skew_ms: self.max_future_skew.ms(),
            archive_grace_ms: self.archive.enabled().then(|| self.archive.grace.ms()),
        }
    }

    /// Compiles the `[[board]]` tables; mistakes name board and field.
    pub fn compile_boards(&self) -> Result<BoardSet, ConfigError> {
        Ok(BoardSet::compile(&self.boards, &self.globals())?)
    }

    /// Compiles the `[[check]]` tables; mistakes name check and field.
    /// Checks need `[kafka] quarantine_topic`: what they stop is kept there.
    pub fn compile_checks(&self) -> Result<CheckSet, ConfigError> {
        let checks = CheckSet::compile(&self.checks).map_err(|e| ConfigError::Invalid {
            location: e.location,
            message: e.message,
        })?;
        if !checks.is_empty() && self.kafka.quarantine_topic.is_none() {
            return Err(ConfigError::setting(
                "kafka.quarantine_topic",
                "is required with [[check]] entries: events that fail a check are kept there for review",
            ));
        }
        Ok(checks)
    }
}

/// Compiles `[[board]]` tables inside a minimal configuration, for the
/// unit tests of the modules that work on boards.
#[cfg(test)]
pub(crate) fn test_boards(boards: &str) -> BoardSet {
    let text = format!(
        "[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[redis]\nurl = \"redis://127.0.0.1:1\"\n{boards}"
    );
    Config::from_toml(&text, Path::new("test.toml"), Vec::new())
        .and_then(|c| c.compile_boards())
        .expect("test boards compile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::ranking::TieBreak;

    const MINIMAL: &str = r#"
        [kafka]
        brokers = "127.0.0.1:9092"
        topics = ["events"]
        [redis]
        url = "redis://127.0.0.1:6379"
        [[board]]
        name = "b"
        event = "gift"
        member = "receiver_id"
        score = "count"
        periods = ["day"]
    "#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_toml(
            text,
            Path::new("test.toml"),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn defaults_apply() {
        let c = load(MINIMAL, &[]).unwrap();
        assert_eq!(c.timezone.0, chrono_tz::Tz::UTC);
        assert_eq!(c.max_future_skew.ms(), 300_000);
        assert_eq!(c.batch.max_events.get(), 100_000);
        assert_eq!(c.batch.max_delay_ms.get(), 50);
        assert_eq!(c.redis.response_timeout_ms.get(), 10_000);
        assert_eq!(c.kafka.max_event_bytes.get(), 65_536);
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:9898");
        assert_eq!(c.http.union_cache.ms(), 1_000);
        assert_eq!(c.http.max_streams.get(), 10_000);
        assert_eq!(c.http.max_connections.get(), 16_384);
        assert_eq!(c.http.header_timeout.ms(), 10_000);
        assert_eq!(c.http.max_pollers.get(), 1_024);
        assert_eq!(c.http.max_read_entries.get(), 2_000_000);
        assert_eq!(c.redis.key_prefix, "rankflow");
        assert_eq!(c.kafka.group_id, "rankflow");
        assert_eq!(c.boards[0].aggregate, None, "sum unless given");
        assert_eq!(c.boards[0].tie_break, TieBreak::None);
    }

    #[test]
    fn unknown_key_is_rejected_with_its_line() {
        let text = MINIMAL
            .replace("max_delay", "x")
            .replace("[redis]", "[redis]\n        urll = \"redis://x\"");
        let err = load(&text, &[]).unwrap_err().to_string();
        assert!(err.contains("urll"), "{err}");
        assert!(err.contains("line"), "{err}");
    }

    #[test]
    fn admin_tokens_come_from_the_file_and_the_environment_and_never_show() {
        let file = "0123456789abcdef-file";
        let env = "0123456789abcdef-envv";
        let text =
            format!("{MINIMAL}\n[admin]\ntokens = {{ ops = \"{file}\", support = \"{file}2\" }}\n");
        let c = load(&text, &[("RANKFLOW_ADMIN_TOKENS_SUPPORT", env)]).unwrap();
        let tokens: Vec<(&str, &str)> = c
            .admin
            .tokens
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(tokens, vec![("ops", file), ("support", env)]);
        let shown = format!("{c:?}\n{}", c.admin.summary());
        assert!(!shown.contains(file) && !shown.contains(env), "{shown}");
        assert!(shown.contains("tokens ops, support"), "{shown}");
        // A value refused by its type is quoted with its line: masked.
        let bad = text.replace("tokens = {", "tokens = { x = 1,");
        let err = load(&bad, &[]).unwrap_err().to_string();
        assert!(err.contains("tokens"), "{err}");
        assert!(!err.contains(file), "{err}");
    }

    #[test]
    fn environment_overrides_typed_values() {
        let c = load(
            MINIMAL,
            &[
                ("RANKFLOW_KAFKA_BROKERS", "h:1"),
                ("RANKFLOW_KAFKA_TOPICS", "a, b"),
                ("RANKFLOW_BATCH_MAX_EVENTS", "7"),
                ("RANKFLOW_TIMEZONE", "Asia/Shanghai"),
                ("RANKFLOW_REDIS_URL", "rediss://a:1,rediss://b:2"),
                ("RANKFLOW_REDIS_TLS_CA_FILE", "/etc/ca.pem"),
                ("RANKFLOW_REDIS_RESPONSE_TIMEOUT_MS", "250"),
                ("RANKFLOW_KAFKA_CLIENT_SESSION_TIMEOUT_MS", "6000"),
                ("RANKFLOW_LOG", "debug"),
                ("RANKFLOW_HTTP_UNION_CACHE", "250ms"),
                ("RANKFLOW_HTTP_MAX_STREAMS", "3"),
                ("RANKFLOW_HTTP_MAX_CONNECTIONS", "4"),
                ("RANKFLOW_HTTP_HEADER_TIMEOUT", "2s"),
                ("RANKFLOW_HTTP_MAX_POLLERS", "5"),
                ("RANKFLOW_HTTP_MAX_READ_ENTRIES", "6"),
                ("PATH", "/bin"),
            ],
        )
        .unwrap();
        assert_eq!(c.kafka.brokers, "h:1");
        assert_eq!(c.kafka.topics, vec!["a", "b"]);
        assert_eq!(c.batch.max_events.get(), 7);
        assert_eq!(c.timezone.0, chrono_tz::Tz::Asia__Shanghai);
        assert!(matches!(&c.redis.url, RedisUrl::Cluster(v) if v.len() == 2));
        assert_eq!(
            c.redis.tls_ca_file.as_deref(),
            Some(Path::new("/etc/ca.pem"))
        );
        assert_eq!(
            c.redis.response_timeout_ms.duration(),
            std::time::Duration::from_millis(250)
        );
        assert_eq!(c.kafka.client["session.timeout.ms"], "6000");
        assert_eq!(c.http.union_cache.ms(), 250);
        assert_eq!(c.http.max_streams.get(), 3);
        assert_eq!(c.http.max_connections.get(), 4);
        assert_eq!(c.http.header_timeout.ms(), 2_000);
        assert_eq!(c.http.max_pollers.get(), 5);
        assert_eq!(c.http.max_read_entries.get(), 6);
    }

    #[test]
    fn the_listener_bounds_are_checked() {
        let streams = load(
            MINIMAL,
            &[
                ("RANKFLOW_HTTP_MAX_STREAMS", "9"),
                ("RANKFLOW_HTTP_MAX_CONNECTIONS", "8"),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            streams.contains("http.max_streams") && streams.contains("http.max_connections"),
            "{streams}"
        );
        let zero = load(MINIMAL, &[("RANKFLOW_HTTP_HEADER_TIMEOUT", "0s")])
            .unwrap_err()
            .to_string();
        assert!(zero.contains("header_timeout"), "{zero}");
    }

    /// `[archive]` takes its CA file from the environment too, and the
    /// configuration's `Debug` shows it, and the URL's password in neither
    /// form.
    #[test]
    fn the_archive_settings_come_from_the_environment_and_debug_masks_them() {
        for (url, hidden) in [
            ("postgres://rf:s3cret@db/rf?sslmode=require", "s3cret"),
            (
                "host=db user=rf password='s3 cret' sslmode=require",
                "s3 cret",
            ),
        ] {
            let c = load(
                MINIMAL,
                &[
                    ("RANKFLOW_ARCHIVE_URL", url),
                    ("RANKFLOW_ARCHIVE_CA_FILE", "/etc/pg-ca.pem"),
                ],
            )
            .unwrap();
            assert_eq!(c.archive.url.as_deref(), Some(url));
            assert_eq!(
                c.archive.ca_file.as_deref(),
                Some(Path::new("/etc/pg-ca.pem"))
            );
            let shown = format!("{c:?}");
            assert!(!shown.contains(hidden), "{shown}");
            assert!(shown.contains("***"), "{shown}");
            assert!(shown.contains("/etc/pg-ca.pem"), "{shown}");
        }
    }

    #[test]
    fn unknown_environment_setting_is_named() {
        let err = load(MINIMAL, &[("RANKFLOW_KAFKA_BROKER", "x")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("RANKFLOW_KAFKA_BROKER"), "{err}");
        let err = load(MINIMAL, &[("RANKFLOW_BATCH_MAX_EVENTS", "many")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("integer"), "{err}");
        let err = load(MINIMAL, &[("RANKFLOW_BATCH_MAX_EVENTS", "0")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("max_events") && err.contains("nonzero"),
            "{err}"
        );
        let err = load(MINIMAL, &[("RANKFLOW_HTTP_LISTEN", "localhost:80")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen"), "{err}");
    }
}
