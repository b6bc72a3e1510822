//! Cross-field rules of the configuration, checked when it is loaded (so
//! `rankflow check` and `rankflow run` refuse the same files): topics,
//! the dead-letter topic, Redis URLs (scheme and syntax, without
//! connecting), TLS files and the key prefix. Each message names the
//! setting, and a URL in a message has its password masked.

use std::collections::HashSet;

use redis::IntoConnectionInfo;

use super::error::ConfigError;
use super::{Config, conninfo, redact};

/// URL schemes rankflow connects with: plain TCP, TLS, and a Unix socket.
pub(crate) const REDIS_SCHEMES: &[&str] = &["redis", "rediss", "unix", "redis+unix"];

impl Config {
    /// Checks the rules that involve more than one value. Types (non-zero
    /// numbers, addresses, durations, zones) are already checked by
    /// deserialization; board rules by [`Config::compile_boards`].
    ///
    /// `redis.wait_replicas` is not compared with the deployment here: only
    /// the server knows how many replicas each primary has, and a single
    /// node with replicas is a valid set-up. [`Config::notes`] explains it.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_kafka()?;
        self.validate_redis()?;
        self.validate_http()?;
        self.validate_archive()?;
        self.admin.validate()
    }

    /// `[archive]` settings that only make sense with others. The URL
    /// itself (its form, `sslmode`, the CA file) is read where the archive
    /// connects, and checked at start-up like the Redis TLS files.
    fn validate_archive(&self) -> Result<(), ConfigError> {
        let a = &self.archive;
        if a.url.is_none() && a.ca_file.is_some() {
            return Err(ConfigError::setting(
                "archive.ca_file",
                "is set, but archive.url is not, so there is no archive to connect to",
            ));
        }
        Ok(())
    }

    /// The note for a CA file that is not used (the URL names its own
    /// `sslrootcert`), or given with an `sslmode` that still lets the
    /// connection be made without TLS.
    fn archive_tls_note(&self) -> Option<String> {
        let (url, ca) = (self.archive.url.as_deref()?, self.archive.ca_file.as_ref()?);
        let (_, tls) = conninfo::without(url, &["sslmode", "sslrootcert"]).ok()?;
        let last = |key: &str| tls.iter().rev().find(|p| p.key == key);
        if last("sslrootcert").is_some() {
            return Some(format!(
                "archive.ca_file {} is not used: archive.url names its own CA (sslrootcert), which takes precedence",
                ca.display()
            ));
        }
        let mode = last("sslmode").map_or("prefer", |p| p.value.as_str());
        (mode == "prefer").then(|| {
            format!(
                "archive.ca_file {} checks the server's certificate only when the server offers TLS: archive.url's sslmode is prefer, which falls back to a plain connection; use sslmode=verify-full to require TLS",
                ca.display()
            )
        })
    }

    /// The listener's bounds: a head must be given some time, and every
    /// stream holds a connection.
    fn validate_http(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        if http.header_timeout.ms() <= 0 {
            return Err(ConfigError::setting(
                "http.header_timeout",
                "must be longer than 0 (a client needs time to send its request)",
            ));
        }
        if http.max_streams > http.max_connections {
            return Err(ConfigError::setting(
                "http.max_streams",
                format!(
                    "{} streams cannot be open on at most {} connections (http.max_connections)",
                    http.max_streams, http.max_connections
                ),
            ));
        }
        Ok(())
    }

    fn validate_kafka(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(ConfigError::setting(
                "kafka.brokers",
                "is empty; give host:port[,host:port...]",
            ));
        }
        if k.group_id.trim().is_empty() {
            return Err(ConfigError::setting("kafka.group_id", "is empty"));
        }
        if k.topics.is_empty() {
            return Err(ConfigError::setting(
                "kafka.topics",
                "is empty; list at least one topic to consume",
            ));
        }
        let mut seen = HashSet::new();
        for (i, t) in k.topics.iter().enumerate() {
            if t.trim().is_empty() {
                return Err(ConfigError::setting(
                    &format!("kafka.topics[{i}]"),
                    "is an empty topic name",
                ));
            }
            if !seen.insert(t.as_str()) {
                return Err(ConfigError::setting(
                    &format!("kafka.topics[{i}]"),
                    format!("topic {t:?} is listed twice"),
                ));
            }
        }
        if let Some(dlq) = &k.dead_letter_topic {
            if dlq.trim().is_empty() {
                return Err(ConfigError::setting(
                    "kafka.dead_letter_topic",
                    "is empty; leave it out to only count and log invalid events",
                ));
            }
            if seen.contains(dlq.as_str()) {
                return Err(ConfigError::setting(
                    "kafka.dead_letter_topic",
                    format!(
                        "{dlq:?} is also in kafka.topics: rankflow would consume its own dead letters and send them there again"
                    ),
                ));
            }
        }
        if let Some(q) = &k.quarantine_topic {
            if q.trim().is_empty() {
                return Err(ConfigError::setting(
                    "kafka.quarantine_topic",
                    "is empty; name the topic where events that fail a check are kept",
                ));
            }
            if seen.contains(q.as_str()) {
                return Err(ConfigError::setting(
                    "kafka.quarantine_topic",
                    format!(
                        "{q:?} is also in kafka.topics: rankflow would consume the events it quarantined and check them again"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_redis(&self) -> Result<(), ConfigError> {
        let r = &self.redis;
        let urls = r.url.urls();
        if urls.is_empty() {
            return Err(ConfigError::setting(
                "redis.url",
                "the cluster list is empty; give one node URL (cluster mode is detected) or several",
            ));
        }
        let mut tls = 0;
        for (i, url) in urls.iter().enumerate() {
            let key = if urls.len() > 1 {
                format!("redis.url[{i}]")
            } else {
                "redis.url".to_string()
            };
            check_url(&key, url)?;
            if url.starts_with("rediss://") {
                tls += 1;
            }
        }
        if tls != 0 && tls != urls.len() {
            return Err(ConfigError::setting(
                "redis.url",
                "mixes rediss:// and plain URLs; a cluster is either all TLS or none",
            ));
        }
        if tls == 0 && r.tls_ca_file.is_some() {
            return Err(ConfigError::setting(
                "redis.tls_ca_file",
                "is set, but redis.url is not a rediss:// URL, so TLS would not be used",
            ));
        }
        if r.tls_cert_file.is_some() != r.tls_key_file.is_some() {
            return Err(ConfigError::setting(
                "redis.tls_cert_file",
                "a client certificate needs both redis.tls_cert_file and redis.tls_key_file",
            ));
        }
        if tls == 0 && r.tls_cert_file.is_some() {
            return Err(ConfigError::setting(
                "redis.tls_cert_file",
                "is set, but redis.url is not a rediss:// URL, so TLS would not be used",
            ));
        }
        let prefix = &r.key_prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(ConfigError::setting(
                "redis.key_prefix",
                "must be non-empty and must not contain `{` or `}` (they delimit the hash tag)",
            ));
        }
        Ok(())
    }

    /// Remarks about valid settings that an operator should know, printed
    /// by `rankflow check` and logged at start-up.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.redis.wait_replicas > 0 {
            notes.push(format!(
                "redis.wait_replicas = {}: every primary rankflow writes to needs that many replicas, or no batch is ever acknowledged (a single node without replicas stalls)",
                self.redis.wait_replicas
            ));
        }
        if self.kafka.dead_letter_topic.is_none() {
            notes.push(
                "no kafka.dead_letter_topic: invalid events are counted and logged, not kept"
                    .into(),
            );
        }
        notes.extend(self.archive_tls_note());
        notes
    }
}

/// The scheme must be one rankflow supports and the URL must parse; the
/// message shows the URL with its password masked.
fn check_url(key: &str, url: &str) -> Result<(), ConfigError> {
    let shown = redact::url(url);
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(ConfigError::setting(
            key,
            format!("{shown:?} is not a URL; expected redis://host:port"),
        ));
    };
    if !REDIS_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(ConfigError::setting(
            key,
            format!(
                "{shown:?} has the unsupported scheme {scheme:?}; use redis://, rediss:// (TLS) or unix:// (a socket path)"
            ),
        ));
    }
    url.into_connection_info()
        .map_err(|e| ConfigError::setting(key, format!("{shown:?} cannot be parsed: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(kafka_extra: &str, redis: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "[kafka]\nbrokers = \"b:9092\"\ntopics = [\"events\"]\n{kafka_extra}\n[redis]\n{redis}\n"
        );
        Config::from_toml(&text, Path::new("t.toml"), Vec::new())
    }

    fn error(kafka_extra: &str, redis: &str) -> String {
        match config(kafka_extra, redis) {
            Ok(_) => panic!("accepted: {kafka_extra} / {redis}"),
            Err(e) => e.to_string(),
        }
    }

    const URL: &str = "url = \"redis://127.0.0.1:6379\"";

    #[test]
    fn a_plain_config_is_valid() {
        config("", URL).unwrap();
        config("", "url = \"unix:///tmp/redis.sock\"").unwrap();
        config("", "url = [\"redis://a:1\", \"redis://b:2\"]").unwrap();
        config("", "url = \"rediss://h:1\"\ntls_ca_file = \"/ca.pem\"").unwrap();
    }

    #[test]
    fn topics_are_checked() {
        let e = Config::from_toml(
            "[kafka]\nbrokers = \"b\"\ntopics = []\n[redis]\nurl = \"redis://h\"\n",
            Path::new("t.toml"),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("setting `kafka.topics`") && e.contains("empty"),
            "{e}"
        );
        let e = Config::from_toml(
            "[kafka]\nbrokers = \"b\"\ntopics = [\"a\", \"a\"]\n[redis]\nurl = \"redis://h\"\n",
            Path::new("t.toml"),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`kafka.topics[1]`") && e.contains("twice"),
            "{e}"
        );
        let e = error("dead_letter_topic = \"events\"", URL);
        assert!(e.contains("`kafka.dead_letter_topic`"), "{e}");
        assert!(e.contains("also in kafka.topics"), "{e}");
        let e = error("dead_letter_topic = \"\"", URL);
        assert!(e.contains("`kafka.dead_letter_topic`"), "{e}");
        let e = error("group_id = \" \"", URL);
        assert!(e.contains("`kafka.group_id`"), "{e}");
    }

    #[test]
    fn redis_urls_are_checked_without_showing_passwords() {
        let e = error("", "url = \"http://:hunter2@h:1\"");
        assert!(
            e.contains("`redis.url`") && e.contains("unsupported scheme"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = error("", "url = \"h:6379\"");
        assert!(e.contains("`redis.url`") && e.contains("not a URL"), "{e}");
        let e = error("", "url = \"redis://:hunter2@h:1/notadb\"");
        assert!(e.contains("cannot be parsed"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = error("", "url = []");
        assert!(e.contains("`redis.url`") && e.contains("empty"), "{e}");
        let e = error("", "url = [\"redis://a:1\", \"valkey://b:2\"]");
        assert!(e.contains("`redis.url[1]`"), "{e}");
        let e = error("", "url = [\"redis://a:1\", \"rediss://b:2\"]");
        assert!(e.contains("mixes"), "{e}");
    }

    #[test]
    fn tls_settings_must_match_the_url() {
        let e = error("", &format!("{URL}\ntls_ca_file = \"/ca.pem\""));
        assert!(e.contains("`redis.tls_ca_file`"), "{e}");
        let e = error("", "url = \"rediss://h:1\"\ntls_cert_file = \"/c.pem\"");
        assert!(
            e.contains("`redis.tls_cert_file`") && e.contains("both"),
            "{e}"
        );
    }

    #[test]
    fn zero_and_malformed_values_name_their_key() {
        let e = error("", &format!("{URL}\nresponse_timeout_ms = 0"));
        assert!(
            e.contains("response_timeout_ms") && e.contains("at least 1"),
            "{e}"
        );
        let e = error("max_event_bytes = 0", URL);
        assert!(
            e.contains("max_event_bytes") && e.contains("nonzero"),
            "{e}"
        );
        let e = error("", &format!("{URL}\nkey_prefix = \"a{{b\""));
        assert!(e.contains("`redis.key_prefix`"), "{e}");
        let e = Config::from_toml(
            &format!("[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[redis]\n{URL}\n[batch]\nmax_delay_ms = 0\n"),
            Path::new("t.toml"),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_delay_ms") && e.contains("at least 1"),
            "{e}"
        );
        let e = Config::from_toml(
            &format!("[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[redis]\n{URL}\n[http]\nlisten = \"localhost\"\n"),
            Path::new("t.toml"),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("listen"), "{e}");
        let e = Config::from_toml(
            &format!("max_future_skew = \"1mo\"\n[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[redis]\n{URL}\n"),
            Path::new("t.toml"),
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("max_future_skew"), "{e}");
    }

    #[test]
    fn notes_explain_wait_replicas() {
        let c = config("", &format!("{URL}\nwait_replicas = 1")).unwrap();
        assert!(
            c.notes()
                .iter()
                .any(|n| n.contains("redis.wait_replicas = 1"))
        );
    }

    #[test]
    fn the_archive_ca_file_needs_a_url_and_a_weak_sslmode_is_noted() {
        let e = error("", &format!("{URL}\n[archive]\nca_file = \"/ca.pem\""));
        assert!(e.contains("`archive.ca_file`"), "{e}");
        let noted = |url: &str| {
            let archive = format!("{URL}\n[archive]\nurl = \"{url}\"\nca_file = \"/ca.pem\"");
            config("", &archive)
                .unwrap()
                .notes()
                .into_iter()
                .any(|n| n.contains("archive.ca_file /ca.pem") && n.contains("prefer"))
        };
        assert!(noted("postgres://h/db"));
        assert!(noted("host=h sslmode=prefer"));
        assert!(!noted("postgres://h/db?sslmode=verify-full"));
        assert!(!noted("host=h sslmode=require"));
        // The last sslmode counts, as in the driver.
        assert!(noted("host=h sslmode=require sslmode=prefer"));
        let unused = config(
            "",
            &format!(
                "{URL}\n[archive]\nurl = \"host=h sslmode=verify-full sslrootcert=/own.pem\"\nca_file = \"/ca.pem\""
            ),
        )
        .unwrap()
        .notes();
        assert!(
            unused
                .iter()
                .any(|n| n.contains("archive.ca_file /ca.pem is not used")),
            "{unused:?}"
        );
    }
}
