//! What a read asks for ([`Query`], with [`ScopeUnion`] for several scopes
//! read as one) and the bounds on a read's parameters (docs/http-api.md:
//! [`MAX_LIMIT`], [`MAX_OFFSET`], [`MAX_RADIUS`], [`MAX_IDS`],
//! [`MAX_LISTED_SCOPES`]), with the check of a count against its bound
//! ([`check_bound`]) and the error both the reader and the HTTP API give for
//! one out of range ([`out_of_range`]).

use super::error::BadParam;

/// Most ids one members read takes (docs/http-api.md).
pub(crate) const MAX_IDS: usize = 1000;

/// Largest page a read may ask for (`limit`).
pub(crate) const MAX_LIMIT: usize = 1000;

/// Largest `offset`: a Redis sorted set holds at most 2^32 − 1 members, so no
/// board has a rank past this, and `offset + limit` stays far inside the
/// signed 64-bit indices `ZRANGE` takes.
pub(crate) const MAX_OFFSET: usize = 4_294_967_295;

/// Largest `radius` of an `around` read: the page is at most
/// `2 × radius + 1` entries, about [`MAX_LIMIT`].
pub(crate) const MAX_RADIUS: usize = MAX_LIMIT / 2;

/// Most scopes one request may list.
pub(crate) const MAX_LISTED_SCOPES: usize = 1_000;

/// What a read asks for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// The board's name.
    pub board: String,
    /// The view as the API names it: `day`, `all`, `win:3h`, or a rolling
    /// view `last:7d`.
    pub view: String,
    /// The scope read: required on a scoped board (unless `scope_union` is
    /// set), refused on an unscoped one.
    pub scope: Option<String>,
    /// Several scopes read as one (then `scope` is `None`).
    pub scope_union: Option<ScopeUnion>,
    /// A period id (`2026-W47`) to read a past period, live or archived;
    /// `None` for the current one. Windows take none.
    pub period: Option<String>,
}

/// Several scopes of a board read as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeUnion {
    /// `scope=a&scope=b`: these scopes (at least two, distinct).
    Listed(Vec<String>),
    /// `scope=*`: every scope value the view's registry holds.
    All,
}

impl ScopeUnion {
    /// What the values of a repeated `scope` parameter ask for: none, one
    /// scope, a union of the distinct values listed (in the order given), or
    /// `*` for every scope. `*` with other values, or more than
    /// [`MAX_LISTED_SCOPES`] values, is refused.
    pub(crate) fn choose(given: &[&str]) -> Result<(Option<String>, Option<ScopeUnion>), BadParam> {
        // One pass with a set: a query string can repeat `scope` any number
        // of times, and comparing each value with every one kept so far
        // would take quadratic time before the count below could refuse it.
        let mut seen = std::collections::HashSet::with_capacity(given.len());
        let distinct: Vec<&str> = given.iter().copied().filter(|s| seen.insert(*s)).collect();
        match distinct.as_slice() {
            [] => Ok((None, None)),
            ["*"] => Ok((None, Some(ScopeUnion::All))),
            [one] => Ok((Some(one.to_string()), None)),
            many if many.contains(&"*") => Err(BadParam::new(
                "scope",
                "scope=* already stands for every scope; give it alone",
            )),
            many if many.len() > MAX_LISTED_SCOPES => Err(BadParam::new(
                "scope",
                format!(
                    "{} scopes are listed; a union takes at most {MAX_LISTED_SCOPES} (or scope=* for all)",
                    many.len()
                ),
            )),
            many => Ok((
                None,
                Some(ScopeUnion::Listed(
                    many.iter().map(|s| s.to_string()).collect(),
                )),
            )),
        }
    }

    /// The scopes as a list shows them: the values, or `["*"]`.
    pub(crate) fn shown(&self) -> Vec<String> {
        match self {
            ScopeUnion::Listed(s) => s.clone(),
            ScopeUnion::All => vec!["*".to_string()],
        }
    }
}

/// `Err` naming `param` unless `value <= max`. The message is the one the
/// HTTP API gives for a number it cannot parse, so both read the same.
pub(crate) fn check_bound(param: &str, value: usize, max: usize) -> Result<(), BadParam> {
    if value <= max {
        Ok(())
    } else {
        Err(out_of_range(param, &value.to_string(), max))
    }
}

/// The error for a count parameter that is not a whole number in `0..=max`.
pub(crate) fn out_of_range(param: &str, given: &str, max: usize) -> BadParam {
    BadParam::new(
        param,
        format!("{param} must be a whole number from 0 to {max}, got {given:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_name_the_parameter() {
        assert_eq!(check_bound("limit", MAX_LIMIT, MAX_LIMIT), Ok(()));
        let e = check_bound("offset", MAX_OFFSET + 1, MAX_OFFSET).map_err(|e| e.message);
        assert_eq!(
            e,
            Err("offset must be a whole number from 0 to 4294967295, got \"4294967296\"".into())
        );
        // The largest page past the largest offset still fits ZRANGE's i64.
        assert!((MAX_OFFSET as u64 + MAX_LIMIT as u64) < i64::MAX as u64);
    }

    #[test]
    fn repeated_scopes_choose_one_a_union_or_all() {
        let listed = |v: &[&str]| {
            Some(ScopeUnion::Listed(
                v.iter().map(|s| s.to_string()).collect(),
            ))
        };
        assert_eq!(ScopeUnion::choose(&[]).unwrap(), (None, None));
        assert_eq!(
            ScopeUnion::choose(&["a"]).unwrap(),
            (Some("a".into()), None)
        );
        assert_eq!(
            ScopeUnion::choose(&["a", "a"]).unwrap(),
            (Some("a".into()), None)
        );
        assert_eq!(
            ScopeUnion::choose(&["b", "a", "b"]).unwrap(),
            (None, listed(&["b", "a"]))
        );
        assert_eq!(
            ScopeUnion::choose(&["*"]).unwrap(),
            (None, Some(ScopeUnion::All))
        );
        assert_eq!(ScopeUnion::choose(&["*", "a"]).unwrap_err().param, "scope");
        let many: Vec<String> = (0..=MAX_LISTED_SCOPES).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let e = ScopeUnion::choose(&many).unwrap_err();
        assert!(e.message.contains("1001 scopes"), "{}", e.message);
    }

    #[test]
    fn repeated_scopes_are_told_apart_in_linear_time() {
        // 100,000 distinct values (a long query string): refused for their
        // number, after one pass over them, not after comparing each with
        // all the others (5 billion comparisons took minutes).
        let many: Vec<String> = (0..100_000).map(|i| format!("scope-{i}")).collect();
        let mut given: Vec<&str> = many.iter().map(String::as_str).collect();
        given.extend(many.iter().map(String::as_str));
        let started = std::time::Instant::now();
        let e = ScopeUnion::choose(&given).unwrap_err();
        let took = started.elapsed();
        assert!(e.message.contains("100000 scopes"), "{}", e.message);
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    }
}
