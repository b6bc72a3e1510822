//! Typed setting values: each is parsed while the file is read, so a value
//! that cannot work (a zero timeout, an unknown zone, a calendar length where
//! a fixed one is needed) fails the load with a message at its key, instead
//! of surfacing later as odd behaviour.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::board::duration::parse_fixed;
use crate::board::model::parse_tz;

/// A positive number of milliseconds, written as an integer (the existing
/// `*_ms` keys keep their meaning and type; zero is refused at load).
#[derive(Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Millis(NonZeroU64);

impl Millis {
    /// `ms` if it is not zero.
    pub const fn new(ms: u64) -> Option<Millis> {
        match NonZeroU64::new(ms) {
            Some(n) => Some(Millis(n)),
            None => None,
        }
    }

    /// For defaults written in the code; a zero there is a bug caught at
    /// the first test run.
    pub(super) const fn from_const(ms: u64) -> Millis {
        match NonZeroU64::new(ms) {
            Some(n) => Millis(n),
            None => Millis(NonZeroU64::MIN),
        }
    }

    /// The milliseconds, never 0: for logs and arithmetic in ms.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    pub(crate) fn duration(self) -> Duration {
        Duration::from_millis(self.0.get())
    }
}

impl TryFrom<u64> for Millis {
    type Error = String;
    fn try_from(ms: u64) -> Result<Self, Self::Error> {
        Millis::new(ms)
            .ok_or_else(|| "must be at least 1 (milliseconds); 0 would never fire".into())
    }
}

impl From<Millis> for u64 {
    fn from(m: Millis) -> u64 {
        m.get()
    }
}

impl fmt::Debug for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.get())
    }
}

/// A fixed length written like `"5m"` or `"90s"` (no months or years, whose
/// length depends on the calendar).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct FixedSpan {
    pub(super) text: String,
    pub(super) ms: i64,
}

impl FixedSpan {
    pub(crate) fn ms(&self) -> i64 {
        self.ms
    }
}

impl TryFrom<String> for FixedSpan {
    type Error = String;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        let ms = parse_fixed(&text).map_err(|e| e.to_string())?;
        Ok(FixedSpan { text, ms })
    }
}

impl From<FixedSpan> for String {
    fn from(s: FixedSpan) -> String {
        s.text
    }
}

impl fmt::Debug for FixedSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

/// An IANA time zone, written by name (`"UTC"`, `"Asia/Shanghai"`).
#[derive(Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct TimeZone(pub Tz);

impl TryFrom<String> for TimeZone {
    type Error = String;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        parse_tz(&name).map(TimeZone)
    }
}

impl From<TimeZone> for String {
    fn from(z: TimeZone) -> String {
        z.0.name().to_string()
    }
}

impl fmt::Debug for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_refuse() {
        assert_eq!(Millis::try_from(50).map(Millis::get), Ok(50));
        assert!(Millis::try_from(0).is_err());
        assert_eq!(
            FixedSpan::try_from("5m".to_string()).map(|s| s.ms()),
            Ok(300_000)
        );
        assert!(FixedSpan::try_from("1mo".to_string()).is_err());
        assert!(TimeZone::try_from("Mars/Base".to_string()).is_err());
        assert_eq!(
            TimeZone::try_from("Asia/Tokyo".to_string()).map(|z| z.0),
            Ok(Tz::Asia__Tokyo)
        );
    }
}
