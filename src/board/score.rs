//! Score encoding (docs/score-encoding.md). The sorted-set score is always the
//! exact value; tie-break boards put a 12-hex-digit tie key in front of the
//! member so that Redis's order among equal scores (lexicographic by member)
//! is the tie-break order. Value and time never share the bits of one double.
//!
//! The same encoding is implemented in `src/sink/lua/apply.lua` (`enc`);
//! readers decode what the script wrote with [`TieKey::decode`].

use super::ranking::{Order, TieBreak};

/// Largest magnitude a score may have and stay exact: 2^53.
pub(crate) const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
/// Largest event time a tie key holds: 2^48 − 1 ms (year 10889).
pub(crate) const MAX_TIE_TS: i64 = (1 << 48) - 1;
/// Width of the tie key in hex digits.
pub(crate) const TIE_KEY_HEX: usize = 12;

/// How a board's tie key is derived from the time a member reached its score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TieKey {
    /// No tie key: members are stored as given.
    None,
    /// key = ts: with the rank order, later times rank first among equals.
    Ascending,
    /// key = 2^48−1−ts: earlier times rank first among equals.
    Descending,
}

impl TieKey {
    /// Rank lists read the zset in `order`; among equal scores Redis then
    /// orders members by bytes in the same direction, so "earliest first"
    /// needs a key that grows as time shrinks when reading descending.
    pub(crate) fn for_board(tie: TieBreak, order: Order) -> TieKey {
        match (tie, order) {
            (TieBreak::None, _) => TieKey::None,
            (TieBreak::Earliest, Order::Desc) | (TieBreak::Latest, Order::Asc) => {
                TieKey::Descending
            }
            (TieBreak::Latest, Order::Desc) | (TieBreak::Earliest, Order::Asc) => TieKey::Ascending,
        }
    }

    /// The code passed to the Lua script.
    pub(crate) fn code(self) -> &'static str {
        match self {
            TieKey::None => "n",
            TieKey::Ascending => "a",
            TieKey::Descending => "d",
        }
    }

    fn key(self, ts: i64) -> i64 {
        match self {
            TieKey::Descending => MAX_TIE_TS - ts,
            _ => ts,
        }
    }

    /// The stored member for `member` whose score was reached at `ts`.
    pub(crate) fn encode(self, member: &str, ts: i64) -> String {
        match self {
            TieKey::None => member.to_string(),
            _ => format!("{:012x}{member}", self.key(ts.clamp(0, MAX_TIE_TS))),
        }
    }

    /// Splits a stored member into the member and the time it reached its score.
    pub(crate) fn decode(self, stored: &str) -> Option<(&str, Option<i64>)> {
        match self {
            TieKey::None => Some((stored, None)),
            _ => {
                let hex = stored.get(..TIE_KEY_HEX)?;
                let k = i64::from_str_radix(hex, 16).ok()?;
                Some((&stored[TIE_KEY_HEX..], Some(self.key(k))))
            }
        }
    }
}

/// Whether a value can be a score without losing precision.
pub(crate) fn is_exact(v: f64) -> bool {
    v.is_finite() && v.abs() <= MAX_EXACT
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encoding_round_trips(m in "\\PC{0,20}", ts in 0i64..=MAX_TIE_TS) {
            for k in [TieKey::Ascending, TieKey::Descending, TieKey::None] {
                let e = k.encode(&m, ts);
                let (dm, dts) = k.decode(&e).unwrap();
                prop_assert_eq!(dm, m.as_str());
                if k != TieKey::None { prop_assert_eq!(dts, Some(ts)); }
            }
        }

        #[test]
        fn byte_order_of_equal_scores_is_the_tie_order(a in 0i64..=MAX_TIE_TS, b in 0i64..=MAX_TIE_TS, m in "[a-z]{1,5}", n in "[a-z]{1,5}") {
            prop_assume!(a != b);
            // Descending read (ZREVRANGE) puts the greater member first.
            let first_desc = |k: TieKey| {
                if k.encode(&m, a).as_bytes() > k.encode(&n, b).as_bytes() { a } else { b }
            };
            prop_assert_eq!(first_desc(TieKey::for_board(TieBreak::Earliest, Order::Desc)), a.min(b));
            prop_assert_eq!(first_desc(TieKey::for_board(TieBreak::Latest, Order::Desc)), a.max(b));
        }
    }
}
