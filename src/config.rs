//! The configuration file (`rankflow.toml`, SPEC §2) as written by the user:
//! its serde structures, defaults, `RANKFLOW_<SECTION>_<KEY>` environment
//! overrides and the errors that name where a setting is wrong.
//!
//! This module only reads and shapes text. Turning boards into compiled rules
//! (expressions, periods, windows) and cross-field checks live in
//! [`crate::board::model`], so that a bad rule is reported with the board's name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Environment variables with the `RANKFLOW_` prefix that are not settings.
const NON_SETTING_VARS: &[&str] = &["RANKFLOW_CONFIG", "RANKFLOW_LOG", "RANKFLOW_LOG_FORMAT"];

/// Everything that can be wrong with the configuration; each message says
/// where (file and line, environment variable, or board and field).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{location}: {message}")]
    Invalid { location: String, message: String },
}

impl ConfigError {
    pub fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            location: location.into(),
            message: message.into(),
        }
    }
}

/// The whole file. Unknown keys anywhere are rejected (`deny_unknown_fields`)
/// so that a typo cannot silently fall back to a default.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// IANA zone for boards that do not name their own.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// Events further ahead of the clock than this are invalid (SPEC §2).
    #[serde(default = "default_future_skew")]
    pub max_future_skew: String,
    pub kafka: KafkaConfig,
    pub redis: RedisConfig,
    #[serde(default)]
    pub batch: BatchConfig,
    #[serde(default)]
    pub http: HttpConfig,
    /// The `[[board]]` array.
    #[serde(default, rename = "board")]
    pub boards: Vec<BoardConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma separated (`bootstrap.servers`).
    pub brokers: String,
    #[serde(default = "default_group_id")]
    pub group_id: String,
    pub topics: Vec<String>,
    /// Where undecodable or rule-breaking messages go (SPEC §4). Without it
    /// they are only counted and logged.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// Messages larger than this are rejected as `too_large` before parsing,
    /// so one huge payload cannot cost a JSON parse of unbounded size.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
    /// librdkafka properties passed through as given.
    #[serde(default)]
    pub client: BTreeMap<String, String>,
}

/// `url` is one URL for a single node, or a list of node URLs for a cluster.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged, expecting = "a redis:// URL, or a list of cluster node URLs")]
pub enum RedisUrl {
    Single(String),
    Cluster(Vec<String>),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    pub url: RedisUrl,
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
    /// How long one pipelined batch may take before it is treated as failed
    /// and retried (a retry is safe: the Lua call is fenced by offset).
    #[serde(default = "default_response_timeout_ms")]
    pub response_timeout_ms: u64,
    /// Acknowledge a batch only once this many replicas of every primary
    /// it wrote to have its writes (Redis `WAIT`), so that a failover to a
    /// replica cannot lose acknowledged updates. 0 = do not wait.
    #[serde(default)]
    pub wait_replicas: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// A batch closes when it holds this many messages... (only reached
    /// above `max_events / max_delay_ms` events per second, e.g. while
    /// catching up; bigger batches aggregate more per member and key)
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// ...or when its first message is this old.
    #[serde(default = "default_max_delay_ms")]
    pub max_delay_ms: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_events: default_max_events(),
            max_delay_ms: default_max_delay_ms(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    #[serde(default = "default_listen")]
    pub listen: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: default_listen(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    #[default]
    Sum,
    Max,
    Min,
    Last,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TieBreak {
    #[default]
    None,
    Earliest,
    Latest,
}

/// Rank order: `desc` puts the highest score first (the default, and for
/// `min` boards `asc`, because their best is the lowest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Desc,
    Asc,
}

/// One `[[board]]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardConfig {
    pub name: String,
    pub event: String,
    #[serde(default)]
    pub filter: Option<String>,
    pub member: String,
    pub score: String,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub periods: Vec<String>,
    #[serde(default)]
    pub windows: Vec<String>,
    #[serde(default)]
    pub aggregate: Aggregate,
    #[serde(default)]
    pub tie_break: TieBreak,
    #[serde(default)]
    pub order: Option<Order>,
    #[serde(default)]
    pub timezone: Option<String>,
    /// Per period kind (`hour`..`year`): how long after the period ends its
    /// key is kept.
    #[serde(default)]
    pub retention: BTreeMap<String, String>,
}

fn default_timezone() -> String {
    "UTC".into()
}
fn default_future_skew() -> String {
    "5m".into()
}
fn default_group_id() -> String {
    "rankflow".into()
}
fn default_max_event_bytes() -> usize {
    64 * 1024
}
fn default_key_prefix() -> String {
    "rankflow".into()
}
fn default_response_timeout_ms() -> u64 {
    10_000
}
fn default_max_events() -> usize {
    20_000
}
fn default_max_delay_ms() -> u64 {
    50
}
fn default_listen() -> String {
    "127.0.0.1:9898".into()
}

/// The settings an environment variable can override, with their TOML type.
/// Lists are written comma separated in the environment.
#[derive(Clone, Copy)]
enum EnvKind {
    Str,
    Int,
    List,
    /// A single URL, or a comma separated list meaning a cluster.
    StrOrList,
}

const ENV_SETTINGS: &[(&str, &str, EnvKind)] = &[
    ("", "timezone", EnvKind::Str),
    ("", "max_future_skew", EnvKind::Str),
    ("kafka", "brokers", EnvKind::Str),
    ("kafka", "group_id", EnvKind::Str),
    ("kafka", "topics", EnvKind::List),
    ("kafka", "dead_letter_topic", EnvKind::Str),
    ("kafka", "max_event_bytes", EnvKind::Int),
    ("redis", "url", EnvKind::StrOrList),
    ("redis", "key_prefix", EnvKind::Str),
    ("redis", "response_timeout_ms", EnvKind::Int),
    ("redis", "wait_replicas", EnvKind::Int),
    ("batch", "max_events", EnvKind::Int),
    ("batch", "max_delay_ms", EnvKind::Int),
    ("http", "listen", EnvKind::Str),
];

impl Config {
    /// Reads the file, applies the process environment and deserializes.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path, std::env::vars())
    }

    /// Parses `text` (named `path` in messages) with the given environment.
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
        let overridden = apply_env(&mut table, env)?;
        if overridden {
            // Spans into the original text would be wrong after an override,
            // so re-serialize: messages then still name the key.
            let merged = toml::to_string(&table).map_err(|e| ConfigError::Env {
                var: "RANKFLOW_*".into(),
                message: e.to_string(),
            })?;
            toml::from_str(&merged).map_err(parse_err)
        } else {
            toml::from_str(text).map_err(parse_err)
        }
    }
}

/// Writes every `RANKFLOW_<SECTION>_<KEY>` variable into `table`; returns
/// whether anything was overridden. `RANKFLOW_KAFKA_CLIENT_<PROP>` sets the
/// librdkafka property `<prop>` with `_` read as `.`
/// (`RANKFLOW_KAFKA_CLIENT_SESSION_TIMEOUT_MS` → `session.timeout.ms`).
fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<bool, ConfigError> {
    let mut overridden = false;
    for (var, value) in env {
        let Some(rest) = var.strip_prefix("RANKFLOW_") else {
            continue;
        };
        if NON_SETTING_VARS.contains(&var.as_str()) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        if let Some(prop) = lower.strip_prefix("kafka_client_") {
            let client = section(table, "kafka", &var)?;
            let client = match client
                .entry("client")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            {
                toml::Value::Table(t) => t,
                _ => {
                    return Err(ConfigError::Env {
                        var,
                        message: "[kafka.client] in the file is not a table".into(),
                    });
                }
            };
            client.insert(prop.replace('_', "."), toml::Value::String(value));
            overridden = true;
            continue;
        }
        let found = ENV_SETTINGS.iter().find(|(sec, key, _)| {
            if sec.is_empty() {
                lower == *key
            } else {
                lower.strip_prefix(sec).and_then(|r| r.strip_prefix('_')) == Some(key)
            }
        });
        let Some(&(sec, key, kind)) = found else {
            let known: Vec<String> = ENV_SETTINGS
                .iter()
                .map(|(s, k, _)| env_name(s, k))
                .collect();
            return Err(ConfigError::Env {
                var,
                message: format!(
                    "not a rankflow setting; known: {}, RANKFLOW_KAFKA_CLIENT_<PROPERTY>",
                    known.join(", ")
                ),
            });
        };
        let parsed = match kind {
            EnvKind::Str => toml::Value::String(value),
            EnvKind::Int => {
                let n: i64 = value.trim().parse().map_err(|_| ConfigError::Env {
                    var: var.clone(),
                    message: format!("expected an integer, got {value:?}"),
                })?;
                toml::Value::Integer(n)
            }
            EnvKind::List => toml::Value::Array(split_list(&value)),
            EnvKind::StrOrList if value.contains(',') => toml::Value::Array(split_list(&value)),
            EnvKind::StrOrList => toml::Value::String(value),
        };
        let target = if sec.is_empty() {
            &mut *table
        } else {
            section(table, sec, &var)?
        };
        target.insert(key.to_string(), parsed);
        overridden = true;
    }
    Ok(overridden)
}

fn env_name(section: &str, key: &str) -> String {
    if section.is_empty() {
        format!("RANKFLOW_{}", key.to_ascii_uppercase())
    } else {
        format!(
            "RANKFLOW_{}_{}",
            section.to_ascii_uppercase(),
            key.to_ascii_uppercase()
        )
    }
}

fn split_list(value: &str) -> Vec<toml::Value> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| toml::Value::String(s.to_string()))
        .collect()
}

fn section<'t>(
    table: &'t mut toml::Table,
    name: &str,
    var: &str,
) -> Result<&'t mut toml::Table, ConfigError> {
    match table
        .entry(name)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
    {
        toml::Value::Table(t) => Ok(t),
        _ => Err(ConfigError::Env {
            var: var.to_string(),
            message: format!("[{name}] in the file is not a table"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.timezone, "UTC");
        assert_eq!(c.batch.max_events, 20_000);
        assert_eq!(c.batch.max_delay_ms, 50);
        assert_eq!(c.http.listen, "127.0.0.1:9898");
        assert_eq!(c.redis.key_prefix, "rankflow");
        assert_eq!(c.kafka.group_id, "rankflow");
        assert_eq!(c.boards[0].aggregate, Aggregate::Sum);
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
    fn environment_overrides_typed_values() {
        let c = load(
            MINIMAL,
            &[
                ("RANKFLOW_KAFKA_BROKERS", "h:1"),
                ("RANKFLOW_KAFKA_TOPICS", "a, b"),
                ("RANKFLOW_BATCH_MAX_EVENTS", "7"),
                ("RANKFLOW_TIMEZONE", "Asia/Shanghai"),
                ("RANKFLOW_REDIS_URL", "redis://a:1,redis://b:2"),
                ("RANKFLOW_KAFKA_CLIENT_SESSION_TIMEOUT_MS", "6000"),
                ("RANKFLOW_LOG", "debug"),
                ("PATH", "/bin"),
            ],
        )
        .unwrap();
        assert_eq!(c.kafka.brokers, "h:1");
        assert_eq!(c.kafka.topics, vec!["a", "b"]);
        assert_eq!(c.batch.max_events, 7);
        assert_eq!(c.timezone, "Asia/Shanghai");
        assert!(matches!(&c.redis.url, RedisUrl::Cluster(v) if v.len() == 2));
        assert_eq!(c.kafka.client["session.timeout.ms"], "6000");
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
    }
}
