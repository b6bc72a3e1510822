//! Looking up where partitions resume: the positions recorded in Redis,
//! read by a task of its own (retrying with capped backoff while Redis is
//! unreachable, so the loop keeps polling meanwhile) and reported to the
//! loop with the generation they were asked for.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

use super::partitions::ResumeAt;
use super::port::Sink;

/// First and largest pause between lookups.
const RETRY_START: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// A lookup's answer.
#[derive(Debug)]
pub(crate) struct Resume {
    /// Assignment generation the lookup belongs to.
    pub(crate) generation: u64,
    pub(crate) offsets: ResumeAt,
}

/// Reads the positions of `parts` and sends them to `tx`. A partition
/// without a position in Redis resumes at its fallback (`None`: where Kafka
/// has it). Gives up only at shutdown.
pub(crate) fn look_up<S: Sink + ?Sized>(
    sink: Arc<S>,
    generation: u64,
    parts: ResumeAt,
    tx: UnboundedSender<Resume>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let keys: Vec<_> = parts.iter().map(|(p, _)| p.clone()).collect();
        let mut delay = RETRY_START;
        loop {
            match sink.positions(keys.clone()).await {
                Ok(found) => {
                    let offsets = parts
                        .into_iter()
                        .map(|(p, fallback)| {
                            let recorded = found.get(&p).copied().map(Offset::Offset);
                            (p, recorded.or(fallback))
                        })
                        .collect();
                    let _ = tx.send(Resume {
                        generation,
                        offsets,
                    });
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "Cannot read partition positions from Redis; the partitions wait.");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.changed() => return,
            }
            delay = (delay * 2).min(RETRY_MAX);
        }
    });
}
