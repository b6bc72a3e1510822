//! One read of a view shared by many readers of it ([`Sheet`]): the live
//! views' pollers (docs/http-api.md, "Live views") read a board view once per
//! tick for every stream that follows it, whatever page (`limit`,
//! `offset`) and rank style each asks for, and each stream then takes its
//! own page ([`Sheet::page`]) or its member's place ([`Sheet::near`]) from
//! it.
//!
//! The pages asked for are read as *runs* ([`runs`]): contiguous ranges of
//! ranks, pages less than [`GAP`] ranks apart read as one, so many pages
//! near each other cost one `ZRANGE`. A run's competition and dense ranks
//! come from the count of its first value (one script call for all runs,
//! `ranks.lua`), the rest follow from the run itself ([`Styler`]): a page
//! that starts inside a tie takes its ranks from the tie's first member,
//! read or counted.

use super::answer::{Entry, List};
use super::error::{BadParam, ReadError};
use super::query::MAX_LIMIT;
use super::ranks::RankStyle;
use crate::sink::store::StoreError;

/// Pages fewer ranks apart than this are read as one run: the ranks in
/// between cost less to read than another command.
pub(super) const GAP: u64 = MAX_LIMIT as u64;

/// The rank styles a shared read numbers, besides ordinal ranks (which
/// every read has).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Styles {
    pub(super) competition: bool,
    pub(super) dense: bool,
}

impl Styles {
    /// The styles that number any of `styles`.
    pub(crate) fn of(styles: impl IntoIterator<Item = RankStyle>) -> Styles {
        let mut out = Styles::default();
        for s in styles {
            match s {
                RankStyle::Ordinal => {}
                RankStyle::Competition => out.competition = true,
                RankStyle::Dense => out.dense = true,
            }
        }
        out
    }

    /// Whether any rank needs counting (a script call) rather than reading.
    pub(super) fn counted(self) -> bool {
        self.competition || self.dense
    }

    /// The read script's style argument (`runs` mode).
    pub(super) fn arg(self) -> &'static str {
        match (self.competition, self.dense) {
            (true, true) => "both",
            (true, false) => "competition",
            (false, true) => "dense",
            (false, false) => "ordinal",
        }
    }
}

/// Ranks `start ..= stop` (0-based) read at once: the entries found there
/// (the view may end before `stop`), with ordinal ranks, and their ranks
/// in the styles counted (empty when not asked for).
pub(super) struct Run {
    pub(super) start: u64,
    pub(super) stop: u64,
    pub(super) entries: Vec<Entry>,
    pub(super) competition: Vec<u64>,
    pub(super) dense: Vec<u64>,
}

/// One read of a view for several pages.
pub(crate) struct Sheet {
    /// The list every page shows (board, view, period, scopes, total,
    /// source), without entries.
    pub(super) head: List,
    /// In rank order, apart.
    pub(super) runs: Vec<Run>,
    /// A past period whose key is gone: its pages are read from the
    /// archive, one by one (it can no longer change).
    pub(super) archived: bool,
    /// How far dense ranks could be counted, when they were asked for; the
    /// other styles are not affected.
    pub(super) dense: DenseLimit,
}

/// What bounds the dense ranks of a shared read, so that each page (or
/// member) is refused exactly when a read of it alone would be, whatever
/// other streams share the read.
#[derive(Debug, Clone, Default)]
pub(super) struct DenseLimit {
    /// Why some runs have no dense ranks: a composite board's view without
    /// its index (none has), or a walk that would go deeper than `[http]
    /// max_read_entries` (the runs past its reach have none).
    pub(super) refused: Option<BadParam>,
    /// The dense ranks were walked (the view has no index) with this
    /// budget: a page whose first entry has that many distinct values or
    /// more ahead of it is refused, as its own read would be, even when a
    /// run from higher up numbered it.
    pub(super) walked: Option<u64>,
}

/// The refusal of a dense rank that would walk more than `max` distinct
/// values of `board` (`[http] max_read_entries`).
pub(super) fn walk_too_long(board: &str, max: u64) -> BadParam {
    BadParam::new(
        "rank",
        format!(
            "rank=dense here would walk more than {max} distinct values of board {board} one at a time (this view has no dense-rank index), more entries than one read may walk ([http] max_read_entries): use rank=competition or rank=ordinal, or raise the setting"
        ),
    )
}

/// One member's place on a [`Sheet`] read around it.
pub(crate) struct Near {
    /// Members ahead of it (its 0-based ordinal rank).
    pub(crate) ordinal: u64,
    /// Its entry, ranked in the style asked for.
    pub(crate) entry: Entry,
    /// The members read ahead of it, in rank order.
    pub(crate) ahead: Vec<String>,
    /// The members read behind it, in rank order.
    pub(crate) behind: Vec<String>,
    /// Whether `ahead` is every member ahead of it (the read started at
    /// the top).
    pub(crate) complete: bool,
}

/// The runs that cover `windows` (0-based start, count): each page's ranks
/// `start ..= start + count - 1`, sorted, pages closer than [`GAP`] merged.
/// Empty pages need no run.
pub(super) fn runs(windows: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = windows
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|&(start, count)| (start, start + count - 1))
        .collect();
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, stop) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1.saturating_add(GAP) => last.1 = last.1.max(stop),
            _ => out.push((start, stop)),
        }
    }
    out
}

/// Most ranks one shared read of a view covers, its runs together (the
/// ranks between pages merged into one run included): ten full pages, so
/// that what streams ask for cannot make a poller's read grow without
/// bound; `[http] max_read_entries` lowers it.
pub(crate) const MAX_SHARED: u64 = 10 * MAX_LIMIT as u64;

/// The ranks a shared read of `windows` covers.
fn covered(windows: &[(u64, u64)]) -> u64 {
    runs(windows).iter().map(|(a, b)| b - a + 1).sum()
}

/// How many of `windows`, taken in the order given, one shared read
/// covering at most `max` ranks can serve: the longest such prefix.
pub(crate) fn fitting(windows: &[(u64, u64)], max: u64) -> usize {
    // Adding a page never makes the runs shorter: binary search.
    let (mut lo, mut hi) = (0, windows.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if covered(&windows[..mid]) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn not_read(what: &str) -> ReadError {
    StoreError::Protocol(format!("a shared read of the view did not cover {what}")).into()
}

impl Sheet {
    /// Whether the pages must be read from the archive instead.
    pub(crate) fn archived(&self) -> bool {
        self.archived
    }

    /// The list without entries: board, view, period, scopes, total, source.
    pub(crate) fn head(&self) -> &List {
        &self.head
    }

    /// The ranks of `run`'s entries in `style`.
    fn ranks(&self, run: &Run, style: RankStyle) -> Result<Vec<u64>, ReadError> {
        let styled = match style {
            RankStyle::Ordinal => return Ok(run.entries.iter().map(|e| e.rank).collect()),
            RankStyle::Competition => &run.competition,
            RankStyle::Dense => &run.dense,
        };
        if styled.len() == run.entries.len() {
            return Ok(styled.clone());
        }
        match (&self.dense.refused, style) {
            (Some(refused), RankStyle::Dense) => Err(ReadError::BadRequest(refused.clone())),
            _ => Err(not_read(&format!("rank={}", style.name()))),
        }
    }

    /// Refuses a dense `rank` (1-based) that a walk of its own would not
    /// reach: `rank - 1` distinct values ahead, at least the walk's budget.
    fn check_walk(&self, style: RankStyle, rank: u64) -> Result<(), ReadError> {
        match self.dense.walked {
            Some(max) if style == RankStyle::Dense && rank.saturating_sub(1) >= max => {
                Err(ReadError::BadRequest(walk_too_long(&self.head.board, max)))
            }
            _ => Ok(()),
        }
    }

    /// The page of `count` entries from 0-based `start`, ranked in
    /// `style`: what `top` answers (the page must be one the read was for).
    pub(crate) fn page(&self, start: u64, count: u64, style: RankStyle) -> Result<List, ReadError> {
        let mut list = self.head.clone();
        if count == 0 {
            return Ok(list);
        }
        let run = self
            .runs
            .iter()
            .find(|r| r.start <= start && start <= r.stop)
            .ok_or_else(|| not_read(&format!("offset={start}")))?;
        let ranks = self.ranks(run, style)?;
        let from = ((start - run.start) as usize).min(run.entries.len());
        let to = from.saturating_add(count as usize).min(run.entries.len());
        if let Some(&first) = ranks.get(from) {
            self.check_walk(style, first)?;
        }
        list.entries = run.entries[from..to]
            .iter()
            .zip(&ranks[from..to])
            .map(|(e, rank)| Entry {
                rank: *rank,
                ..e.clone()
            })
            .collect();
        Ok(list)
    }

    /// `member`'s place in the first run, ranked in `style`; `None` when
    /// it is not there (it moved between finding it and reading around
    /// it).
    pub(crate) fn near(&self, member: &str, style: RankStyle) -> Result<Option<Near>, ReadError> {
        let Some(run) = self.runs.first() else {
            return Ok(None);
        };
        let Some(at) = run.entries.iter().position(|e| e.member == member) else {
            return Ok(None);
        };
        let ranks = self.ranks(run, style)?;
        self.check_walk(style, ranks[at])?;
        let names = |es: &[Entry]| es.iter().map(|e| e.member.clone()).collect();
        Ok(Some(Near {
            ordinal: run.start + at as u64,
            entry: Entry {
                rank: ranks[at],
                ..run.entries[at].clone()
            },
            ahead: names(&run.entries[..at]),
            behind: names(&run.entries[at + 1..]),
            complete: run.start == 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::answer::Source;

    #[test]
    fn pages_near_each_other_are_read_as_one_run() {
        assert_eq!(runs(&[]), []);
        assert_eq!(runs(&[(0, 0), (5, 0)]), []);
        // Sixty limits from the top: one run of sixty.
        let limits: Vec<(u64, u64)> = (1..=60).rev().map(|l| (0, l)).collect();
        assert_eq!(runs(&limits), [(0, 59)]);
        // Overlapping and near pages merge; a far one is its own run.
        assert_eq!(
            runs(&[(4, 6), (0, 5), (100, 20), (5_000, 10), (119 + GAP, 1)]),
            [(0, 119 + GAP), (5_000, 5_009)]
        );
        assert_eq!(runs(&[(0, 1), (GAP + 2, 1)]), [(0, 0), (GAP + 2, GAP + 2)]);
    }

    #[test]
    fn a_shared_read_serves_the_pages_that_fit_in_order() {
        let pages = [(0, 10), (5, 10), (100, 50), (2_000, 1_000), (0, 1)];
        // 150 ranks for the first three (one run, 0 ..= 149).
        assert_eq!(covered(&pages[..3]), 150);
        assert_eq!(fitting(&pages, 149), 2);
        assert_eq!(fitting(&pages, 150), 3);
        assert_eq!(fitting(&pages, 1_149), 3);
        assert_eq!(fitting(&pages, 1_150), 5);
        assert_eq!(fitting(&pages, 0), 0);
        assert_eq!(fitting(&[], 0), 0);
        assert_eq!(fitting(&[(0, 0), (9, 0)], 0), 2, "empty pages read nothing");
    }

    fn sheet() -> Sheet {
        // Values 50, 50, 40 | 40, 30 read as one run from rank 3 (0-based
        // 2): two members better than the first value, one distinct.
        let values = [50.0, 50.0, 40.0, 40.0, 30.0];
        let entries: Vec<Entry> = ["a", "b", "c", "d", "e"]
            .iter()
            .zip(values)
            .enumerate()
            .map(|(i, (m, score))| Entry {
                rank: i as u64 + 3,
                member: m.to_string(),
                score,
                fields: None,
            })
            .collect();
        Sheet {
            head: List {
                board: "b".into(),
                view: "all".into(),
                period: None,
                scope: None,
                scopes: None,
                total: 20,
                entries: Vec::new(),
                source: Source::Live,
            },
            runs: vec![Run {
                start: 2,
                stop: 9,
                entries,
                competition: vec![3, 3, 5, 5, 7],
                dense: vec![2, 2, 3, 3, 4],
            }],
            archived: false,
            dense: DenseLimit::default(),
        }
    }

    fn ranks(list: &List) -> Vec<(String, u64)> {
        list.entries
            .iter()
            .map(|e| (e.member.clone(), e.rank))
            .collect()
    }

    #[test]
    fn each_page_is_sliced_from_its_run_with_its_styled_ranks() {
        let s = sheet();
        let page = |start, count, style| ranks(&s.page(start, count, style).unwrap());
        let pairs = |v: &[(&str, u64)]| -> Vec<(String, u64)> {
            v.iter().map(|(m, r)| (m.to_string(), *r)).collect()
        };
        assert_eq!(
            page(3, 2, RankStyle::Competition),
            pairs(&[("b", 3), ("c", 5)])
        );
        assert_eq!(page(5, 3, RankStyle::Dense), pairs(&[("d", 3), ("e", 4)]));
        assert_eq!(page(2, 1, RankStyle::Ordinal), pairs(&[("a", 3)]));
        // Past the view's end inside the run: empty, not an error.
        assert_eq!(page(8, 2, RankStyle::Ordinal), pairs(&[]));
        assert_eq!(s.page(0, 0, RankStyle::Dense).unwrap().total, 20);
        // A page the read was not for is an error, never a wrong page.
        assert!(s.page(0, 2, RankStyle::Ordinal).is_err());
        // A run the walk did not reach has no dense ranks: refused.
        let mut refused = sheet();
        refused.runs[0].dense.clear();
        refused.dense.refused = Some(BadParam::new("rank", "too long"));
        assert!(refused.page(2, 2, RankStyle::Competition).is_ok());
        assert!(matches!(
            refused.page(2, 2, RankStyle::Dense),
            Err(ReadError::BadRequest(b)) if b.message == "too long"
        ));
    }

    #[test]
    fn a_walked_dense_page_is_refused_where_its_own_walk_would_be() {
        // Walked with a budget of 3: a page whose first entry has 3
        // distinct values ahead (dense rank 4) would not be reached alone.
        let mut s = sheet();
        s.dense.walked = Some(3);
        let dense = |s: &Sheet, start| s.page(start, 2, RankStyle::Dense).map(|l| ranks(&l));
        assert!(dense(&s, 2).is_ok(), "rank 2: one value ahead");
        assert!(dense(&s, 5).is_ok(), "rank 3: two values ahead");
        let refused = dense(&s, 6).unwrap_err().to_string();
        assert!(refused.contains("max_read_entries"), "{refused}");
        assert!(s.page(6, 2, RankStyle::Competition).is_ok());
        assert!(s.near("d", RankStyle::Dense).is_ok());
        assert!(s.near("e", RankStyle::Dense).is_err());
        assert!(s.near("e", RankStyle::Ordinal).is_ok());
        // With the index (not walked), nothing is refused.
        assert!(dense(&sheet(), 6).is_ok());
    }

    #[test]
    fn a_member_is_found_with_its_neighbours() {
        let s = sheet();
        let near = s.near("c", RankStyle::Dense).unwrap().unwrap();
        assert_eq!((near.ordinal, near.entry.rank), (4, 3));
        assert_eq!(
            (near.ahead, near.behind),
            (vec!["a".into(), "b".into()], vec!["d".into(), "e".into()])
        );
        assert!(!near.complete, "the run starts at rank 3");
        assert!(s.near("zz", RankStyle::Ordinal).unwrap().is_none());
    }
}
