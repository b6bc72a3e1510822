//! The producer whose deliveries rankflow waits for (dead letters and
//! quarantined events, audit entries, period-closed messages): a librdkafka
//! producer with a polling thread of its own.
//!
//! rdkafka's `FutureProducer` polls in steps of 100 ms and spins through
//! the last millisecond of each: librdkafka waits in whole milliseconds, so
//! what is left under one is polled again and again without waiting. `perf`
//! on the checks benchmark put that at about 3% of a core for an idle
//! producer. This one polls in steps of a second, so it spins one
//! millisecond in a thousand; a delivery is reported as soon as it comes
//! either way, because the poll serves each event as it arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::oneshot;

/// How long one poll of the polling thread lasts; also how long the thread
/// outlives its producer's last handle.
const POLL_STEP: Duration = Duration::from_secs(1);

/// How long [`Producer::send`] waits between tries while librdkafka's local
/// queue is full.
const FULL_QUEUE_WAIT: Duration = Duration::from_millis(10);

/// Where a message was written: its partition and offset.
pub type Written = (i32, i64);

/// What a delivery report answers.
type Report = Result<Written, KafkaError>;

/// Hands each delivery report to the one waiting for it.
pub struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<oneshot::Sender<Report>>;

    fn delivery(&self, result: &DeliveryResult<'_>, waiting: Self::DeliveryOpaque) {
        let report = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.clone()),
        };
        // Nobody waits any more when the sender gave up: nothing to tell.
        let _ = waiting.send(report);
    }
}

/// A message to send.
pub struct Record<'a> {
    /// The topic written to.
    pub topic: &'a str,
    /// The message's key (none: librdkafka picks the partition).
    pub key: Option<&'a [u8]>,
    /// The message's value.
    pub payload: &'a [u8],
    /// Its headers.
    pub headers: Option<OwnedHeaders>,
}

impl<'a> Record<'a> {
    /// `payload` for `topic`, without key or headers.
    pub fn to(topic: &'a str, payload: &'a [u8]) -> Record<'a> {
        Record {
            topic,
            key: None,
            payload,
            headers: None,
        }
    }
}

/// A sent message's delivery, to wait for.
pub struct Delivery(oneshot::Receiver<Report>);

impl Delivery {
    /// Where the message was written, or why it was not.
    pub async fn written(self) -> Report {
        // The report's sender dropped unanswered: librdkafka dropped the
        // message without reporting (the producer went away).
        self.0.await.unwrap_or(Err(KafkaError::Canceled))
    }
}

/// The producer; cheap to clone. The polling thread stops within a second
/// of the last clone's drop, and the librdkafka client with it.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
}

struct Shared {
    base: Arc<BaseProducer<Deliveries>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Producer {
    /// Starts the polling thread (named `thread`) of `base`.
    pub(crate) fn start(base: BaseProducer<Deliveries>, thread: &str) -> std::io::Result<Producer> {
        let base = Arc::new(base);
        let stop = Arc::new(AtomicBool::new(false));
        let (polled, stopped) = (base.clone(), stop.clone());
        std::thread::Builder::new()
            .name(thread.to_string())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    polled.poll(POLL_STEP);
                }
            })?;
        Ok(Producer {
            shared: Arc::new(Shared { base, stop }),
        })
    }

    /// Queues `record` for sending (a full local queue is
    /// `QueueFull`: the record may be queued again).
    fn enqueue(&self, record: &Record<'_>) -> Result<Delivery, KafkaError> {
        let (tx, rx) = oneshot::channel();
        let mut base =
            BaseRecord::with_opaque_to(record.topic, Box::new(tx)).payload(record.payload);
        if let Some(key) = record.key {
            base = base.key(key);
        }
        if let Some(headers) = &record.headers {
            base = base.headers(headers.clone());
        }
        self.shared
            .base
            .send(base)
            .map(|()| Delivery(rx))
            .map_err(|(e, _)| e)
    }

    /// Queues `record` for sending, waiting out a full local queue for up
    /// to `queue_timeout`.
    pub async fn enqueue_waiting(
        &self,
        record: &Record<'_>,
        queue_timeout: Duration,
    ) -> Result<Delivery, KafkaError> {
        let deadline = Instant::now() + queue_timeout;
        loop {
            match self.enqueue(record) {
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(FULL_QUEUE_WAIT).await;
                }
                queued => return queued,
            }
        }
    }

    /// Sends `record` and waits for its delivery; a full local queue is
    /// tried again for up to `queue_timeout`.
    pub async fn send(&self, record: Record<'_>, queue_timeout: Duration) -> Report {
        self.enqueue_waiting(&record, queue_timeout)
            .await?
            .written()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;

    /// CPU time (ms) used so far by this process's thread named `name`.
    fn thread_cpu_ms(name: &str) -> Option<u64> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // Fields after the parenthesised name: utime and stime are the
            // 12th and 13th, in clock ticks of 10 ms.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            let ticks: u64 =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            return Some(ticks * 10);
        }
        None
    }

    fn idle_producer() -> BaseProducer<Deliveries> {
        // Nothing listens there: the producer stays idle, trying to connect.
        ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("log_level", "0")
            .create_with_context(Deliveries)
            .expect("a producer with default properties")
    }

    #[test]
    fn an_idle_producers_polling_thread_does_not_spin() {
        let producer = Producer::start(idle_producer(), "rf-idle-test").expect("thread");
        // rdkafka's own stepping, for comparison: polls of 100 ms.
        let base = Arc::new(idle_producer());
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (base.clone(), stop.clone());
        let reference = std::thread::Builder::new()
            .name("rf-idle-ref".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    b.poll(Duration::from_millis(100));
                }
            })
            .expect("thread");
        std::thread::sleep(Duration::from_millis(500));
        let start = (thread_cpu_ms("rf-idle-test"), thread_cpu_ms("rf-idle-ref"));
        std::thread::sleep(Duration::from_secs(4));
        let end = (thread_cpu_ms("rf-idle-test"), thread_cpu_ms("rf-idle-ref"));
        stop.store(true, Ordering::Relaxed);
        let _ = reference.join();
        let ours = end.0.expect("our thread") - start.0.expect("our thread");
        let theirs = end.1.expect("reference") - start.1.expect("reference");
        eprintln!("4 s idle: ours {ours} ms of CPU, 100 ms steps {theirs} ms");
        assert!(
            ours <= 20,
            "the polling thread used {ours} ms of CPU in 4 s idle"
        );
        drop(producer);
    }
}
