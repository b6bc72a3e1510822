//! Calendar periods of a board: which `hour` / `day` / `week` / `month` /
//! `year` / `all` period an event time falls in, in the board's IANA time
//! zone, the period's id (used in Redis keys) and its exact `[start, end)`
//! bounds in epoch milliseconds.
//!
//! This module owns the local-time ⇄ instant conversions that the rest of the
//! time math ([`super::window`], [`super::duration`]) builds on.
//!
//! # Model
//!
//! A period is identified by a *label* of local wall-clock time (`2026-11-01T01`,
//! `2026-W53`, …). Its start is the first instant whose local time carries that
//! label, its end is the first instant of the next label. Clocks that jump
//! forward skip labels (no `T02` on a spring-forward night: it is an error to
//! name it); clocks that jump back re-enter a label that is already running, so
//! the label simply lasts longer (the fall-back `T01` in New York spans two real
//! hours). Because every boundary is "the first instant of a label", the periods
//! of one kind tile the timeline with no gap and no overlap.
//!
//! Rare tz-database quirk: a few zones once moved their clocks back at a time
//! that is *not* a label boundary (America/St_Johns used 00:01 until 2011, so
//! local time went `00:00 → 00:01 → 23:01` of the previous day). The next label
//! has then already started when the old one is re-entered; to keep the tiling,
//! such re-lived minutes belong to the label that started most recently (the
//! new day / hour), even though the wall clock reads the previous one.
//!
//! # Range
//!
//! Inputs are clamped to [`MIN_TS_MS`]`..=`[`MAX_TS_MS`] (local years 0001..=9999
//! in every zone, so ids always have four-digit years). A timestamp outside that
//! range gets the period of the nearest supported instant; nothing panics.

use std::fmt;
use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Days, LocalResult, Months, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta,
    TimeZone, Timelike, Weekday,
};
use chrono_tz::Tz;

/// Smallest supported instant: 0001-01-02T00:00:00Z. A day after 0001-01-01 so
/// that no UTC offset (always < 24 h) can push the local date into year 0.
pub(crate) const MIN_TS_MS: i64 = -62_135_510_400_000;
/// Largest supported instant: 9999-12-30T23:59:59.999Z, so that local dates
/// stay within year 9999 in every zone.
pub(crate) const MAX_TS_MS: i64 = 253_402_214_399_999;

const HOUR_MS: i64 = 3_600_000;

/// Clamp an arbitrary `i64` timestamp into the supported range.
pub(crate) fn clamp_ts(ts_ms: i64) -> i64 {
    ts_ms.clamp(MIN_TS_MS, MAX_TS_MS)
}

/// The kinds of periodic boards.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PeriodKind {
    Hour,
    Day,
    Week,
    Month,
    Year,
    All,
}

impl PeriodKind {
    /// Every kind, shortest first.
    pub(crate) const ALL: [PeriodKind; 6] = [
        PeriodKind::Hour,
        PeriodKind::Day,
        PeriodKind::Week,
        PeriodKind::Month,
        PeriodKind::Year,
        PeriodKind::All,
    ];

    /// The name used in config and in view labels (`"week"`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            PeriodKind::Hour => "hour",
            PeriodKind::Day => "day",
            PeriodKind::Week => "week",
            PeriodKind::Month => "month",
            PeriodKind::Year => "year",
            PeriodKind::All => "all",
        }
    }

    /// Inverse of [`PeriodKind::name`]; exact, lower-case match only.
    pub(crate) fn parse(s: &str) -> Option<PeriodKind> {
        PeriodKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// What an id of this kind looks like, for error messages.
    fn id_format(self) -> &'static str {
        match self {
            PeriodKind::Hour => "YYYY-MM-DDTHH, a local wall-clock hour such as 2026-11-21T14",
            PeriodKind::Day => "YYYY-MM-DD, a local date such as 2026-11-21",
            PeriodKind::Week => "YYYY-Www, an ISO 8601 week such as 2026-W47",
            PeriodKind::Month => "YYYY-MM, such as 2026-11",
            PeriodKind::Year => "YYYY, such as 2026",
            PeriodKind::All => "the literal `all`",
        }
    }
}

impl fmt::Display for PeriodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PeriodKind {
    type Err = PeriodError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PeriodKind::parse(s).ok_or_else(|| PeriodError::UnknownKind {
            text: s.to_string(),
        })
    }
}

/// One concrete period: `[start_ms, end_ms)` in epoch milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Period {
    pub(crate) kind: PeriodKind,
    /// `2026-11-21T14`, `2026-11-21`, `2026-W47`, `2026-11`, `2026`, or `all`.
    pub(crate) id: String,
    /// First instant of the period. For [`PeriodKind::All`] this is `i64::MIN`:
    /// the all-time board has no start.
    pub(crate) start_ms: i64,
    /// First instant after the period; `None` for [`PeriodKind::All`].
    pub(crate) end_ms: Option<i64>,
}

impl Period {
    /// The view name used in Redis keys: `week:2026-W47`, or `all`.
    pub(crate) fn view(&self) -> String {
        match self.kind {
            PeriodKind::All => "all".to_string(),
            kind => format!("{}:{}", kind.name(), self.id),
        }
    }

    /// Whether `ts_ms` lies in `[start_ms, end_ms)`.
    #[cfg(test)]
    pub(crate) fn contains(&self, ts_ms: i64) -> bool {
        self.start_ms <= ts_ms && self.end_ms.is_none_or(|end| ts_ms < end)
    }

    fn all() -> Period {
        Period {
            kind: PeriodKind::All,
            id: "all".to_string(),
            start_ms: i64::MIN,
            end_ms: None,
        }
    }
}

/// Why a period id or kind was rejected. Messages are shown to users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    #[error("unknown period kind {text:?}: expected one of hour, day, week, month, year, all")]
    UnknownKind { text: String },
    #[error("invalid {kind} period id {id:?}: expected {expected}")]
    Malformed {
        kind: PeriodKind,
        id: String,
        expected: &'static str,
    },
    #[error("invalid {kind} period id {id:?}: {reason}")]
    InvalidDate {
        kind: PeriodKind,
        id: String,
        reason: String,
    },
    #[error(
        "week period id {id:?} does not exist: ISO week-year {year} has only {weeks} weeks (W01..=W{weeks})"
    )]
    NoSuchWeek { id: String, year: i32, weeks: u32 },
    #[error(
        "{kind} period {id:?} does not exist in time zone {tz}: the local clock skips over it (daylight-saving or UTC-offset change)"
    )]
    Skipped {
        kind: PeriodKind,
        id: String,
        tz: String,
    },
}

/// The period of `kind` that contains the instant `ts_ms`, in `tz`.
///
/// `ts_ms` is clamped into [`MIN_TS_MS`]`..=`[`MAX_TS_MS`] first (see the
/// module docs); within that range `start_ms <= ts_ms < end_ms` always holds.
pub(crate) fn period_of(kind: PeriodKind, ts_ms: i64, tz: Tz) -> Period {
    if kind == PeriodKind::All {
        return Period::all();
    }
    match resolve(kind, clamp_ts(ts_ms), tz) {
        Some(r) => r.into_period(kind),
        // Unreachable for clamped inputs (every chrono operation involved is in
        // range); rather than panic, fall back to the label of the UTC wall clock
        // with a minimal period around the instant.
        None => fallback_period(kind, ts_ms),
    }
}

/// End of the period of `kind` that is current at `now_ms`: the instant at
/// which the board resets. `None` for [`PeriodKind::All`], which never resets.
pub(crate) fn next_reset(kind: PeriodKind, now_ms: i64, tz: Tz) -> Option<i64> {
    period_of(kind, now_ms, tz).end_ms
}

/// Parse a period id of `kind` into its period in `tz` (the inverse of
/// [`period_of`]'s `id`). The format is strict: exactly `YYYY-MM-DDTHH`,
/// `YYYY-MM-DD`, `YYYY-Www`, `YYYY-MM`, `YYYY` or `all`, ASCII digits, no
/// surrounding whitespace. Years 0001..=9999 are accepted (the periods of the
/// very first days of year 1 start before [`MIN_TS_MS`], the clamp limit of
/// [`period_of`]).
///
/// Errors: wrong shape, impossible calendar values (month 13, Feb 30, hour 24),
/// years outside 0001..=9999, week 53 of a 52-week ISO year, and labels the local
/// clock never shows (the spring-forward `T02`, a day skipped by a date-line
/// change).
pub(crate) fn parse_period_id(kind: PeriodKind, id: &str, tz: Tz) -> Result<Period, PeriodError> {
    if kind == PeriodKind::All {
        return if id == "all" {
            Ok(Period::all())
        } else {
            Err(malformed(kind, id))
        };
    }
    let start_label = parse_label(kind, id)?;
    let invalid = || PeriodError::InvalidDate {
        kind,
        id: id.to_string(),
        reason: "outside the supported range".to_string(),
    };
    let next_label = step(kind, start_label, true).ok_or_else(invalid)?;
    let start_ms = first_instant_at_or_after(start_label, tz).ok_or_else(invalid)?;
    let end_ms = first_instant_at_or_after(next_label, tz).ok_or_else(invalid)?;
    if start_ms >= end_ms {
        // The first instant at/after the label start already belongs to a later
        // label: the clock jumped over this whole label.
        return Err(PeriodError::Skipped {
            kind,
            id: id.to_string(),
            tz: tz.name().to_string(),
        });
    }
    Ok(Period {
        kind,
        id: id.to_string(),
        start_ms,
        end_ms: Some(end_ms),
    })
}

// ---------------------------------------------------------------------------
// Local time ⇄ instant

/// Local wall-clock time of an instant in `tz`. `None` only outside chrono's
/// representable range.
pub(crate) fn local_naive(ts_ms: i64, tz: Tz) -> Option<NaiveDateTime> {
    Some(
        DateTime::from_timestamp_millis(ts_ms)?
            .with_timezone(&tz)
            .naive_local(),
    )
}

/// The first instant at which the local clock of `tz` reaches `local`:
/// - a normal local time: its only instant;
/// - a repeated local time (fall-back): the earlier of the two instants;
/// - a skipped local time (spring-forward gap): the instant of the jump, whose
///   local reading is the first one after the gap.
///
/// This is the boundary function for every period and day bucket: periods are
/// `[f(label), f(next label))`, so they tile the timeline by construction.
pub(crate) fn first_instant_at_or_after(local: NaiveDateTime, tz: Tz) -> Option<i64> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(dt) => Some(dt.timestamp_millis()),
        LocalResult::Ambiguous(a, b) => Some(a.timestamp_millis().min(b.timestamp_millis())),
        LocalResult::None => gap_exit(local, tz),
    }
}

/// Instant of the forward jump that skips `local`. chrono-tz does not expose
/// its transition table, so binary-search the instant at which the local clock
/// first reads `>= local`. UTC offsets are always under 24 h, so that instant is
/// within ±26 h of `local` read as UTC; inside that window the predicate flips
/// exactly once for any real zone (it could only flip more often if the clock
/// jumped back across `local` as well, which no zone does within two days).
fn gap_exit(local: NaiveDateTime, tz: Tz) -> Option<i64> {
    let as_utc = local.and_utc().timestamp_millis();
    let mut lo = as_utc.checked_sub(26 * HOUR_MS)?;
    let mut hi = as_utc.checked_add(26 * HOUR_MS)?;
    if local_naive(lo, tz)? >= local || local_naive(hi, tz)? < local {
        return None;
    }
    // Invariant: local(lo) < local <= local(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if local_naive(mid, tz)? >= local {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// First instant of local date `date` (local midnight, or the end of a gap that
/// swallows midnight).
pub(crate) fn day_start_ms(date: NaiveDate, tz: Tz) -> Option<i64> {
    first_instant_at_or_after(date.and_time(NaiveTime::MIN), tz)
}

/// The local date whose day period contains `ts_ms` (the clamped instant), i.e.
/// the date of `period_of(Day, ts_ms, tz)`, together with its bounds.
pub(crate) fn day_of(ts_ms: i64, tz: Tz) -> Option<(NaiveDate, i64, i64)> {
    let r = resolve(PeriodKind::Day, clamp_ts(ts_ms), tz)?;
    Some((r.label.date(), r.start_ms, r.end_ms))
}

// ---------------------------------------------------------------------------
// Labels

/// A resolved period: the local start of its label and its instant bounds.
struct Resolved {
    label: NaiveDateTime,
    start_ms: i64,
    end_ms: i64,
}

impl Resolved {
    fn into_period(self, kind: PeriodKind) -> Period {
        Period {
            kind,
            id: label_id(kind, self.label),
            start_ms: self.start_ms,
            end_ms: Some(self.end_ms),
        }
    }
}

/// Find the label `L` with `f(L) <= ts < f(next L)` (see
/// [`first_instant_at_or_after`]). Usually `L` is the label of the local time of
/// `ts`; the loops only move when the clock was turned back across a label
/// boundary (see module docs), and are bounded so that nothing can spin.
fn resolve(kind: PeriodKind, ts: i64, tz: Tz) -> Option<Resolved> {
    const MAX_STEPS: u32 = 64;
    let mut label = truncate(kind, local_naive(ts, tz)?)?;
    let mut start = first_instant_at_or_after(label, tz)?;
    let mut steps = 0;
    while start > ts {
        // Defensive: the label of ts cannot start after ts, but if the zone data
        // ever disagreed with itself, stepping back keeps the tiling intact.
        steps += 1;
        if steps > MAX_STEPS {
            return None;
        }
        label = step(kind, label, false)?;
        start = first_instant_at_or_after(label, tz)?;
    }
    let mut end = first_instant_at_or_after(step(kind, label, true)?, tz)?;
    while end <= ts {
        steps += 1;
        if steps > MAX_STEPS {
            return None;
        }
        label = step(kind, label, true)?;
        start = end;
        end = first_instant_at_or_after(step(kind, label, true)?, tz)?;
    }
    Some(Resolved {
        label,
        start_ms: start,
        end_ms: end,
    })
}

/// Local start of the label containing the local time `t`.
fn truncate(kind: PeriodKind, t: NaiveDateTime) -> Option<NaiveDateTime> {
    let d = t.date();
    let date = match kind {
        PeriodKind::Hour => return d.and_hms_opt(t.hour(), 0, 0),
        PeriodKind::Day => d,
        // ISO weeks start on Monday.
        PeriodKind::Week => {
            d.checked_sub_days(Days::new(u64::from(d.weekday().num_days_from_monday())))?
        }
        PeriodKind::Month => d.with_day(1)?,
        PeriodKind::Year => NaiveDate::from_ymd_opt(d.year(), 1, 1)?,
        PeriodKind::All => return None,
    };
    Some(date.and_time(NaiveTime::MIN))
}

/// Local start of the next (`forward`) or previous label.
fn step(kind: PeriodKind, label: NaiveDateTime, forward: bool) -> Option<NaiveDateTime> {
    let by_days = |n: u64| {
        if forward {
            label.checked_add_days(Days::new(n))
        } else {
            label.checked_sub_days(Days::new(n))
        }
    };
    let by_months = |n: u32| {
        if forward {
            label.checked_add_months(Months::new(n))
        } else {
            label.checked_sub_months(Months::new(n))
        }
    };
    match kind {
        PeriodKind::Hour => {
            let hour = TimeDelta::hours(if forward { 1 } else { -1 });
            label.checked_add_signed(hour)
        }
        PeriodKind::Day => by_days(1),
        PeriodKind::Week => by_days(7),
        PeriodKind::Month => by_months(1),
        PeriodKind::Year => by_months(12),
        PeriodKind::All => None,
    }
}

/// The id of the label starting at local time `label`.
fn label_id(kind: PeriodKind, label: NaiveDateTime) -> String {
    let d = label.date();
    match kind {
        PeriodKind::Hour => format!(
            "{:04}-{:02}-{:02}T{:02}",
            d.year(),
            d.month(),
            d.day(),
            label.hour()
        ),
        PeriodKind::Day => format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day()),
        PeriodKind::Week => {
            // Labelled by ISO week-year, which differs from the calendar year
            // around New Year (2027-01-01 is in 2026-W53).
            let w = d.iso_week();
            format!("{:04}-W{:02}", w.year(), w.week())
        }
        PeriodKind::Month => format!("{:04}-{:02}", d.year(), d.month()),
        PeriodKind::Year => format!("{:04}", d.year()),
        PeriodKind::All => "all".to_string(),
    }
}

fn malformed(kind: PeriodKind, id: &str) -> PeriodError {
    PeriodError::Malformed {
        kind,
        id: id.to_string(),
        expected: kind.id_format(),
    }
}

/// Strictly parse an id into the local start of its label.
fn parse_label(kind: PeriodKind, id: &str) -> Result<NaiveDateTime, PeriodError> {
    // Shape check: 'D' is an ASCII digit, anything else must match literally.
    let shape = match kind {
        PeriodKind::Hour => "DDDD-DD-DDTDD",
        PeriodKind::Day => "DDDD-DD-DD",
        PeriodKind::Week => "DDDD-WDD",
        PeriodKind::Month => "DDDD-DD",
        PeriodKind::Year => "DDDD",
        PeriodKind::All => return Err(malformed(kind, id)),
    };
    let b = id.as_bytes();
    let shape_ok = b.len() == shape.len()
        && shape.bytes().zip(b).all(|(s, &c)| match s {
            b'D' => c.is_ascii_digit(),
            lit => c == lit,
        });
    if !shape_ok {
        return Err(malformed(kind, id));
    }
    // Safe: the shape check guarantees ASCII digits at these positions.
    let num = |from: usize, to: usize| -> u32 {
        b[from..to]
            .iter()
            .fold(0, |acc, &c| acc * 10 + u32::from(c - b'0'))
    };
    let invalid = |reason: String| PeriodError::InvalidDate {
        kind,
        id: id.to_string(),
        reason,
    };
    let year = num(0, 4);
    if year == 0 {
        return Err(invalid("year must be between 0001 and 9999".to_string()));
    }
    // At most 9999, so the cast cannot truncate.
    let year = year as i32;
    let ymd = |month: u32, day: u32| {
        if !(1..=12).contains(&month) {
            return Err(invalid(format!(
                "month {month:02} is not between 01 and 12"
            )));
        }
        NaiveDate::from_ymd_opt(year, month, day).ok_or_else(|| {
            invalid(format!(
                "{year:04}-{month:02}-{day:02} is not a calendar date"
            ))
        })
    };
    let date = match kind {
        PeriodKind::Hour | PeriodKind::Day => ymd(num(5, 7), num(8, 10))?,
        PeriodKind::Month => ymd(num(5, 7), 1)?,
        PeriodKind::Year => ymd(1, 1)?,
        PeriodKind::Week => {
            let week = num(6, 8);
            let weeks = NaiveDate::from_ymd_opt(year, 12, 28).map_or(52, |d| d.iso_week().week());
            if week == 0 || week > weeks {
                return Err(PeriodError::NoSuchWeek {
                    id: id.to_string(),
                    year,
                    weeks,
                });
            }
            NaiveDate::from_isoywd_opt(year, week, Weekday::Mon)
                .ok_or_else(|| invalid("outside the supported range".to_string()))?
        }
        PeriodKind::All => return Err(malformed(kind, id)),
    };
    let hour = if kind == PeriodKind::Hour {
        let h = num(11, 13);
        if h > 23 {
            return Err(invalid(format!("hour {h:02} is not between 00 and 23")));
        }
        h
    } else {
        0
    };
    date.and_hms_opt(hour, 0, 0)
        .ok_or_else(|| invalid("outside the supported range".to_string()))
}

/// Last-resort period for the (unreachable) case where chrono cannot represent
/// a clamped instant: label of the UTC clock, one millisecond long.
fn fallback_period(kind: PeriodKind, ts_ms: i64) -> Period {
    let id = DateTime::from_timestamp_millis(clamp_ts(ts_ms))
        .and_then(|dt| truncate(kind, dt.naive_utc()))
        .map_or_else(|| "invalid".to_string(), |l| label_id(kind, l));
    Period {
        kind,
        id,
        start_ms: ts_ms,
        end_ms: Some(ts_ms.saturating_add(1)),
    }
}

#[cfg(test)]
#[path = "time_tests.rs"]
mod time_tests;
