//! Reading boards back (SPEC §5): locating a view's key for a board, scope
//! and period, trimming a window to the clock before reading it, and turning
//! stored members and scores into entries with true values and 1-based
//! ranks. Shared by the HTTP API and `rankflow top`.

use std::sync::Arc;

use serde::Serialize;

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, parse_period_id, period_of};
use crate::clock::SharedClock;
use crate::config::Order;
use crate::sink::store::{Store, StoreError};
use crate::sink::trim_instances;

/// Largest page a read may ask for.
pub const MAX_LIMIT: usize = 1000;

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
    #[error("{0}")]
    BadRequest(String),
    #[error("member {member:?} is not on this board")]
    MemberNotFound { member: String },
    #[error(transparent)]
    Store(#[from] StoreError),
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

impl Reader {
    fn locate(&self, q: &Query) -> Result<Located<'_>, ReadError> {
        let (board_index, board) = self
            .boards
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
                return Err(ReadError::BadRequest(format!(
                    "board {:?} is scoped: give scope=<value>",
                    board.name
                )));
            }
            (None, Some(_)) => {
                return Err(ReadError::BadRequest(format!(
                    "board {:?} has no scope",
                    board.name
                )));
            }
            _ => {}
        }
        let tag = keys::instance_tag(&board.name, q.scope.as_deref());
        let (view_id, period, window) = match spec {
            ViewSpec::Window(w) => {
                if q.period.is_some() {
                    return Err(ReadError::BadRequest(
                        "a window always shows the current moment; period= does not apply".into(),
                    ));
                }
                (w.view(), None, true)
            }
            ViewSpec::Period {
                kind: PeriodKind::All,
                ..
            } => ("all".to_string(), None, false),
            ViewSpec::Period { kind, .. } => {
                let p = match &q.period {
                    Some(id) => parse_period_id(*kind, id, board.tz)
                        .map_err(|e| ReadError::BadRequest(e.to_string()))?,
                    None => period_of(*kind, self.clock.now_ms(), board.tz),
                };
                (p.view(), Some(p.id), false)
            }
        };
        Ok(Located {
            board,
            board_index,
            key: keys::view_key(&self.boards.key_prefix, &tag, &view_id),
            tag,
            period,
            window,
        })
    }

    async fn prepare(&self, at: &Located<'_>) -> Result<(), ReadError> {
        if at.window {
            trim_instances(
                &self.store,
                &self.boards,
                &[(at.board_index, at.tag.clone())],
                self.clock.now_ms(),
            )
            .await?;
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

    /// Members ranked `offset+1 ..= offset+limit`.
    pub async fn top(&self, q: &Query, offset: usize, limit: usize) -> Result<List, ReadError> {
        let limit = limit.min(MAX_LIMIT);
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let total: u64 = self.store.query(redis::cmd("ZCARD").arg(&at.key)).await?;
        let entries = if limit == 0 {
            Vec::new()
        } else {
            self.range(&at, offset, offset + limit - 1).await?
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
    pub async fn around(&self, q: &Query, member: &str, radius: usize) -> Result<List, ReadError> {
        let radius = radius.min(MAX_LIMIT / 2);
        let at = self.locate(q)?;
        self.prepare(&at).await?;
        let (rank, _) =
            self.rank_of(&at, member)
                .await?
                .ok_or_else(|| ReadError::MemberNotFound {
                    member: member.to_string(),
                })?;
        let start = (rank as usize).saturating_sub(radius);
        let entries = self.range(&at, start, rank as usize + radius).await?;
        let total: u64 = self.store.query(redis::cmd("ZCARD").arg(&at.key)).await?;
        Ok(self.list(q, &at, total, entries))
    }

    /// Entries by 0-based rank range (inclusive).
    async fn range(
        &self,
        at: &Located<'_>,
        start: usize,
        stop: usize,
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
                    rank: (start + i + 1) as u64,
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
