//! The periods of a board view (`GET /v1/boards/{board}/{view}/periods`):
//! the ones still in Redis and the archived ones, merged, newest first,
//! paged.
//!
//! Live periods are found without scanning keys: the ids from the newest
//! period an event may already be in (now plus the allowed clock skew) back
//! to the oldest whose key may not have expired yet (end + retention), then
//! the closed periods still waiting for the archiver (the due set's items
//! whose close time has passed: they are kept past their retention until
//! archived). Those that exist in Redis are live; one archived as well is
//! shown live, as a read of it would be answered. A board a shadow was
//! promoted in place of lists what its reads answer (docs/rebuilds.md):
//! its own periods that ended by the promotion, the shadow's after it.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::answer::Source;
use super::error::{BadParam, ReadError};
use super::handle::Reader;
use super::locate::check;
use super::query::{MAX_LIMIT, MAX_OFFSET, Query, check_bound};
use super::reply::reply;
use crate::archive::read::PeriodRow;
use crate::board::duration::add_span;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{Period, PeriodKind, parse_period_id, period_of};

/// Most period ids looked up in Redis for one listing: far more than any
/// sensible retention holds (an hourly view kept a year has 8,760).
const MAX_CANDIDATES: usize = 100_000;
/// Keys counted per pipeline.
const CHUNK: usize = 1_000;

/// One period of a view.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PeriodInfo {
    pub(crate) period: String,
    /// RFC 3339, UTC.
    pub(crate) start: String,
    pub(crate) end: String,
    pub(crate) source: Source,
    pub(crate) members: u64,
}

/// A page of a view's periods, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodList {
    pub(crate) board: String,
    pub(crate) view: String,
    pub(crate) scope: Option<String>,
    /// Periods in the whole list.
    pub(crate) total: u64,
    pub(crate) periods: Vec<PeriodInfo>,
}

impl Reader {
    /// The periods of `q`'s view and scope (its `period` is not used),
    /// `limit` of them from `offset` on.
    pub(crate) async fn periods(
        &self,
        q: &Query,
        offset: usize,
        limit: usize,
    ) -> Result<PeriodList, ReadError> {
        check_bound("limit", limit, MAX_LIMIT).map_err(ReadError::BadRequest)?;
        check_bound("offset", offset, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        let now = self.clock.now_ms();
        let (board, kind) = periodic_view(&self.boards, q)?;
        let promoted = self.serving_map().await?.get(&q.board).cloned();
        let live = match promoted {
            None => self.live_periods(q, board, kind, now).await?,
            Some(served) => {
                self.promoted_periods(q, (board, kind), &served.board, served.since, now)
                    .await?
            }
        };
        // Archived periods are listed under the board's own name whatever
        // serves it: those it closed before a promotion are its own, and
        // the archiver writes those closed after it there too.
        let page = match &self.archive {
            Some(archive) => {
                let scope = q.scope.as_deref().unwrap_or("");
                archive
                    .periods(
                        &board.name,
                        scope,
                        kind.name(),
                        &live,
                        offset as u64,
                        limit as u64,
                    )
                    .await?
            }
            None => crate::archive::read::PeriodPage {
                total: live.len() as u64,
                periods: live.into_iter().skip(offset).take(limit).collect(),
            },
        };
        Ok(PeriodList {
            board: q.board.clone(),
            view: q.view.clone(),
            scope: q.scope.clone(),
            total: page.total,
            periods: page.periods.into_iter().map(info).collect(),
        })
    }

    /// The periods in Redis of a board that `shadow` serves since `since`,
    /// newest first, as reads answer them: those that ended by then from
    /// the board's own keys, the others from the shadow's.
    async fn promoted_periods(
        &self,
        q: &Query,
        (board, kind): (&Board, PeriodKind),
        shadow: &str,
        since: i64,
        now: i64,
    ) -> Result<Vec<PeriodRow>, ReadError> {
        let own = self.live_periods(q, board, kind, now).await?;
        let Some(serving) = self.boards.get(shadow) else {
            return Ok(own);
        };
        let theirs = self.live_periods(q, serving, kind, now).await?;
        let mut rows: Vec<PeriodRow> = own
            .into_iter()
            .filter(|r| r.end_ms <= since)
            .chain(theirs.into_iter().filter(|r| r.end_ms > since))
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.start_ms));
        Ok(rows)
    }

    /// The periods of the view that have a key in Redis, newest first.
    async fn live_periods(
        &self,
        q: &Query,
        board: &Board,
        kind: PeriodKind,
        now: i64,
    ) -> Result<Vec<PeriodRow>, ReadError> {
        let tag = board.tag(q.scope.as_deref());
        let mut candidates = recent_periods(board, kind, now, self.boards.future_skew_ms);
        if archived(board, kind) {
            for p in self.pending_periods(board, kind, &tag, now).await? {
                candidates.entry(p.id.clone()).or_insert(p);
            }
        }
        let candidates: Vec<Period> = candidates.into_values().rev().collect();
        let mut live = Vec::new();
        for chunk in candidates.chunks(CHUNK) {
            let cmds: Vec<redis::Cmd> = chunk
                .iter()
                .map(|p| {
                    let key = keys::view_key(&self.boards.key_prefix, &tag, &p.view());
                    redis::cmd("ZCARD").arg(key).clone()
                })
                .collect();
            let replies = self.store.pipeline(&cmds, self.store.epoch()).await?;
            for (i, p) in chunk.iter().enumerate() {
                let members: u64 = reply(&replies, i)?;
                if members > 0 {
                    live.push(PeriodRow {
                        period: p.id.clone(),
                        start_ms: p.start_ms,
                        end_ms: p.end_ms.unwrap_or(p.start_ms),
                        members,
                        live: true,
                    });
                }
            }
        }
        Ok(live)
    }

    /// Closed periods of this view and instance that wait for the archiver
    /// (and so may be kept past their retention).
    async fn pending_periods(
        &self,
        board: &Board,
        kind: PeriodKind,
        tag: &str,
        now: i64,
    ) -> Result<Vec<Period>, ReadError> {
        let due = keys::archive_due_key(&self.boards.key_prefix);
        let mut found = Vec::new();
        let mut offset = 0;
        // The backlog is normally a handful; during a long archive outage
        // it is read in pages, and bounded like the walk back in time.
        while offset < MAX_CANDIDATES {
            let items: Vec<String> = self
                .store
                .query(
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(&due)
                        .arg("-inf")
                        .arg(now)
                        .arg("LIMIT")
                        .arg(offset)
                        .arg(CHUNK),
                )
                .await?;
            offset += CHUNK;
            let last = items.len() < CHUNK;
            for item in items {
                let Some((t, view_id)) = keys::parse_due_member(&item) else {
                    continue;
                };
                let Some(id) = view_id
                    .strip_prefix(kind.name())
                    .and_then(|r| r.strip_prefix(':'))
                else {
                    continue;
                };
                if t == tag
                    && let Ok(p) = parse_period_id(kind, id, board.tz)
                {
                    found.push(p);
                }
            }
            if last {
                break;
            }
        }
        Ok(found)
    }
}

/// The board and period kind of `q`, which must name an `hour` .. `year`
/// view with a fitting scope; needs no server, so the API refuses a bad
/// listing (400, 404) even before Redis is reachable.
pub fn periodic_view<'b>(
    boards: &'b crate::board::BoardSet,
    q: &Query,
) -> Result<(&'b Board, PeriodKind), ReadError> {
    // Checks board, view and scope as every read does.
    let current = Query {
        period: None,
        ..q.clone()
    };
    check(boards, 0, &current)?;
    let board = boards
        .get(&q.board)
        .ok_or_else(|| ReadError::UnknownBoard(q.board.clone()))?;
    match board.view(&q.view) {
        Some(ViewSpec::Period { kind, .. }) if *kind != PeriodKind::All => Ok((board, *kind)),
        _ => Err(ReadError::BadRequest(BadParam::new(
            "view",
            format!(
                "view {} has no periods to list: periods apply to hour, day, week, month and year views",
                q.view
            ),
        ))),
    }
}

fn archived(board: &Board, kind: PeriodKind) -> bool {
    board
        .views
        .iter()
        .any(|v| matches!(v, ViewSpec::Period { kind: k, close_after: Some(_), .. } if *k == kind))
}

/// The periods whose keys may still exist by their expiry, by id: from the
/// one `now + skew` falls in back to the oldest that ended less than the
/// retention ago.
fn recent_periods(
    board: &Board,
    kind: PeriodKind,
    now: i64,
    skew_ms: i64,
) -> BTreeMap<String, Period> {
    let retention = board.views.iter().find_map(|v| match v {
        ViewSpec::Period {
            kind: k, retention, ..
        } if *k == kind => *retention,
        _ => None,
    });
    let mut out = BTreeMap::new();
    let mut p = period_of(kind, now.saturating_add(skew_ms.max(0)), board.tz);
    while out.len() < MAX_CANDIDATES {
        let Some(end) = p.end_ms else { break };
        let alive = match &retention {
            Some(r) => add_span(end, r, board.tz) > now,
            None => true,
        };
        if !alive {
            break;
        }
        let before = period_of(kind, p.start_ms - 1, board.tz);
        out.insert(p.id.clone(), p);
        if before.start_ms >= end {
            break; // the start of the calendar range: nothing earlier
        }
        p = before;
    }
    out
}

fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        .unwrap_or_default()
}

fn info(p: PeriodRow) -> PeriodInfo {
    PeriodInfo {
        start: rfc3339(p.start_ms),
        end: rfc3339(p.end_ms),
        source: if p.live {
            Source::Live
        } else {
            Source::Archive
        },
        members: p.members,
        period: p.period,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T12:00:00Z, a Saturday.
    const NOW: i64 = 1_795_262_400_000;

    fn board() -> crate::board::BoardSet {
        crate::config::test_boards(
            r#"
[[board]]
name = "b"
event = "score"
member = "user_id"
score = "points"
periods = ["day", "week", "all"]
retention = { day = "3d", week = "3w" }
"#,
        )
    }

    fn ids(kind: PeriodKind, skew: i64) -> Vec<String> {
        let set = board();
        let b = &set.boards[0];
        recent_periods(b, kind, NOW, skew)
            .into_keys()
            .rev()
            .collect()
    }

    #[test]
    fn the_walk_covers_every_period_whose_key_may_not_have_expired() {
        // Day 21 is current; day 18 ended on the 19th at 00:00, three days
        // before the 22nd: the 18th expired at the 22nd 00:00 > now, kept.
        assert_eq!(
            ids(PeriodKind::Day, 0),
            ["2026-11-21", "2026-11-20", "2026-11-19", "2026-11-18"]
        );
        // Week 47 (16th-22nd) is current; week 44 ended 2 Nov + 21 d = 23rd.
        assert_eq!(
            ids(PeriodKind::Week, 0),
            ["2026-W47", "2026-W46", "2026-W45", "2026-W44"]
        );
        // An event up to the skew ahead may already be in tomorrow.
        assert_eq!(ids(PeriodKind::Day, 13 * 3_600_000)[0], "2026-11-22");
    }

    #[test]
    fn only_hour_to_year_views_have_periods_to_list() {
        let set = board();
        let q = |view: &str| Query {
            board: "b".into(),
            view: view.into(),
            ..Query::default()
        };
        assert!(periodic_view(&set, &q("week")).is_ok());
        match periodic_view(&set, &q("all")) {
            Err(ReadError::BadRequest(b)) => {
                assert_eq!(b.param, "view");
                assert!(b.message.contains("hour, day, week, month and year"), "{b}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            periodic_view(&set, &q("month")),
            Err(ReadError::UnknownView { .. })
        ));
    }
}
