//! Reading boards back (SPEC §5): locating a view's key for a board, scope
//! and period, trimming a window to the clock before reading it, and turning
//! stored members and scores into entries with true values and 1-based
//! ranks. Shared by the HTTP API and `rankflow top`, so the bounds on a read
//! (SPEC §8.6: [`MAX_LIMIT`], [`MAX_OFFSET`], [`MAX_RADIUS`]) and the errors
//! that name a bad parameter ([`BadParam`]) live here, and are enforced here,
//! whatever the caller checked before.

use std::sync::Arc;

use serde::Serialize;

use crate::board::BoardSet;
use crate::board::Order;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, parse_period_id, period_of};
use crate::clock::SharedClock;
use crate::sink::store::{Store, StoreError};

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
}

/// A page of a board.
#[derive(Debug, Clone, Serialize)]
pub struct List {
    pub board: String,
    pub view: String,
    pub period: Option<String>,
    pub scope: Option<String>,
    pub total: u64,
    pub entries: Vec<Entry>,
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
    /// No reader yet: Redis has not been reached since start-up. Temporary,
    /// unlike a configuration fault.
    #[error("not connected to Redis yet; try again shortly")]
    NotReady,
    #[error(transparent)]
    Store(#[from] StoreError),
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
}

/// Reads boards from Redis.
#[derive(Clone)]
pub struct Reader {
    pub boards: Arc<BoardSet>,
    pub store: Store,
    pub clock: SharedClock,
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
    let spec = board.view(&q.view).ok_or_else(|| ReadError::UnknownView {
        board: board.name.clone(),
        view: q.view.clone(),
        known: board
            .views
            .iter()
            .map(ViewSpec::name)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    match (&board.scope, &q.scope) {
        (Some(_), None) => {
            return Err(ReadError::bad(
                "scope",
                format!("board {:?} is scoped: give scope=<value>", board.name),
            ));
        }
        (None, Some(_)) => {
            return Err(ReadError::bad(
                "scope",
                format!("board {:?} has no scope; scope= does not apply", board.name),
            ));
        }
        _ => {}
    }
    let tag = keys::instance_tag(&board.name, q.scope.as_deref());
    let (view_id, period, window) = view_of(spec, board, q.period.as_deref(), now_ms)?;
    Ok(Located {
        board,
        board_index,
        key: keys::view_key(&boards.key_prefix, &tag, &view_id),
        tag,
        period,
        window,
    })
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
        let evicted = crate::sink::trim_instances(
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
        Ok(())
    }

    fn list(&self, q: &Query, at: &Located<'_>, total: u64, entries: Vec<Entry>) -> List {
        List {
            board: at.board.name.clone(),
            view: q.view.clone(),
            period: at.period.clone(),
            scope: q.scope.clone(),
            total,
            entries,
        }
    }

    /// Members ranked `offset+1 ..= offset+limit`. A `limit` over
    /// [`MAX_LIMIT`] or an `offset` over [`MAX_OFFSET`] is refused, never
    /// capped: the caller would otherwise get fewer entries than it asked for
    /// with no way to tell.
    pub async fn top(&self, q: &Query, offset: usize, limit: usize) -> Result<List, ReadError> {
        check_bound("limit", limit, MAX_LIMIT).map_err(ReadError::BadRequest)?;
        check_bound("offset", offset, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let total: u64 = self.store.query(redis::cmd("ZCARD").arg(&at.key)).await?;
        // Widened before adding: the bounds above keep the sum far below
        // i64::MAX, the largest index ZRANGE takes, on any platform.
        let (start, count) = (offset as u64, limit as u64);
        let entries = if count == 0 {
            Vec::new()
        } else {
            self.range(&at, start, start + count - 1).await?
        };
        Ok(self.list(q, &at, total, entries))
    }

    /// One member's rank and score.
    pub async fn member(&self, q: &Query, member: &str) -> Result<Entry, ReadError> {
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let (rank, score) =
            self.rank_of(&at, member)
                .await?
                .ok_or_else(|| ReadError::MemberNotFound {
                    member: member.to_string(),
                })?;
        Ok(Entry {
            rank: rank + 1,
            member: member.to_string(),
            score,
        })
    }

    /// The member and up to `radius` neighbours on each side.
    /// A `radius` over [`MAX_RADIUS`] is refused, never capped.
    pub async fn around(&self, q: &Query, member: &str, radius: usize) -> Result<List, ReadError> {
        check_bound("radius", radius, MAX_RADIUS).map_err(ReadError::BadRequest)?;
        let radius = radius as u64;
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let (rank, _) =
            self.rank_of(&at, member)
                .await?
                .ok_or_else(|| ReadError::MemberNotFound {
                    member: member.to_string(),
                })?;
        let start = rank.saturating_sub(radius);
        let entries = self.range(&at, start, rank + radius).await?;
        let total: u64 = self.store.query(redis::cmd("ZCARD").arg(&at.key)).await?;
        Ok(self.list(q, &at, total, entries))
    }

    /// Entries by 0-based rank range (inclusive).
    async fn range(
        &self,
        at: &Located<'_>,
        start: u64,
        stop: u64,
    ) -> Result<Vec<Entry>, ReadError> {
        let command = match at.board.order {
            Order::Desc => "ZREVRANGE",
            Order::Asc => "ZRANGE",
        };
        let raw: Vec<(Vec<u8>, f64)> = self
            .store
            .query(
                redis::cmd(command)
                    .arg(&at.key)
                    .arg(start)
                    .arg(stop)
                    .arg("WITHSCORES"),
            )
            .await?;
        Ok(raw
            .into_iter()
            .enumerate()
            .map(|(i, (stored, score))| {
                let stored = String::from_utf8_lossy(&stored);
                let member = at
                    .board
                    .tie_key
                    .decode(&stored)
                    .map_or_else(|| stored.to_string(), |(m, _)| m.to_string());
                Entry {
                    rank: start + i as u64 + 1,
                    member,
                    score,
                }
            })
            .collect())
    }

    /// 0-based rank and score of a member, if present.
    async fn rank_of(
        &self,
        at: &Located<'_>,
        member: &str,
    ) -> Result<Option<(u64, f64)>, ReadError> {
        let stored = if at.board.tie_key.code() == "n" {
            member.to_string()
        } else {
            let ts: Option<i64> = self
                .store
                .query(
                    redis::cmd("HGET")
                        .arg(keys::helper(&at.key, "t"))
                        .arg(member),
                )
                .await?;
            match ts {
                Some(ts) => at.board.tie_key.encode(member, ts),
                None => return Ok(None),
            }
        };
        let rank_cmd = match at.board.order {
            Order::Desc => "ZREVRANK",
            Order::Asc => "ZRANK",
        };
        let mut pipe = redis::pipe();
        pipe.cmd(rank_cmd).arg(&at.key).arg(&stored);
        pipe.cmd("ZSCORE").arg(&at.key).arg(&stored);
        let cmds: Vec<redis::Cmd> = pipe.cmd_iter().cloned().collect();
        let replies = self.store.pipeline(&cmds, self.store.epoch()).await?;
        let rank: Option<u64> = replies
            .first()
            .and_then(|v| redis::from_redis_value(v.clone()).ok());
        let score: Option<f64> = replies
            .get(1)
            .and_then(|v| redis::from_redis_value(v.clone()).ok());
        Ok(rank.zip(score))
    }
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
            "other: board \"total\" has no view \"week\" (it has: all, day)"
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
