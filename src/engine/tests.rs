//! The consumer loop without servers: a fake consumer that records the
//! calls made on it, a fake sink whose flushes finish when the test says,
//! messages fed through a channel, and tokio's paused clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::Offset;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{OwnedMessage, Timestamp};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::flush::Flushed;
use super::port::{Positions, Sink, Source};
use super::setup::Engine;
use crate::board::BoardSet;
use crate::clock::ManualClock;
use crate::config::{BatchConfig, Millis};
use crate::event::Decoder;
use crate::sink::report::FlushReport;
use crate::telemetry::Outcome;

use super::batch::Batch;
use crate::source::{RebalanceEvent, TopicPartition};

const TS: i64 = 1_763_700_000_000;

/// A call the loop made on the consumer.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Pause(Vec<TopicPartition>),
    Resume(Vec<TopicPartition>),
    Seek(TopicPartition, Offset),
    Store(Vec<(Arc<str>, i32, i64)>),
    Commit,
}

#[derive(Default)]
struct FakeSource {
    calls: Mutex<Vec<Call>>,
}

impl FakeSource {
    fn record(&self, call: Call) -> Result<(), KafkaError> {
        self.calls.lock().unwrap().push(call);
        Ok(())
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The stored offsets, in the order they were stored.
    fn stored(&self) -> Vec<Vec<(Arc<str>, i32, i64)>> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Store(o) => Some(o),
                _ => None,
            })
            .collect()
    }
}

fn sorted(parts: &[TopicPartition]) -> Vec<TopicPartition> {
    let mut v = parts.to_vec();
    v.sort();
    v
}

impl Source for FakeSource {
    fn pause(&self, parts: &[TopicPartition]) -> Result<(), KafkaError> {
        self.record(Call::Pause(sorted(parts)))
    }
    fn resume(&self, parts: &[TopicPartition]) -> Result<(), KafkaError> {
        self.record(Call::Resume(sorted(parts)))
    }
    fn seek(&self, part: &TopicPartition, at: Offset) -> Result<(), KafkaError> {
        self.record(Call::Seek(part.clone(), at))
    }
    fn store_offsets(&self, offsets: &[(Arc<str>, i32, i64)]) -> Result<(), KafkaError> {
        let mut o = offsets.to_vec();
        o.sort();
        self.record(Call::Store(o))
    }
    fn commit(&self) -> Result<(), KafkaError> {
        self.record(Call::Commit)
    }
    fn stream_error(&self, _: &KafkaError) -> bool {
        false
    }
}

/// A flush the loop started; it finishes when the test says.
struct Started {
    messages: usize,
    batch: Option<Batch>,
    finish: Option<oneshot::Sender<Flushed>>,
}

#[derive(Default)]
struct SinkState {
    started: Mutex<Vec<Started>>,
    epoch: AtomicU64,
    positions: Mutex<Positions>,
    /// Position lookups still to fail (Redis unreachable).
    failing_lookups: AtomicU64,
}

#[derive(Clone, Default)]
struct FakeSink(Arc<SinkState>);

impl FakeSink {
    /// Messages of each flush started so far.
    fn sizes(&self) -> Vec<usize> {
        let started = self.0.started.lock().unwrap();
        started.iter().map(|s| s.messages).collect()
    }

    fn offsets(&self, flush: usize) -> Vec<(Arc<str>, i32, i64)> {
        let started = self.0.started.lock().unwrap();
        let batch = started[flush].batch.as_ref().unwrap();
        batch
            .record
            .commit_offsets()
            .map(|(t, p, o)| (t.clone(), p, o))
            .collect()
    }

    /// (partition, outcome, count) of what the batch of a flush holds.
    fn outcomes(&self, flush: usize) -> Vec<(i32, Outcome, u64)> {
        let started = self.0.started.lock().unwrap();
        let record = &started[flush].batch.as_ref().unwrap().record;
        let mut out = std::collections::BTreeMap::new();
        for ((part, _, outcome), n) in &record.outcomes {
            *out.entry((record.parts[*part as usize].partition, *outcome))
                .or_insert(0) += *n;
        }
        for e in &record.applied {
            *out.entry((record.parts[e.part as usize].partition, Outcome::Applied))
                .or_insert(0) += 1;
        }
        out.into_iter().map(|((p, o), n)| (p, o, n)).collect()
    }

    /// Finishes flush `i` as applied (`Some`) or given up.
    fn finish(&self, i: usize, applied: bool) {
        let mut started = self.0.started.lock().unwrap();
        let s = &mut started[i];
        let flushed = if applied {
            let batch = s.batch.take().unwrap();
            Flushed::Applied(Box::new(batch), FlushReport::default(), Duration::ZERO)
        } else {
            Flushed::Abandoned
        };
        let _ = s.finish.take().unwrap().send(flushed);
    }
}

impl Sink for FakeSink {
    fn start(
        &self,
        batch: Batch,
        _previous: Option<oneshot::Receiver<bool>>,
        _shutdown: &watch::Receiver<bool>,
    ) -> (JoinHandle<Flushed>, oneshot::Receiver<bool>) {
        let (finish, finished) = oneshot::channel();
        self.0.started.lock().unwrap().push(Started {
            messages: batch.messages(),
            batch: Some(batch),
            finish: Some(finish),
        });
        let handle = tokio::spawn(async move { finished.await.unwrap_or(Flushed::Abandoned) });
        (handle, oneshot::channel().1)
    }
    fn epoch(&self) -> u64 {
        self.0.epoch.load(Ordering::SeqCst)
    }
    fn positions(&self, _: Vec<TopicPartition>) -> BoxFuture<'static, Result<Positions, String>> {
        let found = self.0.positions.lock().unwrap().clone();
        let fail = self
            .0
            .failing_lookups
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Box::pin(async move {
            if fail {
                Err("connection refused".to_string())
            } else {
                Ok(found)
            }
        })
    }
    fn keeps_payloads(&self) -> bool {
        false
    }
    fn moderation(&self) -> Arc<crate::moderation::Cell> {
        Arc::new(crate::moderation::Cell::new(
            crate::moderation::MemberHasher::new(None),
        ))
    }
}

type Chunk = Vec<KafkaResult<OwnedMessage>>;

struct Harness {
    source: Arc<FakeSource>,
    sink: FakeSink,
    messages: UnboundedSender<Chunk>,
    rebalances: UnboundedSender<RebalanceEvent>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

fn boards() -> BoardSet {
    let text = r#"
[[board]]
        name = "fans"
        event = "gift"
        member = "sender_id"
        score = "count"
        periods = ["all"]
    "#;
    crate::config::test_boards(text)
}

fn tp(p: i32) -> TopicPartition {
    (Arc::from("t"), p)
}

fn gift(partition: i32, offset: i64) -> KafkaResult<OwnedMessage> {
    let json = serde_json::json!({
        "type": "gift", "event_id": format!("e{partition}-{offset}"), "ts": TS,
        "sender_id": "s", "receiver_id": "r", "gift_id": "g", "count": 1, "value": 1
    });
    Ok(OwnedMessage::new(
        Some(json.to_string().into_bytes()),
        None,
        "t".into(),
        Timestamp::NotAvailable,
        partition,
        offset,
        None,
    ))
}

/// Lets the loop (and the tasks it spawned) run for `ms` of paused time.
async fn run_for(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

impl Harness {
    /// A loop with partitions 0 and 1 of `t` assigned and positioned.
    async fn start(max_events: usize, max_delay_ms: u64) -> Harness {
        let h = Harness::start_with(max_events, max_delay_ms, FakeSink::default()).await;
        assert_eq!(h.source.calls(), vec![Call::Resume(vec![tp(0), tp(1)])]);
        h
    }

    /// A loop on `sink` that was just assigned partitions 0 and 1 of `t`.
    async fn start_with(max_events: usize, max_delay_ms: u64, sink: FakeSink) -> Harness {
        let source = Arc::new(FakeSource::default());
        let (messages, rx) = unbounded_channel::<Chunk>();
        let (rebalances, rebalance_rx) = unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let engine = Engine {
            boards: Arc::new(boards()),
            checks: Default::default(),
            decoder: Arc::new(Decoder::new(65536).unwrap()),
            consumer: source.clone(),
            rebalances: rebalance_rx,
            clock: Arc::new(ManualClock::new(TS)),
            health: Default::default(),
            batch: BatchConfig {
                max_events: std::num::NonZeroUsize::new(max_events).unwrap(),
                max_delay_ms: Millis::new(max_delay_ms).unwrap(),
            },
            max_event_bytes: 65536,
            trim_wanted: Default::default(),
            role: super::Role::Live,
            flusher: sink.clone(),
        };
        let mut rx = rx;
        let stream = Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let task = tokio::spawn(engine.run_on(stream, shutdown_rx));
        let h = Harness {
            source,
            sink,
            messages,
            rebalances,
            shutdown,
            task,
        };
        h.rebalances
            .send(RebalanceEvent::Assigned(vec![tp(0), tp(1)]))
            .unwrap();
        // As the statistics callback reports them (src/source/mod.rs).
        h.rebalances
            .send(RebalanceEvent::FetchersStarted(vec![tp(0), tp(1)]))
            .unwrap();
        run_for(1).await;
        h
    }

    async fn send(&self, messages: Vec<(i32, i64)>) {
        let chunk = messages.into_iter().map(|(p, o)| gift(p, o)).collect();
        self.messages.send(chunk).unwrap();
        run_for(1).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_closes_when_full() {
    let h = Harness::start(3, 10_000).await;
    h.send((0..7).map(|o| (0, o)).collect()).await;
    assert_eq!(
        h.sink.sizes(),
        vec![3, 3],
        "two full batches start; one waits"
    );
    h.sink.finish(0, true);
    run_for(1).await;
    assert_eq!(
        h.sink.sizes(),
        vec![3, 3],
        "the seventh message waits for its batch to fill or age"
    );
    h.send(vec![(0, 7), (0, 8)]).await;
    assert_eq!(h.sink.sizes(), vec![3, 3, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_closes_when_old_enough() {
    let h = Harness::start(100, 200).await;
    h.send(vec![(0, 0), (1, 0)]).await;
    run_for(150).await;
    h.send(vec![(0, 1)]).await;
    assert!(h.sink.sizes().is_empty(), "not yet 200 ms old");
    run_for(60).await;
    assert_eq!(h.sink.sizes(), vec![3]);
    // The timer starts again with the next batch's first message.
    h.send(vec![(1, 1)]).await;
    run_for(150).await;
    assert_eq!(h.sink.sizes(), vec![3]);
    run_for(60).await;
    assert_eq!(h.sink.sizes(), vec![3, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_due_batch_keeps_growing_while_both_flush_slots_are_busy() {
    let h = Harness::start(10, 100).await;
    h.send((0..20).map(|o| (0, o)).collect()).await;
    assert_eq!(h.sink.sizes(), vec![10, 10]);
    h.send(vec![(1, 0)]).await;
    run_for(150).await;
    // Due, but no slot: it waits, and what arrives meanwhile joins it.
    h.send(vec![(1, 1), (1, 2)]).await;
    h.send(vec![(1, 3)]).await;
    run_for(500).await;
    assert_eq!(h.sink.sizes(), vec![10, 10]);
    h.sink.finish(0, true);
    run_for(1).await;
    assert_eq!(
        h.sink.sizes(),
        vec![10, 10, 4],
        "the due batch starts as soon as a slot is free"
    );
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_stay_in_order_when_flushes_finish_out_of_order() {
    let h = Harness::start(2, 10_000).await;
    h.send(vec![(0, 0), (0, 1), (0, 2), (1, 0)]).await;
    assert_eq!(h.sink.sizes(), vec![2, 2]);
    h.sink.finish(1, true);
    run_for(50).await;
    assert!(
        h.source.stored().is_empty(),
        "nothing before the first flush"
    );
    h.sink.finish(0, true);
    run_for(1).await;
    let t: Arc<str> = Arc::from("t");
    assert_eq!(
        h.source.stored(),
        vec![vec![(t.clone(), 0, 2)], vec![(t.clone(), 0, 3), (t, 1, 1)]]
    );
}

#[tokio::test(start_paused = true)]
async fn a_revoke_during_a_flush_commits_and_counts_nothing_of_the_revoked_partition() {
    let h = Harness::start(4, 10_000).await;
    h.send(vec![(0, 0), (1, 0), (0, 1), (1, 1)]).await;
    assert_eq!(h.sink.sizes(), vec![4]);
    // The next batch is being built when partition 1 is revoked.
    h.send(vec![(0, 2), (1, 2), (1, 3)]).await;
    h.rebalances
        .send(RebalanceEvent::Revoked(vec![tp(1)]))
        .unwrap();
    run_for(1).await;
    h.sink.finish(0, true);
    run_for(1).await;
    let t: Arc<str> = Arc::from("t");
    assert_eq!(
        h.source.stored(),
        vec![vec![(t.clone(), 0, 2)]],
        "the in-flight batch commits only partition 0"
    );
    h.send(vec![(0, 3)]).await;
    assert_eq!(h.sink.sizes(), vec![4, 4]);
    assert_eq!(
        h.sink.offsets(1),
        vec![(t, 0, 4)],
        "the built batch lost partition 1"
    );
    assert_eq!(
        h.sink.outcomes(1),
        vec![(0, Outcome::Applied, 2)],
        "the revoked partition's events are left to its next owner to count"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rewind_discards_the_unsent_batches_and_seeks_to_the_positions_in_redis() {
    let h = Harness::start(2, 100).await;
    h.send(vec![(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6)])
        .await;
    assert_eq!(h.sink.sizes(), vec![2, 2]);
    // Redis lost state while the first flush was applied.
    h.sink.0.positions.lock().unwrap().insert(tp(0), 2);
    h.sink.0.epoch.fetch_add(1, Ordering::SeqCst);
    h.sink.finish(0, true);
    run_for(1).await;
    let calls = h.source.calls();
    let t: Arc<str> = Arc::from("t");
    assert_eq!(calls.len(), 7, "{calls:?}");
    assert_eq!(
        calls[1],
        Call::Store(vec![(t.clone(), 0, 2)]),
        "applied before the loss"
    );
    assert_eq!(calls[2], Call::Pause(vec![tp(0), tp(1)]));
    let mut seeks = calls[3..6].to_vec();
    seeks.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        seeks,
        vec![
            Call::Seek(tp(0), Offset::Offset(2)),
            Call::Seek(tp(1), Offset::Beginning),
            // Redis's position is stored for commit; the log start is not.
            Call::Store(vec![(t, 0, 2)]),
        ]
    );
    assert_eq!(calls[6], Call::Resume(vec![tp(0), tp(1)]));
    // The second flush gives up on its own (it waited for the first); the
    // closed batch (4, 5) and the built one (6) were discarded.
    h.sink.finish(1, false);
    run_for(200).await;
    assert_eq!(h.sink.sizes(), vec![2, 2]);
    h.send(vec![(0, 2)]).await;
    run_for(200).await;
    assert_eq!(h.sink.sizes(), vec![2, 2, 1], "what is read again is kept");
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_the_batches_in_hand_in_order_then_commits() {
    let h = Harness::start(2, 10_000).await;
    h.send(vec![(0, 0), (0, 1), (0, 2)]).await;
    assert_eq!(h.sink.sizes(), vec![2]);
    h.shutdown.send(true).unwrap();
    run_for(1).await;
    h.sink.finish(0, true);
    run_for(1).await;
    assert_eq!(
        h.sink.sizes(),
        vec![2, 1],
        "the built batch is flushed after"
    );
    h.sink.finish(1, true);
    let sink = h.sink.clone();
    let source = h.source.clone();
    tokio::time::timeout(Duration::from_secs(10), h.task)
        .await
        .unwrap()
        .unwrap();
    drop(sink);
    let t: Arc<str> = Arc::from("t");
    assert_eq!(
        source.stored(),
        vec![vec![(t.clone(), 0, 2)], vec![(t, 0, 3)]]
    );
    // The commit runs on a thread of its own.
    for _ in 0..100 {
        if source.calls().contains(&Call::Commit) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no commit: {:?}", source.calls());
}

#[test]
fn the_backlog_holds_one_batch_beyond_those_in_flight_and_never_fewer_than_10000_messages() {
    // (max_events, messages held before taking stops), by hand.
    for (max_events, limit) in [
        (1, 10_000),
        (5000, 10_000),
        (10_000, 10_000),
        (20_000, 20_000),
        (100_000, 100_000),
    ] {
        assert_eq!(
            super::backpressure::backlog_limit(max_events),
            limit,
            "max_events {max_events}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_backlog_that_stays_full_pauses_fetching_after_a_second_and_resumes_below_half() {
    // backlog_limit(5000) is 10 000 messages (the floor): two batches
    // beyond the two in flight.
    let h = Harness::start(5000, 60_000).await;
    for chunk in 0..20 {
        h.send((0..1000).map(|i| (0, chunk * 1000 + i)).collect())
            .await;
    }
    assert_eq!(h.sink.sizes(), vec![5000, 5000]);
    let fetch_calls = || {
        let calls = h.source.calls();
        calls
            .into_iter()
            .skip(1) // the resume after the assignment
            .filter(|c| matches!(c, Call::Pause(_) | Call::Resume(_)))
            .collect::<Vec<_>>()
    };
    run_for(900).await;
    assert!(fetch_calls().is_empty(), "only taking stops at first");
    run_for(200).await;
    assert_eq!(fetch_calls(), [Call::Pause(vec![tp(0), tp(1)])]);
    h.sink.finish(0, true);
    run_for(1).await;
    assert_eq!(h.sink.sizes(), vec![5000, 5000, 5000]);
    assert_eq!(
        fetch_calls(),
        [Call::Pause(vec![tp(0), tp(1)])],
        "5000 waiting is not below half"
    );
    h.sink.finish(1, true);
    run_for(1).await;
    assert_eq!(h.sink.sizes(), vec![5000, 5000, 5000, 5000]);
    assert_eq!(
        fetch_calls(),
        [
            Call::Pause(vec![tp(0), tp(1)]),
            Call::Resume(vec![tp(0), tp(1)])
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn assigned_partitions_wait_paused_until_redis_answers_the_position_lookup() {
    let sink = FakeSink::default();
    sink.0.failing_lookups.store(3, Ordering::SeqCst);
    sink.0.positions.lock().unwrap().insert(tp(1), 40);
    let h = Harness::start_with(10, 100, sink).await;
    // Retries after 100, 200 and 400 ms: the fourth lookup answers.
    run_for(650).await;
    assert!(h.source.calls().is_empty(), "{:?}", h.source.calls());
    run_for(100).await;
    assert_eq!(
        h.source.calls(),
        vec![
            Call::Seek(tp(1), Offset::Offset(40)),
            // Everything before it is applied: committed even if nothing
            // new arrives.
            Call::Store(vec![(Arc::from("t"), 1, 40)]),
            Call::Resume(vec![tp(0), tp(1)])
        ],
        "partition 0 has no position: it reads from Kafka's committed offset"
    );
}

#[tokio::test(start_paused = true)]
async fn partitions_assigned_while_a_lookup_is_in_flight_all_resume() {
    let sink = FakeSink::default();
    // The first lookup fails and retries after 100 ms; meanwhile partition
    // 2 is assigned, whose lookup makes the first one's answer stale.
    sink.0.failing_lookups.store(2, Ordering::SeqCst);
    let h = Harness::start_with(10, 100, sink).await;
    run_for(50).await;
    h.rebalances
        .send(RebalanceEvent::Assigned(vec![tp(2)]))
        .unwrap();
    h.rebalances
        .send(RebalanceEvent::FetchersStarted(vec![tp(2)]))
        .unwrap();
    run_for(2_000).await;
    let resumed: Vec<TopicPartition> = h
        .source
        .calls()
        .into_iter()
        .flat_map(|c| match c {
            Call::Resume(parts) => parts,
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        sorted(&resumed),
        vec![tp(0), tp(1), tp(2)],
        "every assigned partition fetches once its position is known: {:?}",
        h.source.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn a_positioned_partition_is_sought_and_resumed_only_once_its_fetcher_started() {
    let sink = FakeSink::default();
    sink.0.positions.lock().unwrap().insert(tp(2), 70);
    let h = Harness::start_with(10, 100, sink).await;
    let before = h.source.calls().len();
    h.rebalances
        .send(RebalanceEvent::Assigned(vec![tp(2)]))
        .unwrap();
    // The lookup answers at once, but librdkafka has not reported the
    // fetcher started: a seek or resume now could make it drop the start.
    run_for(2_000).await;
    let touched = |calls: &[Call]| {
        calls.iter().any(|c| match c {
            Call::Seek(p, _) => *p == tp(2),
            Call::Resume(parts) | Call::Pause(parts) => parts.contains(&tp(2)),
            _ => false,
        })
    };
    let calls = h.source.calls();
    assert!(!touched(&calls[before..]), "{calls:?}");
    h.rebalances
        .send(RebalanceEvent::FetchersStarted(vec![tp(2)]))
        .unwrap();
    run_for(10).await;
    assert_eq!(
        h.source.calls()[before..].to_vec(),
        vec![
            Call::Seek(tp(2), Offset::Offset(70)),
            Call::Store(vec![(Arc::from("t"), 2, 70)]),
            Call::Resume(vec![tp(2)])
        ]
    );
}

/// Log lines written while `f` runs on this thread (the tests' runtime is
/// single-threaded, so the loop's lines are among them).
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_partition_whose_fetcher_does_not_start_is_logged_once() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink_lines = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || Captured(sink_lines.clone()))
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let warnings = || {
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter(|l| l.contains("has not started fetching") && l.contains("partition=2"))
            .count()
    };
    let h = Harness::start(10, 100).await;
    h.rebalances
        .send(RebalanceEvent::Assigned(vec![tp(2)]))
        .unwrap();
    // Statistics every second, none of them reporting partition 2 started.
    for second in 1..=90 {
        run_for(1_000).await;
        h.rebalances
            .send(RebalanceEvent::FetchersStarted(vec![tp(0), tp(1)]))
            .unwrap();
        run_for(1).await;
        let want = usize::from(second >= 30);
        assert_eq!(warnings(), want, "after {second} s");
    }
    let before = h.source.calls().len();
    h.rebalances
        .send(RebalanceEvent::FetchersStarted(vec![tp(2)]))
        .unwrap();
    run_for(10).await;
    assert!(
        h.source.calls()[before..].contains(&Call::Resume(vec![tp(2)])),
        "it still resumes once started"
    );
    assert_eq!(warnings(), 1);
}
