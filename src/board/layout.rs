//! Composite ordering (docs/score-encoding.md): how a member's
//! tuple of exact fields becomes one sorted-set entry whose Redis order is
//! the rank order, and back. Pure: no Redis, no I/O.
//!
//! The score is the first field's value (an exact double; a missing value
//! is -inf on a `desc` board and +inf on an `asc` one, so it lists last).
//! The stored member is `<code of field 2>..<code of field k>[<tie key>]<member>`,
//! each code [`CODE_HEX`] hex digits. Among equal scores Redis orders members
//! by bytes, in the listing direction of the first field (`ZREVRANGE` for
//! `desc`, `ZRANGE` for `asc`); each code is built so that this byte order is
//! the field's rank order, a missing value last. Every field is decoded back
//! from the stored member alone.
//!
//! The same encoding is written by `src/sink/lua/apply.lua` (`cenc`); the two
//! must change together.
//!
//! It imports only the ranking enums and the tie key, so the compiled board
//! (`model`), which holds a [`Layout`], can import it; callers outside the
//! board folder reach it through `composite`, which re-exports it next to
//! the reader helpers that need the compiled board.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::ranking::{Aggregate, Order};
use super::score::{MAX_EXACT, TIE_KEY_HEX, TieKey};

/// Most fields a composite board may have.
pub(crate) const MAX_FIELDS: usize = 4;
/// Width of one field's code in the stored member, in hex digits.
pub(crate) const CODE_HEX: usize = 15;
/// Largest magnitude of a field value: 2^53, every integer up to it exact.
pub(crate) const MAX_VALUE: i64 = 1 << 53;
/// All 15 hex digits set: the other extreme code.
const ALL_F: i64 = (1 << (4 * CODE_HEX)) - 1;
/// The first hex digit's place: a code is a sign digit (1: negative,
/// 2: zero or positive) and 14 digits of `2^53 + v` or of `v`. Neither part
/// ever exceeds 2^53, so the Lua script computes it with exact doubles.
const SIGN: i64 = 1 << (4 * (CODE_HEX - 1));

/// One field's values per event or per member, in field order; `None` when
/// the field has no value (its filter failed, or never matched).
pub type Values = [Option<i64>; MAX_FIELDS];

/// How one field ranks: its name and order. (Its expression, filter and
/// aggregate live in the compiled board.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldOrder {
    pub(crate) name: String,
    pub(crate) order: Order,
    pub(crate) aggregate: Aggregate,
}

/// The encoding of one composite board: its fields in rank order and the
/// tie key that follows the codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) fields: Vec<FieldOrder>,
    pub(crate) tie_key: TieKey,
}

/// Whether `v` is an integer every field can hold exactly.
pub(crate) fn in_range(v: f64) -> bool {
    v.fract() == 0.0 && v.abs() <= MAX_EXACT
}

impl Layout {
    /// The listing direction: the first field's order.
    pub(crate) fn direction(&self) -> Order {
        self.fields.first().map_or(Order::Desc, |f| f.order)
    }

    /// Length of the code prefix (fields 2..k), in bytes.
    pub(crate) fn codes_len(&self) -> usize {
        CODE_HEX * self.fields.len().saturating_sub(1)
    }

    /// Bytes before the member: codes, then the tie key if any.
    fn prefix_len(&self) -> usize {
        self.codes_len()
            + match self.tie_key {
                TieKey::None => 0,
                _ => TIE_KEY_HEX,
            }
    }

    /// The sorted-set score of a tuple: the first field, or the infinity
    /// that lists last.
    #[cfg(test)]
    pub(crate) fn score(&self, values: &Values) -> f64 {
        match values[0] {
            Some(v) => v as f64,
            None => match self.direction() {
                Order::Desc => f64::NEG_INFINITY,
                Order::Asc => f64::INFINITY,
            },
        }
    }

    /// The code of field `i` (≥ 1). Listed first = greater bytes when the
    /// direction is `desc`, smaller when `asc`; so the digits are
    /// complemented when the field's order differs from the direction,
    /// and "missing" is the code listed last (all 0 or all f).
    fn code(&self, i: usize, v: Option<i64>) -> i64 {
        let dir = self.direction();
        match v {
            None => match dir {
                Order::Desc => 0,
                Order::Asc => ALL_F,
            },
            Some(v) => {
                let v = v.clamp(-MAX_VALUE, MAX_VALUE);
                let u = if v < 0 {
                    SIGN + (MAX_VALUE + v)
                } else {
                    2 * SIGN + v
                };
                if self.fields[i].order == dir {
                    u
                } else {
                    ALL_F - u
                }
            }
        }
    }

    fn value_of(&self, i: usize, code: i64) -> Option<i64> {
        let dir = self.direction();
        let missing = match dir {
            Order::Desc => 0,
            Order::Asc => ALL_F,
        };
        if code == missing {
            return None;
        }
        let u = if self.fields[i].order == dir {
            code
        } else {
            ALL_F - code
        };
        let rest = u % SIGN;
        match u / SIGN {
            1 if rest < MAX_VALUE => Some(rest - MAX_VALUE),
            2 if rest <= MAX_VALUE => Some(rest),
            _ => None,
        }
    }

    /// The stored member of `member` with `values`, its tuple reached at
    /// `tie_ts` (used only when the board has a tie key).
    pub(crate) fn encode(&self, member: &str, values: &Values, tie_ts: i64) -> String {
        let mut out = String::with_capacity(self.prefix_len() + member.len());
        for (i, v) in values.iter().enumerate().take(self.fields.len()).skip(1) {
            let _ = write!(out, "{:015x}", self.code(i, *v));
        }
        out.push_str(&self.tie_key.encode(member, tie_ts));
        out
    }

    /// The member and every field of a stored entry (`score` is its
    /// sorted-set score); `None` if `stored` is not of this layout.
    pub(crate) fn decode<'s>(&self, stored: &'s str, score: f64) -> Option<(&'s str, Values)> {
        let mut values: Values = [None; MAX_FIELDS];
        values[0] = in_range(score).then_some(score as i64);
        for (i, slot) in values
            .iter_mut()
            .enumerate()
            .take(self.fields.len())
            .skip(1)
        {
            let hex = stored.get(CODE_HEX * (i - 1)..CODE_HEX * i)?;
            let code = i64::from_str_radix(hex, 16).ok()?;
            *slot = self.value_of(i, code);
        }
        let rest = stored.get(self.codes_len()..)?;
        let (member, _) = self.tie_key.decode(rest)?;
        Some((member, values))
    }

    /// The bytes every member of `stored`'s tie group shares: members with
    /// the same score and this prefix have all fields equal (competition
    /// and dense ranks count such groups). With the score, the group is
    /// the lex range `[prefix`, `(prefix\xff` among entries of that score.
    #[cfg(test)]
    pub(crate) fn tie_group<'s>(&self, stored: &'s str) -> Option<&'s str> {
        stored.get(..self.codes_len())
    }

    /// The fields of a decoded entry, named, for the API's `"fields"`.
    pub(crate) fn named(&self, values: &Values) -> FieldValues {
        FieldValues(
            self.fields
                .iter()
                .zip(values)
                .map(|(f, v)| (f.name.clone(), *v))
                .collect(),
        )
    }

    /// The per-field spec the apply script reads: `c`, then per field its
    /// aggregate (`s` sum, `x` max, `n` min, `l` last) and whether its
    /// code is complemented (`c`) or not (`p`).
    pub(crate) fn script_code(&self) -> String {
        let dir = self.direction();
        let mut out = String::from("c");
        for f in &self.fields {
            out.push(match f.aggregate {
                Aggregate::Sum => 's',
                Aggregate::Max => 'x',
                Aggregate::Min => 'n',
                Aggregate::Last => 'l',
            });
            out.push(if f.order == dir { 'p' } else { 'c' });
        }
        out.push(match dir {
            Order::Desc => 'd',
            Order::Asc => 'a',
        });
        out
    }
}

impl Layout {
    /// What a window of this board keeps per field, for `rankflow check`.
    /// Every rule is exact in a window: buckets leave oldest first, so a
    /// `last` field whose latest event leaves has no older event left.
    pub(crate) fn window_description(&self) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|f| {
                let kept = match f.aggregate {
                    Aggregate::Sum => "the total of its events in the window (a leaving bucket is subtracted)",
                    Aggregate::Max => "the greatest of its events in the window (per-member best-bucket index K:ord)",
                    Aggregate::Min => "the least of its events in the window (per-member best-bucket index K:ord)",
                    Aggregate::Last => "the value of its latest event in the window, exact",
                };
                format!("{} = {kept}", f.name)
            })
            .collect();
        format!(
            "windows keep {}; a field no event in the window gave has no value, and a member with no field left leaves the window",
            fields.join(", ")
        )
    }
}

/// A member's fields by name, in field order, serialized as a JSON object
/// (`null` for a field without a value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldValues(pub Vec<(String, Option<i64>)>);

impl Serialize for FieldValues {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// A member's state in a composite view as kept in the helper hash `K:f`:
/// per field `value:time` (the time the field reached its value, by the
/// aggregate rules of src/sink/aggregate.rs) or empty, joined by `;`.
pub(crate) fn parse_state(text: &str) -> Option<[Option<(i64, i64)>; MAX_FIELDS]> {
    let mut out = [None; MAX_FIELDS];
    for (i, part) in text.split(';').enumerate() {
        if i >= MAX_FIELDS {
            return None;
        }
        if part.is_empty() {
            continue;
        }
        let (v, t) = part.split_once(':')?;
        out[i] = Some((v.parse().ok()?, t.parse().ok()?));
    }
    Some(out)
}

impl Layout {
    /// The stored member of `member` from its `K:f` state (the reader uses
    /// it to find a member's rank without scanning).
    pub(crate) fn stored_from_state(&self, member: &str, state: &str) -> Option<String> {
        let parsed = parse_state(state)?;
        let mut values: Values = [None; MAX_FIELDS];
        let mut tie_ts = 0;
        for (i, p) in parsed.iter().enumerate() {
            if let Some((v, t)) = p {
                values[i] = Some(*v);
                tie_ts = tie_ts.max(*t);
            }
        }
        Some(self.encode(member, &values, tie_ts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::ranking::TieBreak;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn layout(orders: &[Order], tie: TieBreak) -> Layout {
        Layout {
            fields: orders
                .iter()
                .enumerate()
                .map(|(i, o)| FieldOrder {
                    name: format!("f{i}"),
                    order: *o,
                    aggregate: Aggregate::Sum,
                })
                .collect(),
            tie_key: TieKey::for_board(tie, orders[0]),
        }
    }

    /// The reference rule, written from docs/score-encoding.md without the encoding:
    /// fields in order (better value first, missing after every value),
    /// then tie time (per `tie_break`), then member bytes.
    fn reference(
        l: &Layout,
        tie: TieBreak,
        a: &(String, Values, i64),
        b: &(String, Values, i64),
    ) -> Ordering {
        for (i, f) in l.fields.iter().enumerate() {
            let c = match (a.1[i], b.1[i]) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => match f.order {
                    Order::Desc => y.cmp(&x),
                    Order::Asc => x.cmp(&y),
                },
            };
            if c != Ordering::Equal {
                return c;
            }
        }
        let t = match tie {
            TieBreak::None => Ordering::Equal,
            TieBreak::Earliest => a.2.cmp(&b.2),
            TieBreak::Latest => b.2.cmp(&a.2),
        };
        // Redis lists equal tuples by member bytes in the listing
        // direction: descending for `desc` boards.
        t.then_with(|| match l.direction() {
            Order::Desc => b.0.as_bytes().cmp(a.0.as_bytes()),
            Order::Asc => a.0.as_bytes().cmp(b.0.as_bytes()),
        })
    }

    /// Redis's listing order of (score, member) pairs in `dir`.
    fn redis_order(dir: Order, a: &(f64, String), b: &(f64, String)) -> Ordering {
        let asc =
            a.0.partial_cmp(&b.0)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()));
        match dir {
            Order::Asc => asc,
            Order::Desc => asc.reverse(),
        }
    }

    fn value() -> impl Strategy<Value = Option<i64>> {
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(MAX_VALUE)),
            1 => Just(Some(-MAX_VALUE)),
            1 => Just(Some(0)),
            4 => (-3i64..3).prop_map(Some),
            2 => (-MAX_VALUE..=MAX_VALUE).prop_map(Some),
        ]
    }

    fn order() -> impl Strategy<Value = Order> {
        prop_oneof![Just(Order::Desc), Just(Order::Asc)]
    }

    fn tie() -> impl Strategy<Value = TieBreak> {
        prop_oneof![
            Just(TieBreak::None),
            Just(TieBreak::Earliest),
            Just(TieBreak::Latest)
        ]
    }

    proptest! {
        #[test]
        fn redis_order_of_encoded_entries_is_the_rank_order(
            orders in prop::collection::vec(order(), 1..=MAX_FIELDS),
            tie in tie(),
            rows in prop::collection::vec(
                (prop::collection::vec(value(), MAX_FIELDS), 0i64..4, "[a-c]{1,2}"), 2..12),
        ) {
            let l = layout(&orders, tie);
            let mut seen = std::collections::HashSet::new();
            let tuples: Vec<(String, Values, i64)> = rows
                .into_iter()
                .filter(|(_, _, m)| seen.insert(m.clone()))
                .map(|(v, t, m)| {
                    let mut values: Values = [None; MAX_FIELDS];
                    values[..orders.len()].copy_from_slice(&v[..orders.len()]);
                    (m, values, t)
                })
                .collect();
            let mut expected = tuples.clone();
            expected.sort_by(|a, b| reference(&l, tie, a, b));
            let mut encoded: Vec<(f64, String)> = tuples
                .iter()
                .map(|(m, v, t)| (l.score(v), l.encode(m, v, *t)))
                .collect();
            encoded.sort_by(|a, b| redis_order(l.direction(), a, b));
            let decoded: Vec<(String, Values)> = encoded
                .iter()
                .map(|(s, e)| {
                    let (m, v) = l.decode(e, *s).expect("decodes");
                    (m.to_string(), v)
                })
                .collect();
            let want: Vec<(String, Values)> =
                expected.into_iter().map(|(m, v, _)| (m, v)).collect();
            prop_assert_eq!(decoded, want);
        }

        #[test]
        fn every_field_and_the_member_round_trip(
            orders in prop::collection::vec(order(), 1..=MAX_FIELDS),
            tie in tie(),
            v in prop::collection::vec(value(), MAX_FIELDS),
            t in 0i64..(1 << 40),
            m in "\\PC{1,12}",
        ) {
            let l = layout(&orders, tie);
            let mut values: Values = [None; MAX_FIELDS];
            values[..orders.len()].copy_from_slice(&v[..orders.len()]);
            let stored = l.encode(&m, &values, t);
            let (dm, dv) = l.decode(&stored, l.score(&values)).unwrap();
            prop_assert_eq!(dm, m.as_str());
            prop_assert_eq!(dv, values);
            // Equal tuples share the tie group; the group is the codes.
            let other = l.encode("zz", &values, t + 1);
            prop_assert_eq!(l.tie_group(&stored), l.tie_group(&other));
            prop_assert_eq!(l.tie_group(&stored).map(str::len), Some(l.codes_len()));
        }
    }

    #[test]
    fn codes_are_fixed_width_and_missing_is_the_extreme() {
        let l = layout(&[Order::Desc, Order::Asc, Order::Desc], TieBreak::None);
        let s = l.encode("m", &[Some(1), None, None, None], 0);
        assert_eq!(s, format!("{}{}m", "0".repeat(15), "0".repeat(15)));
        let s = l.encode("m", &[Some(1), Some(MAX_VALUE), Some(-MAX_VALUE), None], 0);
        assert_eq!(s.len(), 31);
        assert_eq!(l.score(&[None; MAX_FIELDS]), f64::NEG_INFINITY);
        let asc = layout(&[Order::Asc, Order::Asc], TieBreak::None);
        assert_eq!(asc.encode("m", &[None; MAX_FIELDS], 0), "fffffffffffffffm");
        assert_eq!(asc.score(&[None; MAX_FIELDS]), f64::INFINITY);
        assert_eq!(l.script_code(), "cspscspd");
    }

    /// The worked example of docs/score-encoding.md, computed by hand there.
    #[test]
    fn the_documented_example_encodes_as_written() {
        let l = layout(&[Order::Desc, Order::Asc, Order::Asc], TieBreak::None);
        let values = [Some(5), Some(97), Some(1_763_700_123_456), None];
        assert_eq!(
            l.encode("u1", &values, 0),
            "dffffffffffff9edfffe655b47d8bfu1"
        );
        let plain = layout(&[Order::Desc, Order::Desc], TieBreak::None);
        for (v, code) in [
            (-1, "11fffffffffffff"),
            (0, "200000000000000"),
            (MAX_VALUE, "220000000000000"),
            (-MAX_VALUE, "100000000000000"),
        ] {
            assert_eq!(plain.encode("", &[Some(0), Some(v), None, None], 0), code);
        }
    }

    #[test]
    fn the_window_description_names_what_each_rule_keeps() {
        let mut l = layout(
            &[Order::Desc, Order::Asc, Order::Desc, Order::Asc],
            TieBreak::None,
        );
        let rules = [
            Aggregate::Sum,
            Aggregate::Max,
            Aggregate::Min,
            Aggregate::Last,
        ];
        for (f, rule) in l.fields.iter_mut().zip(rules) {
            f.aggregate = rule;
        }
        let text = l.window_description();
        for says in [
            "f0 = the total of its events in the window",
            "f1 = the greatest of its events",
            "f2 = the least of its events",
            "f3 = the value of its latest event in the window, exact",
        ] {
            assert!(text.contains(says), "{says}: {text}");
        }
    }

    #[test]
    fn state_text_gives_the_stored_member() {
        let l = layout(&[Order::Desc, Order::Asc], TieBreak::Earliest);
        let state = "5:100;97:250";
        let want = l.encode("u1", &[Some(5), Some(97), None, None], 250);
        assert_eq!(l.stored_from_state("u1", state).as_deref(), Some(&*want));
        assert_eq!(parse_state(";3:1"), Some([None, Some((3, 1)), None, None]));
        assert_eq!(parse_state("x"), None);
        assert!(!in_range(0.5) && !in_range(MAX_EXACT * 2.0) && in_range(-MAX_EXACT));
    }
}
