//! `[admin]` (docs/admin.md): the named bearer tokens of the admin API.
//! Owns [`Secret`], a setting that is read like a string and never
//! printed, and the rules a token must follow.
//!
//! A token is compared by the API in constant time ([`crate::admin`]);
//! here it only has to be a usable bearer token: long enough not to be
//! guessed, and made of the characters an `Authorization` header carries.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

use super::error::ConfigError;

/// A secret setting (an admin token). Deserialized from a
/// string; `Debug` and `Serialize` write `***`, so a configuration printed
/// or logged never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself: for comparing and keying, never for printing.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

/// Fewest characters of a token: 16 random characters
/// of the token alphabet are about 96 bits, out of reach of guessing over
/// HTTP.
pub(crate) const MIN_SECRET_CHARS: usize = 16;

/// `[admin]`: off (every `/v1/admin/...` route answers 404) without
/// tokens.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminConfig {
    /// Token name → bearer token. The name is what logs show as the
    /// actor; `RANKFLOW_ADMIN_TOKENS_<NAME>` sets one.
    #[serde(default)]
    pub(crate) tokens: BTreeMap<String, Secret>,
    /// Kafka topic every admin action is announced on, if any.
    #[serde(default)]
    pub(crate) audit_topic: Option<String>,
    /// The secret the keyed hashes of member ids are made with (the member
    /// index and the record of erasures, docs/moderation.md). Without it
    /// members can be hidden and restored, not erased.
    #[serde(default)]
    pub(crate) erase_key: Option<Secret>,
}

impl AdminConfig {
    /// Whether the admin API is served at all.
    pub(crate) fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// One line for `rankflow check`: the tokens' names, never the tokens.
    pub(crate) fn summary(&self) -> String {
        if !self.enabled() {
            return "admin API off (no [admin] tokens)".to_string();
        }
        let names: Vec<&str> = self.tokens.keys().map(String::as_str).collect();
        let audit = match &self.audit_topic {
            Some(t) => format!("actions announced on topic {t}"),
            None => "actions logged only (no audit_topic)".to_string(),
        };
        let erase = if self.erase_key.is_some() {
            "erase on (erase_key set)"
        } else {
            "erase off (no erase_key)"
        };
        format!(
            "admin API on /v1/admin for tokens {}; {audit}; {erase}",
            names.join(", ")
        )
    }

    /// Checks names and tokens. Messages name the setting and never quote
    /// a secret.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(key) = &self.erase_key {
            check_secret("admin.erase_key", key)?;
        }
        if let Some(topic) = &self.audit_topic
            && (topic.is_empty() || topic.len() > 249)
        {
            return Err(ConfigError::setting(
                "admin.audit_topic",
                "must name a Kafka topic (1 to 249 characters)",
            ));
        }
        let mut owners: HashMap<&str, &str> = HashMap::new();
        for (name, token) in &self.tokens {
            let key = format!("admin.tokens.{name}");
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(ConfigError::setting(
                    &key,
                    "a token's name is made of a-z, 0-9 and _ (it names the actor in logs and is the <NAME> of RANKFLOW_ADMIN_TOKENS_<NAME>)",
                ));
            }
            check_secret(&key, token)?;
            if self.erase_key.as_ref() == Some(token) {
                return Err(ConfigError::setting(
                    &key,
                    "is the same as admin.erase_key; the hashing key must be a secret of its own",
                ));
            }
            if let Some(other) = owners.insert(token.expose(), name) {
                return Err(ConfigError::setting(
                    &key,
                    format!(
                        "is the same token as admin.tokens.{other}; each name needs its own, or logs cannot tell who acted"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A token: long enough, and of the characters of an RFC 6750
/// bearer token (letters, digits, `-._~+/`, `=` at the end), so that any
/// HTTP client can send it unchanged.
fn check_secret(key: &str, secret: &Secret) -> Result<(), ConfigError> {
    let s = secret.expose();
    let body = s.trim_end_matches('=');
    if !body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
    {
        return Err(ConfigError::setting(
            key,
            "may hold only letters, digits and -._~+/ (with = at the end), as a bearer token does",
        ));
    }
    if s.chars().count() < MIN_SECRET_CHARS {
        return Err(ConfigError::setting(
            key,
            format!(
                "is {} characters long; use at least {MIN_SECRET_CHARS} random ones (e.g. `openssl rand -hex 24`)",
                s.chars().count()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(toml_text: &str) -> AdminConfig {
        toml::from_str(toml_text).expect("admin table")
    }

    fn refused(toml_text: &str) -> String {
        admin(toml_text)
            .validate()
            .expect_err("refused")
            .to_string()
    }

    const GOOD: &str = "0123456789abcdef0123";

    #[test]
    fn good_tokens_pass_and_print_as_stars() {
        let a = admin(&format!(
            "tokens = {{ ops = \"{GOOD}\", support_2 = \"{GOOD}x==\" }}"
        ));
        a.validate().expect("valid");
        assert!(a.enabled());
        let shown = format!("{a:?} {}", toml::to_string(&a).expect("serializes"));
        assert!(!shown.contains(GOOD), "{shown}");
        assert_eq!(shown.matches("***").count(), 4, "{shown}");
        assert!(!AdminConfig::default().enabled());
    }

    #[test]
    fn bad_settings_name_the_setting_and_never_the_secret() {
        // (table, what the message must say), by hand.
        let cases = [
            (
                "tokens = { Ops = \"0123456789abcdef0\" }",
                "admin.tokens.Ops",
            ),
            ("tokens = { ops = \"short\" }", "is 5 characters long"),
            ("tokens = { ops = \"0123456789abcdef 0\" }", "bearer token"),
            (
                "tokens = { ops = \"0123456789abcdef0\", two = \"0123456789abcdef0\" }",
                "same token as admin.tokens.ops",
            ),
        ];
        for (text, want) in cases {
            let message = refused(text);
            assert!(message.contains(want), "{text}: {message}");
            for secret in ["0123456789abcdef0", "short"] {
                assert!(!message.contains(secret), "{text} leaks: {message}");
            }
        }
    }
}
