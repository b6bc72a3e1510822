//! What a read answers: ranked entries ([`Entry`], one member's
//! [`MemberEntry`]), pages of them ([`List`], [`MemberList`]) and where an
//! answer comes from ([`Source`]: Redis or the archive), all serialized as
//! the HTTP API's JSON (docs/http-api.md); whole scores are written as JSON
//! integers.

use serde::Serialize;

use crate::archive::read::ArchivedRow;
use crate::board::composite::FieldValues;

/// One ranked member.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    /// 1-based, in the rank style the read asked for (`rank=`).
    pub rank: u64,
    /// The member as given in the events (tie-break or field encoding removed).
    pub member: String,
    /// The member's value in the view; on a composite board its first field
    /// (`null` in JSON when it has none).
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
    /// `"live"`: read from Redis, while the period's keys exist.
    Live,
    /// `"archive"`: read from PostgreSQL, once the period's keys are gone.
    Archive,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::Archive => "archive",
        }
    }
}

/// A page of a board.
#[derive(Debug, Clone, Serialize)]
pub struct List {
    pub(crate) board: String,
    pub(crate) view: String,
    pub(crate) period: Option<String>,
    pub(crate) scope: Option<String>,
    /// The scopes of a union of scopes (`["*"]` for all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) scopes: Option<Vec<String>>,
    /// Members on the board (the view, the period, the scope), not only on
    /// this page.
    pub total: u64,
    /// The page, in rank order.
    pub entries: Vec<Entry>,
    pub(crate) source: Source,
}

/// The entries of a list of members (a friends board), in rank order with
/// their global ranks, and the ids not on the board, in request order.
#[derive(Debug, Clone, Serialize)]
pub struct MemberList {
    pub(crate) board: String,
    pub(crate) view: String,
    pub(crate) period: Option<String>,
    pub(crate) scope: Option<String>,
    /// The scopes of a union of scopes (`["*"]` for all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) scopes: Option<Vec<String>>,
    pub(crate) source: Source,
    pub(crate) total: u64,
    /// The asked-for members on the board, in rank order, with their ranks
    /// on the whole board.
    pub entries: Vec<Entry>,
    /// The asked-for ids not on the board, in request order.
    pub missing: Vec<String>,
}

/// One member's entry, and where it was read.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberEntry {
    /// 1-based, in the rank style the read asked for (`rank=`).
    pub rank: u64,
    pub(crate) member: String,
    /// The member's value in the view; on a composite board its first field.
    #[serde(serialize_with = "score_json")]
    pub score: f64,
    /// A composite board's fields (docs/score-encoding.md); `None` on other boards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<FieldValues>,
    pub(crate) source: Source,
}

impl MemberEntry {
    pub(super) fn new(e: Entry, source: Source) -> MemberEntry {
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
pub(super) fn score_json<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() <= crate::board::score::MAX_EXACT {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::error::ReadError;

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
}
