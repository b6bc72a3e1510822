//! Where a query's data lives ([`Located`]): the board, the key of the view
//! (a period, a window, a rolling view or a union of scopes), the period
//! shown, and whether a past period may come from the archive. [`check`]
//! runs the same without Redis, so a caller can refuse a bad request before
//! Redis is reachable.

use super::error::ReadError;
use super::plan::UnionPlan;
use super::query::{Query, ScopeUnion};
use super::view::view_of;
use super::{scopes, union};
use crate::archive::copy::PeriodKey;
use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::period_of;

/// Where a query's data lives.
#[derive(Clone)]
pub(super) struct Located<'b> {
    pub(super) board: &'b Board,
    pub(super) board_index: usize,
    pub(super) tag: String,
    pub(super) key: String,
    pub(super) period: Option<String>,
    pub(super) window: bool,
    /// The period asked for, when it is not the current one: then a key
    /// that does not exist sends the read to the archive.
    pub(super) past: Option<PeriodKey>,
    /// For a rolling view (`last:7d`): the union to compute into `key`
    /// before reading it.
    pub(super) union: Option<UnionPlan>,
}

impl<'b> Located<'b> {
    /// The same union computed into a key of this read's own (beside the
    /// shared result, same hash tag), which lives until the read deletes
    /// it: for a read that found the shared result expired before it
    /// looked. `None` when `self` is no union.
    pub(super) fn private(&self) -> Option<Located<'b>> {
        let plan = self.union.as_ref()?.private();
        Some(Located {
            key: plan.result.clone(),
            union: Some(plan),
            ..self.clone()
        })
    }
}

/// Checks that `q` names a board and view and that its scope and period fit
/// them, without touching Redis, so a caller can refuse a bad request (400,
/// 404) even before Redis is reachable. `now_ms` picks the current period.
pub fn check(boards: &BoardSet, now_ms: i64, q: &Query) -> Result<(), ReadError> {
    locate(boards, now_ms, q).map(|_| ())
}

/// Where `q`'s data lives, or why it cannot be read.
pub(super) fn locate<'b>(
    boards: &'b BoardSet,
    now_ms: i64,
    q: &Query,
) -> Result<Located<'b>, ReadError> {
    let (board_index, board) = boards
        .boards
        .iter()
        .enumerate()
        .find(|(_, b)| b.name == q.board)
        .ok_or_else(|| ReadError::UnknownBoard(q.board.clone()))?;
    if let Some(which) = &q.scope_union {
        let at = (board_index, board);
        return locate_scopes(&boards.key_prefix, at, which, q, now_ms);
    }
    if let Some(view) = union::parse(&q.view) {
        let view = view?;
        check_scope(board, q)?;
        let tag = board.tag(q.scope.as_deref());
        let (plan, newest) = union::plan(
            &boards.key_prefix,
            board,
            &tag,
            view,
            q.period.as_deref(),
            now_ms,
        )?;
        return Ok(Located {
            board,
            board_index,
            key: plan.result.clone(),
            tag,
            period: Some(newest),
            window: false,
            past: None,
            union: Some(plan),
        });
    }
    let spec = board.view(&q.view).ok_or_else(|| ReadError::UnknownView {
        board: board.name.clone(),
        view: q.view.clone(),
        known: union::known_views(board),
    })?;
    check_scope(board, q)?;
    let tag = board.tag(q.scope.as_deref());
    let (view_id, period, window) = view_of(spec, board, q.period.as_deref(), now_ms)?;
    let past = match (spec, &period) {
        (ViewSpec::Period { kind, .. }, Some(id))
            if q.period.is_some() && *id != period_of(*kind, now_ms, board.tz).id =>
        {
            Some(PeriodKey {
                board: board.name.clone(),
                scope: q.scope.clone().unwrap_or_default(),
                view: kind.name().to_string(),
                period: id.clone(),
            })
        }
        _ => None,
    };
    Ok(Located {
        board,
        board_index,
        key: keys::view_key(&boards.key_prefix, &tag, &view_id),
        tag,
        period,
        window,
        past,
        union: None,
    })
}

/// Where the union of `which` scopes of `board` that `q` asks for is read.
fn locate_scopes<'b>(
    prefix: &str,
    (board_index, board): (usize, &'b Board),
    which: &ScopeUnion,
    q: &Query,
    now_ms: i64,
) -> Result<Located<'b>, ReadError> {
    let (plan, period) = scopes::plan(prefix, board, which, &q.view, q.period.as_deref(), now_ms)?;
    Ok(Located {
        board,
        board_index,
        key: plan.result.clone(),
        tag: board.stored.clone(),
        period,
        window: false,
        past: None,
        union: Some(plan),
    })
}

/// Whether `q` gives a scope exactly when the board is scoped.
fn check_scope(board: &Board, q: &Query) -> Result<(), ReadError> {
    match (&board.scope, &q.scope) {
        (Some(_), None) => Err(ReadError::bad(
            "scope",
            format!("board {:?} is scoped: give scope=<value>", board.name),
        )),
        (None, Some(_)) => Err(ReadError::bad(
            "scope",
            format!("board {:?} has no scope; scope= does not apply", board.name),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T12:00:00Z.
    const NOW: i64 = 1_795_262_400_000;

    fn boards() -> BoardSet {
        let text = r#"
[[board]]
name = "total"
event = "score"
member = "user_id"
score = "points"
periods = ["all", "day"]
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
windows = ["1h/1m"]
"#;
        crate::config::test_boards(text)
    }

    fn q(board: &str, view: &str, scope: Option<&str>, period: Option<&str>) -> Query {
        Query {
            board: board.into(),
            view: view.into(),
            scope: scope.map(str::to_string),
            scope_union: None,
            period: period.map(str::to_string),
        }
    }

    /// The parameter a `check` refuses, or a description of another outcome.
    fn refused(query: &Query) -> String {
        match check(&boards(), NOW, query) {
            Err(ReadError::BadRequest(b)) => {
                assert!(
                    b.message.contains(&b.param),
                    "{b:?} does not name its parameter"
                );
                b.param
            }
            Err(e) => format!("other: {e}"),
            Ok(()) => "ok".into(),
        }
    }

    #[test]
    fn check_names_the_parameter_that_does_not_fit_the_board() {
        let located = locate(&boards(), NOW, &q("total", "day", None, None)).map(|l| l.key);
        assert_eq!(
            located.ok().as_deref(),
            Some("rankflow:{total}:day:2026-11-21")
        );
        for (query, want) in [
            (q("total", "day", None, Some("2026-11-20")), "ok"),
            (q("total", "all", None, Some("all")), "ok"),
            (q("fans", "win:1h", Some("s1"), None), "ok"),
            (q("total", "day", None, Some("garbage")), "period"),
            (q("total", "day", None, Some("2026-02-30")), "period"),
            (q("total", "all", None, Some("2026-11-21")), "period"),
            (
                q("fans", "win:1h", Some("s1"), Some("2026-11-21")),
                "period",
            ),
            (q("fans", "win:1h", None, None), "scope"),
            (q("total", "all", Some("s1"), None), "scope"),
        ] {
            assert_eq!(refused(&query), want, "{query:?}");
        }
        assert_eq!(
            refused(&q("nope", "all", None, None)),
            "other: no board named \"nope\""
        );
        assert_eq!(
            refused(&q("total", "week", None, None)),
            "other: board \"total\" has no view \"week\" (it has: all, day, last:<N>d (N up to 35))"
        );
    }

    #[test]
    fn only_a_period_other_than_the_current_one_may_come_from_the_archive() {
        let past = |query: &Query| {
            locate(&boards(), NOW, query)
                .ok()
                .and_then(|l| l.past)
                .map(|k| k.path())
        };
        assert_eq!(
            past(&q("total", "day", None, Some("2026-11-20"))).as_deref(),
            Some("total//day/2026-11-20")
        );
        // The current period, named or not, the all-time view and windows
        // are always live.
        assert_eq!(past(&q("total", "day", None, Some("2026-11-21"))), None);
        assert_eq!(past(&q("total", "day", None, None)), None);
        assert_eq!(past(&q("total", "all", None, Some("all"))), None);
        assert_eq!(past(&q("fans", "win:1h", Some("s1"), None)), None);
    }
}
