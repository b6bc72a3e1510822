//! Duration strings used in board config: retention (`"35d"`, `"13mo"`,
//! `"3y"`) and window lengths/buckets (`"3h"`, `"1m"`).
//!
//! Grammar: `<positive integer><unit>`, no sign, no spaces inside, no
//! compounds. Units:
//! - fixed lengths: `s` seconds, `m` minutes, `h` hours, `d` days (24 h),
//!   `w` weeks (7 × 24 h), and `ms` milliseconds (accepted so that every
//!   [`Span`] has a text form);
//! - calendar lengths: `mo` months and `y` years (= 12 months). They are added
//!   in the board's local calendar by [`add_span`], keeping the wall-clock time
//!   and clamping the day to the end of a shorter month.
//!
//! Surrounding whitespace is ignored; anything else is a config error whose
//! message lists what is accepted.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Months};
use chrono_tz::Tz;

pub(crate) const SECOND_MS: i64 = 1_000;
pub(crate) const MINUTE_MS: i64 = 60 * SECOND_MS;
pub(crate) const HOUR_MS: i64 = 60 * MINUTE_MS;
pub(crate) const DAY_MS: i64 = 24 * HOUR_MS;
pub(crate) const WEEK_MS: i64 = 7 * DAY_MS;

const ACCEPTED: &str = "a positive whole number followed by a unit: s (seconds), m (minutes), h (hours), d (days), w (weeks), mo (months) or y (years), e.g. \"35d\" or \"13mo\"";
const ACCEPTED_FIXED: &str = "a positive whole number followed by a fixed-length unit: s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. \"3h\" or \"7d\"";

/// A parsed duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Span {
    /// An exact number of milliseconds (`s`, `m`, `h`, `d`, `w`, `ms`).
    Fixed { ms: i64 },
    /// Calendar months in the board's time zone (`mo`; `y` is 12 months).
    Months(u32),
}

impl Span {
    /// The shortest this span can be: its length for fixed spans, 28 days
    /// per month for calendar months (DST can shorten a day by an hour, so
    /// one hour less per month).
    pub(crate) fn min_ms(&self) -> i64 {
        match *self {
            Span::Fixed { ms } => ms,
            Span::Months(n) => i64::from(n) * (28 * DAY_MS - HOUR_MS),
        }
    }
}

impl fmt::Display for Span {
    /// Canonical text that [`parse_span`] maps back to the same value: the
    /// largest unit that divides exactly (`"35d"` prints as `"5w"`, `"12mo"` as
    /// `"1y"`), since the unit originally written is not stored.
    /// (`Fixed` values that are not positive have no parseable form and print
    /// as e.g. `"0ms"`.)
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Span::Fixed { ms } => {
                if ms > 0 {
                    for (unit, len) in [
                        ("w", WEEK_MS),
                        ("d", DAY_MS),
                        ("h", HOUR_MS),
                        ("m", MINUTE_MS),
                        ("s", SECOND_MS),
                    ] {
                        if ms % len == 0 {
                            return write!(f, "{}{unit}", ms / len);
                        }
                    }
                }
                write!(f, "{ms}ms")
            }
            Span::Months(n) if n > 0 && n % 12 == 0 => write!(f, "{}y", n / 12),
            Span::Months(n) => write!(f, "{n}mo"),
        }
    }
}

impl FromStr for Span {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_span(s)
    }
}

/// Why a duration string was rejected. Messages are shown to users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    #[error("empty duration: expected {ACCEPTED}")]
    Empty,
    #[error("invalid duration {text:?}: expected {ACCEPTED}")]
    Malformed { text: String },
    #[error("invalid duration {text:?}: missing unit; expected {ACCEPTED}")]
    MissingUnit { text: String },
    #[error("invalid duration {text:?}: unknown unit {unit:?}; expected {ACCEPTED}")]
    UnknownUnit { text: String, unit: String },
    #[error("invalid duration {text:?}: must be greater than zero")]
    Zero { text: String },
    #[error("invalid duration {text:?}: too large")]
    TooLarge { text: String },
    #[error(
        "invalid duration {text:?}: months and years have no fixed length here; expected {ACCEPTED_FIXED}"
    )]
    NotFixed { text: String },
}

/// Parse a retention-style duration: fixed units or calendar `mo` / `y`.
pub(crate) fn parse_span(s: &str) -> Result<Span, DurationError> {
    let text = s.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let digits_end = text
        .bytes()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(DurationError::Malformed {
            text: text.to_string(),
        });
    }
    if unit.is_empty() {
        // "35" alone: say which units exist rather than guessing one.
        return Err(DurationError::MissingUnit {
            text: text.to_string(),
        });
    }
    let too_large = || DurationError::TooLarge {
        text: text.to_string(),
    };
    // All-digit string: the only parse failure left is overflow.
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    if n == 0 {
        return Err(DurationError::Zero {
            text: text.to_string(),
        });
    }
    let fixed = |len: i64| -> Result<Span, DurationError> {
        let n = i64::try_from(n).map_err(|_| too_large())?;
        let ms = n.checked_mul(len).ok_or_else(too_large)?;
        Ok(Span::Fixed { ms })
    };
    let months = |per: u32| -> Result<Span, DurationError> {
        let n = u32::try_from(n).map_err(|_| too_large())?;
        Ok(Span::Months(n.checked_mul(per).ok_or_else(too_large)?))
    };
    match unit {
        "ms" => fixed(1),
        "s" => fixed(SECOND_MS),
        "m" => fixed(MINUTE_MS),
        "h" => fixed(HOUR_MS),
        "d" => fixed(DAY_MS),
        "w" => fixed(WEEK_MS),
        "mo" => months(1),
        "y" => months(12),
        _ => Err(DurationError::UnknownUnit {
            text: text.to_string(),
            unit: unit.to_string(),
        }),
    }
}

/// Parse a duration that must have a fixed length (windows): returns
/// milliseconds, always > 0. `mo` / `y` are rejected with [`DurationError::NotFixed`].
pub(crate) fn parse_fixed(s: &str) -> Result<i64, DurationError> {
    match parse_span(s)? {
        Span::Fixed { ms } => Ok(ms),
        Span::Months(_) => Err(DurationError::NotFixed {
            text: s.trim().to_string(),
        }),
    }
}

/// `instant_ms + span`.
///
/// - `Fixed`: plain (saturating) addition; DST does not matter.
/// - `Months(n)`: move the local date of the instant in `tz` by `n` calendar
///   months, keeping the wall-clock time and clamping the day to the last day of
///   the target month (Jan 31 + 1 month = Feb 28/29). If that local time is
///   repeated by a fall-back the earlier instant is used; if it is skipped by a
///   spring-forward, the instant the clock jumps (the first one after the gap).
///   Results beyond chrono's range saturate to `i64::MAX`.
pub(crate) fn add_span(instant_ms: i64, span: &Span, tz: Tz) -> i64 {
    match *span {
        Span::Fixed { ms } => instant_ms.saturating_add(ms),
        Span::Months(0) => instant_ms,
        Span::Months(n) => add_months(instant_ms, n, tz).unwrap_or(i64::MAX),
    }
}

fn add_months(instant_ms: i64, n: u32, tz: Tz) -> Option<i64> {
    let local = DateTime::from_timestamp_millis(instant_ms)?
        .with_timezone(&tz)
        .naive_local();
    let target = local.checked_add_months(Months::new(n))?;
    super::period::first_instant_at_or_after(target, tz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        let cases = [
            ("1500ms", Span::Fixed { ms: 1500 }),
            ("30s", Span::Fixed { ms: 30_000 }),
            ("1m", Span::Fixed { ms: 60_000 }),
            ("3h", Span::Fixed { ms: 3 * HOUR_MS }),
            ("2d", Span::Fixed { ms: 2 * DAY_MS }),
            ("35d", Span::Fixed { ms: 35 * DAY_MS }),
            ("10w", Span::Fixed { ms: 70 * DAY_MS }),
            ("13mo", Span::Months(13)),
            ("3y", Span::Months(36)),
            (" 7d ", Span::Fixed { ms: 7 * DAY_MS }),
        ];
        for (text, want) in cases {
            assert_eq!(parse_span(text), Ok(want), "{text}");
        }
        assert_eq!(parse_fixed("3h"), Ok(3 * HOUR_MS));
    }

    #[test]
    fn rejects_bad_text_with_helpful_errors() {
        for bad in [
            "", "  ", "d", "-1d", "+1d", "1.5h", "1 h", "1H", "1hr", "1h30m", "35", "h1",
        ] {
            let err = parse_span(bad).expect_err(bad);
            let msg = err.to_string();
            assert!(msg.contains("expected"), "{bad}: {msg}");
        }
        assert!(matches!(parse_span("0d"), Err(DurationError::Zero { .. })));
        assert!(matches!(
            parse_span("99999999999999999999d"),
            Err(DurationError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_span("9999999999999999w"),
            Err(DurationError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_span("400000000y"),
            Err(DurationError::TooLarge { .. })
        ));
        let err = parse_fixed("13mo").expect_err("calendar unit");
        assert!(matches!(err, DurationError::NotFixed { .. }));
        assert!(err.to_string().contains("s (seconds)"), "{err}");
        assert!(parse_fixed("1y").is_err());
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "2d", "3h", "1m", "30s", "10w", "13mo", "3y", "1500ms", "90m",
        ] {
            let span = parse_span(text).expect(text);
            assert_eq!(parse_span(&span.to_string()), Ok(span), "{text}");
        }
        // Canonical form uses the largest exact unit.
        assert_eq!(parse_span("2d").expect("2d").to_string(), "2d");
        assert_eq!(parse_span("13mo").expect("13mo").to_string(), "13mo");
        assert_eq!(parse_span("3y").expect("3y").to_string(), "3y");
        assert_eq!(parse_span("10w").expect("10w").to_string(), "10w");
        assert_eq!(parse_span("35d").expect("35d").to_string(), "5w");
        assert_eq!(parse_span("12mo").expect("12mo").to_string(), "1y");
        assert_eq!(parse_span("90m").expect("90m").to_string(), "90m");
        assert_eq!("3h".parse::<Span>(), Ok(Span::Fixed { ms: 3 * HOUR_MS }));
    }
}
