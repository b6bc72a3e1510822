//! The final standings of a closed period, read from Redis in rank order
//! one chunk at a time (so the archiver's memory is bounded by a chunk,
//! whatever the board's size): `ZREVRANGE` by rank index for `desc` boards,
//! `ZRANGE` for `asc` ones, tie-break members decoded back to the member
//! with [`TieKey`]. Index paging is consistent because the key is frozen
//! (its `K:closed` marker is set before the first read); as a last check
//! the stream fails if the rows read do not add up to the count taken at
//! close, which aborts the copy's transaction.

use futures::{Stream, StreamExt};

use crate::board::Order;
use crate::board::score::TieKey;
use crate::sink::store::Store;

use super::ArchiveError;
use super::copy::Standing;

/// What to read.
#[derive(Debug, Clone)]
pub struct Frozen {
    pub view_key: String,
    pub order: Order,
    pub tie_key: TieKey,
    /// Members counted when the period was closed.
    pub members: u64,
    /// Members per chunk (≥ 1).
    pub chunk: usize,
}

/// Turns stored members and scores into standings, in the order read.
pub fn decode(tie_key: TieKey, rows: Vec<(String, f64)>) -> Result<Vec<Standing>, ArchiveError> {
    rows.into_iter()
        .map(|(stored, score)| match tie_key.decode(&stored) {
            Some((member, _)) => Ok(Standing {
                member: member.to_string(),
                score,
            }),
            None => Err(ArchiveError::Source(format!(
                "member {stored:?} lacks the board's tie-break key"
            ))),
        })
        .collect()
}

struct Cursor {
    store: Store,
    frozen: Frozen,
    next: u64,
    done: bool,
}

/// The standings in chunks of `frozen.chunk`, best first.
pub fn chunks(
    store: Store,
    frozen: Frozen,
) -> impl Stream<Item = Result<Vec<Standing>, ArchiveError>> {
    let cursor = Cursor {
        store,
        frozen,
        next: 0,
        done: false,
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

async fn read_chunk(c: &mut Cursor) -> Result<Vec<Standing>, ArchiveError> {
    let f = &c.frozen;
    let chunk = f.chunk.max(1) as u64;
    let command = match f.order {
        Order::Desc => "ZREVRANGE",
        Order::Asc => "ZRANGE",
    };
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
    if (rows.len() as u64) < chunk {
        c.done = true;
        if c.next != f.members {
            return Err(ArchiveError::Source(format!(
                "{} changed while it was archived: {} members at close, {} read",
                f.view_key, f.members, c.next
            )));
        }
    }
    decode(f.tie_key, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::TieBreak;

    #[test]
    fn tie_break_members_are_decoded() {
        let k = TieKey::for_board(TieBreak::Earliest, Order::Desc);
        let rows = vec![(k.encode("alice", 5), 3.0), (k.encode("bob:1", 9), 3.0)];
        let got = decode(k, rows).unwrap();
        assert_eq!(
            got,
            vec![
                Standing {
                    member: "alice".into(),
                    score: 3.0
                },
                Standing {
                    member: "bob:1".into(),
                    score: 3.0
                },
            ]
        );
        let plain = decode(TieKey::None, vec![("0000x".into(), 1.5)]).unwrap();
        assert_eq!(plain[0].member, "0000x");
    }

    #[test]
    fn a_member_without_its_tie_key_fails_the_copy() {
        let k = TieKey::Ascending;
        let e = decode(k, vec![("short".into(), 1.0)]).unwrap_err();
        assert_eq!(e.kind(), "source");
    }
}
