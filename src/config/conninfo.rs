//! PostgreSQL connection strings (`[archive] url`) in their two forms, read
//! the way tokio-postgres reads them: a URL
//! (`postgres://user:password@host:port/db?key=value&...`) and
//! keyword/value pairs (`host=db password='a b' sslmode=require`). Each
//! parameter comes with its place in the text, so that [`super::redact`]
//! masks a password exactly where the driver would find one, and the
//! archive's connector takes out the TLS parameters the driver does not
//! know (`sslmode=verify-full`, `sslrootcert`) before it parses the rest.

use std::ops::Range;

/// Whether `s` is the URL form, as tokio-postgres decides (else it is read
/// as keyword/value pairs).
pub(crate) fn is_url(s: &str) -> bool {
    url_body_at(s).is_some()
}

/// Where the text after `postgres://` or `postgresql://` starts.
fn url_body_at(s: &str) -> Option<usize> {
    ["postgres://", "postgresql://"]
        .into_iter()
        .find(|p| s.starts_with(p))
        .map(str::len)
}

/// One `key=value` parameter of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    /// The key, decoded (percent-decoded in a URL).
    pub(crate) key: String,
    /// The value, decoded (quotes and backslash escapes, or percent-encoding).
    pub(crate) value: String,
    /// The whole pair as written.
    pub(crate) pair: Range<usize>,
    /// The value as written (with its quotes).
    pub(crate) value_at: Range<usize>,
}

/// Where a connection string stops making sense: the byte offset of the
/// parameter being read, and why (never quoting the text, which may hold a
/// password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    pub(crate) at: usize,
    pub(crate) reason: &'static str,
}

/// The parameters of a keyword/value string, in order. Stricter than the
/// driver in one way: text it would silently ignore (a pair without a key,
/// `=x`) is an error here.
pub(crate) fn key_value(s: &str) -> Result<Vec<Param>, Broken> {
    let skip_ws = |i: usize| s.len() - s[i..].trim_start().len();
    let mut params = Vec::new();
    let mut i = 0;
    loop {
        i = skip_ws(i);
        if i == s.len() {
            return Ok(params);
        }
        let start = i;
        let broken = |reason| Broken { at: start, reason };
        i += s[i..]
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(s.len() - i);
        if i == start {
            return Err(broken("a parameter without a name"));
        }
        let key = s[start..i].to_string();
        i = skip_ws(i);
        if !s[i..].starts_with('=') {
            return Err(broken("a parameter name without `=`"));
        }
        i = skip_ws(i + 1);
        let (value, end) = kv_value(s, i).map_err(broken)?;
        params.push(Param {
            key,
            value,
            pair: start..end,
            value_at: i..end,
        });
        i = end;
    }
}

/// A value at `i`: quoted (`'a b'`, with `\'` and `\\`) or up to the next
/// white space (backslash escapes too); returns it and where it ends.
fn kv_value(s: &str, mut i: usize) -> Result<(String, usize), &'static str> {
    let quoted = s[i..].starts_with('\'');
    if quoted {
        i += 1;
    }
    let mut value = String::new();
    let mut chars = s[i..].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\'' if quoted => return Ok((value, i + at + 1)),
            c if c.is_whitespace() && !quoted => return Ok((value, i + at)),
            '\\' => value.extend(chars.next().map(|(_, c)| c)),
            c => value.push(c),
        }
    }
    if quoted {
        Err("a quoted value without its closing quote")
    } else if value.is_empty() {
        Err("a parameter without a value")
    } else {
        Ok((value, s.len()))
    }
}

/// The places of a URL's parts, as tokio-postgres splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UrlParts {
    /// `user:password` before the first `@`, if there is an `@`.
    pub(crate) userinfo: Option<Range<usize>>,
    /// The `?` that starts the parameters, if any.
    pub(crate) query: Option<usize>,
    /// The parameters after it, in order.
    pub(crate) params: Vec<Param>,
}

/// Splits a `postgres://` URL: the user information runs to the first `@`
/// (wherever it is), the parameters start at the first `?` after it, and
/// each `key=value` ends at the next `&`.
pub(crate) fn url(s: &str) -> Result<UrlParts, Broken> {
    let body = url_body_at(s).ok_or(Broken {
        at: 0,
        reason: "not a postgres:// URL",
    })?;
    let userinfo = s[body..].find('@').map(|at| body..body + at);
    let after = userinfo.as_ref().map_or(body, |r| r.end + 1);
    let query = s[after..].find('?').map(|q| after + q);
    let mut params = Vec::new();
    if let Some(q) = query {
        let mut i = q + 1;
        while i < s.len() {
            let broken = |reason| Broken { at: i, reason };
            let eq = s[i..]
                .find('=')
                .map(|e| i + e)
                .ok_or(broken("a parameter without `=`"))?;
            let end = s[eq + 1..].find('&').map_or(s.len(), |e| eq + 1 + e);
            params.push(Param {
                key: percent_decode(&s[i..eq]).ok_or(broken("a parameter that is not UTF-8"))?,
                value: percent_decode(&s[eq + 1..end])
                    .ok_or(broken("a parameter that is not UTF-8"))?,
                pair: i..end,
                value_at: eq + 1..end,
            });
            i = end + 1;
        }
    }
    Ok(UrlParts {
        userinfo,
        query,
        params,
    })
}

/// `%XX` decoded (an incomplete escape is kept as written, as the driver
/// does); `None` if the result is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `s` without the parameters named in `keys`, and those parameters (in
/// order; a later one overrides an earlier one, as in the driver), for
/// either form. The rest is left exactly as written.
pub(crate) fn without(s: &str, keys: &[&str]) -> Result<(String, Vec<Param>), Broken> {
    let (params, head, sep) = if is_url(s) {
        let parts = url(s)?;
        let head = parts.query.map_or(s, |q| &s[..q]);
        (parts.params, head, "&")
    } else {
        (key_value(s)?, "", " ")
    };
    let (taken, kept): (Vec<Param>, Vec<Param>) = params
        .into_iter()
        .partition(|p| keys.contains(&p.key.as_str()));
    let kept: Vec<&str> = kept.iter().map(|p| &s[p.pair.clone()]).collect();
    let rest = match (is_url(s), kept.is_empty()) {
        (true, true) => head.to_string(),
        (true, false) => format!("{head}?{}", kept.join(sep)),
        (false, _) => kept.join(sep),
    };
    Ok((rest, taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(params: &[Param]) -> Vec<(&str, &str)> {
        params
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect()
    }

    #[test]
    fn key_value_pairs_are_read_like_the_driver_reads_them() {
        let s = r"host=db  port = 5432 password='a b\'c' user=me\ you dbname=''";
        let params = key_value(s).unwrap();
        assert_eq!(
            pairs(&params),
            [
                ("host", "db"),
                ("port", "5432"),
                ("password", "a b'c"),
                ("user", "me you"),
                ("dbname", "")
            ]
        );
        assert_eq!(&s[params[2].value_at.clone()], r"'a b\'c'");
        // What the driver reads, for the same text.
        let config: tokio_postgres::Config = s.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"a b'c"[..]));
        assert_eq!(config.get_user(), Some("me you"));
    }

    #[test]
    fn broken_key_value_strings_say_where_without_quoting() {
        let e = key_value("host=h password='a b").unwrap_err();
        assert_eq!(e.at, 7);
        assert!(e.reason.contains("closing quote"));
        assert_eq!(key_value("host=h =x").unwrap_err().at, 7);
        assert_eq!(key_value("host=h pass word").unwrap_err().at, 7);
        assert_eq!(key_value("host=").unwrap_err().at, 0);
        assert_eq!(key_value("  ").unwrap(), []);
    }

    #[test]
    fn urls_are_split_like_the_driver_splits_them() {
        let s = "postgres://u:p%40ss@h:1,g:2/db?sslmode=require&application_name=a%20b";
        let parts = url(s).unwrap();
        assert_eq!(&s[parts.userinfo.clone().unwrap()], "u:p%40ss");
        assert_eq!(
            pairs(&parts.params),
            [("sslmode", "require"), ("application_name", "a b")]
        );
        // A `?` in the user information is not the start of the parameters.
        let s = "postgresql://u:a?b@h/db";
        assert_eq!(url(s).unwrap().query, None);
        assert!(url("postgres://h/db?sslmode").is_err());
    }

    #[test]
    fn without_takes_out_the_named_parameters_only() {
        let tls = ["sslmode", "sslrootcert"];
        let (rest, taken) = without(
            "postgres://u@h/db?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Fca.pem",
            &tls,
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?connect_timeout=3");
        assert_eq!(
            pairs(&taken),
            [("sslmode", "verify-full"), ("sslrootcert", "/ca.pem")]
        );
        let (rest, _) = without("postgres://h/db?sslmode=disable", &tls).unwrap();
        assert_eq!(rest, "postgres://h/db");
        let (rest, taken) = without(
            "host=h sslmode = 'verify-ca' password='x y' sslrootcert=/c",
            &tls,
        )
        .unwrap();
        assert_eq!(rest, "host=h password='x y'");
        assert_eq!(
            pairs(&taken),
            [("sslmode", "verify-ca"), ("sslrootcert", "/c")]
        );
    }
}
