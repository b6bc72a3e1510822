//! Rolling views computed at read time (docs/http-api.md): `last:<N><unit>`, the
//! union of the N most recent period boards of one instance (board and
//! scope) up to the current period or the one `period=` names. This module
//! owns the view grammar and its limits ([`parse`], [`max_n`], [`offered`],
//! and what `GET /v1/boards` says of unions of scopes, [`scope_offer`]) and
//! the plan of one union (its period keys and result key, [`plan`]).
//! Computing it, and sharing the result between readers, is
//! [`super::compute`]'s.
//!
//! The result key `{prefix}:{tag}:u:last:<N><unit>:<newest period id>` is
//! under the instance's hash tag, the slot of its period keys, so a union
//! works on a Redis Cluster. It has no dense-rank index (`K:v`): dense
//! ranks on a union walk the distinct scores (see [`super::ranks`]).
//! Periods whose keys are gone (expired, or archived and removed) count as
//! empty: a union covers what is still in Redis.

use serde::Serialize;

use super::error::{BadParam, ReadError};
use super::plan::UnionPlan;
use super::query::MAX_LISTED_SCOPES;
use crate::board::duration::{DAY_MS, HOUR_MS, Span};
use crate::board::keys;
use crate::board::model::{Aggregate, Board, ViewSpec};
use crate::board::period::{Period, PeriodKind, parse_period_id, period_of};

/// Most periods one union covers when the board keeps that period kind
/// forever (no retention): about 13 months of days, 16 days of hours.
pub(crate) const MAX_UNION_PERIODS: u32 = 400;

/// The unit letters of `last:<N><unit>`, and the period kind each reads.
const UNITS: [(&str, PeriodKind); 5] = [
    ("h", PeriodKind::Hour),
    ("d", PeriodKind::Day),
    ("w", PeriodKind::Week),
    ("mo", PeriodKind::Month),
    ("y", PeriodKind::Year),
];

/// How a scoped board's scopes may be read as one (`GET /v1/boards`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ScopeUnionOffer {
    /// `scope=a&scope=b`, up to this many scopes.
    pub(crate) max_listed: usize,
    /// `scope=*`: scope values each view's registry keeps (0: not offered).
    pub(crate) registry: u64,
    /// `"scope"` (default layout: unions on a single Redis only) or
    /// `"board"` (all scopes in the board's slot: unions on a cluster too).
    pub(crate) scope_slot: &'static str,
}

/// The unions of scopes `board` offers, if any.
pub(crate) fn scope_offer(board: &Board) -> Option<ScopeUnionOffer> {
    (board.scope.is_some() && unsupported(board).is_none()).then_some(ScopeUnionOffer {
        max_listed: MAX_LISTED_SCOPES,
        registry: board.scope_registry,
        scope_slot: if board.board_slot { "board" } else { "scope" },
    })
}

/// A union view the board offers, as `GET /v1/boards` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UnionOffer {
    /// `last:<N>d`: any N from 1 to `max_n`.
    pub(crate) view: String,
    pub(crate) max_n: u32,
}

fn unit_of(kind: PeriodKind) -> &'static str {
    UNITS
        .iter()
        .find(|(_, k)| *k == kind)
        .map(|(u, _)| *u)
        .unwrap_or("")
}

fn bad_view(message: impl Into<String>) -> ReadError {
    ReadError::BadRequest(BadParam::new("view", message))
}

/// `Some((n, kind))` for a view named `last:...`, checked for its form
/// only; `None` for other views. Leading zeros and signs are refused so
/// that one union has one name (and one result key).
pub(crate) fn parse(view: &str) -> Option<Result<(u32, PeriodKind), ReadError>> {
    let rest = view.strip_prefix("last:")?;
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let (number, unit) = rest.split_at(digits);
    let kind = UNITS.iter().find(|(u, _)| *u == unit).map(|(_, k)| *k);
    let n = number
        .parse::<u32>()
        .ok()
        .filter(|_| !number.starts_with('0'));
    Some(match (n, kind) {
        (Some(n), Some(kind)) => Ok((n, kind)),
        _ => Err(bad_view(format!(
            "view {view:?} is not a rolling view: write last:<N><unit> with N a whole number from 1 and unit h, d, w, mo or y (last:7d, last:24h, last:12mo)"
        ))),
    })
}

/// The nominal length of a period kind, for counting how many fit in a
/// retention (a longer DST day is covered: the newest period of a range is
/// always younger than its retention by a whole period).
fn nominal_ms(kind: PeriodKind) -> i64 {
    match kind {
        PeriodKind::Hour => HOUR_MS,
        PeriodKind::Day => DAY_MS,
        PeriodKind::Week => 7 * DAY_MS,
        PeriodKind::Month => 31 * DAY_MS,
        PeriodKind::Year | PeriodKind::All => 366 * DAY_MS,
    }
}

/// Most periods of `kind` a union of `board` may cover: as many whole
/// periods as its retention for that kind holds (at least the current
/// one), or [`MAX_UNION_PERIODS`] when kept forever. `None` when the
/// board does not keep that period kind.
pub(crate) fn max_n(board: &Board, kind: PeriodKind) -> Option<u32> {
    let retention = board.views.iter().find_map(|v| match v {
        ViewSpec::Period {
            kind: k, retention, ..
        } if *k == kind => Some(*retention),
        _ => None,
    })?;
    let fits = match (retention, kind) {
        (None, _) => i64::from(MAX_UNION_PERIODS),
        (Some(Span::Months(m)), PeriodKind::Month) => i64::from(m),
        (Some(Span::Months(m)), PeriodKind::Year) => i64::from(m / 12),
        (Some(span), kind) => span.min_ms() / nominal_ms(kind),
    };
    Some(fits.clamp(1, i64::from(MAX_UNION_PERIODS)) as u32)
}

/// Why `board` cannot be read as a union (of periods or of scopes), if it
/// cannot.
pub(super) fn unsupported(board: &Board) -> Option<String> {
    if board.composite.is_some() {
        return Some(format!(
            "board {} is a composite board (order_by): unions of its boards (rolling views, several scopes) are not supported, since each field keeps its own aggregate inside the member encoding",
            board.name
        ));
    }
    if board.aggregate == Aggregate::Last {
        return Some(format!(
            "board {} keeps each member's last value: the last value over several periods or scopes is not a union of their boards, so rolling views and unions of scopes are not offered",
            board.name
        ));
    }
    None
}

/// The union views `board` offers, shortest period first.
pub(crate) fn offered(board: &Board) -> Vec<UnionOffer> {
    if unsupported(board).is_some() {
        return Vec::new();
    }
    UNITS
        .iter()
        .filter_map(|(unit, kind)| {
            max_n(board, *kind).map(|max_n| UnionOffer {
                view: format!("last:<N>{unit}"),
                max_n,
            })
        })
        .collect()
}

/// The plan of union view `last:<n><kind>` of the instance `tag`, whose
/// newest period is `period` (an id) or the current one at `now_ms`.
/// Returns the plan and the newest period's id.
pub(super) fn plan(
    prefix: &str,
    board: &Board,
    tag: &str,
    view: (u32, PeriodKind),
    period: Option<&str>,
    now_ms: i64,
) -> Result<(UnionPlan, String), ReadError> {
    let (views, newest) = range(board, view, period, now_ms)?;
    let sources = views
        .iter()
        .map(|v| keys::view_key(prefix, tag, v))
        .collect();
    let result = keys::view_key(prefix, tag, &result_view(view, &newest));
    Ok((UnionPlan::new(board, result, sources), newest))
}

/// The view part of a rolling view's result key: `u:last:<n><unit>:<newest>`.
pub(super) fn result_view((n, kind): (u32, PeriodKind), newest: &str) -> String {
    format!("u:last:{n}{}:{newest}", unit_of(kind))
}

/// The periods of `last:<n><kind>` ending with `period` (or the current
/// one at `now_ms`): their view ids newest first, and the id of the newest.
/// Checks that the board offers the view.
pub(super) fn range(
    board: &Board,
    (n, kind): (u32, PeriodKind),
    period: Option<&str>,
    now_ms: i64,
) -> Result<(Vec<String>, String), ReadError> {
    if let Some(why) = unsupported(board) {
        return Err(bad_view(why));
    }
    let unit = unit_of(kind);
    let Some(max) = max_n(board, kind) else {
        return Err(ReadError::UnknownView {
            board: board.name.clone(),
            view: format!("last:{n}{unit}"),
            known: known_views(board),
        });
    };
    if n > max {
        return Err(bad_view(format!(
            "view last:{n}{unit} reaches past what board {} keeps of its {} periods: at most last:{max}{unit}",
            board.name,
            kind.name()
        )));
    }
    let newest = match period {
        Some(id) => parse_period_id(kind, id, board.tz)
            .map_err(|e| ReadError::BadRequest(BadParam::new("period", format!("period: {e}"))))?,
        None => period_of(kind, now_ms, board.tz),
    };
    let views = periods_back(&newest, n, board)
        .iter()
        .map(Period::view)
        .collect();
    Ok((views, newest.id))
}

/// The board's views and the rolling views it offers, for the 404 of an
/// unknown view.
pub(super) fn known_views(board: &Board) -> String {
    board
        .views
        .iter()
        .map(ViewSpec::name)
        .chain(
            offered(board)
                .into_iter()
                .map(|o| format!("{} (N up to {})", o.view, o.max_n)),
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// `newest` and the `n − 1` periods before it, newest first, in the
/// board's time zone (ISO weeks, month lengths and DST are the calendar's).
fn periods_back(newest: &Period, n: u32, board: &Board) -> Vec<Period> {
    let mut out = Vec::with_capacity(n as usize);
    let mut p = newest.clone();
    for _ in 0..n {
        let before = period_of(p.kind, p.start_ms.saturating_sub(1), board.tz);
        let at_start = before.start_ms >= p.start_ms;
        out.push(p);
        if at_start {
            break; // the start of the calendar range: nothing earlier
        }
        p = before;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T12:00:00Z, a Saturday.
    const NOW: i64 = 1_795_262_400_000;

    fn boards() -> crate::board::BoardSet {
        crate::config::test_boards(
            r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day", "week", "month", "all"]
retention = { hour = "2d", day = "35d", week = "3w", month = "13mo" }
timezone = "Asia/Tokyo"
[[board]]
name = "last"
event = "score"
member = "user_id"
score = "points"
aggregate = "last"
periods = ["day"]
"#,
        )
    }

    fn ids(n: u32, newest: Option<&str>, view: (u32, PeriodKind)) -> Result<Vec<String>, String> {
        let set = boards();
        let b = &set.boards[0];
        let (n, kind) = (n.max(view.0), view.1);
        plan("rf", b, "b", (n, kind), newest, NOW)
            .map(|(p, _)| p.sources)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_grammar_takes_a_count_and_a_unit_and_nothing_else() {
        let ok = |v: &str| parse(v).and_then(Result::ok);
        assert_eq!(ok("last:7d"), Some((7, PeriodKind::Day)));
        assert_eq!(ok("last:24h"), Some((24, PeriodKind::Hour)));
        assert_eq!(ok("last:12mo"), Some((12, PeriodKind::Month)));
        assert_eq!(ok("last:1y"), Some((1, PeriodKind::Year)));
        assert!(parse("day").is_none());
        for bad in [
            "last:",
            "last:0d",
            "last:07d",
            "last:7",
            "last:d",
            "last:-1d",
            "last:7m",
            "last:7D",
            "last:99999999999d",
        ] {
            match parse(bad) {
                Some(Err(ReadError::BadRequest(b))) => {
                    assert_eq!(b.param, "view");
                    assert!(b.message.contains("last:<N><unit>"), "{b}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn n_is_bounded_by_the_retention_of_the_period_kind() {
        let set = boards();
        let b = &set.boards[0];
        assert_eq!(max_n(b, PeriodKind::Hour), Some(48));
        assert_eq!(max_n(b, PeriodKind::Day), Some(35));
        assert_eq!(max_n(b, PeriodKind::Week), Some(3));
        assert_eq!(max_n(b, PeriodKind::Month), Some(13));
        assert_eq!(max_n(b, PeriodKind::Year), None);
        assert_eq!(
            offered(b)
                .iter()
                .map(|o| o.view.as_str())
                .collect::<Vec<_>>(),
            ["last:<N>h", "last:<N>d", "last:<N>w", "last:<N>mo"]
        );
        assert!(
            ids(36, None, (36, PeriodKind::Day)).is_err_and(|e| e.contains("at most last:35d"))
        );
        assert!(
            ids(1, None, (1, PeriodKind::Year))
                .is_err_and(|e| e.contains("has no view \"last:1y\""))
        );
        // `last` boards are refused with the reason.
        let e = plan(
            "rf",
            &set.boards[1],
            "last",
            (2, PeriodKind::Day),
            None,
            NOW,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("last value"), "{e}");
        assert!(offered(&set.boards[1]).is_empty());
    }

    #[test]
    fn ranges_follow_the_calendar_of_the_board_time_zone() {
        // Noon UTC is 21:00 in Tokyo: the current day is the 21st there.
        assert_eq!(
            ids(3, None, (3, PeriodKind::Day)).ok(),
            Some(vec![
                "rf:{b}:day:2026-11-21".to_string(),
                "rf:{b}:day:2026-11-20".to_string(),
                "rf:{b}:day:2026-11-19".to_string(),
            ])
        );
        // Across a month boundary and a year's first ISO week.
        assert_eq!(
            ids(3, Some("2026-03-01"), (3, PeriodKind::Day)).ok(),
            Some(vec![
                "rf:{b}:day:2026-03-01".to_string(),
                "rf:{b}:day:2026-02-28".to_string(),
                "rf:{b}:day:2026-02-27".to_string(),
            ])
        );
        assert_eq!(
            ids(2, Some("2026-W01"), (2, PeriodKind::Week)).ok(),
            Some(vec![
                "rf:{b}:week:2026-W01".to_string(),
                "rf:{b}:week:2025-W52".to_string()
            ])
        );
        assert_eq!(
            ids(2, Some("2026-01"), (2, PeriodKind::Month)).ok(),
            Some(vec![
                "rf:{b}:month:2026-01".to_string(),
                "rf:{b}:month:2025-12".to_string()
            ])
        );
        let set = boards();
        let (p, newest) = plan("rf", &set.boards[0], "b", (7, PeriodKind::Day), None, NOW)
            .map_err(|e| e.to_string())
            .unwrap();
        assert_eq!(newest, "2026-11-21");
        assert_eq!(p.result, "rf:{b}:u:last:7d:2026-11-21");
        assert_eq!(p.times, "rf:{b}:u:last:7d:2026-11-21:t");
        assert!(
            ids(2, Some("2026-13-01"), (2, PeriodKind::Day)).is_err_and(|e| e.contains("period"))
        );
    }
}
