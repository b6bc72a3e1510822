//! Shutdown: finish the flushes in flight and the batches in hand, in
//! order, within [`SHUTDOWN_FLUSH_BUDGET`], then commit synchronously
//! within [`COMMIT_BUDGET`] (together within the 10 s shutdown budget).

use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::flush::Flushed;
use super::port::{Sink, Source};
use super::queue::FlushQueue;
use super::run::ConsumerLoop;

/// Part of the 10 s shutdown budget spent waiting for Redis...
pub(crate) const SHUTDOWN_FLUSH_BUDGET: Duration = Duration::from_secs(7);
/// ...and for the final offset commit.
pub(crate) const COMMIT_BUDGET: Duration = Duration::from_secs(2);

impl<Src: Source, Snk: Sink> ConsumerLoop<Src, Snk> {
    pub(super) async fn drain(&mut self) {
        let queue = std::mem::replace(&mut self.queue, FlushQueue::new(1, Duration::ZERO));
        let leftover = queue.into_leftover();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_FLUSH_BUDGET;
        let mut applied_all = true;
        for handle in leftover.inflight {
            applied_all &= self.await_flush(handle, deadline).await;
        }
        // A receiver that is not shut down lets these last flushes retry
        // until the deadline instead of giving up at the first failure.
        let (_keep, running) = watch::channel(false);
        let mut previous = leftover.previous;
        for batch in leftover.closed {
            if !applied_all {
                // Order matters for the fences: never apply past a gap.
                break;
            }
            let (handle, done) = self.sink.start(batch, previous.take(), &running);
            previous = Some(done);
            applied_all &= self.await_flush(handle, deadline).await;
        }
        self.commit(applied_all).await;
    }

    /// A synchronous commit waits for the group coordinator; with the
    /// broker unreachable that could outlast the shutdown budget, so it
    /// runs on its own thread and is given [`COMMIT_BUDGET`].
    async fn commit(&self, applied_all: bool) {
        let source = self.source.clone();
        let (tx, rx) = oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(source.commit());
        });
        match tokio::time::timeout(COMMIT_BUDGET, rx).await {
            Ok(Ok(Ok(()))) => {
                tracing::info!(all_applied = applied_all, "Offsets committed on shutdown.")
            }
            Ok(Ok(Err(e))) => tracing::info!(error = %e, "No offsets to commit on shutdown."),
            _ => tracing::warn!(
                "The final commit did not finish in time (broker unreachable?); the group keeps the last committed offsets and the fences skip what is re-read."
            ),
        }
    }

    async fn await_flush(
        &mut self,
        mut handle: JoinHandle<Flushed>,
        deadline: tokio::time::Instant,
    ) -> bool {
        match tokio::time::timeout_at(deadline, &mut handle).await {
            Ok(Ok(Flushed::Applied(batch, report, took))) => {
                self.on_flushed(&batch, &report, took);
                true
            }
            Ok(_) => false,
            Err(_) => {
                handle.abort();
                tracing::warn!(
                    "Redis did not acknowledge the last batch before the shutdown deadline; its offsets stay uncommitted and will be consumed again."
                );
                false
            }
        }
    }
}
