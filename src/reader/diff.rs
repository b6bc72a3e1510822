//! `GET /v1/boards/{shadow}/{view}/diff` (docs/rebuilds.md): the members
//! whose rank or value in a shadow board's view differs from the board it
//! shadows, in the same view, period and scope. Both views are read whole,
//! in pages of [`MAX_LIMIT`], with the same rank style, each from its own
//! data (also after a promotion: `serving.rs`); the read is
//! refused before it starts if the two together hold more entries than
//! one read may walk (`[http] max_read_entries`). The differing members
//! are listed in the shadow's rank order, then those only on the live
//! board in its rank order, and paged with `offset` and `limit`.

use std::collections::HashMap;

use serde::Serialize;

use super::answer::Entry;
use super::error::ReadError;
use super::handle::Reader;
use super::query::{MAX_LIMIT, MAX_OFFSET, Query, check_bound};
use super::ranks::RankStyle;
use super::reads::Serve;

/// One member that differs; `null` on the side it is missing from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    pub(crate) member: String,
    /// Its place and value on the shadow board.
    pub(crate) shadow: Option<Side>,
    /// Its place and value on the board the shadow would replace.
    pub(crate) live: Option<Side>,
}

/// A member's place on one of the two boards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    pub(crate) rank: u64,
    #[serde(serialize_with = "super::answer::score_json")]
    pub(crate) score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fields: Option<crate::board::composite::FieldValues>,
}

impl From<Entry> for Side {
    fn from(e: Entry) -> Side {
        Side {
            rank: e.rank,
            score: e.score,
            fields: e.fields,
        }
    }
}

/// The answer of a diff.
#[derive(Debug, Clone, Serialize)]
pub struct DiffList {
    pub(crate) board: String,
    /// The board it shadows.
    pub(crate) of: String,
    pub(crate) view: String,
    /// Members on each board.
    pub(crate) shadow_total: u64,
    pub(crate) live_total: u64,
    /// Members that differ, not only on this page.
    pub(crate) total: u64,
    pub(crate) entries: Vec<Difference>,
}

/// The members of `shadow` and `live` (each in rank order) that differ, in
/// the order the module header gives.
pub(crate) fn differences(shadow: Vec<Entry>, live: Vec<Entry>) -> Vec<Difference> {
    let mut live_by: HashMap<String, Entry> =
        live.iter().map(|e| (e.member.clone(), e.clone())).collect();
    let mut out = Vec::new();
    for s in shadow {
        let l = live_by.remove(&s.member);
        if l.as_ref() != Some(&s) {
            out.push(Difference {
                member: s.member.clone(),
                shadow: Some(s.into()),
                live: l.map(Side::from),
            });
        }
    }
    for l in live {
        if live_by.remove(&l.member).is_some() {
            out.push(Difference {
                member: l.member.clone(),
                shadow: None,
                live: Some(l.into()),
            });
        }
    }
    out
}

impl Reader {
    /// The differences between shadow board `q.board` and the board it
    /// shadows, `offset`/`limit` of them.
    pub async fn diff(
        &self,
        q: &Query,
        offset: usize,
        limit: usize,
        style: RankStyle,
    ) -> Result<DiffList, ReadError> {
        check_bound("limit", limit, MAX_LIMIT).map_err(ReadError::BadRequest)?;
        check_bound("offset", offset, MAX_OFFSET).map_err(ReadError::BadRequest)?;
        let board = self
            .boards
            .get(&q.board)
            .ok_or_else(|| ReadError::UnknownBoard(q.board.clone()))?;
        let Some(shadow) = &board.shadow else {
            return Err(ReadError::bad(
                "board",
                format!(
                    "board {:?} is not a shadow board: a diff compares a shadow (`shadow_of`) with the board it would replace",
                    q.board
                ),
            ));
        };
        let live_q = Query {
            board: shadow.of.clone(),
            ..q.clone()
        };
        let sizes = (
            self.page(q, 0, 0, style, Serve::Own).await?.total,
            self.page(&live_q, 0, 0, style, Serve::Own).await?.total,
        );
        if sizes.0 + sizes.1 > self.max_read_entries {
            return Err(ReadError::bad(
                "view",
                format!(
                    "this diff would read {} entries (both boards together), more than the {} one read may ([http] max_read_entries): compare a scope or a period, or raise the setting",
                    sizes.0 + sizes.1,
                    self.max_read_entries
                ),
            ));
        }
        let shadow_entries = self.whole(q, sizes.0, style).await?;
        let live_entries = self.whole(&live_q, sizes.1, style).await?;
        let all = differences(shadow_entries, live_entries);
        Ok(DiffList {
            board: q.board.clone(),
            of: shadow.of.clone(),
            view: q.view.clone(),
            shadow_total: sizes.0,
            live_total: sizes.1,
            total: all.len() as u64,
            entries: all.into_iter().skip(offset).take(limit).collect(),
        })
    }

    /// Every entry of a view of `total` members, in pages.
    async fn whole(
        &self,
        q: &Query,
        total: u64,
        style: RankStyle,
    ) -> Result<Vec<Entry>, ReadError> {
        let mut entries = Vec::with_capacity(total as usize);
        while (entries.len() as u64) < total {
            let page = self
                .page(q, entries.len(), MAX_LIMIT, style, Serve::Own)
                .await?
                .entries;
            if page.is_empty() {
                break;
            }
            entries.extend(page);
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(rank: u64, member: &str, score: f64) -> Entry {
        Entry {
            rank,
            member: member.into(),
            score,
            fields: None,
        }
    }

    #[test]
    fn members_that_moved_changed_or_are_on_one_side_only_are_listed_in_order() {
        let shadow = vec![
            e(1, "b", 9.0),
            e(2, "a", 8.0),
            e(3, "c", 5.0),
            e(4, "n", 1.0),
        ];
        let live = vec![
            e(1, "a", 8.0),
            e(2, "b", 7.0),
            e(3, "c", 5.0),
            e(4, "z", 2.0),
        ];
        let d = differences(shadow, live);
        type Place = Option<(u64, f64)>;
        let got: Vec<(&str, Place, Place)> = d
            .iter()
            .map(|d| {
                (
                    d.member.as_str(),
                    d.shadow.as_ref().map(|s| (s.rank, s.score)),
                    d.live.as_ref().map(|s| (s.rank, s.score)),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("b", Some((1, 9.0)), Some((2, 7.0))),
                ("a", Some((2, 8.0)), Some((1, 8.0))),
                ("n", Some((4, 1.0)), None),
                ("z", None, Some((4, 2.0))),
            ],
            "c is the same on both"
        );
        assert!(differences(vec![e(1, "a", 1.0)], vec![e(1, "a", 1.0)]).is_empty());
    }
}
