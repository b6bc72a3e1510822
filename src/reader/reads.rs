//! The reads of a board's view: a page ([`Reader::top_ranked`]), a list of
//! members ([`Reader::members`]), one member ([`Reader::member_ranked`]) and
//! one member with its neighbours ([`Reader::around_ranked`]). Each locates
//! the view, trims a window or computes a union first, reads Redis, and
//! falls back to the archive for a past period whose key is gone.

use super::answer::{Entry, List, MemberEntry, MemberList, Source};
use super::compute::Trim;
use super::error::ReadError;
use super::handle::Reader;
use super::locate::{Located, locate};
use super::query::{MAX_IDS, MAX_LIMIT, MAX_OFFSET, MAX_RADIUS, Query, ScopeUnion, check_bound};
use super::ranks::RankStyle;
use super::reply::reply;
use crate::archive::read::ArchivedRows;
use crate::board::Order;
use crate::board::composite;
use crate::board::keys;

/// Whose data a read serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Serve {
    /// The shadow promoted in the board's place, if any (every API read).
    Promoted,
    /// The board's own.
    Own,
}

impl Reader {
    /// Where `q`'s data lives: the board's own, or that of the shadow
    /// promoted in its place (`serving.rs`).
    pub(super) async fn locate(&self, q: &Query) -> Result<Located<'_>, ReadError> {
        let served = self.served(q).await?;
        locate(&self.boards, self.clock.now_ms(), &served)
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

    /// Where a read of `at` must be made again, after [`Reader::prepare`]
    /// said `members` and the read found nothing (`found_nothing`): when
    /// `at` is a union with members whose result had expired by the time
    /// the read looked, the same union computed into a key of the read's
    /// own ([`Located::private`]). The shared result lives `[http]
    /// union_cache` and no longer, and a stall between computing and
    /// reading can outlast that; without this such a read answers an
    /// empty board. Called after every read, it deletes a read's own key
    /// once it has been read.
    pub(super) async fn read_again<'b>(
        &self,
        at: &Located<'b>,
        (members, found_nothing): (bool, bool),
    ) -> Result<Option<Located<'b>>, ReadError> {
        let Some(plan) = at.union.as_ref() else {
            return Ok(None);
        };
        if plan.private {
            let _: () = self
                .store
                .query(
                    redis::cmd("UNLINK")
                        .arg(&plan.result)
                        .arg(&plan.times)
                        .arg(&plan.fresh),
                )
                .await?;
            return Ok(None);
        }
        if !members || !found_nothing {
            return Ok(None);
        }
        let exists: bool = self
            .store
            .query(redis::cmd("EXISTS").arg(&plan.result))
            .await?;
        if exists {
            return Ok(None);
        }
        tracing::debug!(
            key = %plan.result,
            "A union's result expired before it was read: reading it from a key of the read's own."
        );
        Ok(at.private())
    }

    /// Makes `at` ready to read: trims a window instance, computes a union;
    /// whether `at` is a union with members.
    pub(super) async fn prepare(&self, at: &Located<'_>) -> Result<bool, ReadError> {
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
            let trim = Trim {
                boards: &self.boards,
                board_index: at.board_index,
                now_ms: self.clock.now_ms(),
            };
            let max = self.max_read_entries;
            return self.unions.ensure(&self.store, plan, trim, max).await;
        }
        Ok(false)
    }

    pub(super) fn list(
        &self,
        q: &Query,
        at: &Located<'_>,
        total: u64,
        entries: Vec<Entry>,
        source: Source,
    ) -> List {
        List {
            // The board asked for, also where a promoted shadow serves it.
            board: q.board.clone(),
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
        self.page(q, offset, limit, style, Serve::Promoted).await
    }

    /// [`Reader::top_ranked`] of the data `serve` says: a promoted board's
    /// shadow, or the board's own (a diff compares the two).
    pub(super) async fn page(
        &self,
        q: &Query,
        offset: usize,
        limit: usize,
        style: RankStyle,
        serve: Serve,
    ) -> Result<List, ReadError> {
        check_bound("limit", limit, MAX_LIMIT).map_err(ReadError::BadRequest)?;
        check_bound("offset", offset, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        let mut at = match serve {
            Serve::Promoted => self.locate(q).await?,
            Serve::Own => locate(&self.boards, self.clock.now_ms(), q)?,
        };
        // Widened before adding: the bounds above keep the sum far below
        // i64::MAX, the largest index ZRANGE takes, on any platform.
        let (start, count) = (offset as u64, limit as u64);
        let (total, entries) = loop {
            let members = self.prepare(&at).await?;
            let read = if count > 0 && style != RankStyle::Ordinal {
                self.styled_range(&at, start, start + count - 1, style)
                    .await?
            } else {
                self.ordinal_range(&at, start, count).await?
            };
            let again = (members, read.0 == 0);
            match self.read_again(&at, again).await? {
                Some(again) => at = again,
                None => break read,
            }
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
        let mut at = self.locate(q).await?;
        let live = loop {
            let members = self.prepare(&at).await?;
            let live = self.live_members(&at, &unique, style).await?;
            let again = (members, live.total == 0);
            match self.read_again(&at, again).await? {
                Some(again) => at = again,
                None => break live,
            }
        };
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
            board: q.board.clone(),
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
        let mut at = self.locate(q).await?;
        let not_found = || ReadError::MemberNotFound {
            member: member.to_string(),
        };
        let (exists, live) = loop {
            let members = self.prepare(&at).await?;
            let (exists, live) = self.member_entry(&at, member, style).await?;
            match self.read_again(&at, (members, !exists)).await? {
                Some(again) => at = again,
                None => break (exists, live),
            }
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

    /// Whether `member` is in `at`'s view, and its entry ranked in `style`.
    async fn member_entry(
        &self,
        at: &Located<'_>,
        member: &str,
        style: RankStyle,
    ) -> Result<(bool, Option<Entry>), ReadError> {
        Ok(if style == RankStyle::Ordinal {
            let live = self.rank_of(at, member).await?;
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
            let live = self.live_members(at, &[member.to_string()], style).await?;
            (live.total > 0, live.entries.into_iter().next())
        })
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
        let mut at = self.locate(q).await?;
        let not_found = || ReadError::MemberNotFound {
            member: member.to_string(),
        };
        let (exists, page) = loop {
            let members = self.prepare(&at).await?;
            let (exists, page) = self.page_around(&at, member, radius, style).await?;
            let empty = !exists || page.as_ref().is_some_and(|(total, _)| *total == 0);
            match self.read_again(&at, (members, empty)).await? {
                Some(again) => at = again,
                None => break (exists, page),
            }
        };
        if !exists && let Some(key) = &at.past {
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
        let (total, entries) = page.ok_or_else(not_found)?;
        Ok(self.list(q, &at, total, entries, Source::Live))
    }

    /// Whether `at`'s view exists, and the view's size and the page of
    /// `radius` ranks each side of `member` if it is there.
    async fn page_around(
        &self,
        at: &Located<'_>,
        member: &str,
        radius: u64,
        style: RankStyle,
    ) -> Result<(bool, Option<(u64, Vec<Entry>)>), ReadError> {
        let live = self.rank_of(at, member).await?;
        let Some((rank, _)) = live.hit else {
            return Ok((live.exists, None));
        };
        let start = rank.saturating_sub(radius);
        let page = if style == RankStyle::Ordinal {
            self.ordinal_range(at, start, rank + radius - start + 1)
                .await?
        } else {
            self.styled_range(at, start, rank + radius, style).await?
        };
        Ok((live.exists, Some(page)))
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
    pub(super) fn range_cmd(&self, at: &Located<'_>, start: u64, stop: u64) -> redis::Cmd {
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
    pub(super) fn entries(
        &self,
        at: &Located<'_>,
        start: u64,
        raw: Vec<(Vec<u8>, f64)>,
    ) -> Vec<Entry> {
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
    pub(super) async fn rank_of(
        &self,
        at: &Located<'_>,
        member: &str,
    ) -> Result<Lookup, ReadError> {
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
pub(super) struct Lookup {
    /// Whether the view's key exists at all.
    pub(super) exists: bool,
    /// 0-based rank and score, if the member is in it.
    pub(super) hit: Option<(u64, f64)>,
    /// The member as stored (tie key, composite codes) when looked up.
    pub(super) stored: String,
}
