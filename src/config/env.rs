//! Environment overrides of settings: `RANKFLOW_<SECTION>_<KEY>` (docs/configuration.md)
//! `RANKFLOW_KAFKA_CLIENT_<PROPERTY>` and `RANKFLOW_ADMIN_TOKENS_<NAME>`, written into the parsed TOML
//! table before it is deserialized, so an override is typed and checked
//! exactly like the file.

use super::error::ConfigError;

/// Environment variables with the `RANKFLOW_` prefix that are not settings.
const NON_SETTING_VARS: &[&str] = &["RANKFLOW_CONFIG", "RANKFLOW_LOG", "RANKFLOW_LOG_FORMAT"];

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
    ("redis", "tls_ca_file", EnvKind::Str),
    ("redis", "tls_cert_file", EnvKind::Str),
    ("redis", "tls_key_file", EnvKind::Str),
    ("batch", "max_events", EnvKind::Int),
    ("batch", "max_delay_ms", EnvKind::Int),
    ("http", "listen", EnvKind::Str),
    ("http", "union_cache", EnvKind::Str),
    ("admin", "audit_topic", EnvKind::Str),
    ("admin", "erase_key", EnvKind::Str),
    ("http", "max_streams", EnvKind::Int),
    ("http", "max_connections", EnvKind::Int),
    ("http", "header_timeout", EnvKind::Str),
    ("http", "max_pollers", EnvKind::Int),
    ("http", "max_read_entries", EnvKind::Int),
    ("archive", "url", EnvKind::Str),
    ("archive", "ca_file", EnvKind::Str),
    ("archive", "grace", EnvKind::Str),
    ("archive", "closed_topic", EnvKind::Str),
    ("archive", "closed_top", EnvKind::Int),
    ("archive", "interval_ms", EnvKind::Int),
    ("archive", "chunk", EnvKind::Int),
];

/// Writes every `RANKFLOW_<SECTION>_<KEY>` variable into `table`; returns
/// whether anything was overridden. `RANKFLOW_KAFKA_CLIENT_<PROP>` sets the
/// librdkafka property `<prop>` with `_` read as `.`
/// (`RANKFLOW_KAFKA_CLIENT_SESSION_TIMEOUT_MS` → `session.timeout.ms`).
pub(super) fn apply_env(
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
            let client = section(section(table, "kafka", &var)?, "client", &var)?;
            client.insert(prop.replace('_', "."), toml::Value::String(value));
            overridden = true;
            continue;
        }
        if let Some(name) = lower.strip_prefix("admin_tokens_") {
            // One token per name: the secret stays out of the file.
            let tokens = section(section(table, "admin", &var)?, "tokens", &var)?;
            tokens.insert(name.to_string(), toml::Value::String(value));
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
