//! Composite ordering (docs/score-encoding.md) as readers use it: the
//! encoding of a member's tuple of exact fields as one sorted-set entry,
//! defined in `layout.rs` and re-exported here, and the reader helpers
//! that turn any board's stored entries back into members (with their
//! fields on composite boards). The helpers take the compiled [`Board`],
//! which holds a [`Layout`]; keeping them apart from the encoding lets
//! `model` import the encoding without a cycle.

pub use super::layout::{FieldValues, Values};
pub(crate) use super::layout::{Layout, MAX_FIELDS, MAX_VALUE, in_range};
use super::model::Board;
use super::score::TieKey;

/// For readers: a stored entry of `board` as (member, fields). Members of
/// tie-break boards lose their tie key; composite members also give their
/// fields (`None` for other boards).
pub(crate) fn read_entry(board: &Board, stored: &str, score: f64) -> (String, Option<FieldValues>) {
    if let Some(c) = &board.composite
        && let Some((member, values)) = c.layout.decode(stored, score)
    {
        return (member.to_string(), Some(c.layout.named(&values)));
    }
    let member = board
        .tie_key
        .decode(stored)
        .map_or_else(|| stored.to_string(), |(m, _)| m.to_string());
    (member, None)
}

/// For readers: the helper hash holding what a member's stored form is
/// built from (`K:f` for composite boards, `K:t` for tie-break boards), or
/// `None` when the stored member is the member itself.
pub(crate) fn helper_of(board: &Board) -> Option<&'static str> {
    if board.composite.is_some() {
        Some("f")
    } else if board.tie_key == TieKey::None {
        None
    } else {
        Some("t")
    }
}

/// For readers: the stored member of `member` from its entry in the
/// [`helper_of`] hash (`None` if that entry is unreadable).
pub(crate) fn stored_member(board: &Board, member: &str, helper: &str) -> Option<String> {
    match &board.composite {
        Some(c) => c.layout.stored_from_state(member, helper),
        None => {
            let ts: i64 = helper.parse().ok()?;
            Some(board.tie_key.encode(member, ts))
        }
    }
}
