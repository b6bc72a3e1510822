//! Secrets in settings: passwords in Redis URLs and secret librdkafka
//! properties (`sasl.password`, `ssl.key.password`, ...). Whatever prints a
//! setting — logs, `rankflow check`, error messages, `Debug` — goes through
//! these functions, so a secret is shown as `***` and never in clear.

/// What replaces a secret.
pub(crate) const MASK: &str = "***";

/// `url` with the password (userinfo after `:`, or a `password=`/`pass=`
/// query parameter) replaced by [`MASK`]. A URL without a password comes
/// back unchanged; text that is not a URL at all is masked whole after the
/// first `@`, since it cannot be told which part is secret.
pub(crate) fn url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:{MASK}@{host}"),
            // `redis://secret@host` is read as a password by some clients.
            None if scheme.is_some() && !userinfo.is_empty() => format!("{MASK}@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = mask_query(tail);
    match scheme {
        Some(s) => format!("{s}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

fn mask_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let masked: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if matches!(k.to_ascii_lowercase().as_str(), "pass" | "password") => {
                format!("{k}={MASK}")
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", masked.join("&"))
}

/// Whether a librdkafka property holds a secret (passwords, keys, JAAS and
/// OAuth settings that may embed credentials).
pub(crate) fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key.contains("jaas")
        || key == "ssl.key.pem"
        || key == "sasl.oauthbearer.config"
        || key == "sasl.oauthbearer.extensions"
}

/// The value of property `key` as it may be shown.
pub(crate) fn property<'v>(key: &str, value: &'v str) -> &'v str {
    if is_secret_property(key) { MASK } else { value }
}

/// `text` with every occurrence of a secret `value` masked: for messages
/// that come from librdkafka and may quote a value they reject.
pub(crate) fn in_text(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(s, MASK);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(url("rediss://user:p%40w@h:1"), "rediss://user:***@h:1");
        assert_eq!(url("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(url("redis://h:1"), "redis://h:1");
        assert_eq!(
            url("unix:///tmp/r.sock?db=1&pass=pw"),
            "unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(url("redis://u:a@b@h:1"), "redis://u:***@h:1");
    }

    #[test]
    fn secret_properties_are_masked() {
        assert_eq!(property("sasl.password", "pw"), MASK);
        assert_eq!(property("ssl.key.password", "pw"), MASK);
        assert_eq!(property("sasl.jaas.config", "x"), MASK);
        assert_eq!(property("sasl.username", "me"), "me");
        assert_eq!(
            in_text("bad value \"pw\" here", &["pw"]),
            "bad value \"***\" here"
        );
    }
}
