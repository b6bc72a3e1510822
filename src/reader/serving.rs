//! Which board's data serves a board's reads (docs/rebuilds.md): after a
//! shadow board is promoted in place of the board it shadows, every read
//! of that board (top, members, around, periods, rolling views, unions of
//! scopes, live streams, the page) is answered from the shadow's keys,
//! under the board's own name. Reads of a past period that ended before the
//! promotion keep reading the board's own data: periods already archived
//! stay as archived.
//!
//! The map is `<prefix>:serving` (board → `{"board", "since", "actor"}`),
//! written by the promotion (`crate::admin::promote`). Each reader keeps a
//! copy for at most [`FRESH`]; a promotion answers only after that long,
//! so from its answer on every reader of the fleet serves the shadow.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use crate::board::keys;
use crate::board::model::ViewSpec;
use crate::board::period::parse_period_id;

use super::error::ReadError;
use super::handle::Reader;
use super::query::Query;
use crate::board::serving::{self as map, FRESH, ServingMap};

impl Reader {
    /// The map as this reader knows it (read from Redis when its copy is
    /// older than [`FRESH`]).
    pub(crate) async fn serving_map(&self) -> Result<Arc<ServingMap>, ReadError> {
        let lock = || {
            self.serving
                .copy
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some((at, map)) = lock().as_ref()
            && at.elapsed() < FRESH
        {
            return Ok(map.clone());
        }
        let raw: HashMap<String, String> = self
            .store
            .query(redis::cmd("HGETALL").arg(keys::serving_key(&self.boards.key_prefix)))
            .await?;
        let map: ServingMap = map::parse(raw, &self.boards);
        let map = Arc::new(map);
        *lock() = Some((Instant::now(), map.clone()));
        Ok(map)
    }

    /// `q` as it is served: its board replaced by the shadow promoted in
    /// its place, unless it reads a period that ended before the
    /// promotion.
    pub(crate) async fn served<'q>(&self, q: &'q Query) -> Result<Cow<'q, Query>, ReadError> {
        let map = self.serving_map().await?;
        let Some(served) = map.get(&q.board) else {
            return Ok(Cow::Borrowed(q));
        };
        if self.ended_before(q, served.since) {
            return Ok(Cow::Borrowed(q));
        }
        Ok(Cow::Owned(Query {
            board: served.board.clone(),
            ..q.clone()
        }))
    }

    /// Whether `q` reads a past period that ended at or before `ms`.
    fn ended_before(&self, q: &Query, ms: i64) -> bool {
        let (Some(id), Some(board)) = (&q.period, self.boards.get(&q.board)) else {
            return false;
        };
        let Some(ViewSpec::Period { kind, .. }) = board.view(&q.view) else {
            return false;
        };
        parse_period_id(*kind, id, board.tz)
            .ok()
            .and_then(|p| p.end_ms)
            .is_some_and(|end| end <= ms)
    }
}
