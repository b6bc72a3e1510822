//! The fan-out behind live views (docs/http-api.md, "Live views"): one poller
//! task per board view that streams follow (board, view, period and
//! scopes; and the member, for member streams), shared by every stream of
//! that view whatever page or rank style it asks for; the cap on pollers
//! and the cap on open streams.
//!
//! A stream asks its view's poller for a *lens* ([`Poll::Lens`]: its page
//! and rank style, say): streams asking the same share one
//! `tokio::sync::watch` channel. The poller reads its view once per
//! [`TICK`] for all its lenses together (one Redis read of what they need
//! between them), then publishes each lens's JSON only when it changed. A
//! watch channel holds one value, so a slow client never builds a backlog:
//! when it gets round to reading, it sees the newest state and skips the
//! ones in between. A new lens wakes the poller for a read at once rather
//! than at the next tick. The poller drops a lens at the first read after
//! its last subscriber left, and stops when none is left (or at shutdown),
//! so an idle view costs nothing.
//!
//! Since each poller costs a Redis read per tick, there are at most
//! `max_pollers` of them (`[http] max_pollers`): a stream that would start
//! one more is refused, so what clients ask for cannot multiply the reads.
//!
//! Event ids are wall-clock milliseconds of the read that found the change
//! (one more than the lens's last id when the clock has not moved on), so
//! they keep increasing across a poller's restart and across a restart of
//! rankflow: a client that reconnects with `Last-Event-ID` never sees an id
//! go back.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, watch};
use tokio::time::MissedTickBehavior;

use crate::api::error::ApiError;
use crate::telemetry::events::{StreamPushed, StreamsOpen};

/// How often a poller reads its view: the "at most every 250 ms" of live
/// views (docs/http-api.md), and the most Redis reads one view costs per second.
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// The default of `[http] max_pollers`.
const DEFAULT_MAX_POLLERS: usize = 1_024;

/// One published state of a lens.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The SSE `id:`.
    pub(crate) id: u64,
    /// The SSE `event:` name; `None` for the default (`message`).
    pub(crate) event: Option<&'static str>,
    /// The JSON sent as `data:`.
    pub(crate) data: String,
}

/// What a lens's channel holds.
#[derive(Debug, Clone)]
pub(crate) enum State {
    /// The first read has not finished.
    Pending,
    Ready(Arc<Snapshot>),
    /// The first read failed: the answer new subscribers get instead of a
    /// stream (a later success replaces it).
    Failed(ApiError),
}

/// What one read found for one lens.
pub(crate) struct Change {
    pub(crate) event: Option<&'static str>,
    pub(crate) data: String,
    /// The view can no longer change (an archived period): the poller
    /// stops reading for this lens and only waits for its subscribers to
    /// leave.
    pub(crate) last: bool,
}

/// One lens's part of a read: `Ok(None)` when nothing changed since its
/// last `Some`.
pub(crate) type Outcome = Result<Option<Change>, ApiError>;

/// A lens, with what its poller remembers of it between reads.
pub(crate) struct Sub<L, M> {
    pub(crate) lens: L,
    pub(crate) memory: M,
}

/// A view a poller reads.
pub(crate) trait Poll: Send + 'static {
    /// `top` or `member`, the label of `rankflow_stream_events_total`.
    const KIND: &'static str;

    /// What one stream asks of the view (its page, its rank style):
    /// streams asking the same share one channel.
    type Lens: Clone + Eq + Hash + Send + Sync + 'static;

    /// What the poller keeps of a lens between reads (the last state
    /// sent), to tell a change.
    type Memory: Default + Send + 'static;

    /// Reads the view once for all `subs` and returns each one's outcome,
    /// in their order; `Err` when the read failed for all of them.
    fn poll(
        &mut self,
        subs: &mut [Sub<Self::Lens, Self::Memory>],
    ) -> impl Future<Output = Result<Vec<Outcome>, ApiError>> + Send;
}

type Channel = Arc<watch::Sender<State>>;

/// The lenses of one poller: shared by the poller and [`StreamHub::subscribe`].
struct Lenses<L> {
    channels: Mutex<HashMap<L, Channel>>,
    /// Wakes the poller for a read at once when a lens is added.
    wake: Notify,
}

impl<L: Eq + Hash> Lenses<L> {
    fn new() -> Lenses<L> {
        Lenses {
            channels: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<L, Channel>> {
        // Each operation under this lock is one insert, lookup or retain,
        // so a poisoned lock still holds a consistent map.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver of `lens`, adding it (and waking the poller) if new.
    fn join(&self, lens: L) -> watch::Receiver<State> {
        let mut channels = self.lock();
        if let Some(tx) = channels.get(&lens) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(State::Pending);
        channels.insert(lens, Arc::new(tx));
        self.wake.notify_one();
        rx
    }
}

/// Pollers by view key; each is the [`Lenses`] of its view's lens type.
type Pollers = HashMap<String, Arc<dyn Any + Send + Sync>>;

/// The pollers and the count of open streams; one per HTTP server.
pub struct StreamHub {
    max_streams: usize,
    max_pollers: usize,
    open: AtomicUsize,
    pollers: Mutex<Pollers>,
    shutdown: watch::Receiver<bool>,
    /// Keeps `shutdown` open for a hub made by [`StreamHub::default`],
    /// which no one shuts down.
    _never: Option<watch::Sender<bool>>,
}

impl Default for StreamHub {
    /// At most 10,000 streams and 1,024 pollers, and no shutdown signal
    /// (tests, embedding).
    fn default() -> StreamHub {
        let (tx, rx) = watch::channel(false);
        let mut hub = StreamHub::new(10_000, rx);
        hub._never = Some(tx);
        hub
    }
}

impl StreamHub {
    /// A hub allowing `max_streams` open streams (`[http] max_streams`)
    /// and 1,024 pollers, all of which end when `shutdown` turns true.
    pub fn new(max_streams: usize, shutdown: watch::Receiver<bool>) -> StreamHub {
        StreamHub {
            max_streams,
            max_pollers: DEFAULT_MAX_POLLERS,
            open: AtomicUsize::new(0),
            pollers: Mutex::new(HashMap::new()),
            shutdown,
            _never: None,
        }
    }

    /// The same hub running at most `max_pollers` pollers (`[http]
    /// max_pollers`, at least 1): distinct views followed at once.
    pub fn with_max_pollers(mut self, max_pollers: usize) -> StreamHub {
        self.max_pollers = max_pollers.max(1);
        self
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

    fn lock(&self) -> MutexGuard<'_, Pollers> {
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

    pub(crate) fn max_pollers(&self) -> usize {
        self.max_pollers
    }

    /// A receiver of `lens` of the view `key`, starting the view's poller
    /// with `make` when none runs; `None` when that would be one poller
    /// more than `max_pollers`. `key` must tell apart every view that
    /// reads differently, and name the kind of view (`top ...`,
    /// `member ...`), so that one key always has one lens type.
    pub(crate) fn subscribe<P: Poll>(
        self: &Arc<Self>,
        key: String,
        lens: P::Lens,
        make: impl FnOnce() -> P,
    ) -> Option<watch::Receiver<State>> {
        let mut pollers = self.lock();
        if let Some(found) = pollers.get(&key) {
            let lenses = found.clone().downcast::<Lenses<P::Lens>>().ok()?;
            return Some(lenses.join(lens));
        }
        if pollers.len() >= self.max_pollers {
            return None;
        }
        let lenses = Arc::new(Lenses::new());
        let rx = lenses.join(lens);
        pollers.insert(key.clone(), lenses.clone());
        tracing::debug!(key = %key, "Started a live-view poller.");
        tokio::spawn(run(self.clone(), key, lenses, make()));
        Some(rx)
    }

    /// The lenses of `key`'s poller that someone still listens to; `None`,
    /// with the poller removed, when no one does. Under the lock
    /// [`subscribe`](Self::subscribe) takes, so a client never joins a
    /// poller that is about to stop.
    fn live<L: Clone + Eq + Hash>(
        &self,
        key: &str,
        lenses: &Lenses<L>,
    ) -> Option<Vec<(L, Channel)>> {
        let mut pollers = self.lock();
        let mut channels = lenses.lock();
        channels.retain(|_, tx| tx.receiver_count() > 0);
        if channels.is_empty() {
            pollers.remove(key);
            tracing::debug!(key = %key, "Stopped a live-view poller: its last subscriber left.");
            return None;
        }
        Some(
            channels
                .iter()
                .map(|(l, tx)| (l.clone(), tx.clone()))
                .collect(),
        )
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

/// What a poller keeps of one lens.
struct Slot<M> {
    tx: Channel,
    memory: M,
    last_id: u64,
    /// The lens's view can no longer change: no more reads for it.
    finished: bool,
    /// Its reads fail after it had a state (said once per outage).
    failing: bool,
}

impl<M: Default> Slot<M> {
    fn new(tx: Channel) -> Slot<M> {
        Slot {
            tx,
            memory: M::default(),
            last_id: 0,
            finished: false,
            failing: false,
        }
    }

    /// Publishes what a read found for this lens.
    fn publish(&mut self, key: &str, kind: &'static str, outcome: Outcome) {
        match outcome {
            Ok(Some(change)) => {
                self.failing = false;
                self.finished = change.last;
                self.last_id = next_id(self.last_id);
                self.tx.send_replace(State::Ready(Arc::new(Snapshot {
                    id: self.last_id,
                    event: change.event,
                    data: change.data,
                })));
                StreamPushed { kind }.emit();
            }
            Ok(None) => self.failing = false,
            Err(e) if matches!(*self.tx.borrow(), State::Ready(_)) => {
                // Subscribers keep the last good state; one line per outage.
                if !self.failing {
                    tracing::warn!(key = %key, error = %e.body.error, "A live view could not be read; its streams keep the last state until a read succeeds.");
                }
                self.failing = true;
            }
            Err(e) => {
                self.tx.send_replace(State::Failed(e));
            }
        }
    }
}

type Slots<P> = HashMap<<P as Poll>::Lens, Slot<<P as Poll>::Memory>>;

/// The poller of one view: reads every [`TICK`] (and when a lens is
/// added), publishes changes, stops when unused or at shutdown.
async fn run<P: Poll>(hub: Arc<StreamHub>, key: String, lenses: Arc<Lenses<P::Lens>>, mut view: P) {
    let mut shutdown = hub.shutdown();
    let mut tick = tokio::time::interval(TICK);
    // After a slow read (a rolling view being computed), wait a whole tick
    // rather than catch up with a burst of reads.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut slots: Slots<P> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = lenses.wake.notified() => {}
            _ = shutdown.wait_for(|s| *s) => {
                hub.lock().remove(&key);
                return;
            }
        }
        let Some(live) = hub.live(&key, &lenses) else {
            return;
        };
        let live: HashMap<P::Lens, Channel> = live.into_iter().collect();
        slots.retain(|lens, _| live.contains_key(lens));
        for (lens, tx) in live {
            slots.entry(lens).or_insert_with(|| Slot::new(tx));
        }
        read(&key, &mut view, &mut slots).await;
    }
}

/// One read of the view for its lenses still open to change, published.
async fn read<P: Poll>(key: &str, view: &mut P, slots: &mut Slots<P>) {
    let mut open: Vec<(&P::Lens, &mut Slot<P::Memory>)> =
        slots.iter_mut().filter(|(_, s)| !s.finished).collect();
    if open.is_empty() {
        return;
    }
    let mut subs: Vec<Sub<P::Lens, P::Memory>> = open
        .iter_mut()
        .map(|(lens, slot)| Sub {
            lens: (*lens).clone(),
            memory: std::mem::take(&mut slot.memory),
        })
        .collect();
    let outcomes: Vec<Option<Outcome>> = match view.poll(&mut subs).await {
        Ok(outcomes) => outcomes.into_iter().map(Some).collect(),
        Err(e) => subs.iter().map(|_| Some(Err(e.clone()))).collect(),
    };
    let outcomes = outcomes.into_iter().chain(std::iter::repeat_with(|| None));
    for (((_, slot), sub), outcome) in open.into_iter().zip(subs).zip(outcomes) {
        slot.memory = sub.memory;
        if let Some(outcome) = outcome {
            slot.publish(key, P::KIND, outcome);
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

    /// Counts its reads; each lens (a number) gets its number and the
    /// read count once, on its first read.
    struct Counter(Arc<AtomicUsize>);

    impl Poll for Counter {
        const KIND: &'static str = "top";
        type Lens = u32;
        type Memory = bool;

        async fn poll(&mut self, subs: &mut [Sub<u32, bool>]) -> Result<Vec<Outcome>, ApiError> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(subs
                .iter_mut()
                .map(|s| {
                    let first = !std::mem::replace(&mut s.memory, true);
                    Ok(first.then(|| Change {
                        event: None,
                        data: format!("{} {n}", s.lens),
                        last: false,
                    }))
                })
                .collect())
        }
    }

    async fn ready(rx: &mut watch::Receiver<State>) -> String {
        let state = rx.wait_for(|s| matches!(s, State::Ready(_))).await;
        match state.as_deref() {
            Ok(State::Ready(s)) => s.data.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn lenses_share_their_view_poller_that_stops_when_they_leave() {
        let hub = Arc::new(StreamHub::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let counter = || Counter(reads.clone());
        let mut a = hub.subscribe("k".into(), 1, counter).unwrap();
        let b = hub.subscribe("k".into(), 1, counter).unwrap();
        let mut c = hub.subscribe("k".into(), 2, counter).unwrap();
        assert_eq!(hub.pollers(), 1);
        assert!(ready(&mut a).await.starts_with("1 "));
        assert!(ready(&mut c).await.starts_with("2 "));
        // A few ticks: one read each, whatever the lenses.
        tokio::time::sleep(TICK * 4).await;
        let n = reads.load(Ordering::SeqCst);
        assert!((3..=7).contains(&n), "{n} reads in 4 ticks");
        drop((a, b, c));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while hub.pollers() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "poller still running"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn one_view_more_than_max_pollers_is_refused() {
        let hub = Arc::new(StreamHub::default().with_max_pollers(2));
        let reads = Arc::new(AtomicUsize::new(0));
        let counter = || Counter(reads.clone());
        let a = hub.subscribe("a".into(), 1, counter);
        let b = hub.subscribe("b".into(), 1, counter);
        assert!(a.is_some() && b.is_some());
        assert!(hub.subscribe("c".into(), 1, counter).is_none());
        // Another lens of a view already followed needs no poller.
        assert!(hub.subscribe("a".into(), 7, counter).is_some());
        assert_eq!(hub.pollers(), 2);
    }
}
