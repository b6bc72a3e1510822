//! Which key expiries this consumer set recently. A period key's expiry is
//! fixed (period end + retention), so sending PEXPIREAT for every key in
//! every batch is wasted work on the Redis thread; a key's expiry is sent
//! when it is new or later than the last one sent, and again at least once
//! a [`REFRESH`], so a key that Redis lost and recreated gets its expiry
//! back soon. A leaf: its [`REFRESH`] is also how long the due-set and
//! scope registrations are trusted (`due.rs`, `scopes.rs`), and
//! [`crate::sink::caches`] forgets all three together when Redis is known
//! to have lost state.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a sent expiry (or a registration) is trusted before it is sent
/// again.
pub(crate) const REFRESH: Duration = Duration::from_secs(60);
/// Entries kept before old ones are pruned.
const PRUNE_AT: usize = 100_000;

/// Key → (expiry sent, when it was sent).
#[derive(Debug, Default)]
pub(crate) struct ExpiryCache {
    entries: HashMap<String, (i64, Instant)>,
}

impl ExpiryCache {
    /// Whether `key` needs its expiry (absolute ms, or -1 for "persist") sent.
    pub(crate) fn wanted(&self, key: &str, at: i64, now: Instant) -> bool {
        match self.entries.get(key) {
            Some((sent, when)) => {
                now.duration_since(*when) >= REFRESH
                    || (at > *sent && *sent >= 0)
                    || (at < 0 && *sent >= 0)
            }
            None => true,
        }
    }

    /// Records expiries that Redis acknowledged.
    pub(crate) fn record(&mut self, sent: impl IntoIterator<Item = (String, i64)>, now: Instant) {
        for (key, at) in sent {
            self.entries.insert(key, (at, now));
        }
        if self.entries.len() > PRUNE_AT {
            self.entries
                .retain(|_, (_, when)| now.duration_since(*when) < REFRESH);
        }
    }

    /// Forgets every expiry sent (Redis lost its state).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_are_sent_once_then_when_later_or_stale() {
        let mut c = ExpiryCache::default();
        let t0 = Instant::now();
        assert!(c.wanted("k", 100, t0));
        c.record([("k".to_string(), 100)], t0);
        assert!(!c.wanted("k", 100, t0));
        assert!(
            !c.wanted("k", 90, t0),
            "an earlier expiry never shortens a key"
        );
        assert!(c.wanted("k", 101, t0), "a later one is sent");
        assert!(
            c.wanted("k", 100, t0 + REFRESH),
            "and everything once a minute"
        );
        c.clear();
        assert!(c.wanted("k", 100, t0), "cleared, it forgets");
    }
}
