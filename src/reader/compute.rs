//! Computing a union (a rolling view, `union`, or a union of scopes,
//! `scopes`) when it is read: one call of `union.lua` that returns at once
//! while the result is fresh (its marker key lives `[http] union_cache`),
//! else builds it (`ZUNIONSTORE`, or a per-member union in Lua for
//! tie-break boards; a large one in slices, `build`), the result living up
//! to a second longer than its marker so that a read told "fresh" never
//! finds it gone; concurrent readers of one union in this process wait for
//! a single call, and readers in the first half of the life of a result
//! this process built read it without a call ([`Unions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::OnceCell;

use super::build;
use super::error::ReadError;
use super::plan::{PRIVATE_TTL_MS, UnionPlan};
use super::script::ReadScript;
use crate::sink::store::{Store, StoreError};

/// The union script.
pub(crate) const UNION_LUA: &str = include_str!("union.lua");

/// Default time to live of a union's result (`[http] union_cache`).
pub(crate) const DEFAULT_UNION_CACHE_MS: i64 = 1_000;

/// How much sooner than its result a union's freshness marker expires (a
/// quarter of `union_cache` at most): time enough for a read that was told
/// the result is fresh to read it. The result itself lives `union_cache`
/// and no longer, so that no read leaves a key behind for longer.
const MAX_GRACE_MS: i64 = 1_000;

/// The lifetimes of a union's result and of its freshness marker, ms, for
/// a `union_cache` of `ttl_ms` (at least 1): the result `ttl_ms`, the
/// marker up to a quarter less, never under 1 ms.
fn lifetimes(ttl_ms: i64) -> (i64, i64) {
    let grace = (ttl_ms / 4).min(MAX_GRACE_MS);
    (ttl_ms, (ttl_ms - grace).max(1))
}

/// What one union's computation in this process found: if it built the
/// result key, until when the result is surely still there (so later
/// readers skip even the script's `EXISTS`); and whether the union has
/// members (a result key to read) at all.
#[derive(Clone, Copy)]
struct Outcome {
    until: Option<Instant>,
    members: bool,
}

/// One union's computation in this process: empty while it runs.
type Flight = Arc<OnceCell<Outcome>>;

/// Most unions remembered before those no longer fresh are dropped.
const MAX_FLIGHTS: usize = 1_024;

/// The unions being computed (or fresh) in this process, by result key,
/// and the time to live of a result. Cloning shares the map.
#[derive(Clone)]
pub struct Unions {
    ttl_ms: i64,
    /// Most entries a union computes in one script call (None: the
    /// defaults of [`super::build`]); larger ones are built in slices.
    inline_max: Option<u64>,
    flights: Arc<Mutex<HashMap<String, Flight>>>,
}

impl Default for Unions {
    fn default() -> Self {
        Unions::new(DEFAULT_UNION_CACHE_MS)
    }
}

/// Whether a flight is still of use: running, or done and fresh.
fn live(flight: &Flight, now: Instant) -> bool {
    match flight.get() {
        None => true,
        Some(done) => done.until.is_some_and(|until| until > now),
    }
}

impl Unions {
    /// `ttl_ms`: `[http] union_cache`.
    pub fn new(ttl_ms: i64) -> Unions {
        Unions {
            ttl_ms: ttl_ms.max(1),
            inline_max: None,
            flights: Arc::default(),
        }
    }

    /// The same, computing in one script call only unions of at most
    /// `entries` entries (tests and benchmarks of the sliced build).
    pub fn with_inline_max(mut self, entries: u64) -> Unions {
        self.inline_max = Some(entries);
        self
    }

    /// The flight of `key` to join: the one running or fresh, else a new one.
    fn flight(&self, key: &str) -> Flight {
        let now = Instant::now();
        let mut map = match self.flights.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map.len() >= MAX_FLIGHTS {
            map.retain(|_, f| live(f, now));
        }
        match map.get(key) {
            Some(f) if live(f, now) => f.clone(),
            _ => {
                let f = Flight::default();
                map.insert(key.to_string(), f.clone());
                f
            }
        }
    }

    /// Makes sure the plan's result key exists (unless the union is
    /// empty). Readers that arrive while another computes it wait for that
    /// one call (if it fails, the next waiter tries again); readers within
    /// half the time to live of a result this process built use it at once:
    /// the key was set to live the whole TTL before the call returned.
    /// `trim` names the board and clock for trimming window sources first;
    /// a union whose boards hold more than `max_entries` entries together
    /// is refused before anything is computed (`[http] max_read_entries`).
    /// Whether the union has members, so that a reader that then finds no
    /// result key knows it expired before the read.
    pub(super) async fn ensure(
        &self,
        store: &Store,
        plan: &UnionPlan,
        trim: Trim<'_>,
        max_entries: u64,
    ) -> Result<bool, ReadError> {
        if plan.private {
            // One read's own result: computed whatever is cached, never
            // shared, deleted by the read.
            let lives = (PRIVATE_TTL_MS, PRIVATE_TTL_MS);
            let built = self.build_union(store, plan, &trim, max_entries, lives);
            return Ok(built.await?.unwrap_or(false));
        }
        let flight = self.flight(&plan.result);
        let done = flight
            .get_or_try_init(|| async {
                let sent = Instant::now();
                let (built, members) = self.compute(store, plan, trim, max_entries).await?;
                // The marker outlives half the TTL (it lives at least
                // three quarters of it).
                let half = Duration::from_millis(self.ttl_ms.unsigned_abs() / 2);
                let until = built.then(|| sent + half);
                Ok::<_, ReadError>(Outcome { until, members })
            })
            .await?;
        Ok(done.members)
    }

    /// Finds the sources (the registries of `scope=*`), trims window
    /// sources to the clock, counts their entries (refusing more than
    /// `max_entries`), and runs the union script; whether it built a
    /// (non-empty) result, and whether the union has members (a fresh
    /// result has).
    async fn compute(
        &self,
        store: &Store,
        plan: &UnionPlan,
        trim: Trim<'_>,
        max_entries: u64,
    ) -> Result<(bool, bool), ReadError> {
        let lives = lifetimes(self.ttl_ms);
        let built = self.build_union(store, plan, &trim, max_entries, lives);
        let Some(built) = built.await? else {
            return Ok((false, true));
        };
        if built {
            // Member actions wait for unions built lately to expire
            // (docs/moderation.md): this marks when the board's last one
            // does. Lives as long as the result.
            let board = &trim.boards.boards[trim.board_index].stored;
            let _: () = store
                .query(
                    redis::cmd("SET")
                        .arg(crate::board::keys::unions_built_key(
                            &trim.boards.key_prefix,
                            board,
                        ))
                        .arg(1)
                        .arg("PX")
                        .arg(self.ttl_ms.max(1)),
                )
                .await?;
        }
        Ok((built, built))
    }

    /// [`Unions::compute`] less the marker, the result and its marker
    /// living `(ttl_ms, marker_ms)`: whether it built a non-empty result,
    /// or `None` when the result was fresh.
    async fn build_union(
        &self,
        store: &Store,
        plan: &UnionPlan,
        trim: &Trim<'_>,
        max_entries: u64,
        (ttl_ms, marker_ms): (i64, i64),
    ) -> Result<Option<bool>, ReadError> {
        let (sources, trims) = super::scopes::resolve(store, plan).await?;
        if !trims.is_empty() {
            let instances: Vec<(usize, String)> =
                trims.into_iter().map(|t| (trim.board_index, t)).collect();
            crate::sink::trim::trim_instances(store, trim.boards, &instances, trim.now_ms).await?;
        }
        let (fresh, entries) = build::survey(store, plan, &sources).await?;
        // Refused whether or not a result is fresh, so that one request
        // gets one answer whatever the cache holds.
        if entries > max_entries {
            return Err(too_many_entries(plan, entries, max_entries));
        }
        if fresh {
            return Ok(None);
        }
        if build::too_big_for_one_call(plan, entries, self.inline_max) {
            let members = build::build(store, plan, &sources, (ttl_ms, marker_ms)).await?;
            tracing::debug!(
                key = %plan.result,
                sources = sources.len(),
                entries,
                members,
                "Built a large union view in slices."
            );
            return Ok(Some(members > 0));
        }
        let mut keys: Vec<&str> = vec![&plan.result, &plan.times, &plan.fresh];
        keys.extend(sources.iter().map(String::as_str));
        let args = [
            plan.aggregate.to_string(),
            plan.tie.to_string(),
            ttl_ms.to_string(),
            marker_ms.to_string(),
        ];
        let reply = eval(store, &keys, &args).await?;
        let made: i64 = redis::from_redis_value(reply)
            .map_err(|e| StoreError::Protocol(format!("union script reply: {e}")))?;
        if made > 0 {
            tracing::debug!(
                key = %plan.result,
                sources = sources.len(),
                members = made - 1,
                ttl_ms = self.ttl_ms,
                "Computed a union view from its boards."
            );
        }
        // 0: another reader made it fresh since the survey.
        Ok((made > 0).then_some(made > 1))
    }
}

/// The 400 of a union that would read `entries` entries, more than `max`.
fn too_many_entries(plan: &UnionPlan, entries: u64, max: u64) -> ReadError {
    let fewer = match plan.param {
        "scope" => "name fewer scopes",
        _ => "read a shorter range",
    };
    ReadError::bad(
        plan.param,
        format!(
            "this union would read {entries} entries (its boards together), more than the {max} one read may ([http] max_read_entries): {fewer}, or raise the setting"
        ),
    )
}

/// What trimming a union's window sources needs: the boards, the board's
/// index, and the reader's clock.
#[derive(Clone, Copy)]
pub(super) struct Trim<'a> {
    pub(crate) boards: &'a crate::board::BoardSet,
    pub(crate) board_index: usize,
    pub(crate) now_ms: i64,
}

static SCRIPT: ReadScript = ReadScript::new("union", UNION_LUA);

/// One `EVALSHA` of the union script (plus a `SCRIPT LOAD` the first time,
/// or when Redis restarted and forgot it).
async fn eval(store: &Store, keys: &[&str], args: &[String]) -> Result<Value, StoreError> {
    SCRIPT.eval(store, keys, args).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_calls_only_commands_rankflow_is_granted() {
        let granted: Vec<&str> = crate::sink::store::ACL_RULES
            .split_whitespace()
            .filter_map(|r| r.strip_prefix('+'))
            .collect();
        let mut n = 0;
        for call in UNION_LUA.split("redis.call(\"").skip(1) {
            let name = call.split('"').next().unwrap_or_default();
            assert!(
                granted.contains(&name.to_ascii_lowercase().as_str()),
                "{name} is not granted"
            );
            n += 1;
        }
        assert!(n >= 6, "only {n} calls found");
    }

    #[test]
    fn a_result_lives_union_cache_and_its_marker_a_little_less() {
        // (union_cache, result, marker), by hand.
        for (ttl, result, marker) in [
            (1, 1, 1),
            (3, 3, 3),
            (4, 4, 3),
            (400, 400, 300),
            (1_000, 1_000, 750),
            (4_000, 4_000, 3_000),
            (60_000, 60_000, 59_000),
        ] {
            assert_eq!(lifetimes(ttl), (result, marker), "union_cache {ttl}");
        }
    }
}
