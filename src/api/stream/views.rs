//! What the live-view pollers read: a top-N list ([`TopView`]) and one
//! member with who passed it ([`MemberView`]), each turned into the JSON of
//! an event only when it changed.
//!
//! The member stream reads the member's neighbourhood (`around`, [`RADIUS`]
//! ranks on each side: one read per tick, whatever the board's size) and
//! compares it with the neighbourhood at its previous event:
//! `"overtaken_by"` names the members now ahead of it that were behind it
//! then, `"overtook"` the members now behind it that were ahead of it then.
//! The limit of that: a member that came from further than [`RADIUS`]
//! ranks away (not in the previous neighbourhood) is not named, because
//! whether it was ahead or behind is unknown; the member's rank still
//! shows the change.

use serde::Serialize;

use super::hub::{Change, Poll};
use crate::api::error::ApiError;
use crate::reader::{self, Entry, List, MemberEntry, RankStyle, ReadError, Reader, Source};

/// Ranks read on each side of a streamed member.
pub(crate) const RADIUS: usize = 10;

/// The top-N list of one query, as the `top` endpoint answers it.
pub(crate) struct TopView {
    pub(crate) reader: Reader,
    pub(crate) query: reader::Query,
    pub(crate) offset: usize,
    pub(crate) limit: usize,
    pub(crate) rank: RankStyle,
    pub(crate) last: Option<String>,
}

impl Poll for TopView {
    const KIND: &'static str = "top";

    async fn poll(&mut self) -> Result<Option<Change>, ApiError> {
        let list = self
            .reader
            .top_ranked(&self.query, self.offset, self.limit, self.rank)
            .await?;
        let data = encode(&list)?;
        if self.last.as_deref() == Some(data.as_str()) {
            return Ok(None);
        }
        self.last = Some(data.clone());
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
    pub(crate) rank: RankStyle,
    /// The neighbourhood at the last event; `None` before the first and
    /// while the member is off the board.
    pub(crate) last: Option<Seen>,
}

/// The member's place at an event.
pub(crate) struct Seen {
    rank: u64,
    score: f64,
    fields: Option<crate::board::composite::FieldValues>,
    ahead: Vec<String>,
    behind: Vec<String>,
}

/// The JSON of a member event: the `members/{member}` entry plus who
/// passed whom.
#[derive(Serialize)]
struct MemberEvent<'a> {
    #[serde(flatten)]
    entry: &'a MemberEntry,
    period: Option<&'a str>,
    overtaken_by: Vec<String>,
    overtook: Vec<String>,
}

/// The JSON of an `absent` event: the member left the board (a window
/// slid past it, or a new period began).
#[derive(Serialize)]
struct Absent<'a> {
    member: &'a str,
}

impl Poll for MemberView {
    const KIND: &'static str = "member";

    async fn poll(&mut self) -> Result<Option<Change>, ApiError> {
        let read = self
            .reader
            .around_ranked(&self.query, &self.member, RADIUS, self.rank)
            .await;
        let list = match read {
            Ok(list) => list,
            // Gone after having been there: say so once. Not there at the
            // first read: the 404 of the member endpoint.
            Err(ReadError::MemberNotFound { .. }) if self.last.is_some() => {
                self.last = None;
                let data = encode(&Absent {
                    member: &self.member,
                })?;
                return Ok(Some(Change {
                    event: Some("absent"),
                    data,
                    last: false,
                }));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(now) = seen(&list, &self.member) else {
            return Err(ReadError::MemberNotFound {
                member: self.member.clone(),
            }
            .into());
        };
        if let Some(last) = &self.last
            && (last.rank, last.score, &last.fields) == (now.rank, now.score, &now.fields)
        {
            return Ok(None);
        }
        let (overtaken_by, overtook) = match &self.last {
            Some(last) => (
                crossed(&now.ahead, &last.behind),
                crossed(&now.behind, &last.ahead),
            ),
            None => (Vec::new(), Vec::new()),
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
            overtaken_by,
            overtook,
        })?;
        self.last = Some(now);
        Ok(Some(Change {
            event: None,
            data,
            last: list.source == Source::Archive,
        }))
    }
}

/// The member's entry in its neighbourhood, and who is on either side.
fn seen(list: &List, member: &str) -> Option<Seen> {
    let at = list.entries.iter().position(|e| e.member == member)?;
    let names = |es: &[Entry]| es.iter().map(|e| e.member.clone()).collect();
    let e = &list.entries[at];
    Some(Seen {
        rank: e.rank,
        score: e.score,
        fields: e.fields.clone(),
        ahead: names(&list.entries[..at]),
        behind: names(&list.entries[at + 1..]),
    })
}

/// The members of `now` (in their order) that are in `then`.
fn crossed(now: &[String], then: &[String]) -> Vec<String> {
    now.iter().filter(|m| then.contains(m)).cloned().collect()
}

fn encode<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| {
        tracing::error!(error = %e, "A live view could not be encoded as JSON.");
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("the view could not be encoded as JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(members: &[&str]) -> List {
        List {
            board: "b".into(),
            view: "all".into(),
            period: None,
            scope: None,
            scopes: None,
            total: members.len() as u64,
            entries: members
                .iter()
                .enumerate()
                .map(|(i, m)| Entry {
                    rank: i as u64 + 1,
                    member: m.to_string(),
                    score: (100 - i) as f64,
                    fields: None,
                })
                .collect(),
            source: Source::Live,
        }
    }

    #[test]
    fn who_passed_whom_between_two_neighbourhoods() {
        let then = seen(&list(&["a", "b", "me", "c", "d"]), "me").unwrap();
        // c and d passed me; I passed b.
        let now = seen(&list(&["a", "c", "d", "me", "b"]), "me").unwrap();
        assert_eq!(crossed(&now.ahead, &then.behind), vec!["c", "d"]);
        assert_eq!(crossed(&now.behind, &then.ahead), vec!["b"]);
        // A newcomer ahead (e, not seen before) is not named.
        let now = seen(&list(&["e", "a", "b", "me"]), "me").unwrap();
        assert!(crossed(&now.ahead, &then.behind).is_empty());
        assert!(seen(&list(&["a"]), "me").is_none());
    }
}
