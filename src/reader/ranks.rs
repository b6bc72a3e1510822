//! Rank styles (docs/http-api.md): `ordinal` (1,2,3,4), `competition` (1,1,3) and
//! `dense` (1,1,2), where "tied" means equal values (the stored score; for
//! tie-break boards the time only orders members within a tie).
//!
//! This module owns the one place a board view's ranks are turned into a
//! style: [`Styler`] takes entries with ordinal ranks and what Redis or the
//! archive counted about the scores (how many members, or distinct scores,
//! are strictly better), and gives each entry its rank in the style. A board
//! kind with another notion of "equal values" (composite boards) only has
//! to supply those counts.
//!
//! The live counts come from `ranks.lua`, a read script run with `EVALSHA`
//! (loaded on first use and again after a Redis restart): competition is
//! O(log n) per distinct score (composite boards: a binary search inside
//! the score's block, O(log b log n)); dense is the value's rank in the
//! view's dense-rank index `K:v`, O(log n). A view without a complete index
//! (board option `dense_ranks = false`, or members from before the index)
//! walks the distinct scores above the target one `ZRANGE ... BYSCORE
//! LIMIT 0 1` at a time, O(d log n) for d distinct better scores, at most
//! [`DENSE_BUDGET`] steps per call so one read never blocks Redis for long
//! (a longer walk continues in further calls, each atomic on its own);
//! composite boards have no walk and refuse dense ranks then.

use redis::Value;
use serde::Serialize;

use super::script::ReadScript;
use crate::sink::store::{Store, StoreError};

/// The read script.
/// The read script, behind the prelude it shares with the apply script
/// (how members are stored, the dense-rank index entries).
pub(crate) const RANKS_LUA: &str = concat!(
    include_str!("../sink/lua/composite.lua"),
    include_str!("ranks.lua")
);

/// Most dense steps one script call takes: a step costs about 7 µs of
/// Redis (measured on a million-member board), so a call blocks Redis for
/// about 7 ms at most.
pub(crate) const DENSE_BUDGET: u64 = 1_000;

/// How ranks are numbered among equal values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RankStyle {
    /// 1, 2, 3, 4: every member its own rank (ties in stored order).
    #[default]
    Ordinal,
    /// 1, 1, 3: equal values share a rank, the next ones are skipped.
    Competition,
    /// 1, 1, 2: equal values share a rank, none are skipped.
    Dense,
}

impl RankStyle {
    pub(crate) fn name(self) -> &'static str {
        match self {
            RankStyle::Ordinal => "ordinal",
            RankStyle::Competition => "competition",
            RankStyle::Dense => "dense",
        }
    }

    /// Every style, in the order errors list them.
    pub(crate) const ALL: [RankStyle; 3] =
        [RankStyle::Ordinal, RankStyle::Competition, RankStyle::Dense];

    /// The style named `raw`, if any.
    pub(crate) fn parse(raw: &str) -> Option<RankStyle> {
        RankStyle::ALL.into_iter().find(|s| s.name() == raw)
    }
}

/// Gives contiguous entries (a page, in rank order) their ranks in a style.
/// `better` is what was counted for the first entry's value: members with
/// a strictly better value (competition) or distinct better values (dense).
/// Within a page, a new value's competition rank is its first holder's
/// ordinal rank, and its dense rank is one more than the previous value's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Styler {
    style: RankStyle,
    better: u64,
}

impl Styler {
    pub fn new(style: RankStyle, better: u64) -> Styler {
        Styler { style, better }
    }

    /// `ranked`: `(ordinal rank, value)` in rank order; returns the styled
    /// ranks in the same order.
    pub fn page<V: PartialEq + Copy>(&self, ranked: &[(u64, V)]) -> Vec<u64> {
        let mut out = Vec::with_capacity(ranked.len());
        let mut current: Option<(V, u64)> = None;
        for &(ordinal, value) in ranked {
            let rank = match (self.style, current) {
                (RankStyle::Ordinal, _) => ordinal,
                (_, Some((v, r))) if v == value => r,
                (RankStyle::Competition, Some(_)) => ordinal,
                (RankStyle::Dense, Some((_, r))) => r + 1,
                (_, None) => self.better + 1,
            };
            current = Some((value, rank));
            out.push(rank);
        }
        out
    }
}

static SCRIPT: ReadScript = ReadScript::new("ranks", RANKS_LUA);

/// The read script: one `EVALSHA` (plus a `SCRIPT LOAD` the first time,
/// or when Redis restarted and forgot it).
pub(crate) async fn eval(
    store: &Store,
    keys: &[&str],
    args: &[String],
) -> Result<Value, StoreError> {
    SCRIPT.eval(store, keys, args).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-made: values 50, 50, 40, 40, 40, 30 from ordinal rank 1.
    const BOARD: [(u64, i64); 6] = [(1, 50), (2, 50), (3, 40), (4, 40), (5, 40), (6, 30)];

    #[test]
    fn styles_follow_the_hand_made_table() {
        let page = |style, better| Styler::new(style, better).page(&BOARD);
        assert_eq!(page(RankStyle::Ordinal, 0), [1, 2, 3, 4, 5, 6]);
        assert_eq!(page(RankStyle::Competition, 0), [1, 1, 3, 3, 3, 6]);
        assert_eq!(page(RankStyle::Dense, 0), [1, 1, 2, 2, 2, 3]);
        // docs/http-api.md's own examples.
        let spec = [(1, 2), (2, 2), (3, 1)];
        assert_eq!(
            Styler::new(RankStyle::Competition, 0).page(&spec),
            [1, 1, 3]
        );
        assert_eq!(Styler::new(RankStyle::Dense, 0).page(&spec), [1, 1, 2]);
    }

    #[test]
    fn a_page_that_starts_inside_a_tie_takes_the_counts_of_its_first_value() {
        // Board 100, 90, 90 | 90, 80 (page 2 is ranks 4-5, its first value
        // 90 has one better member and one better distinct value).
        let page2 = [(4, 90), (5, 80)];
        assert_eq!(Styler::new(RankStyle::Competition, 1).page(&page2), [2, 5]);
        assert_eq!(Styler::new(RankStyle::Dense, 1).page(&page2), [2, 3]);
        assert_eq!(Styler::new(RankStyle::Ordinal, 1).page(&page2), [4, 5]);
        assert!(Styler::new(RankStyle::Dense, 7).page::<i64>(&[]).is_empty());
    }

    #[test]
    fn styles_are_parsed_by_name_only() {
        for s in RankStyle::ALL {
            assert_eq!(RankStyle::parse(s.name()), Some(s));
        }
        assert_eq!(RankStyle::parse("Dense"), None);
        assert_eq!(RankStyle::default(), RankStyle::Ordinal);
    }

    #[test]
    fn the_script_calls_only_commands_rankflow_is_granted() {
        let granted: Vec<&str> = crate::sink::store::ACL_RULES
            .split_whitespace()
            .filter_map(|r| r.strip_prefix('+'))
            .collect();
        let calls = RANKS_LUA.split("redis.call(\"").skip(1);
        let mut n = 0;
        for call in calls {
            let name = call.split('"').next().unwrap_or_default();
            assert!(
                granted.contains(&name.to_ascii_lowercase().as_str()),
                "{name} is not granted"
            );
            n += 1;
        }
        assert!(n >= 8, "only {n} calls found");
        assert!(granted.contains(&"evalsha") && granted.contains(&"script|load"));
    }
}
