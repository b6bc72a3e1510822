//! The write side of the archive's due set (docs/history.md,
//! docs/redis-layout.md): every period of an archived view that a batch
//! touches is `ZADD NX`ed into `<prefix>:archive:due` (member
//! `{<tag>}:<view id>`, score its close time `end + grace`) before the
//! batch's apply call, and that write is awaited first: if it fails the
//! batch fails and is retried, so a period with data is always registered
//! for the archivers.
//!
//! The due key is one key for the fleet (its own slot on Redis Cluster), so
//! it is a command of its own, never part of an apply call. A cache of the
//! entries this consumer registered keeps that to about one command per new
//! period rather than one per batch; an entry is sent again after
//! [`REFRESH`] (a due set that Redis lost is rebuilt by the next batches),
//! and the cache is forgotten when Redis is known to have lost state.

use std::collections::HashMap;
use std::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;

use super::expiry::REFRESH;
use super::store::{Store, StoreError};
use super::updates::Instance;
/// Entries kept; past it, stale ones are pruned, and if that is not enough
/// the cache starts over (which only costs re-sent registrations).
const MAX_ENTRIES: usize = 100_000;

/// Due-set members this consumer registered, and when.
#[derive(Debug, Default)]
pub(crate) struct Registered {
    entries: HashMap<String, Instant>,
}

impl Registered {
    /// Whether `member` needs registering (again) at `now`.
    pub(crate) fn wanted(&self, member: &str, now: Instant) -> bool {
        self.entries
            .get(member)
            .is_none_or(|sent| now.duration_since(*sent) >= REFRESH)
    }

    /// Records registrations that Redis acknowledged.
    pub(crate) fn record(&mut self, members: impl IntoIterator<Item = String>, now: Instant) {
        for m in members {
            self.entries.insert(m, now);
        }
        if self.entries.len() > MAX_ENTRIES {
            self.entries
                .retain(|_, sent| now.duration_since(*sent) < REFRESH);
            if self.entries.len() > MAX_ENTRIES {
                self.entries.clear();
            }
        }
    }

    /// Forgets every registration (Redis lost its state).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One due-set entry: (close time ms, member).
pub(crate) type DueEntry = (i64, String);

/// The archived periods `instances` touch that `cache` does not show
/// registered recently. Each comes once: an instance's tag is its own and
/// its views are distinct periods.
pub(crate) fn wanted(instances: &[Instance], cache: &Registered, now: Instant) -> Vec<DueEntry> {
    let mut out: Vec<DueEntry> = Vec::new();
    for inst in instances {
        for v in &inst.views {
            let Some(close_at) = v.close_at else {
                continue;
            };
            let member = keys::due_member(&inst.tag, &v.id);
            if cache.wanted(&member, now) {
                out.push((close_at, member));
            }
        }
    }
    out
}

/// `ZADD NX` of `entries` into the due set: an entry already there (another
/// consumer's, or ours) keeps its score.
pub(crate) async fn register(
    store: &Store,
    boards: &BoardSet,
    entries: &[DueEntry],
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(keys::archive_due_key(&boards.key_prefix)).arg("NX");
    for (close_at, member) in entries {
        cmd.arg(*close_at).arg(member);
    }
    let added: i64 = store.query(&cmd).await?;
    tracing::debug!(
        sent = entries.len(),
        added,
        "Registered the archived periods this batch touches as due for archiving at their close."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_sent_once_then_again_after_the_refresh() {
        let mut c = Registered::default();
        let t0 = Instant::now();
        assert!(c.wanted("{b}:day:2026-11-21", t0));
        c.record(["{b}:day:2026-11-21".to_string()], t0);
        assert!(!c.wanted("{b}:day:2026-11-21", t0 + REFRESH / 2));
        assert!(c.wanted("{b}:day:2026-11-21", t0 + REFRESH));
        assert!(c.wanted("{b}:day:2026-11-22", t0), "another period is new");
        c.clear();
        assert!(c.wanted("{b}:day:2026-11-21", t0));
    }

    #[test]
    fn the_cache_stays_bounded() {
        let mut c = Registered::default();
        let t0 = Instant::now();
        c.record((0..MAX_ENTRIES).map(|i| format!("{{b}}:day:{i}")), t0);
        assert_eq!(c.len(), MAX_ENTRIES);
        // Past the bound with every entry fresh: it starts over.
        c.record(["{b}:day:x".to_string()], t0);
        assert!(c.is_empty());
        // With stale entries, only those go.
        c.record((0..MAX_ENTRIES).map(|i| format!("{{b}}:day:{i}")), t0);
        c.record(["{b}:day:x".to_string()], t0 + REFRESH);
        assert_eq!(c.len(), 1);
    }
}
