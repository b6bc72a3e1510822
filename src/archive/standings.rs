//! The final standings of a closed period, read from Redis in rank order
//! one chunk at a time (so the archiver's memory is bounded by a chunk,
//! whatever the board's size): `ZREVRANGE` by rank index for `desc` boards,
//! `ZRANGE` for `asc` ones, tie-break members decoded back to the member
//! with [`TieKey`], composite members (docs/score-encoding.md) back to the member and
//! every field with [`Layout::decode`]. Index paging is consistent because the key is frozen
//! (its `K:closed` marker is set before the first read); as a last check
//! the stream fails if the rows read do not add up to the count taken at
//! close, which aborts the copy's transaction.
//!
//! Members hidden by an admin (docs/moderation.md) sit in the view's twin
//! `K~h`; they are archived too, marked hidden and ranked where they
//! would be in `K`. A twin holds the hidden members only, so it is read
//! whole before the first chunk and merged into the chunks in the sorted
//! set's own order (score, then the stored member's bytes).

use std::collections::VecDeque;

use futures::{Stream, StreamExt};

use crate::board::Order;
use crate::board::composite::Layout;
use crate::board::score::TieKey;
use crate::sink::store::Store;

use super::ArchiveError;
use super::copy::Row;

/// What to read.
#[derive(Debug, Clone)]
pub(crate) struct Frozen {
    pub(crate) view_key: String,
    /// `K~h`: the members hidden from the view.
    pub(crate) twin_key: String,
    pub(crate) order: Order,
    pub(crate) tie_key: TieKey,
    /// The encoding of a composite board's members; `None` for other boards.
    pub(crate) layout: Option<Layout>,
    /// Members counted when the period was closed, in `K` and its twin.
    pub(crate) members: u64,
    /// Members per chunk (≥ 1).
    pub(crate) chunk: usize,
}

/// Turns stored members and scores into standings, in the order read:
/// with `layout` (a composite board) each row gets every field, else the
/// member is decoded with `tie_key`. A stored member the board's encoding
/// cannot read fails the copy rather than archiving a wrong name.
pub(crate) fn decode(
    tie_key: TieKey,
    layout: Option<&Layout>,
    rows: Vec<(String, f64, bool)>,
) -> Result<Vec<Row>, ArchiveError> {
    rows.into_iter()
        .map(|(stored, score, hidden)| {
            let decoded = match layout {
                Some(l) => l.decode(&stored, score).map(|(member, values)| Row {
                    member: member.to_string(),
                    score,
                    fields: Some(values[..l.fields.len()].to_vec()),
                    hidden,
                }),
                None => tie_key.decode(&stored).map(|(member, _)| Row {
                    member: member.to_string(),
                    score,
                    fields: None,
                    hidden,
                }),
            };
            decoded.ok_or_else(|| {
                ArchiveError::Source(format!(
                    "member {stored:?} is not in the board's encoding (tie-break key, field codes)"
                ))
            })
        })
        .collect()
}

struct Cursor {
    store: Store,
    frozen: Frozen,
    next: u64,
    done: bool,
    /// The twin's members still to merge, best first; `None` before the
    /// first chunk.
    twin: Option<VecDeque<(String, f64)>>,
    /// Members the twin had.
    twin_len: u64,
}

/// Whether `a` comes before `b` in a sorted set read in `order`: the
/// better score first, equal scores by the stored member's bytes
/// (`ZRANGE` ascending, `ZREVRANGE` descending).
fn precedes(order: Order, a: &(String, f64), b: &(String, f64)) -> bool {
    match order {
        Order::Desc => a.1 > b.1 || (a.1 == b.1 && a.0.as_bytes() > b.0.as_bytes()),
        Order::Asc => a.1 < b.1 || (a.1 == b.1 && a.0.as_bytes() < b.0.as_bytes()),
    }
}

/// The chunk `rows` of `K` with the twin's members that precede each row
/// (and, for the `last` chunk, every one left) merged in, hidden ones
/// flagged.
fn merge(
    order: Order,
    rows: Vec<(String, f64)>,
    twin: &mut VecDeque<(String, f64)>,
    last: bool,
) -> Vec<(String, f64, bool)> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        while let Some(t) = twin.front()
            && precedes(order, t, &row)
        {
            if let Some((m, s)) = twin.pop_front() {
                out.push((m, s, true));
            }
        }
        out.push((row.0, row.1, false));
    }
    if last {
        out.extend(twin.drain(..).map(|(m, s)| (m, s, true)));
    }
    out
}

/// The standings in chunks of `frozen.chunk`, best first.
pub(crate) fn chunks(
    store: Store,
    frozen: Frozen,
) -> impl Stream<Item = Result<Vec<Row>, ArchiveError>> {
    let cursor = Cursor {
        store,
        frozen,
        next: 0,
        done: false,
        twin: None,
        twin_len: 0,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        if c.done {
            return None;
        }
        let read = read_chunk(&mut c).await;
        if read.is_err() {
            c.done = true;
        }
        Some((read, c))
    })
    // The read past the last full chunk comes back empty: no chunk to copy.
    .filter(|r| std::future::ready(!matches!(r, Ok(rows) if rows.is_empty())))
}

async fn read_chunk(c: &mut Cursor) -> Result<Vec<Row>, ArchiveError> {
    let f = &c.frozen;
    let chunk = f.chunk.max(1) as u64;
    let command = match f.order {
        Order::Desc => "ZREVRANGE",
        Order::Asc => "ZRANGE",
    };
    if c.twin.is_none() {
        let twin: Vec<(String, f64)> = c
            .store
            .query(
                redis::cmd(command)
                    .arg(&f.twin_key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await
            .map_err(ArchiveError::redis)?;
        c.twin_len = twin.len() as u64;
        c.twin = Some(twin.into());
    }
    let rows: Vec<(String, f64)> = c
        .store
        .query(
            redis::cmd(command)
                .arg(&f.view_key)
                .arg(c.next)
                .arg(c.next + chunk - 1)
                .arg("WITHSCORES"),
        )
        .await
        .map_err(ArchiveError::redis)?;
    c.next += rows.len() as u64;
    let last = (rows.len() as u64) < chunk;
    if last {
        c.done = true;
        if c.next + c.twin_len != f.members {
            return Err(ArchiveError::Source(format!(
                "{} changed while it was archived: {} members at close, {} read",
                f.view_key,
                f.members,
                c.next + c.twin_len
            )));
        }
    }
    let twin = c.twin.get_or_insert_with(VecDeque::new);
    decode(
        f.tie_key,
        f.layout.as_ref(),
        merge(f.order, rows, twin, last),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::layout::FieldOrder;
    use crate::board::model::Aggregate;
    use crate::board::ranking::TieBreak;

    fn row(member: &str, score: f64, fields: Option<Vec<Option<i64>>>) -> Row {
        Row {
            member: member.into(),
            score,
            fields,
            hidden: false,
        }
    }

    #[test]
    fn tie_break_members_are_decoded() {
        let k = TieKey::for_board(TieBreak::Earliest, Order::Desc);
        let rows = vec![
            (k.encode("alice", 5), 3.0, false),
            (k.encode("bob:1", 9), 3.0, false),
        ];
        let got = decode(k, None, rows).unwrap();
        assert_eq!(got, vec![row("alice", 3.0, None), row("bob:1", 3.0, None)]);
        let plain = decode(TieKey::None, None, vec![("0000x".into(), 1.5, false)]).unwrap();
        assert_eq!(plain[0].member, "0000x");
    }

    /// The twin's members go where the sorted set would hold them, by a
    /// hand-made order: desc boards by score then member bytes descending
    /// (`ZREVRANGE`), asc boards the other way; what is left after the
    /// last chunk comes at the end.
    #[test]
    fn twin_members_are_merged_in_the_sorted_set_order() {
        let z = |m: &str, s: f64| (m.to_string(), s);
        let names = |rows: Vec<(String, f64, bool)>| -> Vec<String> {
            rows.into_iter()
                .map(|(m, _, h)| if h { format!("{m}*") } else { m })
                .collect()
        };
        // desc: b50 a50 x45 y40 c40 d30, with a and y in the twin.
        let mut twin: VecDeque<_> = [z("a", 50.0), z("y", 40.0)].into();
        let first = merge(
            Order::Desc,
            vec![z("b", 50.0), z("x", 45.0)],
            &mut twin,
            false,
        );
        assert_eq!(names(first), ["b", "a*", "x"]);
        let last = merge(Order::Desc, vec![z("c", 40.0)], &mut twin, true);
        assert_eq!(names(last), ["y*", "c"]);
        let mut twin: VecDeque<_> = [z("d", 30.0)].into();
        assert_eq!(
            names(merge(Order::Desc, vec![z("c", 40.0)], &mut twin, true)),
            ["c", "d*"]
        );
        // asc: z (-inf) first; b ties with a and c at 1, between them by bytes.
        let mut twin: VecDeque<_> = [z("z", f64::NEG_INFINITY), z("b", 1.0)].into();
        let rows = vec![z("a", 1.0), z("c", 1.0), z("d", 2.0)];
        assert_eq!(
            names(merge(Order::Asc, rows, &mut twin, true)),
            ["z*", "a", "b*", "c", "d"]
        );
    }

    #[test]
    fn a_member_without_its_tie_key_fails_the_copy() {
        let k = TieKey::Ascending;
        let e = decode(k, None, vec![("short".into(), 1.0, false)]).unwrap_err();
        assert_eq!(e.kind(), "source");
    }

    /// Stored members written by hand from docs/score-encoding.md (desc
    /// board; field 2 asc, so complemented; field 3 desc): every field and
    /// the member come back, a missing field as `None`.
    #[test]
    fn composite_members_give_every_field() {
        let field = |name: &str, order| FieldOrder {
            name: name.into(),
            order,
            aggregate: Aggregate::Sum,
        };
        let layout = Layout {
            fields: vec![
                field("a", Order::Desc),
                field("b", Order::Asc),
                field("c", Order::Desc),
            ],
            tie_key: TieKey::None,
        };
        // b = 97: 0xfff... − (2·16^14 + 97); c missing on a desc board: 0.
        let stored = format!("dffffffffffff9e{}u1", "0".repeat(15));
        // b = −2^53: code 0x100000000000000, complemented; c = 2^53.
        let extreme = format!("e{}220000000000000u2", "f".repeat(14));
        let got = decode(
            TieKey::None,
            Some(&layout),
            vec![(stored, 5.0, false), (extreme, f64::NEG_INFINITY, false)],
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                row("u1", 5.0, Some(vec![Some(5), Some(97), None])),
                row(
                    "u2",
                    f64::NEG_INFINITY,
                    Some(vec![None, Some(-(1 << 53)), Some(1 << 53)])
                ),
            ]
        );
        let e = decode(
            TieKey::None,
            Some(&layout),
            vec![("short".into(), 1.0, false)],
        )
        .unwrap_err();
        assert_eq!(e.kind(), "source");
    }
}
