//! How far a shadow board's backfill is: its lag (messages between its
//! positions and the live consumers', summed over partitions) and its
//! state. It is `done` once every partition has reached where the live
//! consumers were when the backfill began (`targets`, recorded once by the
//! first instance that watched it); done stays done. [`read`] only reads
//! (for `/v1/boards`); [`watch`] also records `targets` and `done`, feeds
//! `rankflow_backfill_lag{board}` and logs progress.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use crate::board::keys;
use crate::sink::store::{Store, StoreError};
use crate::telemetry::events::BackfillLag;

/// How often [`watch`] looks.
const TICK: Duration = Duration::from_secs(2);
/// How often a running backfill is logged.
const LOG_EVERY: Duration = Duration::from_secs(15);

/// A backfill's state, as `/v1/boards` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum State {
    Running,
    Done,
}

/// A backfill's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Progress {
    pub(crate) state: State,
    /// Messages still to replay to reach the live consumers' positions.
    pub(crate) lag: i64,
    /// What its start could not do as asked (`backfill::start`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// Partition field → next offset.
type Positions = HashMap<String, i64>;

/// What Redis holds about one backfill.
struct Seen {
    live: Positions,
    backfill: Positions,
    targets: Option<Positions>,
    done: bool,
    note: Option<String>,
}

impl Seen {
    fn progress(self) -> Progress {
        Progress {
            state: if self.done {
                State::Done
            } else {
                State::Running
            },
            lag: lag(&self.live, &self.backfill),
            note: self.note,
        }
    }
}

/// The lag: per partition the live consumers have a position for, how far
/// the backfill is behind it (all of it where the backfill has no
/// position yet).
fn lag(live: &Positions, backfill: &Positions) -> i64 {
    live.iter()
        .map(|(f, &l)| (l - backfill.get(f).copied().unwrap_or(0)).max(0))
        .sum()
}

/// Whether the live consumers' positions can be the backfill's targets:
/// they have some, and one for every partition the backfill has reached.
/// Before that (a fleet whose live consumers have not finished a batch on
/// every partition yet), targets would leave partitions out and the
/// backfill would be `done` before it replayed them.
fn can_aim(live: &Positions, backfill: &Positions) -> bool {
    !live.is_empty() && backfill.keys().all(|f| live.contains_key(f))
}

/// Whether the backfill has reached every target.
fn reached(targets: &Positions, backfill: &Positions) -> bool {
    targets
        .iter()
        .all(|(f, &t)| backfill.get(f).is_some_and(|&b| b >= t))
}

/// Only the fields of the configured topics count (`<topic>/<partition>`).
fn of_topics(all: HashMap<String, i64>, topics: &[String]) -> Positions {
    all.into_iter()
        .filter(|(f, _)| {
            f.rsplit_once('/')
                .is_some_and(|(t, _)| topics.iter().any(|x| x == t))
        })
        .collect()
}

async fn look(
    store: &Store,
    prefix: &str,
    board: &str,
    topics: &[String],
) -> Result<Seen, StoreError> {
    let live: HashMap<String, i64> = store
        .query(redis::cmd("HGETALL").arg(keys::positions_key(prefix)))
        .await?;
    let backfill: HashMap<String, i64> = store
        .query(redis::cmd("HGETALL").arg(keys::backfill_positions_key(prefix, board)))
        .await?;
    let (targets, done, note): (Option<String>, Option<i64>, Option<String>) = store
        .query(
            redis::cmd("HMGET")
                .arg(keys::backfill_key(prefix, board))
                .arg("targets")
                .arg("done")
                .arg("note"),
        )
        .await?;
    let targets = targets.and_then(|t| serde_json::from_str::<BTreeMap<String, i64>>(&t).ok());
    Ok(Seen {
        live: of_topics(live, topics),
        backfill: of_topics(backfill, topics),
        targets: targets.map(|t| t.into_iter().collect()),
        done: done.is_some(),
        note,
    })
}

/// The backfill's progress, read only.
pub(crate) async fn read(
    store: &Store,
    prefix: &str,
    board: &str,
    topics: &[String],
) -> Result<Progress, StoreError> {
    Ok(look(store, prefix, board, topics).await?.progress())
}

/// Whether the backfill of `board` is done.
pub(crate) async fn is_done(store: &Store, prefix: &str, board: &str) -> Result<bool, StoreError> {
    store
        .query(
            redis::cmd("HEXISTS")
                .arg(keys::backfill_key(prefix, board))
                .arg("done"),
        )
        .await
}

/// Records the targets if none are, and `done` once they are reached;
/// answers the progress.
async fn advance(
    store: &Store,
    prefix: &str,
    board: &str,
    topics: &[String],
    now_ms: i64,
) -> Result<(Progress, bool), StoreError> {
    let key = keys::backfill_key(prefix, board);
    let mut seen = look(store, prefix, board, topics).await?;
    if seen.targets.is_none() && can_aim(&seen.live, &seen.backfill) {
        let targets: BTreeMap<&String, &i64> = seen.live.iter().collect();
        let json = serde_json::to_string(&targets).unwrap_or_else(|_| "{}".into());
        let _: i64 = store
            .query(redis::cmd("HSETNX").arg(&key).arg("targets").arg(json))
            .await?;
        seen = look(store, prefix, board, topics).await?;
    }
    let mut finished = false;
    if !seen.done
        && let Some(targets) = &seen.targets
        && reached(targets, &seen.backfill)
    {
        let set: i64 = store
            .query(redis::cmd("HSETNX").arg(&key).arg("done").arg(now_ms))
            .await?;
        finished = set == 1;
        seen.done = true;
    }
    Ok((seen.progress(), finished))
}

/// Watches one shadow board's backfill until shutdown: records its targets
/// and its end, sets `rankflow_backfill_lag{board}`, and logs its progress
/// every 15 s while it runs and once when it is done.
pub(crate) async fn watch(
    store: Store,
    prefix: String,
    board: String,
    topics: Vec<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut logged: Option<Instant> = None;
    loop {
        let now_ms = chrono::Utc::now().timestamp_millis();
        match advance(&store, &prefix, &board, &topics, now_ms).await {
            Ok((p, finished)) => {
                BackfillLag {
                    board: &board,
                    lag: p.lag,
                }
                .emit();
                if finished {
                    tracing::info!(board = %board, lag = p.lag, took_s = started.elapsed().as_secs(), "Backfill of the shadow board done: it reached where the live consumers were when it began, and follows new events.");
                } else if p.state == State::Running
                    && logged.is_none_or(|t| t.elapsed() >= LOG_EVERY)
                {
                    tracing::info!(board = %board, lag = p.lag, "Backfilling the shadow board from the topics' history.");
                    logged = Some(Instant::now());
                }
            }
            Err(e) => {
                tracing::debug!(board = %board, error = %e, "Could not read the backfill's progress; trying again.");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, i64)]) -> Positions {
        pairs.iter().map(|(f, o)| (f.to_string(), *o)).collect()
    }

    #[test]
    fn the_lag_sums_how_far_each_partition_is_behind_the_live_consumers() {
        let live = p(&[("t/0", 100), ("t/1", 50), ("t/2", 7)]);
        let backfill = p(&[("t/0", 40), ("t/1", 80)]);
        // 60 behind on t/0, ahead on t/1 (counts 0), nothing yet on t/2.
        assert_eq!(lag(&live, &backfill), 60 + 7);
        assert_eq!(lag(&live, &live), 0);
    }

    /// A hand-made table: live positions, backfill positions, whether
    /// targets may be taken.
    #[test]
    fn targets_wait_for_live_positions_of_every_partition_reached() {
        let cases = [
            (p(&[]), p(&[]), false),
            (p(&[]), p(&[("t/0", 5)]), false),
            (p(&[("t/0", 9)]), p(&[("t/0", 5), ("t/1", 3)]), false),
            (p(&[("t/0", 9)]), p(&[]), true),
            (p(&[("t/0", 9), ("t/1", 1)]), p(&[("t/1", 3)]), true),
        ];
        for (live, backfill, want) in cases {
            assert_eq!(can_aim(&live, &backfill), want, "{live:?} {backfill:?}");
        }
    }

    #[test]
    fn done_needs_every_target_reached() {
        let targets = p(&[("t/0", 10), ("t/1", 20)]);
        assert!(!reached(&targets, &p(&[("t/0", 10)])));
        assert!(!reached(&targets, &p(&[("t/0", 10), ("t/1", 19)])));
        assert!(reached(&targets, &p(&[("t/0", 11), ("t/1", 20)])));
        assert!(reached(&p(&[]), &p(&[])), "nothing to replay");
    }

    #[test]
    fn only_the_configured_topics_count() {
        let all: HashMap<String, i64> = [
            ("a/0".to_string(), 1),
            ("b/0".to_string(), 2),
            ("a.b/1".to_string(), 3),
        ]
        .into_iter()
        .collect();
        let kept = of_topics(all, &["a".to_string(), "a.b".to_string()]);
        assert_eq!(kept, p(&[("a/0", 1), ("a.b/1", 3)]));
    }
}
