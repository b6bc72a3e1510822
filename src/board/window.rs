//! Sliding-window boards (`"3h/1m"`, `"7d/1d"`): parsing and validating the
//! `LENGTH/BUCKET` spec, which bucket an event falls in, and which buckets are
//! inside the window at a given time.
//!
//! Semantics (from the product spec): at time `now` the window holds the events
//! whose bucket `[s, e)` has `e > now - L`. `L` is a fixed duration, so
//! `now - L` is absolute. Buckets of `B` milliseconds are aligned to the Unix
//! epoch — except when `B` is a whole number of days: then buckets are local
//! calendar days of the board's zone (a `1d` bucket on a DST day lasts 23 or
//! 25 h), and `k`-day buckets group local dates by
//! `(days since 1970-01-01 in the local calendar) div k`. Day boundaries come
//! from [`super::period`], so a `1d` bucket is exactly the `day` period.

use std::fmt;
use std::str::FromStr;

use chrono::{Days, NaiveDate};
use chrono_tz::Tz;

use super::duration::{DAY_MS, DurationError, SECOND_MS, parse_fixed};
use super::period::{day_of, day_start_ms};

/// Upper bound on `L / B`: the board keeps one sorted set per bucket, so memory
/// is members × buckets.
pub(crate) const MAX_BUCKETS_PER_WINDOW: i64 = 10_000;

/// A validated window spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WindowSpec {
    /// The spec, `"3h/1m"` (surrounding whitespace removed).
    pub(crate) text: String,
    /// `L` as written, `"3h"`: the view is `win:<label>`.
    pub(crate) label: String,
    /// `L` in milliseconds.
    pub(crate) length_ms: i64,
    /// `B` in milliseconds (nominal 24 h per day for day buckets).
    pub(crate) bucket_ms: i64,
    /// `Some(k)` when `B` is a whole number `k` of days: buckets are then `k`
    /// local calendar days rather than fixed-length intervals.
    pub(crate) bucket_days: Option<u32>,
}

/// Why a window spec was rejected. Messages are shown to users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WindowError {
    #[error(
        "invalid window {text:?}: expected LENGTH/BUCKET with fixed durations (s, m, h, d, w), e.g. \"3h/1m\" or \"7d/1d\""
    )]
    Malformed { text: String },
    #[error("invalid window {text:?}: bad length: {source}")]
    Length {
        text: String,
        #[source]
        source: DurationError,
    },
    #[error("invalid window {text:?}: bad bucket: {source}")]
    Bucket {
        text: String,
        #[source]
        source: DurationError,
    },
    #[error("invalid window {text:?}: the bucket must be at least 1s")]
    BucketTooSmall { text: String },
    #[error("invalid window {text:?}: the bucket must be at most 4294967295 days")]
    BucketTooLarge { text: String },
    #[error(
        "invalid window {text:?}: the length must be at least the bucket (LENGTH/BUCKET, e.g. \"3h/1m\")"
    )]
    LengthShorterThanBucket { text: String },
    #[error(
        "invalid window {text:?}: the length must be a whole multiple of the bucket (e.g. \"3h/1m\", \"7d/1d\")"
    )]
    NotMultiple { text: String },
    #[error(
        "invalid window {text:?}: {buckets} buckets per window; at most 10000 are allowed (memory grows with members × buckets), use a larger bucket"
    )]
    TooManyBuckets { text: String, buckets: i64 },
}

impl WindowSpec {
    /// Parse and validate `"L/B"`: both fixed durations, `B >= 1s`, `L >= B`,
    /// `L` a multiple of `B`, `L / B <= 10_000`.
    pub(crate) fn parse(s: &str) -> Result<WindowSpec, WindowError> {
        let trimmed = s.trim();
        let malformed = || WindowError::Malformed {
            text: trimmed.to_string(),
        };
        let (l, b) = trimmed.split_once('/').ok_or_else(malformed)?;
        let (l, b) = (l.trim(), b.trim());
        if b.contains('/') {
            return Err(malformed());
        }
        let text = format!("{l}/{b}");
        let length_ms = parse_fixed(l).map_err(|source| WindowError::Length {
            text: text.clone(),
            source,
        })?;
        let bucket_ms = parse_fixed(b).map_err(|source| WindowError::Bucket {
            text: text.clone(),
            source,
        })?;
        // parse_fixed guarantees both are > 0.
        if bucket_ms < SECOND_MS {
            return Err(WindowError::BucketTooSmall { text });
        }
        if length_ms < bucket_ms {
            return Err(WindowError::LengthShorterThanBucket { text });
        }
        if length_ms % bucket_ms != 0 {
            return Err(WindowError::NotMultiple { text });
        }
        let buckets = length_ms / bucket_ms;
        if buckets > MAX_BUCKETS_PER_WINDOW {
            return Err(WindowError::TooManyBuckets { text, buckets });
        }
        let bucket_days = if bucket_ms % DAY_MS == 0 {
            let days = u32::try_from(bucket_ms / DAY_MS)
                .map_err(|_| WindowError::BucketTooLarge { text: text.clone() })?;
            Some(days)
        } else {
            None
        };
        Ok(WindowSpec {
            text,
            label: l.to_string(),
            length_ms,
            bucket_ms,
            bucket_days,
        })
    }

    /// The view name used in Redis keys: `win:3h`.
    pub(crate) fn view(&self) -> String {
        format!("win:{}", self.label)
    }

    /// The bucket `[start, end)` containing `ts_ms`.
    ///
    /// Fixed buckets: `start = floor(ts / B) * B` (epoch-aligned, any `i64`;
    /// saturates at the ends of the `i64` range). Day buckets: local days of
    /// `tz` exactly as [`super::period::period_of`] with `Day` sees them; `ts_ms`
    /// is clamped to the supported range of that module (years 0001..=9999), and
    /// a group whose edge falls outside chrono's range saturates to
    /// `i64::MIN` / `i64::MAX`.
    pub(crate) fn bucket_of(&self, ts_ms: i64, tz: Tz) -> (i64, i64) {
        match self.bucket_days {
            Some(k) => {
                day_bucket(ts_ms, k, tz).unwrap_or_else(|| fixed_bucket(ts_ms, self.bucket_ms))
            }
            None => fixed_bucket(ts_ms, self.bucket_ms),
        }
    }

    /// `now - L`: a bucket is in the window at `now` iff its end is `> cutoff`.
    pub(crate) fn cutoff(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.length_ms)
    }

    /// Whether an event at `ts_ms` is in the window at `now_ms`, i.e. its
    /// bucket ends after `now - L`. (Events later than `now` count too; the
    /// definition has no upper bound and callers decide about future events.)
    #[cfg(test)]
    pub(crate) fn in_window(&self, ts_ms: i64, now_ms: i64, tz: Tz) -> bool {
        self.bucket_of(ts_ms, tz).1 > self.cutoff(now_ms)
    }

    /// Upper bound on the number of buckets that can hold in-window events at
    /// one time (buckets that started at or before `now` and end after
    /// `now - L`): `L / B` full buckets plus the partly expired oldest one, so
    /// `L / B + 1` (e.g. 181 for `3h/1m`). With day buckets one more, because a
    /// 23 h DST day can pull an extra local day into a fixed-length `L`.
    #[cfg(test)]
    pub(crate) fn max_buckets(&self) -> i64 {
        // `max(1)`: the fields are public, so guard hand-built specs too.
        let full = self.length_ms / self.bucket_ms.max(1);
        match self.bucket_days {
            Some(_) => full + 2,
            None => full + 1,
        }
    }
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for WindowSpec {
    type Err = WindowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WindowSpec::parse(s)
    }
}

/// Epoch-aligned fixed bucket; computed in i128 so no input overflows.
fn fixed_bucket(ts_ms: i64, bucket_ms: i64) -> (i64, i64) {
    let b = i128::from(bucket_ms.max(1));
    let start = i128::from(ts_ms).div_euclid(b) * b;
    let clamp = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
    (clamp(start), clamp(start + b))
}

/// `k` local days starting at a local date whose day number since 1970-01-01
/// is a multiple of `k`.
fn day_bucket(ts_ms: i64, k: u32, tz: Tz) -> Option<(i64, i64)> {
    let (date, day_start, day_end) = day_of(ts_ms, tz)?;
    if k <= 1 {
        return Some((day_start, day_end));
    }
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    let n = date.signed_duration_since(epoch).num_days();
    let k = i64::from(k.max(1)); // hand-built specs could hold 0
    let first = n.div_euclid(k) * k; // <= n, and n is small (years 1..=9999)
    let first_date = add_days(epoch, first);
    let start = first_date
        .and_then(|d| day_start_ms(d, tz))
        .unwrap_or(i64::MIN);
    let end = first_date
        .and_then(|d| d.checked_add_days(Days::new(k.unsigned_abs())))
        .and_then(|d| day_start_ms(d, tz))
        .unwrap_or(i64::MAX);
    Some((start, end))
}

fn add_days(date: NaiveDate, days: i64) -> Option<NaiveDate> {
    if days >= 0 {
        date.checked_add_days(Days::new(days.unsigned_abs()))
    } else {
        date.checked_sub_days(Days::new(days.unsigned_abs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::duration::{HOUR_MS, MINUTE_MS};

    #[test]
    fn parses_valid_specs() {
        let w = WindowSpec::parse("3h/1m").expect("3h/1m");
        assert_eq!(
            w,
            WindowSpec {
                text: "3h/1m".to_string(),
                label: "3h".to_string(),
                length_ms: 3 * HOUR_MS,
                bucket_ms: MINUTE_MS,
                bucket_days: None,
            }
        );
        assert_eq!(w.view(), "win:3h");
        assert_eq!(w.max_buckets(), 181);
        assert_eq!(w.to_string(), "3h/1m");

        let w = WindowSpec::parse("7d/1d").expect("7d/1d");
        assert_eq!(w.bucket_days, Some(1));
        assert_eq!(w.view(), "win:7d");
        assert_eq!(w.max_buckets(), 9);

        assert_eq!(WindowSpec::parse("4w/1w").expect("4w").bucket_days, Some(7));
        assert_eq!(
            WindowSpec::parse("2d/24h").expect("24h").bucket_days,
            Some(1)
        );
        assert_eq!(WindowSpec::parse("36h/12h").expect("12h").bucket_days, None);
        assert_eq!(WindowSpec::parse("1s/1s").expect("1s").bucket_ms, 1000);
        // Exactly 10_000 buckets is allowed.
        assert!(WindowSpec::parse("10000s/1s").is_ok());
        // "L as written" for the label.
        assert_eq!(
            WindowSpec::parse("180m/1m").expect("180m").view(),
            "win:180m"
        );
    }

    #[test]
    fn rejects_invalid_specs() {
        type IsExpected = fn(&WindowError) -> bool;
        let cases: &[(&str, IsExpected)] = &[
            ("3h", |e| matches!(e, WindowError::Malformed { .. })),
            ("3h/1m/1s", |e| matches!(e, WindowError::Malformed { .. })),
            ("", |e| matches!(e, WindowError::Malformed { .. })),
            ("/1m", |e| matches!(e, WindowError::Length { .. })),
            ("3x/1m", |e| matches!(e, WindowError::Length { .. })),
            ("0h/1m", |e| matches!(e, WindowError::Length { .. })),
            ("3h/0m", |e| matches!(e, WindowError::Bucket { .. })),
            ("1y/1d", |e| matches!(e, WindowError::Length { .. })),
            ("3mo/1mo", |e| matches!(e, WindowError::Length { .. })),
            ("3h/1mo", |e| matches!(e, WindowError::Bucket { .. })),
            ("1s/500ms", |e| {
                matches!(e, WindowError::BucketTooSmall { .. })
            }),
            ("1m/1h", |e| {
                matches!(e, WindowError::LengthShorterThanBucket { .. })
            }),
            ("90m/1h", |e| matches!(e, WindowError::NotMultiple { .. })),
            ("10001s/1s", |e| {
                matches!(
                    e,
                    WindowError::TooManyBuckets {
                        buckets: 10_001,
                        ..
                    }
                )
            }),
            ("7d/1m", |e| matches!(e, WindowError::TooManyBuckets { .. })),
        ];
        for (text, check) in cases {
            let err = WindowSpec::parse(text).expect_err(text);
            assert!(check(&err), "{text}: {err:?}");
            assert!(!err.to_string().is_empty());
        }
        let msg = WindowSpec::parse("7d/1m")
            .expect_err("too many")
            .to_string();
        assert!(msg.contains("10080") && msg.contains("10000"), "{msg}");
        let msg = WindowSpec::parse("3h").expect_err("no slash").to_string();
        assert!(msg.contains("LENGTH/BUCKET"), "{msg}");
    }

    #[test]
    fn fixed_buckets_survive_extreme_inputs() {
        let w = WindowSpec::parse("3h/1m").expect("3h/1m");
        let tz = chrono_tz::UTC;
        for ts in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            let (s, e) = w.bucket_of(ts, tz);
            assert!(s <= ts && (ts < e || e == i64::MAX), "{ts}: {s}..{e}");
            let _ = w.in_window(ts, ts, tz);
            let _ = w.cutoff(ts);
        }
        assert_eq!(w.bucket_of(-1, tz), (-MINUTE_MS, 0));
        // Hand-built specs with zero fields must not divide by zero.
        let odd = WindowSpec {
            bucket_ms: 0,
            bucket_days: Some(0),
            ..WindowSpec::parse("7d/1d").expect("7d/1d")
        };
        let _ = (odd.bucket_of(0, tz), odd.max_buckets());
        let odd = WindowSpec {
            bucket_days: None,
            ..odd
        };
        let _ = (odd.bucket_of(0, tz), odd.max_buckets());
        let d = WindowSpec::parse("7d/1d").expect("7d/1d");
        for ts in [i64::MIN, -1, 0, i64::MAX] {
            let (s, e) = d.bucket_of(ts, chrono_tz::America::New_York);
            assert!(s < e, "{ts}: {s}..{e}");
        }
    }
}
