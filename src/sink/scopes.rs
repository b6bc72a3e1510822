//! The write side of the scope registries (docs/http-api.md, docs/redis-layout.md):
//! for `scope=*` a reader must know which scope values of a scoped board
//! have data in a view, and a Redis Cluster has no cheap way to list keys.
//! So every view of a scoped board keeps a registry, the sorted set
//! [`keys::scope_registry_key`] (`{prefix}:{<board>}:scopes:<view id>`),
//! of the scope values written to it, scored by when this fleet last
//! registered them.
//!
//! Registrations ride in the batch's pipeline beside the apply calls (no
//! round trip of their own). A cache of what this consumer registered keeps
//! that to about one entry per new (scope, view) rather than one per batch;
//! an entry is sent again after [`REFRESH`], which keeps an
//! active scope among the most recent. Each registry keeps the board's
//! `scope_registry` most recent values plus one: a reader that finds more
//! than `scope_registry` knows the list is incomplete and refuses `scope=*`
//! rather than answer a partial union. Once this consumer alone has
//! registered more than that many values in one registry, the registry is
//! surely over its bound, so it stops writing to it: a board with a scope
//! per user costs its registries at most `scope_registry + 1` entries per
//! view, not one per scope. A registry lives as long as its view
//! is meant to (periods: until their retention ends; windows and `all`:
//! no expiry, bounded by its size).
//!
//! Registration is idempotent (a redelivered batch registers again), and a
//! registry may name a scope whose data has since expired: a union counts
//! a missing key as empty.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::board::BoardSet;
use crate::board::keys;

use super::expiry::REFRESH;
use super::updates::Instance;

/// Registries remembered before those untouched for a while are dropped.
const MAX_REGISTRIES: usize = 10_000;

/// What this consumer registered in each registry (same Redis epoch).
#[derive(Debug, Default)]
pub(crate) struct ScopeCache {
    registries: HashMap<String, Seen>,
}

/// One registry: the scopes sent and when, or that it is over its bound.
#[derive(Debug)]
struct Seen {
    scopes: HashMap<String, Instant>,
    full: bool,
    touched: Instant,
}

impl ScopeCache {
    /// Whether `scope` needs registering (again) in `key` at `now`.
    fn wanted(&self, key: &str, scope: &str, now: Instant) -> bool {
        match self.registries.get(key) {
            None => true,
            Some(seen) if seen.full => false,
            Some(seen) => seen
                .scopes
                .get(scope)
                .is_none_or(|sent| now.duration_since(*sent) >= REFRESH),
        }
    }

    /// Forgets everything (Redis lost its state).
    pub(crate) fn clear(&mut self) {
        self.registries.clear();
    }
}

/// One registry to write: its key, the scopes to add, its size bound and
/// until when it lives (ms, 0 = no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScopeEntries {
    pub(crate) key: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) keep: u64,
    pub(crate) keep_until: i64,
}

/// The registrations `instances` bring that `cache` does not show sent
/// recently, one [`ScopeEntries`] per registry key.
pub(crate) fn wanted(
    boards: &BoardSet,
    instances: &[Instance],
    cache: &ScopeCache,
    now: Instant,
) -> Vec<ScopeEntries> {
    let mut out: BTreeMap<String, ScopeEntries> = BTreeMap::new();
    for inst in instances {
        let board = &boards.boards[inst.board];
        if board.scope_registry == 0 {
            continue;
        }
        let Some((_, Some(scope))) = keys::parse_tag(&inst.tag) else {
            continue;
        };
        for v in &inst.views {
            let key = keys::scope_registry_key(&boards.key_prefix, &board.stored, &v.id);
            if !cache.wanted(&key, &scope, now) {
                continue;
            }
            let entry = out.entry(key.clone()).or_insert_with(|| ScopeEntries {
                key,
                scopes: Vec::new(),
                keep: board.scope_registry,
                keep_until: v.keep_until,
            });
            entry.keep_until = entry.keep_until.max(v.keep_until);
            entry.scopes.push(scope.clone());
        }
    }
    out.into_values().collect()
}

/// The commands that write `entries` at `now_ms`: per registry a `ZADD`,
/// a trim to the `keep + 1` most recent values, and its expiry.
pub(crate) fn commands(entries: &[ScopeEntries], now_ms: i64) -> Vec<redis::Cmd> {
    let mut cmds = Vec::with_capacity(entries.len() * 3);
    for e in entries {
        let mut add = redis::cmd("ZADD");
        add.arg(&e.key);
        for s in &e.scopes {
            add.arg(now_ms).arg(s);
        }
        cmds.push(add);
        // Ranks ascend by score: keep the top keep + 1, drop the rest.
        let last_dropped = -(e.keep as i64) - 2;
        let mut trim = redis::cmd("ZREMRANGEBYRANK");
        trim.arg(&e.key).arg(0).arg(last_dropped);
        cmds.push(trim);
        if e.keep_until > 0 {
            let mut expire = redis::cmd("PEXPIREAT");
            expire.arg(&e.key).arg(e.keep_until);
            cmds.push(expire);
        }
    }
    cmds
}

/// Records registrations that Redis acknowledged; a registry this
/// consumer filled past its bound is marked full and never written again.
pub(crate) fn record(cache: &mut ScopeCache, entries: &[ScopeEntries], now: Instant) {
    if cache.registries.len() >= MAX_REGISTRIES {
        cache
            .registries
            .retain(|_, seen| now.duration_since(seen.touched) < REFRESH);
    }
    for e in entries {
        let seen = cache
            .registries
            .entry(e.key.clone())
            .or_insert_with(|| Seen {
                scopes: HashMap::new(),
                full: false,
                touched: now,
            });
        seen.touched = now;
        if seen.full {
            continue;
        }
        for s in &e.scopes {
            seen.scopes.insert(s.clone(), now);
        }
        if seen.scopes.len() as u64 > e.keep {
            seen.full = true;
            seen.scopes = HashMap::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_registry_is_added_to_trimmed_to_one_over_its_bound_and_expired() {
        let entries = [ScopeEntries {
            key: "rf:{b}:scopes:day:2026-11-21".into(),
            scopes: vec!["rpg".into(), "a:b".into()],
            keep: 3,
            keep_until: 1_800_000_000_000,
        }];
        let cmds = commands(&entries, 42);
        let packed: Vec<Vec<u8>> = cmds.iter().map(|c| c.get_packed_command()).collect();
        let text: Vec<String> = packed
            .iter()
            .map(|p| String::from_utf8_lossy(p).replace("\r\n", " "))
            .collect();
        assert_eq!(cmds.len(), 3);
        assert!(text[0].contains("ZADD") && text[0].contains("rpg") && text[0].contains("a:b"));
        // Keeps 4 (= 3 + 1): drops ranks 0 ..= -5.
        assert!(text[1].contains("ZREMRANGEBYRANK") && text[1].ends_with("$1 0 $2 -5 "));
        assert!(text[2].contains("PEXPIREAT") && text[2].contains("1800000000000"));
        let forever = ScopeEntries {
            keep_until: 0,
            ..entries[0].clone()
        };
        assert_eq!(
            commands(&[forever], 42).len(),
            2,
            "no expiry when kept forever"
        );
    }
}
