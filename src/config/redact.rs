//! Secrets in settings: passwords in Redis URLs, in PostgreSQL connection
//! strings of either form (`postgres://user:password@...`,
//! `host=... password=...`) and secret librdkafka properties
//! (`sasl.password`, `ssl.key.password`, ...). Whatever prints a setting —
//! logs, `rankflow check`, error messages, `Debug` — goes through these
//! functions, so a secret is shown as `***` and never in clear.

use std::ops::Range;

use super::conninfo;

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

/// A PostgreSQL connection string (`[archive] url`) with every password
/// masked, in either form: the URL's `user:password@` and `password=`
/// parameter, or a keyword/value `password=` (quoted or not). Masking
/// errs on the side of hiding: the user information runs to the last `@`
/// before the parameters (an unencoded `@` in a password is hidden
/// whole), and a keyword/value string that cannot be read is shown only
/// up to where it stops making sense.
pub(crate) fn postgres(s: &str) -> String {
    if conninfo::is_url(s) {
        return splice(s, postgres_url_secrets(s));
    }
    match conninfo::key_value(s) {
        Ok(params) => splice(s, secret_values(&params)),
        // Another scheme's URL: no keyword/value string at all.
        Err(b) if b.at == 0 && s.contains("://") => url(s),
        Err(b) => {
            let good = conninfo::key_value(&s[..b.at]).unwrap_or_default();
            let shown = splice(&s[..b.at], secret_values(&good));
            format!("{shown}{MASK}")
        }
    }
}

/// Whether a connection parameter holds a secret (`password`, libpq's
/// `sslpassword`).
fn is_secret_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains("pass")
}

fn secret_values(params: &[conninfo::Param]) -> Vec<Range<usize>> {
    params
        .iter()
        .filter(|p| is_secret_key(&p.key))
        .map(|p| p.value_at.clone())
        .collect()
}

/// The byte ranges of a `postgres://` URL that may hold a password.
fn postgres_url_secrets(s: &str) -> Vec<Range<usize>> {
    let body = s.find("://").map_or(0, |i| i + 3);
    let mut ranges = Vec::new();
    let first_q = s[body..].find('?').map_or(s.len(), |q| body + q);
    let first_at = s[body..].find('@').map(|a| body + a);
    // The driver ends the user information at the first `@`; a password
    // with an unencoded `@` meant it to end at the last one before `?`.
    let end_at = s[body..first_q].rfind('@').map(|a| body + a).or(first_at);
    if let Some(end) = end_at
        && let Some(colon) = s[body..end].find(':')
    {
        ranges.push(body + colon + 1..end);
    }
    let outside = |i: &usize| !ranges.iter().any(|r| r.contains(i));
    let query = s[body..]
        .match_indices('?')
        .map(|(q, _)| body + q)
        .find(outside);
    if let Some(q) = query {
        let mut secret = false;
        let mut at = q + 1;
        for piece in s[q + 1..].split('&') {
            match piece.split_once('=') {
                Some((k, _)) => {
                    secret = is_secret_key(&conninfo::percent_decode(k).unwrap_or_default())
                        || is_secret_key(k);
                    if secret {
                        ranges.push(at + k.len() + 1..at + piece.len());
                    }
                }
                // `password=a&b`: `b` was meant as part of the password.
                None if secret => ranges.push(at..at + piece.len()),
                None => {}
            }
            at += piece.len() + 1;
        }
    }
    ranges
}

/// `s` with each of `ranges` (which may overlap) replaced by [`MASK`].
fn splice(s: &str, mut ranges: Vec<Range<usize>>) -> String {
    ranges.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(s.len());
    let mut from = 0;
    let mut masked = false;
    for r in ranges {
        if masked && r.start <= from {
            // Overlaps (or touches) the range masked last.
            from = from.max(r.end);
            continue;
        }
        out.push_str(&s[from..r.start]);
        out.push_str(MASK);
        from = r.end;
        masked = true;
    }
    out.push_str(&s[from..]);
    out
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

    /// Every form of PostgreSQL connection string, each with the
    /// password the driver would read masked and nothing else changed.
    #[test]
    fn postgres_passwords_are_masked_in_every_form() {
        let cases = [
            // URL: user information, percent-encoded, a parameter.
            (
                "postgres://rf:s3cret@db:5432/rf",
                "postgres://rf:***@db:5432/rf",
            ),
            (
                "postgresql://rf:p%40ss@db/rf?sslmode=require",
                "postgresql://rf:***@db/rf?sslmode=require",
            ),
            (
                "postgres://db/rf?user=rf&password=s3cret&sslmode=verify-full",
                "postgres://db/rf?user=rf&password=***&sslmode=verify-full",
            ),
            (
                "postgres://db/rf?p%61ssword=s3cret",
                "postgres://db/rf?p%61ssword=***",
            ),
            // An unencoded `@`, `/` or `?` in the password: hidden whole.
            ("postgres://rf:s3@cret@db/rf", "postgres://rf:***@db/rf"),
            ("postgres://rf:s3/cret@db/rf", "postgres://rf:***@db/rf"),
            (
                "postgres://rf:s3?cret@db/rf?password=x",
                "postgres://rf:***@db/rf?password=***",
            ),
            // `&` in a password parameter: what follows is hidden too.
            (
                "postgres://db/rf?password=s3&cret&sslmode=require",
                "postgres://db/rf?password=***&***&sslmode=require",
            ),
            ("postgres://rf@db/rf", "postgres://rf@db/rf"),
            // Keyword/value: plain, quoted with a space, escaped, spaced out.
            (
                "host=db user=rf password=s3cret dbname=rf",
                "host=db user=rf password=*** dbname=rf",
            ),
            (
                "host=db password='s3 cret' sslmode=verify-full",
                "host=db password=*** sslmode=verify-full",
            ),
            (
                r"host=db password='s3\'c ret' user=rf",
                "host=db password=*** user=rf",
            ),
            (
                r"host=db password=s3\ cret user=rf",
                "host=db password=*** user=rf",
            ),
            ("host=db password = s3cret", "host=db password = ***"),
            ("host=db sslpassword=s3cret", "host=db sslpassword=***"),
            // Unreadable: shown up to where it stops making sense.
            ("host=db password='s3 cret", "host=db ***"),
            ("host=db pass word=s3cret", "host=db ***"),
            ("host=db", "host=db"),
        ];
        for (given, shown) in cases {
            assert_eq!(postgres(given), shown, "{given}");
            assert!(!postgres(given).contains("s3"), "{given}");
            assert!(!postgres(given).contains("cret"), "{given}");
        }
    }

    /// What the driver reads as the password is what is masked: the
    /// masked string, read by the driver, has `***` as its password and
    /// every other setting unchanged.
    #[test]
    fn the_masked_part_is_the_password_the_driver_reads() {
        for s in [
            "postgres://rf:s3cret@db:5433/rf?application_name=x",
            "postgres://rf@db/rf?password=s3cret&application_name=x",
            "host=db port=5433 password='s3 cret' application_name=x",
            r"host=db password=s3\ cret user=rf",
        ] {
            let given: tokio_postgres::Config = s.parse().expect(s);
            let shown: tokio_postgres::Config = postgres(s).parse().expect(s);
            assert_eq!(shown.get_password(), Some(&b"***"[..]), "{s}");
            assert_ne!(given.get_password(), shown.get_password(), "{s}");
            assert_eq!(given.get_hosts(), shown.get_hosts(), "{s}");
            assert_eq!(given.get_ports(), shown.get_ports(), "{s}");
            assert_eq!(given.get_user(), shown.get_user(), "{s}");
            assert_eq!(
                given.get_application_name(),
                shown.get_application_name(),
                "{s}"
            );
        }
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
