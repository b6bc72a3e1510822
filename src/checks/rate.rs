//! A rate check's limit, `max_rate = "N/length"` (docs/checks.md): at most
//! N events of one member within any sliding length of event time.

use crate::board::duration::parse_fixed;

/// Longest length a rate may slide over: its state is kept that long.
pub(crate) const MAX_LENGTH_MS: i64 = 7 * 24 * 3_600_000;

/// Largest N: every passed event within the length is kept, so N bounds
/// the state kept per member.
pub(crate) const MAX_COUNT: u32 = 100_000;

/// A parsed `max_rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxRate {
    /// At most this many events...
    pub(crate) count: u32,
    /// ...within any length of event time of this many milliseconds.
    pub(crate) length_ms: i64,
}

impl MaxRate {
    /// Parses `N/length` (`30/1m`, `500/1h`); the message says what is
    /// wrong.
    pub(crate) fn parse(text: &str) -> Result<MaxRate, String> {
        let expected = "expected N/length, e.g. \"30/1m\"";
        let (n, length) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: {expected}"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: {n:?} is not a whole number; {expected}"))?;
        if count == 0 || count > MAX_COUNT {
            return Err(format!(
                "{text:?}: N must be between 1 and {MAX_COUNT} (every passed event within the length is kept)"
            ));
        }
        let length_ms = parse_fixed(length).map_err(|e| e.to_string())?;
        if length_ms > MAX_LENGTH_MS {
            return Err(format!("{text:?}: the length may be at most 7d"));
        }
        Ok(MaxRate { count, length_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_from_a_hand_made_table() {
        for (text, count, length_ms) in [
            ("30/1m", 30, 60_000),
            ("12/1m", 12, 60_000),
            ("500/1h", 500, 3_600_000),
            (" 3 /10s", 3, 10_000),
            ("100000/7d", 100_000, 7 * 86_400_000),
        ] {
            assert_eq!(
                MaxRate::parse(text),
                Ok(MaxRate { count, length_ms }),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for (text, says) in [
            ("30", "expected N/length"),
            ("x/1m", "not a whole number"),
            ("0/1m", "between 1 and"),
            ("100001/1m", "between 1 and"),
            ("30/1mo", "no fixed length"),
            ("30/8d", "at most 7d"),
            ("30/", "empty"),
        ] {
            let e = MaxRate::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
