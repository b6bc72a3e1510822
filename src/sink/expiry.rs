//! Which key expiries this consumer set recently. A period key's expiry is
//! fixed (period end + retention), so sending PEXPIREAT for every key in
//! every batch is wasted work on the Redis thread; a key's expiry is sent
//! when it is new or later than the last one sent, and again at least once
//! a [`REFRESH`], so a key that Redis lost and recreated gets its expiry
//! back soon. When Redis is known to have lost state (the script cache was
//! empty), everything is forgotten, the due-set registrations of archived
//! periods ([`super::due`]) included, which live here for that reason.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::due::Registered;

/// How long a sent expiry is trusted.
pub const REFRESH: Duration = Duration::from_secs(60);
/// Entries kept before old ones are pruned.
const PRUNE_AT: usize = 100_000;

#[derive(Debug, Default)]
pub struct ExpiryCache {
    entries: HashMap<String, (i64, Instant)>,
    /// The store's state epoch the entries belong to.
    epoch: u64,
    /// Archived periods registered in the due set, same epoch.
    pub due: Registered,
    /// Scope values registered in the views' scope registries, same epoch.
    pub scopes: super::scopes::ScopeCache,
}

impl ExpiryCache {
    /// Whether `key` needs its expiry (absolute ms, or -1 for "persist") sent.
    pub fn wanted(&self, key: &str, at: i64, now: Instant) -> bool {
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
    pub fn record(&mut self, sent: impl IntoIterator<Item = (String, i64)>, now: Instant) {
        for (key, at) in sent {
            self.entries.insert(key, (at, now));
        }
        if self.entries.len() > PRUNE_AT {
            self.entries
                .retain(|_, (_, when)| now.duration_since(*when) < REFRESH);
        }
    }

    /// Forgets everything if the store's epoch moved (Redis lost its state).
    pub fn sync_epoch(&mut self, epoch: u64) {
        if epoch != self.epoch {
            self.entries.clear();
            self.due.clear();
            self.scopes.clear();
            self.epoch = epoch;
        }
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
        c.sync_epoch(1);
        assert!(c.wanted("k", 100, t0), "a new epoch forgets");
    }
}
