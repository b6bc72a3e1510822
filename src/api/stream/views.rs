//! What the live-view pollers read: a page of a board view
//! ([`TopView`], each stream's [`Page`] taken from one shared read) and one
//! member with who passed it ([`MemberView`], each stream's rank style
//! taken from one shared read), each turned into the JSON of an event only
//! when it changed for that stream.
//!
//! One read of a top view covers at most [`MAX_SHARED`] ranks (`[http]
//! max_read_entries` if lower), its pages' runs together: the pages
//! already sent are always served, a new one only if it still fits, else
//! its stream is refused (503, or 400 naming `limit` when the page alone
//! is too long), so what streams ask for cannot make a read grow.
//!
//! The member stream reads the member's neighbourhood ([`RADIUS`] ranks on
//! each side, one read per tick whatever the board's size), or everyone
//! from the top when at most [`KNOWN_AHEAD`] members are ahead of it, and
//! compares it with what it read at its previous event ([`passes`]):
//!
//! - `"overtaken_by"` names the members now ahead of it that were not
//!   ahead then. When its previous read started at the top (it knew every
//!   member ahead of it), that is exact, newcomers to the board included.
//!   Deeper down only members it saw behind it in its neighbourhood can be
//!   named: one that came from further away, or from nowhere, is unknown.
//! - `"overtaken_by_count"` is how many passed it: the number of names when
//!   both reads started at the top; deeper down, what the ranks show, its
//!   rank change plus the members it passed, at least the number of names.
//!   It counts every member that passed it unless some member ahead of it
//!   left the board meanwhile or it passed members it did not see.
//! - `"overtook"` names the members now behind it (in its neighbourhood)
//!   that were ahead of it then.

use std::collections::HashSet;

use axum::http::StatusCode;
use serde::Serialize;

use super::hub::{Change, Outcome, Poll, Sub};
use crate::api::error::ApiError;
use crate::reader::{
    self, BadParam, Entry, List, MAX_SHARED, MemberEntry, Near, RankStyle, ReadError, Reader,
    Sheet, Source, Styles,
};

/// Ranks read on each side of a streamed member.
pub(crate) const RADIUS: usize = 10;

/// A streamed member with at most this many members ahead of it is read
/// with all of them, so it knows exactly who passed it.
pub(crate) const KNOWN_AHEAD: usize = 100;

/// One view's pages, as the `top` endpoint answers them.
pub(crate) struct TopView {
    pub(crate) reader: Reader,
    pub(crate) query: reader::Query,
}

/// What one top stream asks of its view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Page {
    pub(crate) offset: usize,
    pub(crate) limit: usize,
    pub(crate) rank: RankStyle,
    /// The scopes of a union as this stream listed them (its `"scopes"`).
    pub(crate) scopes: Option<Vec<String>>,
}

impl Poll for TopView {
    const KIND: &'static str = "top";
    type Lens = Page;
    /// The JSON last sent.
    type Memory = Option<String>;

    async fn poll(
        &mut self,
        subs: &mut [Sub<Page, Option<String>>],
    ) -> Result<Vec<Outcome>, ApiError> {
        let max = MAX_SHARED.min(self.reader.max_read_entries());
        let served = served(subs, max);
        let windows: Vec<(u64, u64)> = subs
            .iter()
            .zip(&served)
            .filter(|(_, served)| **served)
            .map(|(s, _)| window(&s.lens))
            .collect();
        let ranks = subs.iter().zip(&served).filter(|(_, served)| **served);
        let styles = Styles::of(ranks.map(|(s, _)| s.lens.rank));
        let sheet = self.reader.pages(&self.query, &windows, styles).await?;
        let mut out = Vec::with_capacity(subs.len());
        for (sub, served) in subs.iter_mut().zip(served) {
            out.push(match served {
                true => self.page(&sheet, sub).await,
                false => Err(too_wide(&sub.lens, max)),
            });
        }
        Ok(out)
    }
}

/// A page as 0-based start and count.
fn window(page: &Page) -> (u64, u64) {
    (page.offset as u64, page.limit as u64)
}

/// Which of `subs` one read of at most `max` ranks serves: every page
/// already sent (they fitted when they came), then new ones nearest the
/// top first, while they fit.
fn served(subs: &[Sub<Page, Option<String>>], max: u64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..subs.len()).collect();
    order.sort_by_key(|&i| {
        let Page { offset, limit, .. } = subs[i].lens;
        (
            subs[i].memory.is_none(),
            offset.saturating_add(limit),
            offset,
        )
    });
    let windows: Vec<(u64, u64)> = order.iter().map(|&i| window(&subs[i].lens)).collect();
    let fit = reader::fitting(&windows, max);
    let mut served = vec![false; subs.len()];
    for &i in &order[..fit] {
        served[i] = true;
    }
    served
}

/// The refusal of a page that a read of its view covering at most `max`
/// ranks cannot serve: a 400 naming `limit` when the page alone is too
/// long, else a 503 (the view's other streams take the room).
fn too_wide(page: &Page, max: u64) -> ApiError {
    if reader::fitting(&[window(page)], max) == 0 {
        return BadParam::new(
            "limit",
            format!(
                "limit={} is more ranks than one read of a live view covers here ({max}, [http] max_read_entries): ask for a shorter page",
                page.limit
            ),
        )
        .into();
    }
    tracing::warn!(
        max_ranks = max,
        "Refused a stream: its view's shared read would cover too many ranks."
    );
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the live streams of this view already read close to {max} ranks per tick between them, the most one read covers ({MAX_SHARED}, or [http] max_read_entries if lower); follow a page nearer the others or try again later"
        ),
    )
}

impl TopView {
    /// One stream's page of the shared read (or, archived, its own read).
    async fn page(&self, sheet: &Sheet, sub: &mut Sub<Page, Option<String>>) -> Outcome {
        let Page {
            offset,
            limit,
            rank,
            ..
        } = sub.lens;
        let mut list = if sheet.archived() {
            let q = &self.query;
            self.reader.top_ranked(q, offset, limit, rank).await?
        } else {
            sheet.page(offset as u64, limit as u64, rank)?
        };
        list.scopes.clone_from(&sub.lens.scopes);
        let data = encode(&list)?;
        if sub.memory.as_deref() == Some(data.as_str()) {
            return Ok(None);
        }
        sub.memory = Some(data.clone());
        Ok(Some(Change {
            event: None,
            data,
            // An archived period is closed: it is sent once.
            last: list.source == Source::Archive,
        }))
    }
}

/// One member's entry and who passed it.
pub(crate) struct MemberView {
    pub(crate) reader: Reader,
    pub(crate) query: reader::Query,
    pub(crate) member: String,
}

/// What one member stream asks of its view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Follow {
    pub(crate) rank: RankStyle,
}

/// What a member stream's poller keeps between events.
#[derive(Default)]
pub(crate) struct Followed {
    /// The member's place at the last event; `None` before the first and
    /// while the member is off the board.
    seen: Option<Seen>,
    /// Whether an event was sent (so a member not found is `absent`, not
    /// the 404 of a first read).
    started: bool,
}

/// The member's place at an event.
pub(crate) struct Seen {
    /// Members ahead of it (ordinal), whatever the style shown.
    ordinal: u64,
    rank: u64,
    score: f64,
    fields: Option<crate::board::composite::FieldValues>,
    ahead: Vec<String>,
    behind: Vec<String>,
    /// `ahead` names every member ahead of it.
    complete: bool,
}

/// The JSON of a member event: the `members/{member}` entry plus who
/// passed whom.
#[derive(Serialize)]
struct MemberEvent<'a> {
    #[serde(flatten)]
    entry: &'a MemberEntry,
    period: Option<&'a str>,
    overtaken_by: Vec<String>,
    overtaken_by_count: u64,
    overtook: Vec<String>,
}

/// The JSON of an `absent` event: the member left the board (a window
/// slid past it, or a new period began).
#[derive(Serialize)]
struct Absent<'a> {
    member: &'a str,
}

/// Who passed whom between two places of a member.
#[derive(Debug, Default, PartialEq)]
struct Passes {
    overtaken_by: Vec<String>,
    overtaken_by_count: u64,
    overtook: Vec<String>,
}

impl Poll for MemberView {
    const KIND: &'static str = "member";
    type Lens = Follow;
    type Memory = Followed;

    async fn poll(&mut self, subs: &mut [Sub<Follow, Followed>]) -> Result<Vec<Outcome>, ApiError> {
        let styles = Styles::of(subs.iter().map(|s| s.lens.rank));
        let around = (RADIUS as u64, KNOWN_AHEAD as u64);
        let read = self
            .reader
            .near(&self.query, &self.member, around, styles)
            .await;
        let sheet = match read {
            Ok(sheet) => sheet,
            Err(ReadError::MemberNotFound { .. }) => {
                return Ok(subs.iter_mut().map(|s| self.absent(s)).collect());
            }
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::with_capacity(subs.len());
        for sub in subs.iter_mut() {
            out.push(match &sheet {
                Some(sheet) => self.live(sheet, sub),
                None => self.archived(sub).await,
            });
        }
        Ok(out)
    }
}

impl MemberView {
    /// The member is not on the board: gone after having been there (say
    /// so once), or not there at the first read (the 404 of the member
    /// endpoint).
    fn absent(&self, sub: &mut Sub<Follow, Followed>) -> Outcome {
        if sub.memory.seen.take().is_none() {
            if sub.memory.started {
                return Ok(None);
            }
            let member = self.member.clone();
            return Err(ReadError::MemberNotFound { member }.into());
        }
        let data = encode(&Absent {
            member: &self.member,
        })?;
        Ok(Some(Change {
            event: Some("absent"),
            data,
            last: false,
        }))
    }

    fn live(&self, sheet: &Sheet, sub: &mut Sub<Follow, Followed>) -> Outcome {
        // Not where it was found a moment before: read again next tick.
        let Some(near) = sheet.near(&self.member, sub.lens.rank)? else {
            return Ok(None);
        };
        self.event(sub, Seen::from(near), sheet.head())
    }

    /// A past period only the archive has: one read per style, once.
    async fn archived(&self, sub: &mut Sub<Follow, Followed>) -> Outcome {
        let (q, member) = (&self.query, &self.member);
        let list = self
            .reader
            .around_ranked(q, member, RADIUS, sub.lens.rank)
            .await?;
        let Some(now) = seen_in(&list, member) else {
            let member = member.clone();
            return Err(ReadError::MemberNotFound { member }.into());
        };
        self.event(sub, now, &list)
    }

    /// The event for the member's place `now`, if it changed.
    fn event(&self, sub: &mut Sub<Follow, Followed>, now: Seen, list: &List) -> Outcome {
        if let Some(last) = &sub.memory.seen
            && (last.rank, last.score, &last.fields) == (now.rank, now.score, &now.fields)
        {
            return Ok(None);
        }
        let passes = match &sub.memory.seen {
            Some(last) => passes(last, &now),
            None => Passes::default(),
        };
        let entry = MemberEntry {
            rank: now.rank,
            member: self.member.clone(),
            score: now.score,
            fields: now.fields.clone(),
            source: list.source,
        };
        let data = encode(&MemberEvent {
            entry: &entry,
            period: list.period.as_deref(),
            overtaken_by: passes.overtaken_by,
            overtaken_by_count: passes.overtaken_by_count,
            overtook: passes.overtook,
        })?;
        sub.memory = Followed {
            seen: Some(now),
            started: true,
        };
        Ok(Some(Change {
            event: None,
            data,
            last: list.source == Source::Archive,
        }))
    }
}

impl From<Near> for Seen {
    fn from(n: Near) -> Seen {
        Seen {
            ordinal: n.ordinal,
            rank: n.entry.rank,
            score: n.entry.score,
            fields: n.entry.fields,
            ahead: n.ahead,
            behind: n.behind,
            complete: n.complete,
        }
    }
}

/// The member's place in a list read around it (the archive's): its
/// entry, who is on either side.
fn seen_in(list: &List, member: &str) -> Option<Seen> {
    let at = list.entries.iter().position(|e| e.member == member)?;
    let names = |es: &[Entry]| es.iter().map(|e| e.member.clone()).collect();
    let e = &list.entries[at];
    Some(Seen {
        ordinal: e.rank.saturating_sub(1),
        rank: e.rank,
        score: e.score,
        fields: e.fields.clone(),
        ahead: names(&list.entries[..at]),
        behind: names(&list.entries[at + 1..]),
        complete: list.entries.first().is_some_and(|f| f.rank == 1),
    })
}

/// Who passed whom between the member's place `then` and `now` (see the
/// module's header).
fn passes(then: &Seen, now: &Seen) -> Passes {
    let overtaken_by = if then.complete {
        missing_from(&now.ahead, &then.ahead)
    } else {
        crossed(&now.ahead, &then.behind)
    };
    let overtook = crossed(&now.behind, &then.ahead);
    let named = overtaken_by.len() as u64;
    let overtaken_by_count = if then.complete && now.complete {
        named
    } else {
        // Members now ahead that were not: those ahead now, less those
        // ahead then that still are (at most those ahead then, less the
        // ones seen behind it now).
        let shown = (now.ordinal + overtook.len() as u64).saturating_sub(then.ordinal);
        shown.max(named)
    };
    Passes {
        overtaken_by,
        overtaken_by_count,
        overtook,
    }
}

/// The members of `now` (in their order) that are in `then`.
fn crossed(now: &[String], then: &[String]) -> Vec<String> {
    let then: HashSet<&str> = then.iter().map(String::as_str).collect();
    now.iter()
        .filter(|m| then.contains(m.as_str()))
        .cloned()
        .collect()
}

/// The members of `now` (in their order) that are not in `then`.
fn missing_from(now: &[String], then: &[String]) -> Vec<String> {
    let then: HashSet<&str> = then.iter().map(String::as_str).collect();
    now.iter()
        .filter(|m| !then.contains(m.as_str()))
        .cloned()
        .collect()
}

fn encode<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| {
        tracing::error!(error = %e, "A live view could not be encoded as JSON.");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the view could not be encoded as JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The place of `me` in `members` (in rank order) read from 0-based
    /// rank `start`.
    fn place(members: &[&str], start: u64) -> Seen {
        let at = members.iter().position(|m| *m == "me").unwrap();
        let names = |ms: &[&str]| ms.iter().map(|m| m.to_string()).collect();
        Seen {
            ordinal: start + at as u64,
            rank: start + at as u64 + 1,
            score: 1.0,
            fields: None,
            ahead: names(&members[..at]),
            behind: names(&members[at + 1..]),
            complete: start == 0,
        }
    }

    fn passed(by: &[&str], count: u64, overtook: &[&str]) -> Passes {
        let names = |ms: &[&str]| ms.iter().map(|m| m.to_string()).collect();
        Passes {
            overtaken_by: names(by),
            overtaken_by_count: count,
            overtook: names(overtook),
        }
    }

    #[test]
    fn near_the_top_everyone_who_passed_is_named() {
        let then = place(&["a", "b", "me", "c", "d"], 0);
        // c and d passed me; I passed b.
        let now = place(&["a", "c", "d", "me", "b"], 0);
        assert_eq!(passes(&then, &now), passed(&["c", "d"], 2, &["b"]));
        // A newcomer (e, never seen) is named too.
        let now = place(&["e", "a", "b", "me"], 0);
        assert_eq!(passes(&then, &now), passed(&["e"], 1, &[]));
    }

    #[test]
    fn deeper_down_who_passed_is_named_when_seen_and_counted_from_the_ranks() {
        // Read from rank 51: 50 members ahead of the window.
        let then = place(&["a", "b", "me", "c", "d"], 50);
        // c passed me, and so did someone from elsewhere (I am 2 lower).
        let now = place(&["b", "c", "me", "d"], 52);
        assert_eq!(passes(&then, &now), passed(&["c"], 2, &[]));
        // I passed a and b: nobody passed me.
        let now = place(&["x", "me", "b", "a", "c"], 49);
        assert_eq!(passes(&then, &now), passed(&[], 0, &["b", "a"]));
        // From the top to deeper down: those now ahead that were not.
        let top = place(&["a", "me", "b"], 0);
        let fell = place(&["b", "x", "me"], 60);
        assert_eq!(passes(&top, &fell), passed(&["b", "x"], 61, &[]));
    }
}
