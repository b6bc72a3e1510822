//! The fan-out behind live views (docs/http-api.md, issue 13 point 3): one poller
//! task per distinct stream query, shared by every client of that query,
//! and the cap on open streams.
//!
//! A poller reads its view once per [`TICK`] and publishes the JSON in a
//! `tokio::sync::watch` channel only when it changed. A watch channel holds
//! one value, so a slow client never builds a backlog: when it gets round to
//! reading, it sees the newest state and skips the ones in between. The
//! poller stops on the first tick that finds no subscriber left (or at
//! shutdown), so an idle view costs nothing.
//!
//! Event ids are wall-clock milliseconds of the read that found the change
//! (one more than the last id when the clock has not moved on), so they keep
//! increasing across a poller's restart and across a restart of rankflow: a
//! client that reconnects with `Last-Event-ID` never sees an id go back.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use crate::api::error::ApiError;
use crate::telemetry::events::{StreamPushed, StreamsOpen};

/// How often a poller reads its view: the "at most every 250 ms" of live
/// views (docs/http-api.md), and the most Redis reads one view costs per second.
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// One published state of a view.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The SSE `id:`.
    pub(crate) id: u64,
    /// The SSE `event:` name; `None` for the default (`message`).
    pub(crate) event: Option<&'static str>,
    /// The JSON sent as `data:`.
    pub(crate) data: String,
}

/// What a poller's channel holds.
#[derive(Debug, Clone)]
pub(crate) enum State {
    /// The first read has not finished.
    Pending,
    Ready(Arc<Snapshot>),
    /// The first read failed: the answer new subscribers get instead of a
    /// stream (a later success replaces it).
    Failed(ApiError),
}

/// What one read of a view found.
pub(crate) struct Change {
    pub(crate) event: Option<&'static str>,
    pub(crate) data: String,
    /// The view can no longer change (an archived period): the poller
    /// stops reading and only waits for its subscribers to leave.
    pub(crate) last: bool,
}

/// A view a poller reads.
pub(crate) trait Poll: Send + 'static {
    /// `top` or `member`, the label of `rankflow_stream_events_total`.
    const KIND: &'static str;

    /// Reads the view; `Ok(None)` when nothing changed since the last
    /// `Some`.
    fn poll(&mut self) -> impl Future<Output = Result<Option<Change>, ApiError>> + Send;
}

type Channel = Arc<watch::Sender<State>>;

/// The pollers and the count of open streams; one per HTTP server.
pub struct StreamHub {
    max_streams: usize,
    open: AtomicUsize,
    pollers: Mutex<HashMap<String, Channel>>,
    shutdown: watch::Receiver<bool>,
    /// Keeps `shutdown` open for a hub made by [`StreamHub::default`],
    /// which no one shuts down.
    _never: Option<watch::Sender<bool>>,
}

impl Default for StreamHub {
    /// At most 10,000 streams, and no shutdown signal (tests, embedding).
    fn default() -> StreamHub {
        let (tx, rx) = watch::channel(false);
        let mut hub = StreamHub::new(10_000, rx);
        hub._never = Some(tx);
        hub
    }
}

impl StreamHub {
    /// A hub allowing `max_streams` open streams (`[http] max_streams`),
    /// all of which end when `shutdown` turns true.
    pub fn new(max_streams: usize, shutdown: watch::Receiver<bool>) -> StreamHub {
        StreamHub {
            max_streams,
            open: AtomicUsize::new(0),
            pollers: Mutex::new(HashMap::new()),
            shutdown,
            _never: None,
        }
    }

    /// The shutdown signal streams end on.
    pub(crate) fn shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// Pollers running now.
    #[cfg(test)]
    fn pollers(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // A panic while holding this lock leaves the map consistent (each
        // operation is one insert or remove), so a poisoned lock is usable.
        self.pollers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place among the open streams, or `None` at the cap.
    pub(crate) fn permit(self: &Arc<Self>) -> Option<Permit> {
        let before = self.open.fetch_add(1, Ordering::SeqCst);
        if before >= self.max_streams {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        StreamsOpen { open: before + 1 }.emit();
        Some(Permit(self.clone()))
    }

    pub(crate) fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// A receiver of the view `key`, starting its poller with `make` when
    /// none runs. `key` must tell apart every query that reads differently.
    pub(crate) fn subscribe<P: Poll>(
        self: &Arc<Self>,
        key: String,
        make: impl FnOnce() -> P,
    ) -> watch::Receiver<State> {
        let mut pollers = self.lock();
        if let Some(tx) = pollers.get(&key) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(State::Pending);
        let tx = Arc::new(tx);
        pollers.insert(key.clone(), tx.clone());
        tracing::debug!(key = %key, "Started a live-view poller.");
        tokio::spawn(run(self.clone(), key, tx, make()));
        rx
    }

    /// Removes `key`'s poller if no one listens any more; the check and
    /// the removal are under the lock [`subscribe`](Self::subscribe) takes,
    /// so a client never joins a poller that is about to stop.
    fn leave_if_unused(&self, key: &str, tx: &Channel) -> bool {
        let mut pollers = self.lock();
        if tx.receiver_count() > 0 {
            return false;
        }
        pollers.remove(key);
        tracing::debug!(key = %key, "Stopped a live-view poller: its last subscriber left.");
        true
    }
}

/// One open stream; dropping it frees its place.
pub(crate) struct Permit(Arc<StreamHub>);

impl Drop for Permit {
    fn drop(&mut self) {
        let before = self.0.open.fetch_sub(1, Ordering::SeqCst);
        StreamsOpen {
            open: before.saturating_sub(1),
        }
        .emit();
    }
}

/// The poller of one view: reads every [`TICK`], publishes changes, stops
/// when unused or at shutdown.
async fn run<P: Poll>(hub: Arc<StreamHub>, key: String, tx: Channel, mut view: P) {
    let mut shutdown = hub.shutdown();
    let mut tick = tokio::time::interval(TICK);
    // After a slow read (a rolling view being computed), wait a whole tick
    // rather than catch up with a burst of reads.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let (mut last_id, mut finished, mut failing) = (0u64, false, false);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => {
                hub.lock().remove(&key);
                return;
            }
        }
        if hub.leave_if_unused(&key, &tx) {
            return;
        }
        if finished {
            continue;
        }
        match view.poll().await {
            Ok(Some(change)) => {
                failing = false;
                finished = change.last;
                last_id = next_id(last_id);
                tx.send_replace(State::Ready(Arc::new(Snapshot {
                    id: last_id,
                    event: change.event,
                    data: change.data,
                })));
                StreamPushed { kind: P::KIND }.emit();
            }
            Ok(None) => failing = false,
            Err(e) if matches!(*tx.borrow(), State::Ready(_)) => {
                // Subscribers keep the last good state; one line per outage.
                if !failing {
                    tracing::warn!(key = %key, error = %e.body.error, "A live view could not be read; its streams keep the last state until a read succeeds.");
                }
                failing = true;
            }
            Err(e) => {
                tx.send_replace(State::Failed(e));
            }
        }
    }
}

/// The id after `last`: the wall clock in ms, or `last + 1` if that is not
/// larger (a clock step back, or two changes in one ms).
fn next_id(last: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    now.max(last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_even_when_the_clock_does_not() {
        let a = next_id(0);
        assert!(a > 1_600_000_000_000, "{a}");
        assert_eq!(next_id(u64::MAX - 1), u64::MAX);
        let far = a + 10_000_000;
        assert_eq!(next_id(far), far + 1);
    }

    #[tokio::test]
    async fn the_cap_refuses_one_more_and_frees_places_on_drop() {
        let hub = Arc::new(StreamHub::new(2, watch::channel(false).1));
        let a = hub.permit();
        let b = hub.permit();
        assert!(a.is_some() && b.is_some());
        assert!(hub.permit().is_none());
        drop(a);
        assert!(hub.permit().is_some());
    }

    struct Counter(u32);

    impl Poll for Counter {
        const KIND: &'static str = "top";
        async fn poll(&mut self) -> Result<Option<Change>, ApiError> {
            self.0 += 1;
            // Changes on the first read only.
            Ok((self.0 == 1).then(|| Change {
                event: None,
                data: "x".into(),
                last: false,
            }))
        }
    }

    #[tokio::test]
    async fn subscribers_share_a_poller_that_stops_when_they_leave() {
        let hub = Arc::new(StreamHub::default());
        let mut a = hub.subscribe("k".into(), || Counter(0));
        let b = hub.subscribe("k".into(), || Counter(100));
        assert_eq!(hub.pollers(), 1);
        let first = a.wait_for(|s| matches!(s, State::Ready(_))).await;
        assert!(first.is_ok());
        drop(first);
        drop((a, b));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while hub.pollers() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "poller still running"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
