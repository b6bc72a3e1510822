//! Resolving a board view for one event time: which concrete view key it
//! lands in (`day:2026-11-21`, `win:3h`), when that key expires, which window
//! bucket it fills, and whether it is already late.
//!
//! Calendar math is not free (time-zone lookups), and consecutive events
//! mostly fall in the same period, so the last answer per (board, view) is
//! cached and reused while event times stay inside it.

use std::sync::Arc;

use super::duration::add_span;
use super::model::{BoardSet, ViewSpec};
use super::period::{PeriodKind, period_of};

/// Where one event lands in one view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// View id used in the key: `day:2026-11-21`, `all`, `win:3h`.
    pub view_id: Arc<str>,
    /// Absolute expiry of the view key, ms; 0 = never.
    pub expire_at: i64,
    /// For windows, the end of the event's bucket (the log score).
    pub bucket_end: Option<i64>,
    /// Window length, for windows.
    pub window_ms: Option<i64>,
    /// Start of the period (0 for windows): with the view's index, what
    /// identifies the concrete view without comparing strings.
    pub start: i64,
    /// The period is past retention or the bucket has left the window.
    pub late: bool,
}

#[derive(Debug, Clone)]
struct Cached {
    start: i64,
    /// Exclusive; `i64::MAX` for `all`.
    end: i64,
    view_id: Arc<str>,
    expire_at: i64,
}

/// Per-consumer cache of the last period (or bucket) per (board, view).
#[derive(Debug, Default)]
pub struct Resolver {
    cache: Vec<Vec<Option<Cached>>>,
}

impl Resolver {
    pub fn new(boards: &BoardSet) -> Resolver {
        Resolver {
            cache: boards
                .boards
                .iter()
                .map(|b| vec![None; b.views.len()])
                .collect(),
        }
    }

    /// Resolves view `view` of board `board` for an event at `ts`, at clock `now`.
    pub fn resolve(
        &mut self,
        boards: &BoardSet,
        board: usize,
        view: usize,
        ts: i64,
        now: i64,
    ) -> Resolved {
        let b = &boards.boards[board];
        let spec = &b.views[view];
        let slot = &mut self.cache[board][view];
        let hit = slot.as_ref().filter(|c| c.start <= ts && ts < c.end);
        let cached = match hit {
            Some(c) => c.clone(),
            None => {
                let fresh = compute(spec, ts, b.tz);
                *slot = Some(fresh.clone());
                fresh
            }
        };
        match spec {
            ViewSpec::Period { .. } => Resolved {
                late: cached.expire_at != 0 && cached.expire_at <= now,
                view_id: cached.view_id,
                expire_at: cached.expire_at,
                bucket_end: None,
                window_ms: None,
                start: cached.start,
            },
            ViewSpec::Window(w) => Resolved {
                late: cached.end <= w.cutoff(now),
                view_id: cached.view_id,
                expire_at: cached.end.saturating_add(w.length_ms),
                bucket_end: Some(cached.end),
                window_ms: Some(w.length_ms),
                start: 0,
            },
        }
    }
}

fn compute(spec: &ViewSpec, ts: i64, tz: chrono_tz::Tz) -> Cached {
    match spec {
        ViewSpec::Period {
            kind, retention, ..
        } => {
            let p = period_of(*kind, ts, tz);
            let expire_at = match (p.end_ms, retention) {
                (Some(end), Some(r)) if *kind != PeriodKind::All => add_span(end, r, tz),
                _ => 0,
            };
            Cached {
                start: p.start_ms,
                end: p.end_ms.unwrap_or(i64::MAX),
                view_id: p.view().into(),
                expire_at,
            }
        }
        ViewSpec::Window(w) => {
            let (start, end) = w.bucket_of(ts, tz);
            Cached {
                start,
                end,
                view_id: w.view().into(),
                expire_at: 0,
            }
        }
    }
}
