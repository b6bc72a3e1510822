//! The background window trimmer: windows must slide with the clock even
//! when no events arrive, so once a second one consumer of the fleet (the
//! holder of a short Redis lock) trims every registered window instance.
//! Reads trim their own instance too, so a read is exact even between runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::board::BoardSet;
use crate::board::keys;
use crate::board::model::ViewSpec;
use crate::clock::SharedClock;

use super::store::{Store, StoreError};
use super::trim::trim_instances;

const INTERVAL: Duration = Duration::from_secs(1);
/// Registry entries are read in pages of this many instances.
const PAGE: isize = 500;

/// Runs until shutdown; does nothing when no board has windows.
pub(crate) async fn run(
    store: Store,
    boards: Arc<BoardSet>,
    clock: SharedClock,
    wanted: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    if !boards.boards.iter().any(|b| b.has_windows()) {
        return;
    }
    let owner = format!("{}-{}", std::process::id(), clock.now_ms());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(INTERVAL) => {}
            _ = wanted.notified() => {}
            _ = shutdown.changed() => return,
        }
        if let Err(e) = trim_once(&store, &boards, &clock, &owner).await {
            tracing::debug!(error = %e, "Background window trim failed; the next run retries.");
        }
    }
}

/// Longest time a window instance stays interesting after its last
/// registration: its longest window plus a bucket, plus a minute of slack,
/// plus the `REFRESH` a consumer waits before it registers an instance it
/// keeps writing again (`writer::windows_wanted`).
fn horizon_ms(boards: &BoardSet, board: usize) -> i64 {
    boards.boards[board]
        .views
        .iter()
        .filter_map(|v| match v {
            ViewSpec::Window(w) => Some(w.length_ms + w.bucket_ms),
            ViewSpec::Period { .. } => None,
        })
        .max()
        .unwrap_or(0)
        + 60_000
        // A consumer registers an instance again only once a REFRESH, so
        // its last update may be that much later than its registration.
        + super::expiry::REFRESH.as_millis() as i64
}

/// One pass over the registry, if this consumer holds the lock.
pub(crate) async fn trim_once(
    store: &Store,
    boards: &BoardSet,
    clock: &SharedClock,
    owner: &str,
) -> Result<(), StoreError> {
    let lock: Option<String> = store
        .query(
            redis::cmd("SET")
                .arg(keys::trim_lock_key(&boards.key_prefix))
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(INTERVAL.as_millis() as u64 + 500),
        )
        .await?;
    if lock.is_none() {
        return Ok(());
    }
    let registry = keys::window_registry_key(&boards.key_prefix);
    let now = clock.now_ms();
    let mut start = 0isize;
    loop {
        let page: Vec<(String, f64)> = store
            .query(
                redis::cmd("ZRANGE")
                    .arg(&registry)
                    .arg(start)
                    .arg(start + PAGE - 1)
                    .arg("WITHSCORES"),
            )
            .await?;
        if page.is_empty() {
            return Ok(());
        }
        start += page.len() as isize;
        let mut live = Vec::new();
        let mut gone = Vec::new();
        for (tag, last) in &page {
            let board = keys::parse_tag(tag).and_then(|(name, _)| {
                boards
                    .boards
                    .iter()
                    .position(|b| b.stored == name && b.has_windows())
            });
            match board {
                Some(b) if now - (*last as i64) <= horizon_ms(boards, b) => {
                    live.push((b, tag.clone()))
                }
                _ => gone.push(tag.clone()),
            }
        }
        trim_instances(store, boards, &live, now).await?;
        if !gone.is_empty() {
            // Their windows emptied long ago (or the board was removed).
            let _: i64 = store
                .query(redis::cmd("ZREM").arg(&registry).arg(&gone))
                .await?;
            start -= gone.len() as isize;
        }
    }
}
