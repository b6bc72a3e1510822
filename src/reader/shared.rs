//! The reads behind live views (docs/http-api.md, "Live views"): one read of a
//! view for every page its streams ask for ([`Reader::pages`]), and one
//! read around a followed member for every rank style its streams ask for
//! ([`Reader::near`]), each a [`Sheet`] the streams take their own answer
//! from. A read locates the view, trims a window or computes a union once,
//! then reads all its runs in one round trip: `ZCARD` and a `ZRANGE` per
//! run in a pipeline for ordinal ranks, or one call of the read script
//! when competition or dense ranks are counted.

use super::answer::Source;
use super::error::ReadError;
use super::handle::Reader;
use super::locate::Located;
use super::query::{MAX_LIMIT, MAX_OFFSET, Query, check_bound};
use super::reply::reply;
use super::sheet::{DenseLimit, Run, Sheet, Styles, runs};

impl Reader {
    /// One read of `q`'s view for the pages `windows` (0-based start,
    /// count; each within [`MAX_LIMIT`] and [`MAX_OFFSET`]), numbering the
    /// ranks of `styles`. A past period whose key is gone comes back
    /// [`Sheet::archived`], its pages to be read one by one
    /// ([`Reader::top_ranked`]).
    pub(crate) async fn pages(
        &self,
        q: &Query,
        windows: &[(u64, u64)],
        styles: Styles,
    ) -> Result<Sheet, ReadError> {
        for &(start, count) in windows {
            check_bound("limit", count as usize, MAX_LIMIT).map_err(ReadError::BadRequest)?;
            check_bound("offset", start as usize, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        }
        let mut at = self.locate(q).await?;
        let mut sheet = loop {
            let members = self.prepare(&at).await?;
            let sheet = self.read_runs(q, &at, &runs(windows), styles).await?;
            let again = (members, sheet.head.total == 0);
            match self.read_again(&at, again).await? {
                Some(again) => at = again,
                None => break sheet,
            }
        };
        sheet.archived = sheet.head.total == 0 && at.past.is_some();
        Ok(sheet)
    }

    /// One read around `member` in `q`'s view: `radius` ranks on each
    /// side, or everyone from the top when at most `ahead` members are
    /// ahead of it, numbering the ranks of `styles`. `None` for a past
    /// period whose key is gone (read it from the archive); a member not
    /// in the view is [`ReadError::MemberNotFound`]. Two round trips (find
    /// the member, read around it), like `around`.
    pub(crate) async fn near(
        &self,
        q: &Query,
        member: &str,
        (radius, ahead): (u64, u64),
        styles: Styles,
    ) -> Result<Option<Sheet>, ReadError> {
        let mut at = self.locate(q).await?;
        let (exists, sheet) = loop {
            let members = self.prepare(&at).await?;
            let (exists, sheet) = self
                .sheet_near(q, &at, member, (radius, ahead), styles)
                .await?;
            let empty = !exists || sheet.as_ref().is_some_and(|s| s.head.total == 0);
            match self.read_again(&at, (members, empty)).await? {
                Some(again) => at = again,
                None => break (exists, sheet),
            }
        };
        if !exists && at.past.is_some() {
            return Ok(None);
        }
        let sheet = sheet.ok_or_else(|| ReadError::MemberNotFound {
            member: member.to_string(),
        })?;
        Ok(Some(sheet))
    }

    /// Whether `at`'s view exists, and the sheet around `member` if it is
    /// there ([`Reader::near`]).
    async fn sheet_near(
        &self,
        q: &Query,
        at: &Located<'_>,
        member: &str,
        (radius, ahead): (u64, u64),
        styles: Styles,
    ) -> Result<(bool, Option<Sheet>), ReadError> {
        let live = self.rank_of(at, member).await?;
        let Some((rank, _)) = live.hit else {
            return Ok((live.exists, None));
        };
        let start = if rank <= ahead {
            0
        } else {
            rank.saturating_sub(radius)
        };
        let sheet = self
            .read_runs(q, at, &[(start, rank + radius)], styles)
            .await?;
        Ok((live.exists, Some(sheet)))
    }

    /// Reads `runs` (0-based ranks, inclusive, in rank order) in one round
    /// trip.
    async fn read_runs(
        &self,
        q: &Query,
        at: &Located<'_>,
        runs: &[(u64, u64)],
        styles: Styles,
    ) -> Result<Sheet, ReadError> {
        let ((total, runs), dense) = if styles.counted() {
            let (total, runs, dense) = self.styled_runs(at, runs, styles).await?;
            ((total, runs), dense)
        } else {
            (self.ordinal_runs(at, runs).await?, DenseLimit::default())
        };
        Ok(Sheet {
            head: self.list(q, at, total, Vec::new(), Source::Live),
            runs,
            archived: false,
            dense,
        })
    }

    /// `ZCARD` and one `ZRANGE` per run, pipelined: the view's size and
    /// the runs with ordinal ranks.
    async fn ordinal_runs(
        &self,
        at: &Located<'_>,
        runs: &[(u64, u64)],
    ) -> Result<(u64, Vec<Run>), ReadError> {
        let mut cmds = vec![redis::cmd("ZCARD").arg(&at.key).clone()];
        cmds.extend(runs.iter().map(|&(a, b)| self.range_cmd(at, a, b)));
        let replies = self.store.pipeline(&cmds, self.store.epoch()).await?;
        let total: u64 = reply(&replies, 0)?;
        let mut out = Vec::with_capacity(runs.len());
        for (i, &(start, stop)) in runs.iter().enumerate() {
            let raw = reply(&replies, i + 1)?;
            out.push(Run {
                start,
                stop,
                entries: self.entries(at, start, raw),
                competition: Vec::new(),
                dense: Vec::new(),
            });
        }
        Ok((total, out))
    }
}
