//! Trimming windows on demand: the background trimmer's runs and reads
//! that must see a window exactly as of now call [`trim_instances`], which
//! sends trim-only calls of the apply script until no eviction stops at
//! its budget.

use crate::board::BoardSet;

use super::encode;
use super::reply::Reply;
use super::store::{Store, StoreError, server_error};

/// Trims the windows of the given instances to `now`, repeating calls whose
/// eviction hit its budget, so that a read right after sees exactly the
/// window. Returns the entries evicted per board (also counted in
/// `rankflow_window_evictions_total`).
pub(crate) async fn trim_instances(
    store: &Store,
    boards: &BoardSet,
    instances: &[(usize, String)],
    now: i64,
) -> Result<Vec<u64>, StoreError> {
    let mut evicted = vec![0u64; boards.boards.len()];
    let mut pending = encode::trims(boards, instances, store.grouping());
    let mut scripts = store.scripts();
    while !pending.is_empty() {
        let cmds: Vec<redis::Cmd> = pending
            .iter()
            .map(|c| c.command(&scripts.apply, now))
            .collect();
        // Trimming is safe to repeat after Redis restarted (the consumer
        // deals with what it lost), so only the script is reloaded.
        let replies = match store.pipeline(&cmds, scripts.epoch).await {
            Err(StoreError::LostState) => {
                scripts = store.scripts();
                let again: Vec<redis::Cmd> = pending
                    .iter()
                    .map(|c| c.command(&scripts.apply, now))
                    .collect();
                store.pipeline(&again, scripts.epoch).await?
            }
            other => other?,
        };
        let mut again = Vec::new();
        for (c, value) in pending.into_iter().zip(&replies) {
            if let Some(err) = server_error(value) {
                return Err(err);
            }
            match Reply::parse(value) {
                Some(Reply::Done { more, counts, .. }) => {
                    for (m, n) in c.members.iter().zip(&counts) {
                        evicted[m.board] += n.evicted;
                    }
                    if more {
                        again.push(c);
                    }
                }
                _ => {
                    return Err(StoreError::Protocol(format!(
                        "trim call returned {value:?}"
                    )));
                }
            }
        }
        pending = again;
    }
    for (board, n) in evicted.iter().enumerate() {
        crate::telemetry::events::WindowEvicted {
            board: &boards.boards[board].name,
            entries: *n,
        }
        .emit();
    }
    Ok(evicted)
}
