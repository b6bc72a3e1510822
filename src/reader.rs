//! Reading boards back (docs/http-api.md): locating a view's key for a board, scope
//! and period, trimming a window to the clock before reading it, and turning
//! stored members and scores into entries with true values and 1-based
//! ranks. Shared by the HTTP API and `rankflow top`, so the bounds on a read
//! (docs/http-api.md: [`MAX_LIMIT`], [`MAX_OFFSET`], [`MAX_RADIUS`]) and the errors
//! that name a bad parameter ([`BadParam`]) live here, and are enforced here,
//! whatever the caller checked before.
//!
//! A past period is read from Redis while its key exists and from the
//! archive (docs/history.md) once it is gone, with the same JSON but for
//! `"source"`; a past period found in neither never had events (404).
//! Every read takes a rank style (docs/http-api.md, [`RankStyle`]): ordinal ranks
//! come from `ZRANGE`/`ZRANK` as before; competition and dense ranks, and
//! lists of members ([`Reader::members`]), from the read script of
//! [`styled`], numbered by [`ranks::Styler`] (the one place a board kind's
//! notion of "equal values" turns into ranks); archived periods carry all
//! three ranks. The list of a view's periods is in [`periods`].

mod build;
mod periods;
pub mod ranks;
mod scopes;
mod script;
mod styled;
pub mod union;

use std::sync::Arc;

use redis::Value;
use serde::Serialize;

use crate::archive::copy::PeriodKey;
use crate::archive::read::{ArchiveReadError, ArchiveReader, ArchivedRow, ArchivedRows};
use crate::board::BoardSet;
use crate::board::Order;
use crate::board::composite::{self, FieldValues};
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, parse_period_id, period_of};
use crate::clock::SharedClock;
use crate::sink::store::{Store, StoreError, server_error};

pub use periods::{PeriodInfo, PeriodList, periodic_view};
pub use ranks::RankStyle;
pub use scopes::{MAX_LISTED_SCOPES, MAX_UNION_KEYS, ScopeUnion};
pub use union::{UnionOffer, Unions};

/// Most ids one members read takes (docs/http-api.md).
pub const MAX_IDS: usize = 1000;

/// Largest page a read may ask for (`limit`).
pub const MAX_LIMIT: usize = 1000;

/// Largest `offset`: a Redis sorted set holds at most 2^32 − 1 members, so no
/// board has a rank past this, and `offset + limit` stays far inside the
/// signed 64-bit indices `ZRANGE` takes.
pub const MAX_OFFSET: usize = 4_294_967_295;

/// Largest `radius` of an `around` read: the page is at most
/// `2 × radius + 1` entries, about [`MAX_LIMIT`].
pub const MAX_RADIUS: usize = MAX_LIMIT / 2;

/// One ranked member.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    pub rank: u64,
    pub member: String,
    #[serde(serialize_with = "score_json")]
    pub score: f64,
    /// A composite board's fields (docs/score-encoding.md), decoded from the member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<FieldValues>,
}

impl From<ArchivedRow> for Entry {
    fn from(r: ArchivedRow) -> Entry {
        Entry {
            rank: r.rank,
            member: r.member,
            score: r.score,
            fields: r.fields,
        }
    }
}

/// Where an answer comes from: Redis, or the archive of closed periods.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Live,
    Archive,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::Archive => "archive",
        }
    }
}

/// A page of a board.
#[derive(Debug, Clone, Serialize)]
pub struct List {
    pub board: String,
    pub view: String,
    pub period: Option<String>,
    pub scope: Option<String>,
    /// The scopes of a union of scopes (`["*"]` for all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    pub total: u64,
    pub entries: Vec<Entry>,
    pub source: Source,
}

/// The entries of a list of members (a friends board), in rank order with
/// their global ranks, and the ids not on the board, in request order.
#[derive(Debug, Clone, Serialize)]
pub struct MemberList {
    pub board: String,
    pub view: String,
    pub period: Option<String>,
    pub scope: Option<String>,
    /// The scopes of a union of scopes (`["*"]` for all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    pub source: Source,
    pub total: u64,
    pub entries: Vec<Entry>,
    pub missing: Vec<String>,
}

/// One member's entry, and where it was read.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberEntry {
    pub rank: u64,
    pub member: String,
    #[serde(serialize_with = "score_json")]
    pub score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<FieldValues>,
    pub source: Source,
}

impl MemberEntry {
    fn new(e: Entry, source: Source) -> MemberEntry {
        MemberEntry {
            rank: e.rank,
            member: e.member,
            score: e.score,
            fields: e.fields,
            source,
        }
    }
}

/// Integral values are written as JSON integers (`42`, not `42.0`), so that
/// clients in any language read exactly what was counted.
fn score_json<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() <= crate::board::score::MAX_EXACT {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// What a read asks for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub board: String,
    pub view: String,
    pub scope: Option<String>,
    /// Several scopes read as one (then `scope` is `None`).
    pub scope_union: Option<ScopeUnion>,
    pub period: Option<String>,
}

/// A request parameter that cannot be served. `param` is its name as the
/// client wrote it (`limit`, `period`, `limt`...), and `message` says what is
/// wrong in a sentence that also names it, so the text alone is enough.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadParam {
    pub param: String,
    pub message: String,
}

impl BadParam {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> BadParam {
        BadParam {
            param: param.into(),
            message: message.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no board named {0:?}")]
    UnknownBoard(String),
    #[error("board {board:?} has no view {view:?} (it has: {known})")]
    UnknownView {
        board: String,
        view: String,
        known: String,
    },
    /// The caller's fault: a parameter out of range or not applicable.
    #[error("{0}")]
    BadRequest(BadParam),
    #[error("member {member:?} is not on this board")]
    MemberNotFound { member: String },
    /// A period other than the current one with neither a key in Redis
    /// nor a complete copy in the archive.
    #[error("period {period} of board {board}{scope} had no events")]
    NoEvents {
        board: String,
        period: String,
        /// ` (scope "s")` for scoped boards, else empty.
        scope: String,
    },
    /// No reader yet: Redis has not been reached since start-up. Temporary,
    /// unlike a configuration fault.
    #[error("not connected to Redis yet; try again shortly")]
    NotReady,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveReadError),
}

impl ReadError {
    fn bad(param: &str, message: impl Into<String>) -> ReadError {
        ReadError::BadRequest(BadParam::new(param, message))
    }
}

/// `Err` naming `param` unless `value <= max`. The message is the one the
/// HTTP API gives for a number it cannot parse, so both read the same.
pub fn check_bound(param: &str, value: usize, max: usize) -> Result<(), BadParam> {
    if value <= max {
        Ok(())
    } else {
        Err(out_of_range(param, &value.to_string(), max))
    }
}

/// The error for a count parameter that is not a whole number in `0..=max`.
pub fn out_of_range(param: &str, given: &str, max: usize) -> BadParam {
    BadParam::new(
        param,
        format!("{param} must be a whole number from 0 to {max}, got {given:?}"),
    )
}

/// Where a query's data lives.
struct Located<'b> {
    board: &'b Board,
    board_index: usize,
    tag: String,
    key: String,
    period: Option<String>,
    window: bool,
    /// The period asked for, when it is not the current one: then a key
    /// that does not exist sends the read to the archive.
    past: Option<PeriodKey>,
    /// For a rolling view (`last:7d`): the union to compute into `key`
    /// before reading it.
    union: Option<union::UnionPlan>,
}

/// Reads boards from Redis, and closed periods from the archive.
#[derive(Clone)]
pub struct Reader {
    pub boards: Arc<BoardSet>,
    pub store: Store,
    pub clock: SharedClock,
    /// The archive (`[archive] url`), for periods no longer in Redis.
    pub archive: Option<ArchiveReader>,
    /// Rolling views being computed, and how long a result is reused
    /// (`[http] union_cache`).
    pub unions: Unions,
}

/// Checks that `q` names a board and view and that its scope and period fit
/// them, without touching Redis, so a caller can refuse a bad request (400,
/// 404) even before Redis is reachable. `now_ms` picks the current period.
pub fn check(boards: &BoardSet, now_ms: i64, q: &Query) -> Result<(), ReadError> {
    locate(boards, now_ms, q).map(|_| ())
}

/// Where `q`'s data lives, or why it cannot be read.
fn locate<'b>(boards: &'b BoardSet, now_ms: i64, q: &Query) -> Result<Located<'b>, ReadError> {
    let (board_index, board) = boards
        .boards
        .iter()
        .enumerate()
        .find(|(_, b)| b.name == q.board)
        .ok_or_else(|| ReadError::UnknownBoard(q.board.clone()))?;
    if let Some(which) = &q.scope_union {
        let at = (board_index, board);
        return locate_scopes(&boards.key_prefix, at, which, q, now_ms);
    }
    if let Some(view) = union::parse(&q.view) {
        let view = view?;
        check_scope(board, q)?;
        let tag = board.tag(q.scope.as_deref());
        let (plan, newest) = union::plan(
            &boards.key_prefix,
            board,
            &tag,
            view,
            q.period.as_deref(),
            now_ms,
        )?;
        return Ok(Located {
            board,
            board_index,
            key: plan.result.clone(),
            tag,
            period: Some(newest),
            window: false,
            past: None,
            union: Some(plan),
        });
    }
    let spec = board.view(&q.view).ok_or_else(|| ReadError::UnknownView {
        board: board.name.clone(),
        view: q.view.clone(),
        known: union::known_views(board),
    })?;
    check_scope(board, q)?;
    let tag = board.tag(q.scope.as_deref());
    let (view_id, period, window) = view_of(spec, board, q.period.as_deref(), now_ms)?;
    let past = match (spec, &period) {
        (ViewSpec::Period { kind, .. }, Some(id))
            if q.period.is_some() && *id != period_of(*kind, now_ms, board.tz).id =>
        {
            Some(PeriodKey {
                board: board.name.clone(),
                scope: q.scope.clone().unwrap_or_default(),
                view: kind.name().to_string(),
                period: id.clone(),
            })
        }
        _ => None,
    };
    Ok(Located {
        board,
        board_index,
        key: keys::view_key(&boards.key_prefix, &tag, &view_id),
        tag,
        period,
        window,
        past,
        union: None,
    })
}

/// Where the union of `which` scopes of `board` that `q` asks for is read.
fn locate_scopes<'b>(
    prefix: &str,
    (board_index, board): (usize, &'b Board),
    which: &ScopeUnion,
    q: &Query,
    now_ms: i64,
) -> Result<Located<'b>, ReadError> {
    let (plan, period) = scopes::plan(prefix, board, which, &q.view, q.period.as_deref(), now_ms)?;
    Ok(Located {
        board,
        board_index,
        key: plan.result.clone(),
        tag: board.name.clone(),
        period,
        window: false,
        past: None,
        union: Some(plan),
    })
}

/// Whether `q` gives a scope exactly when the board is scoped.
fn check_scope(board: &Board, q: &Query) -> Result<(), ReadError> {
    match (&board.scope, &q.scope) {
        (Some(_), None) => Err(ReadError::bad(
            "scope",
            format!("board {:?} is scoped: give scope=<value>", board.name),
        )),
        (None, Some(_)) => Err(ReadError::bad(
            "scope",
            format!("board {:?} has no scope; scope= does not apply", board.name),
        )),
        _ => Ok(()),
    }
}

/// The view id in keys, the period id shown, and whether it is a window.
fn view_of(
    spec: &ViewSpec,
    board: &Board,
    period: Option<&str>,
    now_ms: i64,
) -> Result<(String, Option<String>, bool), ReadError> {
    match spec {
        ViewSpec::Window(w) => match period {
            Some(_) => Err(ReadError::bad(
                "period",
                "a window always shows the current moment; period= does not apply",
            )),
            None => Ok((w.view(), None, true)),
        },
        // The all-time board has one period; asking for another one
        // is a mistake worth saying rather than ignoring.
        ViewSpec::Period {
            kind: PeriodKind::All,
            ..
        } => match period {
            Some(id) if id != "all" => Err(ReadError::bad(
                "period",
                format!("view all has a single period; period={id:?} does not apply"),
            )),
            _ => Ok(("all".to_string(), None, false)),
        },
        ViewSpec::Period { kind, .. } => {
            let p = match period {
                Some(id) => parse_period_id(*kind, id, board.tz)
                    .map_err(|e| ReadError::bad("period", format!("period: {e}")))?,
                None => period_of(*kind, now_ms, board.tz),
            };
            Ok((p.view(), Some(p.id), false))
        }
    }
}

impl Reader {
    fn locate(&self, q: &Query) -> Result<Located<'_>, ReadError> {
        locate(&self.boards, self.clock.now_ms(), q)
    }

    /// Evicts what has slid out of one window instance as of the reader's
    /// clock, so a read never shows buckets older than the window even when
    /// no event and no background trim has touched the board lately.
    /// Returns how many members left the instance.
    pub async fn trim_window(&self, board_index: usize, tag: &str) -> Result<u64, ReadError> {
        let evicted = crate::sink::trim::trim_instances(
            &self.store,
            &self.boards,
            &[(board_index, tag.to_string())],
            self.clock.now_ms(),
        )
        .await?;
        Ok(evicted.get(board_index).copied().unwrap_or(0))
    }

    async fn prepare(&self, at: &Located<'_>) -> Result<(), ReadError> {
        if at.window {
            self.trim_window(at.board_index, &at.tag).await?;
        }
        if let Some(plan) = &at.union {
            if plan.cross_slot && self.store.is_cluster() {
                return Err(ReadError::bad(
                    "scope",
                    format!(
                        "board {:?} keeps each scope in its own Redis Cluster slot, so its scopes cannot be read as one union: set scope_slot = \"board\" on the board to keep them in one slot",
                        at.board.name
                    ),
                ));
            }
            let trim = union::Trim {
                boards: &self.boards,
                board_index: at.board_index,
                now_ms: self.clock.now_ms(),
            };
            self.unions.ensure(&self.store, plan, trim).await?;
        }
        Ok(())
    }

    fn list(
        &self,
        q: &Query,
        at: &Located<'_>,
        total: u64,
        entries: Vec<Entry>,
        source: Source,
    ) -> List {
        List {
            board: at.board.name.clone(),
            view: q.view.clone(),
            period: at.period.clone(),
            scope: q.scope.clone(),
            scopes: q.scope_union.as_ref().map(ScopeUnion::shown),
            total,
            entries,
            source,
        }
    }

    /// Members ranked `offset+1 ..= offset+limit`, ordinal ranks.
    pub async fn top(&self, q: &Query, offset: usize, limit: usize) -> Result<List, ReadError> {
        self.top_ranked(q, offset, limit, RankStyle::Ordinal).await
    }

    /// Members ranked `offset+1 ..= offset+limit` (in the board's order),
    /// shown with ranks in `style`. A `limit` over [`MAX_LIMIT`] or an
    /// `offset` over [`MAX_OFFSET`] is refused, never capped: the caller
    /// would otherwise get fewer entries than it asked for with no way to
    /// tell.
    pub async fn top_ranked(
        &self,
        q: &Query,
        offset: usize,
        limit: usize,
        style: RankStyle,
    ) -> Result<List, ReadError> {
        check_bound("limit", limit, MAX_LIMIT).map_err(ReadError::BadRequest)?;
        check_bound("offset", offset, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        // Widened before adding: the bounds above keep the sum far below
        // i64::MAX, the largest index ZRANGE takes, on any platform.
        let (start, count) = (offset as u64, limit as u64);
        let (total, entries) = if count > 0 && style != RankStyle::Ordinal {
            self.styled_range(&at, start, start + count - 1, style)
                .await?
        } else {
            self.ordinal_range(&at, start, count).await?
        };
        if total == 0
            && let Some(key) = &at.past
        {
            let rows = match &self.archive {
                Some(a) => {
                    a.page_ranked(key, start + 1, start + count, style.name())
                        .await?
                }
                None => None,
            };
            let rows = self.found(&at, rows)?;
            let entries = rows.rows.into_iter().map(Entry::from).collect();
            return Ok(self.list(q, &at, rows.period.members, entries, Source::Archive));
        }
        Ok(self.list(q, &at, total, entries, Source::Live))
    }

    /// The view's size and `count` entries from 0-based `start`, ordinal.
    async fn ordinal_range(
        &self,
        at: &Located<'_>,
        start: u64,
        count: u64,
    ) -> Result<(u64, Vec<Entry>), ReadError> {
        let mut cmds = vec![redis::cmd("ZCARD").arg(&at.key).clone()];
        if count > 0 {
            cmds.push(self.range_cmd(at, start, start + count - 1));
        }
        // One round trip, so the count and the page come from one look.
        let replies = self.store.pipeline(&cmds, self.store.epoch()).await?;
        let total: u64 = reply(&replies, 0)?;
        let entries = if count == 0 {
            Vec::new()
        } else {
            self.entries(at, start, reply(&replies, 1)?)
        };
        Ok((total, entries))
    }

    /// The entries of the members `ids` (at most [`MAX_IDS`], at least
    /// one; repeats count once) in rank order with their global ranks in
    /// `style`, and the ids not on the board in request order. Live: one
    /// call of the read script; archived: one statement.
    pub async fn members(
        &self,
        q: &Query,
        ids: &[String],
        style: RankStyle,
    ) -> Result<MemberList, ReadError> {
        if ids.is_empty() {
            return Err(ReadError::bad("ids", "ids must name at least one member"));
        }
        if ids.len() > MAX_IDS {
            return Err(ReadError::bad(
                "ids",
                format!("ids takes at most {MAX_IDS} members, got {}", ids.len()),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        let unique: Vec<String> = ids
            .iter()
            .filter(|id| seen.insert(id.as_str()))
            .cloned()
            .collect();
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let live = self.live_members(&at, &unique, style).await?;
        let (total, entries, source) = match &at.past {
            Some(key) if live.total == 0 => {
                let rows = match &self.archive {
                    Some(a) => a.members(key, &unique, style.name()).await?,
                    None => None,
                };
                let rows = self.found(&at, rows)?;
                let entries = rows.rows.into_iter().map(Entry::from).collect();
                (rows.period.members, entries, Source::Archive)
            }
            _ => (live.total, live.entries, Source::Live),
        };
        let on_board: std::collections::HashSet<&str> =
            entries.iter().map(|e: &Entry| e.member.as_str()).collect();
        let missing = unique
            .iter()
            .filter(|id| !on_board.contains(id.as_str()))
            .cloned()
            .collect();
        Ok(MemberList {
            board: at.board.name.clone(),
            view: q.view.clone(),
            period: at.period.clone(),
            scope: q.scope.clone(),
            scopes: q.scope_union.as_ref().map(ScopeUnion::shown),
            source,
            total,
            entries,
            missing,
        })
    }

    /// One member's rank (ordinal) and score.
    pub async fn member(&self, q: &Query, member: &str) -> Result<MemberEntry, ReadError> {
        self.member_ranked(q, member, RankStyle::Ordinal).await
    }

    /// One member's rank in `style` and score.
    pub async fn member_ranked(
        &self,
        q: &Query,
        member: &str,
        style: RankStyle,
    ) -> Result<MemberEntry, ReadError> {
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let not_found = || ReadError::MemberNotFound {
            member: member.to_string(),
        };
        let (exists, live) = if style == RankStyle::Ordinal {
            let live = self.rank_of(&at, member).await?;
            let entry = live.hit.map(|(rank, score)| {
                let (_, fields) = composite::read_entry(at.board, &live.stored, score);
                Entry {
                    rank: rank + 1,
                    member: member.to_string(),
                    score,
                    fields,
                }
            });
            (live.exists, entry)
        } else {
            let live = self.live_members(&at, &[member.to_string()], style).await?;
            (live.total > 0, live.entries.into_iter().next())
        };
        if !exists && let Some(key) = &at.past {
            let rows = match &self.archive {
                Some(a) => a.member_ranked(key, member, style.name()).await?,
                None => None,
            };
            let rows = self.found(&at, rows)?;
            let row = rows.rows.into_iter().next().filter(|_| rows.found);
            return row
                .map(|r| MemberEntry::new(r.into(), Source::Archive))
                .ok_or_else(not_found);
        }
        let entry = live.ok_or_else(not_found)?;
        Ok(MemberEntry::new(entry, Source::Live))
    }

    /// The member and up to `radius` neighbours on each side, ordinal.
    pub async fn around(&self, q: &Query, member: &str, radius: usize) -> Result<List, ReadError> {
        self.around_ranked(q, member, radius, RankStyle::Ordinal)
            .await
    }

    /// The member and up to `radius` neighbours on each side (in the
    /// board's order), ranked in `style`. A `radius` over [`MAX_RADIUS`] is
    /// refused, never capped.
    pub async fn around_ranked(
        &self,
        q: &Query,
        member: &str,
        radius: usize,
        style: RankStyle,
    ) -> Result<List, ReadError> {
        check_bound("radius", radius, MAX_RADIUS).map_err(ReadError::BadRequest)?;
        let radius = radius as u64;
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let not_found = || ReadError::MemberNotFound {
            member: member.to_string(),
        };
        let live = self.rank_of(&at, member).await?;
        if !live.exists
            && let Some(key) = &at.past
        {
            let rows = match &self.archive {
                Some(a) => a.around_ranked(key, member, radius, style.name()).await?,
                None => None,
            };
            let rows = self.found(&at, rows)?;
            if !rows.found {
                return Err(not_found());
            }
            let entries = rows.rows.into_iter().map(Entry::from).collect();
            return Ok(self.list(q, &at, rows.period.members, entries, Source::Archive));
        }
        let (rank, _) = live.hit.ok_or_else(not_found)?;
        let start = rank.saturating_sub(radius);
        let (total, entries) = if style == RankStyle::Ordinal {
            self.ordinal_range(&at, start, rank + radius - start + 1)
                .await?
        } else {
            self.styled_range(&at, start, rank + radius, style).await?
        };
        Ok(self.list(q, &at, total, entries, Source::Live))
    }

    /// The rows of a complete copy (read from the archive, if there is
    /// one), or the 404 of a period that never had events.
    fn found(
        &self,
        at: &Located<'_>,
        rows: Option<ArchivedRows>,
    ) -> Result<ArchivedRows, ReadError> {
        rows.ok_or_else(|| ReadError::NoEvents {
            board: at.board.name.clone(),
            period: at.period.clone().unwrap_or_default(),
            scope: at
                .past
                .as_ref()
                .filter(|k| at.board.scope.is_some() && !k.scope.is_empty())
                .map(|k| format!(" (scope {:?})", k.scope))
                .unwrap_or_default(),
        })
    }

    /// `ZREVRANGE` / `ZRANGE` of 0-based ranks `start ..= stop`.
    fn range_cmd(&self, at: &Located<'_>, start: u64, stop: u64) -> redis::Cmd {
        let command = match at.board.order {
            Order::Desc => "ZREVRANGE",
            Order::Asc => "ZRANGE",
        };
        redis::cmd(command)
            .arg(&at.key)
            .arg(start)
            .arg(stop)
            .arg("WITHSCORES")
            .clone()
    }

    /// Entries from a [`Self::range_cmd`] reply starting at 0-based `start`,
    /// members decoded from their tie-break form.
    fn entries(&self, at: &Located<'_>, start: u64, raw: Vec<(Vec<u8>, f64)>) -> Vec<Entry> {
        raw.into_iter()
            .enumerate()
            .map(|(i, (stored, score))| {
                let stored = String::from_utf8_lossy(&stored);
                let (member, fields) = composite::read_entry(at.board, &stored, score);
                Entry {
                    rank: start + i as u64 + 1,
                    member,
                    score,
                    fields,
                }
            })
            .collect()
    }

    /// Whether the view's key exists, and the member's 0-based rank and
    /// score in it.
    async fn rank_of(&self, at: &Located<'_>, member: &str) -> Result<Lookup, ReadError> {
        let exists = redis::cmd("EXISTS").arg(&at.key).clone();
        let stored = match composite::helper_of(at.board) {
            None => member.to_string(),
            Some(suffix) => {
                let helper = redis::cmd("HGET")
                    .arg(keys::helper(&at.key, suffix))
                    .arg(member)
                    .clone();
                let replies = self
                    .store
                    .pipeline(&[exists, helper], self.store.epoch())
                    .await?;
                match reply::<Option<String>>(&replies, 1)?
                    .and_then(|h| composite::stored_member(at.board, member, &h))
                {
                    Some(stored) => stored,
                    None => {
                        let exists = reply::<u64>(&replies, 0)? > 0;
                        return Ok(Lookup {
                            exists,
                            hit: None,
                            stored: String::new(),
                        });
                    }
                }
            }
        };
        let rank_cmd = match at.board.order {
            Order::Desc => "ZREVRANK",
            Order::Asc => "ZRANK",
        };
        let cmds = [
            redis::cmd("EXISTS").arg(&at.key).clone(),
            redis::cmd(rank_cmd).arg(&at.key).arg(&stored).clone(),
            redis::cmd("ZSCORE").arg(&at.key).arg(&stored).clone(),
        ];
        let replies = self.store.pipeline(&cmds, self.store.epoch()).await?;
        let rank: Option<u64> = reply(&replies, 1)?;
        let score: Option<f64> = reply(&replies, 2)?;
        Ok(Lookup {
            exists: reply::<u64>(&replies, 0)? > 0,
            hit: rank.zip(score),
            stored,
        })
    }
}

/// What Redis has of a member in a view.
struct Lookup {
    /// Whether the view's key exists at all.
    exists: bool,
    /// 0-based rank and score, if the member is in it.
    hit: Option<(u64, f64)>,
    /// The member as stored (tie key, composite codes) when looked up.
    stored: String,
}

/// Reply `i` of a pipeline, converted; an error reply is an error.
fn reply<T: redis::FromRedisValue>(replies: &[Value], i: usize) -> Result<T, StoreError> {
    let value = replies.get(i).cloned().unwrap_or(Value::Nil);
    if let Some(e) = server_error(&value) {
        return Err(e);
    }
    redis::from_redis_value(value).map_err(|e| StoreError::Protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T12:00:00Z.
    const NOW: i64 = 1_795_262_400_000;

    fn boards() -> BoardSet {
        let text = r#"
[[board]]
name = "total"
event = "score"
member = "user_id"
score = "points"
periods = ["all", "day"]
[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
windows = ["1h/1m"]
"#;
        crate::config::test_boards(text)
    }

    fn q(board: &str, view: &str, scope: Option<&str>, period: Option<&str>) -> Query {
        Query {
            board: board.into(),
            view: view.into(),
            scope: scope.map(str::to_string),
            scope_union: None,
            period: period.map(str::to_string),
        }
    }

    /// The parameter a `check` refuses, or a description of another outcome.
    fn refused(query: &Query) -> String {
        match check(&boards(), NOW, query) {
            Err(ReadError::BadRequest(b)) => {
                assert!(
                    b.message.contains(&b.param),
                    "{b:?} does not name its parameter"
                );
                b.param
            }
            Err(e) => format!("other: {e}"),
            Ok(()) => "ok".into(),
        }
    }

    #[test]
    fn check_names_the_parameter_that_does_not_fit_the_board() {
        let located = locate(&boards(), NOW, &q("total", "day", None, None)).map(|l| l.key);
        assert_eq!(
            located.ok().as_deref(),
            Some("rankflow:{total}:day:2026-11-21")
        );
        for (query, want) in [
            (q("total", "day", None, Some("2026-11-20")), "ok"),
            (q("total", "all", None, Some("all")), "ok"),
            (q("fans", "win:1h", Some("s1"), None), "ok"),
            (q("total", "day", None, Some("garbage")), "period"),
            (q("total", "day", None, Some("2026-02-30")), "period"),
            (q("total", "all", None, Some("2026-11-21")), "period"),
            (
                q("fans", "win:1h", Some("s1"), Some("2026-11-21")),
                "period",
            ),
            (q("fans", "win:1h", None, None), "scope"),
            (q("total", "all", Some("s1"), None), "scope"),
        ] {
            assert_eq!(refused(&query), want, "{query:?}");
        }
        assert_eq!(
            refused(&q("nope", "all", None, None)),
            "other: no board named \"nope\""
        );
        assert_eq!(
            refused(&q("total", "week", None, None)),
            "other: board \"total\" has no view \"week\" (it has: all, day, last:<N>d (N up to 35))"
        );
    }

    #[test]
    fn only_a_period_other_than_the_current_one_may_come_from_the_archive() {
        let past = |query: &Query| {
            locate(&boards(), NOW, query)
                .ok()
                .and_then(|l| l.past)
                .map(|k| k.path())
        };
        assert_eq!(
            past(&q("total", "day", None, Some("2026-11-20"))).as_deref(),
            Some("total//day/2026-11-20")
        );
        // The current period, named or not, the all-time view and windows
        // are always live.
        assert_eq!(past(&q("total", "day", None, Some("2026-11-21"))), None);
        assert_eq!(past(&q("total", "day", None, None)), None);
        assert_eq!(past(&q("total", "all", None, Some("all"))), None);
        assert_eq!(past(&q("fans", "win:1h", Some("s1"), None)), None);
    }

    #[test]
    fn answers_say_where_they_come_from() {
        let entry = MemberEntry::new(
            Entry {
                rank: 2,
                member: "u1".into(),
                score: 0.5,
                fields: None,
            },
            Source::Archive,
        );
        assert_eq!(
            serde_json::to_string(&entry).ok().as_deref(),
            Some(r#"{"rank":2,"member":"u1","score":0.5,"source":"archive"}"#)
        );
        let e = ReadError::NoEvents {
            board: "total".into(),
            period: "2026-11-20".into(),
            scope: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "period 2026-11-20 of board total had no events"
        );
    }

    #[test]
    fn bounds_are_inclusive_and_name_the_parameter() {
        assert_eq!(check_bound("limit", MAX_LIMIT, MAX_LIMIT), Ok(()));
        let e = check_bound("offset", MAX_OFFSET + 1, MAX_OFFSET).map_err(|e| e.message);
        assert_eq!(
            e,
            Err("offset must be a whole number from 0 to 4294967295, got \"4294967296\"".into())
        );
        // The largest page past the largest offset still fits ZRANGE's i64.
        assert!((MAX_OFFSET as u64 + MAX_LIMIT as u64) < i64::MAX as u64);
    }
}
