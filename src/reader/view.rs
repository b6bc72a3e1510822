//! The stored view behind a board's view and `period=` ([`view_of`]): its
//! id in keys, the period id an answer shows, and whether it is a window.
//! Shared by locating a read and planning a union of scopes.

use super::error::ReadError;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, parse_period_id, period_of};

/// The view id in keys, the period id shown, and whether it is a window.
pub(super) fn view_of(
    spec: &ViewSpec,
    board: &Board,
    period: Option<&str>,
    now_ms: i64,
) -> Result<(String, Option<String>, bool), ReadError> {
    match spec {
        ViewSpec::Window(w) => match period {
            Some(_) => Err(ReadError::bad(
                "period",
                "a window always shows the current moment; period= does not apply",
            )),
            None => Ok((w.view(), None, true)),
        },
        // The all-time board has one period; asking for another one
        // is a mistake worth saying rather than ignoring.
        ViewSpec::Period {
            kind: PeriodKind::All,
            ..
        } => match period {
            Some(id) if id != "all" => Err(ReadError::bad(
                "period",
                format!("view all has a single period; period={id:?} does not apply"),
            )),
            _ => Ok(("all".to_string(), None, false)),
        },
        ViewSpec::Period { kind, .. } => {
            let p = match period {
                Some(id) => parse_period_id(*kind, id, board.tz)
                    .map_err(|e| ReadError::bad("period", format!("period: {e}")))?,
                None => period_of(*kind, now_ms, board.tz),
            };
            Ok((p.view(), Some(p.id), false))
        }
    }
}
