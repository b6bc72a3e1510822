//! Rolling views computed at read time (docs/http-api.md): `last:<N><unit>`, the
//! union of the N most recent period boards of one instance (board and
//! scope) up to the current period or the one `period=` names. This module
//! owns the view grammar and its limits ([`parse`], [`max_n`], [`offered`]),
//! the plan of one union (its period keys and result key, [`plan`]), and
//! computing it: one call of `union.lua` that returns at once while the
//! result is fresh (its marker key lives `[http] union_cache`), else builds
//! it (`ZUNIONSTORE`, or a per-member union in Lua for tie-break boards),
//! the result living up to a second longer than its marker so that a read
//! told "fresh" never finds it gone; concurrent readers of one union in this process
//! wait for a single call, and readers in the first half of the life of a
//! result this process built read it without a call ([`Unions`]).
//!
//! The result key `{prefix}:{tag}:u:last:<N><unit>:<newest period id>` is
//! under the instance's hash tag, the slot of its period keys, so a union
//! works on a Redis Cluster. It has no dense-rank index (`K:v`): dense
//! ranks on a union walk the distinct scores (see [`super::ranks`]).
//! Periods whose keys are gone (expired, or archived and removed) count as
//! empty: a union covers what is still in Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;
use serde::Serialize;
use tokio::sync::OnceCell;

use super::build;
use super::script::ReadScript;
use super::{BadParam, ReadError};
use crate::board::duration::{DAY_MS, HOUR_MS, Span};
use crate::board::keys;
use crate::board::model::{Aggregate, Board, ViewSpec};
use crate::board::period::{Period, PeriodKind, parse_period_id, period_of};
use crate::sink::store::{Store, StoreError};

/// The union script.
pub const UNION_LUA: &str = include_str!("union.lua");

/// Most periods one union covers when the board keeps that period kind
/// forever (no retention): about 13 months of days, 16 days of hours.
pub const MAX_UNION_PERIODS: u32 = 400;

/// Default time to live of a union's result (`[http] union_cache`).
pub const DEFAULT_UNION_CACHE_MS: i64 = 1_000;

/// How much longer than `union_cache` a result outlives its freshness
/// marker (at most its own TTL): time enough for a read that was told the
/// result is fresh to read it.
const MAX_GRACE_MS: i64 = 1_000;

/// The unit letters of `last:<N><unit>`, and the period kind each reads.
const UNITS: [(&str, PeriodKind); 5] = [
    ("h", PeriodKind::Hour),
    ("d", PeriodKind::Day),
    ("w", PeriodKind::Week),
    ("mo", PeriodKind::Month),
    ("y", PeriodKind::Year),
];

/// How a scoped board's scopes may be read as one (`GET /v1/boards`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScopeUnionOffer {
    /// `scope=a&scope=b`, up to this many scopes.
    pub max_listed: usize,
    /// `scope=*`: scope values each view's registry keeps (0: not offered).
    pub registry: u64,
    /// `"scope"` (default layout: unions on a single Redis only) or
    /// `"board"` (all scopes in the board's slot: unions on a cluster too).
    pub scope_slot: &'static str,
}

/// The unions of scopes `board` offers, if any.
pub fn scope_offer(board: &Board) -> Option<ScopeUnionOffer> {
    (board.scope.is_some() && unsupported(board).is_none()).then_some(ScopeUnionOffer {
        max_listed: super::scopes::MAX_LISTED_SCOPES,
        registry: board.scope_registry,
        scope_slot: if board.board_slot { "board" } else { "scope" },
    })
}

/// A union view the board offers, as `GET /v1/boards` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UnionOffer {
    /// `last:<N>d`: any N from 1 to `max_n`.
    pub view: String,
    pub max_n: u32,
}

/// One union to compute: where its inputs and its result live.
#[derive(Debug, Clone)]
pub(super) struct UnionPlan {
    /// The result sorted set (the key every read of the view uses).
    pub result: String,
    /// Its tie time hash (tie-break boards; else unused).
    pub times: String,
    /// Exists while the result is fresh (lives `union_cache`; the result
    /// a grace longer).
    pub fresh: String,
    /// The boards to combine: period boards newest first, then scope by
    /// scope for a union of scopes.
    pub sources: Vec<String>,
    /// `scope=*`: the sources are every registered scope of these views,
    /// found when the union is computed ([`super::scopes`]).
    pub registered: Option<super::scopes::Registered>,
    /// Window instances (tags) to trim to the reader's clock first.
    pub trims: Vec<String>,
    /// Whether the sources lie in several cluster slots (a union of scopes
    /// of a board in the default layout): refused on a Redis Cluster.
    pub cross_slot: bool,
    pub aggregate: &'static str,
    pub tie: &'static str,
}

fn unit_of(kind: PeriodKind) -> &'static str {
    UNITS
        .iter()
        .find(|(_, k)| *k == kind)
        .map(|(u, _)| *u)
        .unwrap_or("")
}

fn bad_view(message: impl Into<String>) -> ReadError {
    ReadError::BadRequest(BadParam::new("view", message))
}

/// `Some((n, kind))` for a view named `last:...`, checked for its form
/// only; `None` for other views. Leading zeros and signs are refused so
/// that one union has one name (and one result key).
pub fn parse(view: &str) -> Option<Result<(u32, PeriodKind), ReadError>> {
    let rest = view.strip_prefix("last:")?;
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let (number, unit) = rest.split_at(digits);
    let kind = UNITS.iter().find(|(u, _)| *u == unit).map(|(_, k)| *k);
    let n = number
        .parse::<u32>()
        .ok()
        .filter(|_| !number.starts_with('0'));
    Some(match (n, kind) {
        (Some(n), Some(kind)) => Ok((n, kind)),
        _ => Err(bad_view(format!(
            "view {view:?} is not a rolling view: write last:<N><unit> with N a whole number from 1 and unit h, d, w, mo or y (last:7d, last:24h, last:12mo)"
        ))),
    })
}

/// The nominal length of a period kind, for counting how many fit in a
/// retention (a longer DST day is covered: the newest period of a range is
/// always younger than its retention by a whole period).
fn nominal_ms(kind: PeriodKind) -> i64 {
    match kind {
        PeriodKind::Hour => HOUR_MS,
        PeriodKind::Day => DAY_MS,
        PeriodKind::Week => 7 * DAY_MS,
        PeriodKind::Month => 31 * DAY_MS,
        PeriodKind::Year | PeriodKind::All => 366 * DAY_MS,
    }
}

/// Most periods of `kind` a union of `board` may cover: as many whole
/// periods as its retention for that kind holds (at least the current
/// one), or [`MAX_UNION_PERIODS`] when kept forever. `None` when the
/// board does not keep that period kind.
pub fn max_n(board: &Board, kind: PeriodKind) -> Option<u32> {
    let retention = board.views.iter().find_map(|v| match v {
        ViewSpec::Period {
            kind: k, retention, ..
        } if *k == kind => Some(*retention),
        _ => None,
    })?;
    let fits = match (retention, kind) {
        (None, _) => i64::from(MAX_UNION_PERIODS),
        (Some(Span::Months(m)), PeriodKind::Month) => i64::from(m),
        (Some(Span::Months(m)), PeriodKind::Year) => i64::from(m / 12),
        (Some(span), kind) => span.min_ms() / nominal_ms(kind),
    };
    Some(fits.clamp(1, i64::from(MAX_UNION_PERIODS)) as u32)
}

/// Why `board` cannot be read as a union (of periods or of scopes), if it
/// cannot.
pub(super) fn unsupported(board: &Board) -> Option<String> {
    if board.composite.is_some() {
        return Some(format!(
            "board {} is a composite board (order_by): unions of its boards (rolling views, several scopes) are not supported, since each field keeps its own aggregate inside the member encoding",
            board.name
        ));
    }
    if board.aggregate == Aggregate::Last {
        return Some(format!(
            "board {} keeps each member's last value: the last value over several periods or scopes is not a union of their boards, so rolling views and unions of scopes are not offered",
            board.name
        ));
    }
    None
}

/// The union views `board` offers, shortest period first.
pub fn offered(board: &Board) -> Vec<UnionOffer> {
    if unsupported(board).is_some() {
        return Vec::new();
    }
    UNITS
        .iter()
        .filter_map(|(unit, kind)| {
            max_n(board, *kind).map(|max_n| UnionOffer {
                view: format!("last:<N>{unit}"),
                max_n,
            })
        })
        .collect()
}

/// The plan of union view `last:<n><kind>` of the instance `tag`, whose
/// newest period is `period` (an id) or the current one at `now_ms`.
/// Returns the plan and the newest period's id.
pub(super) fn plan(
    prefix: &str,
    board: &Board,
    tag: &str,
    view: (u32, PeriodKind),
    period: Option<&str>,
    now_ms: i64,
) -> Result<(UnionPlan, String), ReadError> {
    let (views, newest) = range(board, view, period, now_ms)?;
    let sources = views
        .iter()
        .map(|v| keys::view_key(prefix, tag, v))
        .collect();
    let result = keys::view_key(prefix, tag, &result_view(view, &newest));
    Ok((UnionPlan::new(board, result, sources), newest))
}

/// The view part of a rolling view's result key: `u:last:<n><unit>:<newest>`.
pub(super) fn result_view((n, kind): (u32, PeriodKind), newest: &str) -> String {
    format!("u:last:{n}{}:{newest}", unit_of(kind))
}

/// The periods of `last:<n><kind>` ending with `period` (or the current
/// one at `now_ms`): their view ids newest first, and the id of the newest.
/// Checks that the board offers the view.
pub(super) fn range(
    board: &Board,
    (n, kind): (u32, PeriodKind),
    period: Option<&str>,
    now_ms: i64,
) -> Result<(Vec<String>, String), ReadError> {
    if let Some(why) = unsupported(board) {
        return Err(bad_view(why));
    }
    let unit = unit_of(kind);
    let Some(max) = max_n(board, kind) else {
        return Err(ReadError::UnknownView {
            board: board.name.clone(),
            view: format!("last:{n}{unit}"),
            known: known_views(board),
        });
    };
    if n > max {
        return Err(bad_view(format!(
            "view last:{n}{unit} reaches past what board {} keeps of its {} periods: at most last:{max}{unit}",
            board.name,
            kind.name()
        )));
    }
    let newest = match period {
        Some(id) => parse_period_id(kind, id, board.tz)
            .map_err(|e| ReadError::BadRequest(BadParam::new("period", format!("period: {e}"))))?,
        None => period_of(kind, now_ms, board.tz),
    };
    let views = periods_back(&newest, n, board)
        .iter()
        .map(Period::view)
        .collect();
    Ok((views, newest.id))
}

impl UnionPlan {
    /// A union of `sources` into `result`, with the board's aggregate.
    pub(super) fn new(board: &Board, result: String, sources: Vec<String>) -> UnionPlan {
        UnionPlan {
            times: keys::helper(&result, "t"),
            fresh: keys::helper(&result, "fresh"),
            result,
            sources,
            registered: None,
            trims: Vec::new(),
            cross_slot: false,
            aggregate: match board.aggregate {
                Aggregate::Max => "max",
                Aggregate::Min => "min",
                Aggregate::Sum | Aggregate::Last => "sum",
            },
            tie: board.tie_key.code(),
        }
    }
}

/// The board's views and the rolling views it offers, for the 404 of an
/// unknown view.
pub(super) fn known_views(board: &Board) -> String {
    board
        .views
        .iter()
        .map(ViewSpec::name)
        .chain(
            offered(board)
                .into_iter()
                .map(|o| format!("{} (N up to {})", o.view, o.max_n)),
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// `newest` and the `n − 1` periods before it, newest first, in the
/// board's time zone (ISO weeks, month lengths and DST are the calendar's).
fn periods_back(newest: &Period, n: u32, board: &Board) -> Vec<Period> {
    let mut out = Vec::with_capacity(n as usize);
    let mut p = newest.clone();
    for _ in 0..n {
        let before = period_of(p.kind, p.start_ms.saturating_sub(1), board.tz);
        let at_start = before.start_ms >= p.start_ms;
        out.push(p);
        if at_start {
            break; // the start of the calendar range: nothing earlier
        }
        p = before;
    }
    out
}

/// One union's computation in this process: empty while it runs; then,
/// if this call built the result key, until when the result is surely
/// still there (so later readers skip even the script's `EXISTS`).
type Flight = Arc<OnceCell<Option<Instant>>>;

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
        Some(fresh) => fresh.is_some_and(|until| until > now),
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
    /// `trim` names the board and clock for trimming window sources first.
    pub(super) async fn ensure(
        &self,
        store: &Store,
        plan: &UnionPlan,
        trim: Trim<'_>,
    ) -> Result<(), ReadError> {
        let flight = self.flight(&plan.result);
        flight
            .get_or_try_init(|| async {
                let sent = Instant::now();
                let built = self.compute(store, plan, trim).await?;
                let half = Duration::from_millis(self.ttl_ms.unsigned_abs() / 2);
                Ok::<_, ReadError>(built.then(|| sent + half))
            })
            .await?;
        Ok(())
    }

    /// Finds the sources (the registries of `scope=*`), trims window
    /// sources to the clock, and runs the union script; whether it built a
    /// (non-empty) result.
    async fn compute(
        &self,
        store: &Store,
        plan: &UnionPlan,
        trim: Trim<'_>,
    ) -> Result<bool, ReadError> {
        let (sources, trims) = super::scopes::resolve(store, plan).await?;
        if !trims.is_empty() {
            let instances: Vec<(usize, String)> =
                trims.into_iter().map(|t| (trim.board_index, t)).collect();
            crate::sink::trim::trim_instances(store, trim.boards, &instances, trim.now_ms).await?;
        }
        let (fresh, entries) = build::survey(store, plan, &sources).await?;
        if fresh {
            return Ok(false);
        }
        let grace = self.ttl_ms.min(MAX_GRACE_MS);
        if build::too_big_for_one_call(plan, entries, self.inline_max) {
            let members = build::build(store, plan, &sources, (self.ttl_ms, grace)).await?;
            tracing::debug!(
                key = %plan.result,
                sources = sources.len(),
                entries,
                members,
                "Built a large union view in slices."
            );
            return Ok(members > 0);
        }
        let mut keys: Vec<&str> = vec![&plan.result, &plan.times, &plan.fresh];
        keys.extend(sources.iter().map(String::as_str));
        let args = [
            plan.aggregate.to_string(),
            plan.tie.to_string(),
            self.ttl_ms.to_string(),
            grace.to_string(),
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
        Ok(made > 1)
    }
}

/// What trimming a union's window sources needs: the boards, the board's
/// index, and the reader's clock.
#[derive(Clone, Copy)]
pub(super) struct Trim<'a> {
    pub boards: &'a crate::board::BoardSet,
    pub board_index: usize,
    pub now_ms: i64,
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

    /// 2026-11-21T12:00:00Z, a Saturday.
    const NOW: i64 = 1_795_262_400_000;

    fn boards() -> crate::board::BoardSet {
        crate::config::test_boards(
            r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["hour", "day", "week", "month", "all"]
retention = { hour = "2d", day = "35d", week = "3w", month = "13mo" }
timezone = "Asia/Tokyo"
[[board]]
name = "last"
event = "score"
member = "user_id"
score = "points"
aggregate = "last"
periods = ["day"]
"#,
        )
    }

    fn ids(n: u32, newest: Option<&str>, view: (u32, PeriodKind)) -> Result<Vec<String>, String> {
        let set = boards();
        let b = &set.boards[0];
        let (n, kind) = (n.max(view.0), view.1);
        plan("rf", b, "b", (n, kind), newest, NOW)
            .map(|(p, _)| p.sources)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_grammar_takes_a_count_and_a_unit_and_nothing_else() {
        let ok = |v: &str| parse(v).and_then(Result::ok);
        assert_eq!(ok("last:7d"), Some((7, PeriodKind::Day)));
        assert_eq!(ok("last:24h"), Some((24, PeriodKind::Hour)));
        assert_eq!(ok("last:12mo"), Some((12, PeriodKind::Month)));
        assert_eq!(ok("last:1y"), Some((1, PeriodKind::Year)));
        assert!(parse("day").is_none());
        for bad in [
            "last:",
            "last:0d",
            "last:07d",
            "last:7",
            "last:d",
            "last:-1d",
            "last:7m",
            "last:7D",
            "last:99999999999d",
        ] {
            match parse(bad) {
                Some(Err(ReadError::BadRequest(b))) => {
                    assert_eq!(b.param, "view");
                    assert!(b.message.contains("last:<N><unit>"), "{b}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn n_is_bounded_by_the_retention_of_the_period_kind() {
        let set = boards();
        let b = &set.boards[0];
        assert_eq!(max_n(b, PeriodKind::Hour), Some(48));
        assert_eq!(max_n(b, PeriodKind::Day), Some(35));
        assert_eq!(max_n(b, PeriodKind::Week), Some(3));
        assert_eq!(max_n(b, PeriodKind::Month), Some(13));
        assert_eq!(max_n(b, PeriodKind::Year), None);
        assert_eq!(
            offered(b)
                .iter()
                .map(|o| o.view.as_str())
                .collect::<Vec<_>>(),
            ["last:<N>h", "last:<N>d", "last:<N>w", "last:<N>mo"]
        );
        assert!(
            ids(36, None, (36, PeriodKind::Day)).is_err_and(|e| e.contains("at most last:35d"))
        );
        assert!(
            ids(1, None, (1, PeriodKind::Year))
                .is_err_and(|e| e.contains("has no view \"last:1y\""))
        );
        // `last` boards are refused with the reason.
        let e = plan(
            "rf",
            &set.boards[1],
            "last",
            (2, PeriodKind::Day),
            None,
            NOW,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("last value"), "{e}");
        assert!(offered(&set.boards[1]).is_empty());
    }

    #[test]
    fn ranges_follow_the_calendar_of_the_board_time_zone() {
        // Noon UTC is 21:00 in Tokyo: the current day is the 21st there.
        assert_eq!(
            ids(3, None, (3, PeriodKind::Day)).ok(),
            Some(vec![
                "rf:{b}:day:2026-11-21".to_string(),
                "rf:{b}:day:2026-11-20".to_string(),
                "rf:{b}:day:2026-11-19".to_string(),
            ])
        );
        // Across a month boundary and a year's first ISO week.
        assert_eq!(
            ids(3, Some("2026-03-01"), (3, PeriodKind::Day)).ok(),
            Some(vec![
                "rf:{b}:day:2026-03-01".to_string(),
                "rf:{b}:day:2026-02-28".to_string(),
                "rf:{b}:day:2026-02-27".to_string(),
            ])
        );
        assert_eq!(
            ids(2, Some("2026-W01"), (2, PeriodKind::Week)).ok(),
            Some(vec![
                "rf:{b}:week:2026-W01".to_string(),
                "rf:{b}:week:2025-W52".to_string()
            ])
        );
        assert_eq!(
            ids(2, Some("2026-01"), (2, PeriodKind::Month)).ok(),
            Some(vec![
                "rf:{b}:month:2026-01".to_string(),
                "rf:{b}:month:2025-12".to_string()
            ])
        );
        let set = boards();
        let (p, newest) = plan("rf", &set.boards[0], "b", (7, PeriodKind::Day), None, NOW)
            .map_err(|e| e.to_string())
            .unwrap();
        assert_eq!(newest, "2026-11-21");
        assert_eq!(p.result, "rf:{b}:u:last:7d:2026-11-21");
        assert_eq!(p.times, "rf:{b}:u:last:7d:2026-11-21:t");
        assert!(
            ids(2, Some("2026-13-01"), (2, PeriodKind::Day)).is_err_and(|e| e.contains("period"))
        );
    }

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
}
