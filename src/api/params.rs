//! The query parameters of the read routes (docs/http-api.md): which route takes
//! which parameter, and turning the raw `name=value` pairs into checked,
//! typed values or a [`BadParam`] that names the offending parameter; then
//! the reader's [`reader::Query`] of a route's board, view, scope and period
//! ([`query`]).
//!
//! Everything a client can get wrong in a query string is caught here, so a
//! bad request is a 400 with a JSON body before any Redis work: a count that
//! is not a whole number or is out of range, a parameter given twice, a
//! parameter the route does not take (a typo like `limt=5` is reported, not
//! ignored), and an unknown value of an enumerated parameter.
//!
//! The ids of a `POST .../members` body are read here too ([`body_ids`]):
//! up to [`MAX_BODY_IDS`] strings, straight from the JSON text, refusing
//! at the first item that is not a string and at the first one past the
//! cap, without building the rest of the body.
//!
//! Adding a parameter is a field in [`Params`], its name in [`KNOWN`] and in
//! the routes that take it, and one arm in [`Params::set`]; an enumerated one
//! (`rank=ordinal|competition|dense`, docs/http-api.md) implements [`Choice`] and
//! its arm is `p.rank = Some(choice(name, raw)?)`.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::reader::{
    self, BadParam, MAX_LIMIT, MAX_OFFSET, MAX_RADIUS, RankStyle, ScopeUnion, out_of_range,
};

/// Largest request body (docs/http-api.md): a `POST .../members` of 1000
/// ids of up to ~60 bytes each. A larger body is a 413.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// Most ids one members read takes: the reader's own bound
/// (`reader::query::MAX_IDS`, which it checks again), applied while the
/// body is read.
pub(crate) const MAX_BODY_IDS: usize = 1000;

/// Every parameter any read route takes, for telling "unknown" from "not
/// taken by this route" in errors.
const KNOWN: &[&str] = &[
    "scope", "period", "limit", "offset", "radius", "rank", "ids",
];

/// The read routes, each with the parameters it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Top,
    Member,
    Around,
    /// `GET .../members?ids=a,b,c`.
    Members,
    /// `POST .../members` (the ids are the body).
    MembersPost,
    Periods,
    /// `GET .../diff` of a shadow board.
    Diff,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Top => "top",
            Route::Member => "members",
            Route::Around => "around",
            Route::Members | Route::MembersPost => "members",
            Route::Periods => "periods",
            Route::Diff => "diff",
        }
    }

    fn takes(self) -> &'static [&'static str] {
        match self {
            Route::Top => &["scope", "period", "limit", "offset", "rank"],
            Route::Member => &["scope", "period", "rank"],
            Route::Around => &["scope", "period", "radius", "rank"],
            Route::Members => &["scope", "period", "rank", "ids"],
            Route::MembersPost => &["scope", "period", "rank"],
            Route::Periods => &["scope", "limit", "offset"],
            Route::Diff => &["scope", "period", "limit", "offset", "rank"],
        }
    }
}

/// The checked parameters of one request; `None` where not given.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Params {
    /// One scope.
    pub(crate) scope: Option<String>,
    /// `scope` given with several values, or `*` (docs/http-api.md).
    pub(crate) scope_union: Option<ScopeUnion>,
    pub(crate) period: Option<String>,
    pub(crate) limit: Option<usize>,
    pub(crate) offset: Option<usize>,
    pub(crate) radius: Option<usize>,
    pub(crate) rank: Option<RankStyle>,
    pub(crate) ids: Option<Vec<String>>,
}

impl Params {
    /// Checks `pairs` (decoded, in query-string order) for `route`.
    pub(crate) fn parse(pairs: &[(String, String)], route: Route) -> Result<Params, BadParam> {
        let mut params = Params::default();
        let mut seen: Vec<&str> = Vec::with_capacity(pairs.len());
        let mut scopes: Vec<&str> = Vec::new();
        for (name, raw) in pairs {
            let name = name.as_str();
            if !route.takes().contains(&name) {
                return Err(not_taken(name, route));
            }
            // `scope` repeats for a union of scopes (docs/http-api.md).
            if name == "scope" {
                scopes.push(raw);
                continue;
            }
            // A second value would silently win or lose; say so instead.
            if seen.contains(&name) {
                return Err(BadParam::new(
                    name,
                    format!("{name} is given more than once; give it once"),
                ));
            }
            seen.push(name);
            params.set(name, raw, route)?;
        }
        (params.scope, params.scope_union) = scope_choice(&scopes, route)?;
        Ok(params)
    }

    fn set(&mut self, name: &str, raw: &str, route: Route) -> Result<(), BadParam> {
        match name {
            "period" => self.period = Some(raw.to_string()),
            "limit" => self.limit = Some(count(name, raw, MAX_LIMIT)?),
            "offset" => self.offset = Some(count(name, raw, MAX_OFFSET)?),
            "radius" => self.radius = Some(count(name, raw, MAX_RADIUS)?),
            "rank" => self.rank = Some(choice(name, raw)?),
            "ids" => self.ids = Some(id_list(raw)?),
            // `parse` only passes names a route takes, all of which are above.
            other => return Err(not_taken(other, route)),
        }
        Ok(())
    }
}

/// The scope of a request from its `scope` values ([`ScopeUnion::choose`]);
/// `periods` lists one scope's periods.
fn scope_choice(
    given: &[&str],
    route: Route,
) -> Result<(Option<String>, Option<ScopeUnion>), BadParam> {
    let (one, union) = ScopeUnion::choose(given)?;
    if union.is_some() && route == Route::Periods {
        return Err(BadParam::new(
            "scope",
            "periods lists the periods of one scope; give scope once, without *",
        ));
    }
    Ok((one, union))
}

/// The error for a name the route does not take, telling a typo (not a
/// parameter at all) from a parameter of another route.
fn not_taken(name: &str, route: Route) -> BadParam {
    let takes = route.takes().join(", ");
    let message = if KNOWN.contains(&name) {
        format!(
            "{name} does not apply to {}; it takes: {takes}",
            route.name()
        )
    } else {
        format!(
            "unknown query parameter {name:?}; {} takes: {takes}",
            route.name()
        )
    };
    BadParam::new(name, message)
}

/// A whole number in `0..=max`. Anything else — letters, a sign, a fraction,
/// a number too large for any integer type — gets the same message, which
/// names the parameter, the range and what was given.
fn count(name: &str, raw: &str, max: usize) -> Result<usize, BadParam> {
    // Only ASCII digits: `parse` would also take a leading `+`.
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(out_of_range(name, raw, max));
    }
    match raw.parse::<usize>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(out_of_range(name, raw, max)),
    }
}

/// `ids=a,b,c`: the members, comma-separated (an id with a comma in it
/// goes in a `POST` body instead). The count is checked by the reader.
fn id_list(raw: &str) -> Result<Vec<String>, BadParam> {
    if raw.is_empty() {
        return Err(BadParam::new("ids", "ids must name at least one member"));
    }
    let ids: Vec<String> = raw.split(',').map(str::to_string).collect();
    if ids.iter().any(String::is_empty) {
        return Err(BadParam::new(
            "ids",
            format!("ids has an empty member id in {raw:?}"),
        ));
    }
    Ok(ids)
}

impl Choice for RankStyle {
    const VALUES: &'static [(&'static str, RankStyle)] = &[
        ("ordinal", RankStyle::Ordinal),
        ("competition", RankStyle::Competition),
        ("dense", RankStyle::Dense),
    ];
}

/// A parameter with a fixed set of values, such as `rank` (docs/http-api.md).
pub(crate) trait Choice: Sized + Copy + 'static {
    /// Each accepted spelling and its value, in the order the error lists them.
    const VALUES: &'static [(&'static str, Self)];
}

/// The value of an enumerated parameter; an unknown value is refused with
/// the list of accepted ones.
pub(crate) fn choice<T: Choice>(name: &str, raw: &str) -> Result<T, BadParam> {
    T::VALUES
        .iter()
        .find(|(spelling, _)| *spelling == raw)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let accepted: Vec<&str> = T::VALUES.iter().map(|(s, _)| *s).collect();
            BadParam::new(
                name,
                format!("{name} must be one of {}, got {raw:?}", accepted.join(", ")),
            )
        })
}

/// The ids of a `POST .../members` body: a JSON list of 1 to
/// [`MAX_BODY_IDS`] strings. Anything else is a 400 naming `ids`, as a bad
/// `ids=` would be; an item that is not a string, or one past the cap,
/// ends the reading there.
pub(crate) fn body_ids(body: &[u8]) -> Result<Vec<String>, BadParam> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(BadParam::new(
            "ids",
            "ids: the body is empty; send a JSON list of member ids",
        ));
    }
    let mut refused = None;
    let mut json = serde_json::Deserializer::from_slice(body);
    let read = IdList {
        refused: &mut refused,
    }
    .deserialize(&mut json)
    .and_then(|ids| json.end().map(|()| ids));
    match (read, refused) {
        (_, Some(why)) => Err(BadParam::new("ids", why)),
        (Err(e), None) => Err(BadParam::new(
            "ids",
            format!("ids: the body is not JSON: {e}"),
        )),
        (Ok(ids), None) if ids.is_empty() => {
            Err(BadParam::new("ids", "ids must name at least one member"))
        }
        (Ok(ids), None) => Ok(ids),
    }
}

/// The whole body: a list, read item by item. Why a body is refused is
/// kept in `refused` (serde's error would add a position to it).
struct IdList<'r> {
    refused: &'r mut Option<String>,
}

impl IdList<'_> {
    fn refuse<T, E: de::Error>(self, what: &str) -> Result<T, E> {
        *self.refused = Some(format!(
            "ids: the body must be a JSON list of member ids, not {what}"
        ));
        Err(E::custom("refused"))
    }
}

impl<'de> DeserializeSeed<'de> for IdList<'_> {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdList<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON list of member ids")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut ids = Vec::new();
        loop {
            if ids.len() == MAX_BODY_IDS {
                // Only whether another item follows is read, not the item.
                return match seq.next_element_seed(OverCap(self.refused))? {
                    None => Ok(ids),
                    Some(()) => Err(de::Error::custom("over the cap")),
                };
            }
            let item = Item {
                index: ids.len(),
                refused: &mut *self.refused,
            };
            match seq.next_element_seed(item)? {
                Some(id) => ids.push(id),
                None => return Ok(ids),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<String>, A::Error> {
        self.refuse("an object")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Vec<String>, E> {
        self.refuse("a string")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Vec<String>, E> {
        self.refuse("a number")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Vec<String>, E> {
        self.refuse("a number")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Vec<String>, E> {
        self.refuse("a number")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Vec<String>, E> {
        self.refuse("a boolean")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
        self.refuse("null")
    }
}

/// One item of the list: a string, or the body is refused naming its
/// index and what it is (a nested list or object is not read).
struct Item<'r> {
    index: usize,
    refused: &'r mut Option<String>,
}

impl Item<'_> {
    fn refuse<T, E: de::Error>(self, what: &str) -> Result<T, E> {
        *self.refused = Some(format!(
            "ids: item {} is not a string but {what}",
            self.index
        ));
        Err(E::custom("refused"))
    }
}

impl<'de> DeserializeSeed<'de> for Item<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Item<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member id (a string)")
    }

    fn visit_str<E: de::Error>(self, id: &str) -> Result<String, E> {
        Ok(id.to_string())
    }

    fn visit_string<E: de::Error>(self, id: String) -> Result<String, E> {
        Ok(id)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<String, A::Error> {
        self.refuse("a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<String, A::Error> {
        self.refuse("an object")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<String, E> {
        self.refuse("a number")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<String, E> {
        self.refuse("a number")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<String, E> {
        self.refuse("a number")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<String, E> {
        self.refuse("a boolean")
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        self.refuse("null")
    }
}

/// Stands for an item past [`MAX_BODY_IDS`]: called only when one follows,
/// it refuses the body without reading it.
struct OverCap<'r>(&'r mut Option<String>);

impl<'de> DeserializeSeed<'de> for OverCap<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        *self.0 = Some(format!(
            "ids takes at most {MAX_BODY_IDS} members; the body lists more"
        ));
        Err(de::Error::custom("over the cap"))
    }
}

/// The reader's query for `board` and `view` with the scope and period of
/// `p` (the counts and the rank style are the route's to take first).
pub(super) fn query(board: String, view: String, p: Params) -> reader::Query {
    reader::Query {
        board,
        view,
        scope: p.scope,
        scope_union: p.scope_union,
        period: p.period,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(q: &[(&str, &str)], route: Route) -> BadParam {
        match Params::parse(&pairs(q), route) {
            Err(e) => e,
            Ok(p) => panic!("{q:?} on {route:?} was accepted as {p:?}"),
        }
    }

    #[test]
    fn valid_counts_at_their_bounds_are_taken() {
        let p = Params::parse(
            &pairs(&[("limit", "1000"), ("offset", "4294967295"), ("scope", "s1")]),
            Route::Top,
        )
        .map_err(|e| e.message);
        assert_eq!(
            p,
            Ok(Params {
                scope: Some("s1".into()),
                limit: Some(1000),
                offset: Some(4_294_967_295),
                ..Params::default()
            })
        );
        let p = Params::parse(&pairs(&[("radius", "500")]), Route::Around);
        assert_eq!(p.map(|p| p.radius), Ok(Some(500)));
        assert_eq!(Params::parse(&[], Route::Member), Ok(Params::default()));
    }

    #[test]
    fn bad_counts_name_the_parameter_and_the_range() {
        for (name, raw, max) in [
            ("limit", "abc", "1000"),
            ("limit", "-1", "1000"),
            ("limit", "+5", "1000"),
            ("limit", "1.5", "1000"),
            ("limit", "", "1000"),
            ("limit", "1001", "1000"),
            ("offset", "-5", "4294967295"),
            ("offset", "4294967296", "4294967295"),
            ("offset", "9223372036854775808", "4294967295"),
            ("offset", "18446744073709551616", "4294967295"),
        ] {
            let e = err(&[(name, raw)], Route::Top);
            assert_eq!(e.param, name);
            assert_eq!(
                e.message,
                format!("{name} must be a whole number from 0 to {max}, got {raw:?}")
            );
        }
        let e = err(&[("radius", "501")], Route::Around);
        assert_eq!(
            (e.param.as_str(), e.message.as_str()),
            (
                "radius",
                "radius must be a whole number from 0 to 500, got \"501\""
            )
        );
    }

    #[test]
    fn unknown_misplaced_and_repeated_parameters_are_refused() {
        let e = err(&[("limit", "5"), ("limt", "5")], Route::Top);
        assert_eq!(e.param, "limt");
        assert_eq!(
            e.message,
            "unknown query parameter \"limt\"; top takes: scope, period, limit, offset, rank"
        );
        let e = err(&[("radius", "2")], Route::Top);
        assert_eq!(
            e.message,
            "radius does not apply to top; it takes: scope, period, limit, offset, rank"
        );
        let e = err(&[("limit", "5")], Route::Member);
        assert_eq!(e.param, "limit");
        let e = err(&[("limit", "5"), ("limit", "6")], Route::Top);
        assert_eq!(e.message, "limit is given more than once; give it once");
    }

    #[test]
    fn rank_and_ids_are_checked_where_they_are_taken() {
        let p = Params::parse(&pairs(&[("rank", "dense")]), Route::Around);
        assert_eq!(p.map(|p| p.rank), Ok(Some(RankStyle::Dense)));
        let e = err(&[("rank", "olympic")], Route::Top);
        assert_eq!(
            (e.param.as_str(), e.message.as_str()),
            (
                "rank",
                "rank must be one of ordinal, competition, dense, got \"olympic\""
            )
        );
        let p = Params::parse(&pairs(&[("ids", "a,b,a")]), Route::Members);
        assert_eq!(
            p.map(|p| p.ids),
            Ok(Some(vec!["a".into(), "b".into(), "a".into()]))
        );
        for bad in ["", "a,,b", "a,"] {
            assert_eq!(err(&[("ids", bad)], Route::Members).param, "ids");
        }
        // A POST carries its ids in the body only; other routes take none.
        assert_eq!(err(&[("ids", "a")], Route::MembersPost).param, "ids");
        assert_eq!(err(&[("ids", "a")], Route::Top).param, "ids");
        assert_eq!(err(&[("rank", "dense")], Route::Periods).param, "rank");
    }

    fn body_error(body: &str) -> String {
        match body_ids(body.as_bytes()) {
            Err(e) => {
                assert_eq!(e.param, "ids", "{body}");
                e.message
            }
            Ok(ids) => panic!("{body} was accepted as {ids:?}"),
        }
    }

    #[test]
    fn a_body_of_ids_is_a_json_list_of_strings() {
        assert_eq!(
            body_ids(br#" ["a", "b,c", "a", "\u00e9"] "#).map_err(|e| e.message),
            Ok(vec!["a".into(), "b,c".into(), "a".into(), "\u{e9}".into()])
        );
        for (body, says) in [
            ("", "ids: the body is empty; send a JSON list of member ids"),
            ("[]", "ids must name at least one member"),
            (
                r#"{"ids": ["a"]}"#,
                "ids: the body must be a JSON list of member ids, not an object",
            ),
            (
                r#""a""#,
                "ids: the body must be a JSON list of member ids, not a string",
            ),
            (
                "7",
                "ids: the body must be a JSON list of member ids, not a number",
            ),
            (
                "null",
                "ids: the body must be a JSON list of member ids, not null",
            ),
            (r#"["a", 1]"#, "ids: item 1 is not a string but a number"),
            (
                r#"["a", "b", ["c"]]"#,
                "ids: item 2 is not a string but a list",
            ),
            (r#"[{"a": 1}]"#, "ids: item 0 is not a string but an object"),
            ("[true]", "ids: item 0 is not a string but a boolean"),
            ("[null]", "ids: item 0 is not a string but null"),
        ] {
            assert_eq!(body_error(body), says, "{body}");
        }
        for bad in [r#"["a","#, r#"["a"] x"#, "[\"a\" \"b\"]", "nope"] {
            assert!(
                body_error(bad).starts_with("ids: the body is not JSON: "),
                "{bad}: {}",
                body_error(bad)
            );
        }
    }

    #[test]
    fn a_body_of_ids_stops_at_the_cap_and_at_the_first_non_string() {
        let ids = |n: usize| {
            let list: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
            serde_json::to_string(&list).unwrap_or_default()
        };
        assert_eq!(body_ids(ids(1000).as_bytes()).map(|v| v.len()), Ok(1000));
        let over = "ids takes at most 1000 members; the body lists more";
        assert_eq!(body_error(&ids(1001)), over);
        // What follows the cap is not read: not even whether it is JSON.
        let cut = format!("{},{{{{{{", ids(1000).trim_end_matches(']'));
        assert_eq!(body_error(&cut), over);
        // Nor what follows the first item that is not a string.
        let nested = format!("[{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(
            body_error(&nested),
            "ids: item 0 is not a string but a list"
        );
        let numbers = format!("[{}1]", "1,".repeat(30_000));
        assert_eq!(
            body_error(&numbers),
            "ids: item 0 is not a string but a number"
        );
        let late = format!("[\"a\",2,{}", "x".repeat(50_000));
        assert_eq!(
            body_error(&late),
            "ids: item 1 is not a string but a number"
        );
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Style {
        Ordinal,
        Dense,
    }

    impl Choice for Style {
        const VALUES: &'static [(&'static str, Style)] =
            &[("ordinal", Style::Ordinal), ("dense", Style::Dense)];
    }

    #[test]
    fn an_enumerated_parameter_lists_its_values() {
        assert_eq!(choice::<Style>("rank", "dense"), Ok(Style::Dense));
        assert_eq!(choice::<Style>("rank", "ordinal"), Ok(Style::Ordinal));
        let e = choice::<Style>("rank", "Dense").map(|_| ()).unwrap_err();
        assert_eq!(e.param, "rank");
        assert_eq!(
            e.message,
            "rank must be one of ordinal, dense, got \"Dense\""
        );
    }
}
