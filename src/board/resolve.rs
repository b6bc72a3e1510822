//! Resolving a board view for one event time: which concrete view key it
//! lands in (`day:2026-11-21`, `win:3h`), when that key expires, which window
//! bucket it fills, when its period closes (archived views, docs/history.md), and
//! whether it is already late.
//!
//! A period of an archived view closes at its end plus `[archive] grace`.
//! From then on, by the consumer's clock, its events are late; the exact
//! guard, whatever the clocks, is the `K:closed` marker the apply script
//! checks (src/sink/lua/apply.lua). Its keys get no expiry from the write
//! path: the archiver restores `end + retention` once the period is copied,
//! so nothing can expire before the copy.
//!
//! Calendar math is not free (time-zone lookups), and consecutive events
//! mostly fall in the same period, so the last answer per (board, view) is
//! cached and reused while event times stay inside it.

use std::sync::Arc;

use super::duration::add_span;
use super::model::{BoardSet, ViewSpec};
use super::period::{PeriodKind, period_of};

/// Where one event lands in one view.
///
/// The view id is borrowed from the resolver's cache: most events resolve
/// to the view the previous one did, and the batch clones the id only when
/// it meets a concrete view for the first time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved<'a> {
    /// View id used in the key: `day:2026-11-21`, `all`, `win:3h`.
    pub(crate) view_id: &'a Arc<str>,
    /// Absolute expiry the write path sets on the view key, ms; 0 = none
    /// (`all`, and archived periods, whose expiry the archiver sets).
    pub(crate) expire_at: i64,
    /// Until when the key is meant to live, ms (0 = forever): `expire_at`,
    /// or for an archived period the `end + retention` the archiver will
    /// restore. What the instance's fences must outlive.
    pub(crate) keep_until: i64,
    /// For a period of an archived view, when it closes (`end + grace`).
    pub(crate) close_at: Option<i64>,
    /// For windows, the end of the event's bucket (the log score).
    pub(crate) bucket_end: Option<i64>,
    /// Window length, for windows.
    pub(crate) window_ms: Option<i64>,
    /// Start of the period (0 for windows): with the view's index, what
    /// identifies the concrete view without comparing strings.
    pub(crate) start: i64,
    /// The period is past retention or closed (`now >= close_at`), or the
    /// bucket has left the window.
    pub(crate) late: bool,
}

#[derive(Debug, Clone)]
struct Cached {
    start: i64,
    /// Exclusive; `i64::MAX` for `all`.
    end: i64,
    view_id: Arc<str>,
    /// End of retention (`end + retention`), 0 for `all` and windows.
    keep_until: i64,
    /// `end + grace` for archived periods.
    close_at: Option<i64>,
}

/// Per-consumer cache of the last period (or bucket) per (board, view).
#[derive(Debug, Default)]
pub struct Resolver {
    cache: Vec<Vec<Option<Cached>>>,
}

impl Resolver {
    /// An empty cache, one slot per view of each board of `boards`; the
    /// first event of each view fills its slot.
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
    pub(crate) fn resolve(
        &mut self,
        boards: &BoardSet,
        board: usize,
        view: usize,
        ts: i64,
        now: i64,
    ) -> Resolved<'_> {
        let b = &boards.boards[board];
        let spec = &b.views[view];
        let slot = &mut self.cache[board][view];
        if !slot.as_ref().is_some_and(|c| c.start <= ts && ts < c.end) {
            *slot = None;
        }
        let cached: &Cached = slot.get_or_insert_with(|| compute(spec, ts, b.tz));
        match spec {
            ViewSpec::Period { .. } => Resolved {
                late: (cached.keep_until != 0 && cached.keep_until <= now)
                    || cached.close_at.is_some_and(|c| now >= c),
                view_id: &cached.view_id,
                // Archived periods keep no expiry until they are copied.
                expire_at: if cached.close_at.is_some() {
                    0
                } else {
                    cached.keep_until
                },
                keep_until: cached.keep_until,
                close_at: cached.close_at,
                bucket_end: None,
                window_ms: None,
                start: cached.start,
            },
            ViewSpec::Window(w) => Resolved {
                late: cached.end <= w.cutoff(now),
                view_id: &cached.view_id,
                expire_at: cached.end.saturating_add(w.length_ms),
                keep_until: cached.end.saturating_add(w.length_ms),
                close_at: None,
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
            kind,
            retention,
            close_after,
        } => {
            let p = period_of(*kind, ts, tz);
            let keep_until = match (p.end_ms, retention) {
                (Some(end), Some(r)) if *kind != PeriodKind::All => add_span(end, r, tz),
                _ => 0,
            };
            // `all` has no end, so it never closes (the board check refuses
            // to archive it anyway).
            let close_at = match (p.end_ms, close_after) {
                (Some(end), Some(grace)) => Some(end.saturating_add(*grace)),
                _ => None,
            };
            Cached {
                start: p.start_ms,
                end: p.end_ms.unwrap_or(i64::MAX),
                view_id: p.view().into(),
                keep_until,
                close_at,
            }
        }
        ViewSpec::Window(w) => {
            let (start, end) = w.bucket_of(ts, tz);
            Cached {
                start,
                end,
                view_id: w.view().into(),
                keep_until: 0,
                close_at: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;
    /// 2026-11-21T00:00:00Z.
    const SAT: i64 = 1_795_219_200_000;

    /// A UTC board whose `day` is archived with `grace_min` minutes of grace
    /// (retention 3d) and whose `hour` (retention 2d) is not.
    fn boards(grace_min: i64) -> BoardSet {
        crate::config::test_boards(&format!(
            r#"
            [archive]
            url = "postgres://127.0.0.1:1/none"
            grace = "{grace_min}m"
            [[board]]
            name = "b"
            event = "gift"
            member = "receiver_id"
            score = "count"
            periods = ["hour", "day", "all"]
            retention = {{ day = "3d" }}
            archive = ["day"]
            "#
        ))
    }

    /// The end of the UTC day of `ts`, computed apart from the calendar code.
    fn day_end(ts: i64) -> i64 {
        (ts.div_euclid(DAY) + 1) * DAY
    }

    #[test]
    fn an_archived_day_closes_at_its_end_plus_grace_and_has_no_expiry() {
        let set = boards(10);
        let mut r = Resolver::new(&set);
        let ts = SAT + 13 * HOUR;
        let end = SAT + DAY;
        let day = r.resolve(&set, 0, 1, ts, ts);
        assert_eq!(&**day.view_id, "day:2026-11-21");
        assert_eq!(day.close_at, Some(end + 10 * MIN));
        assert_eq!(day.expire_at, 0, "no expiry until the archiver sets it");
        assert_eq!(day.keep_until, end + 3 * DAY);
        assert!(!day.late);
        // One ms before the close it is open; at the close, late.
        assert!(!r.resolve(&set, 0, 1, ts, end + 10 * MIN - 1).late);
        assert!(r.resolve(&set, 0, 1, ts, end + 10 * MIN).late);
        // The hour view is not archived: expiry as always, late only past
        // its retention, never closed.
        let hour = r.resolve(&set, 0, 0, ts, end + 10 * MIN);
        assert_eq!(hour.close_at, None);
        assert_eq!(hour.expire_at, SAT + 14 * HOUR + 2 * DAY);
        assert_eq!(hour.keep_until, hour.expire_at);
        assert!(!hour.late);
        let all = r.resolve(&set, 0, 2, ts, i64::MAX);
        assert_eq!((all.close_at, all.expire_at, all.late), (None, 0, false));
    }

    proptest! {
        /// Against a reference model (UTC day end + grace, apart from the
        /// calendar code), for events resolved one after another through one
        /// cache, each at its own clock.
        #[test]
        fn late_exactly_when_the_clock_reached_end_plus_grace(
            grace_min in 1i64..3000,
            events in prop::collection::vec((-3 * DAY..3 * DAY, -DAY..4 * DAY), 1..40),
        ) {
            let set = boards(grace_min);
            let mut r = Resolver::new(&set);
            for (dt, dnow) in events {
                let ts = SAT + dt;
                let now = ts + dnow;
                let close = day_end(ts) + grace_min * MIN;
                let got = r.resolve(&set, 0, 1, ts, now);
                prop_assert_eq!(got.late, now >= close, "ts {} now {}", ts, now);
                prop_assert_eq!(got.close_at, Some(close));
                prop_assert_eq!(got.expire_at, 0);
                prop_assert_eq!(got.keep_until, day_end(ts) + 3 * DAY);
                let hour = r.resolve(&set, 0, 0, ts, now);
                let hour_end = (ts.div_euclid(HOUR) + 1) * HOUR;
                prop_assert_eq!(hour.late, now >= hour_end + 2 * DAY);
                prop_assert_eq!(hour.expire_at, hour_end + 2 * DAY);
                prop_assert_eq!(hour.close_at, None);
            }
        }
    }
}
