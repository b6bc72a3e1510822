//! Backpressure, in two steps. A full backlog first only stops taking
//! messages: librdkafka's bounded prefetch queue then stops the fetcher
//! without dropping what it holds. Only if Redis stays behind for
//! [`PAUSE_AFTER`] are the partitions paused, so that polling can go on
//! (group membership) without fetching; pausing drops the prefetch, so it
//! is kept for real stalls. Fetching resumes once the backlog is below half.
//! The backlog's limit is [`backlog_limit`].

use std::time::Duration;

use tokio::time::Instant;

/// Batches' worth of messages that may wait for Redis before fetching
/// pauses (the one being built and the closed ones)... One is enough to
/// keep Redis busy: taking and encoding a batch is several times faster
/// than applying it, so the next batch is ready before the one in Redis
/// is done. (Two were kept with 20,000-event batches; with the default of
/// 100,000 a second one only held memory: same events/s, 90 MB less RSS
/// in the window benchmark, BENCHMARKS.md, "Batch size".)
const BACKLOG_BATCHES: usize = 1;
/// ...but never fewer messages than this, so that small batches (down to
/// one event) do not pause and resume the fetcher on every flush.
const MIN_BACKLOG_MESSAGES: usize = 10_000;

/// Messages held in memory (closed batches plus the one being built) at
/// which fetching pauses; it resumes below half. This, with librdkafka's
/// `queued.max.messages.kbytes`, bounds the consumer's memory while Redis is
/// slow or down.
pub(crate) fn backlog_limit(max_events: usize) -> usize {
    (max_events * BACKLOG_BATCHES).max(MIN_BACKLOG_MESSAGES)
}

/// How long a full backlog may stop the loop from polling Kafka before the
/// partitions are paused and polling resumes (well below any sensible
/// `max.poll.interval.ms`).
pub(crate) const PAUSE_AFTER: Duration = Duration::from_millis(1000);

/// What the loop must do about fetching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Nothing,
    Pause,
    Resume,
}

#[derive(Debug)]
pub(crate) struct Backpressure {
    /// Messages held (closed batches plus the one being built) at which
    /// the loop stops taking messages.
    limit: usize,
    /// Since when the backlog has been full (until it fell below half).
    since: Option<Instant>,
}

impl Backpressure {
    pub fn new(limit: usize) -> Backpressure {
        Backpressure { limit, since: None }
    }

    /// Looks at the backlog; `paused` is whether the partitions are paused.
    pub(crate) fn observe(&mut self, backlog: usize, paused: bool) -> Step {
        if backlog >= self.limit {
            let since = *self.since.get_or_insert_with(Instant::now);
            if !paused && since.elapsed() >= PAUSE_AFTER {
                return Step::Pause;
            }
        } else if backlog < self.limit / 2 && self.since.is_some() {
            self.since = None;
            if paused {
                return Step::Resume;
            }
        }
        Step::Nothing
    }

    /// Messages are taken unless the backlog is full; once the partitions
    /// are paused, polling goes on (it fetches nothing).
    pub(crate) fn takes_messages(&self, paused: bool) -> bool {
        self.since.is_none() || paused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_backlog_stops_taking_then_pauses_after_a_second_and_resumes_below_half() {
        let mut bp = Backpressure::new(100);
        assert_eq!(bp.observe(100, false), Step::Nothing);
        assert!(!bp.takes_messages(false));
        tokio::time::advance(PAUSE_AFTER - Duration::from_millis(1)).await;
        assert_eq!(bp.observe(100, false), Step::Nothing);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(bp.observe(100, false), Step::Pause);
        assert!(bp.takes_messages(true), "polling goes on while paused");
        assert_eq!(bp.observe(50, true), Step::Nothing, "not below half yet");
        assert_eq!(bp.observe(49, true), Step::Resume);
        assert!(bp.takes_messages(false));
    }
}
