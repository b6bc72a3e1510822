//! Internal events, in the spirit of vector's `internal_events`: one type per
//! thing rankflow reports, whose `emit` writes its log line and its metrics
//! together, so a number on the dashboard and a sentence in the log cannot
//! disagree and no other module names a metric. Emitted per batch (or per
//! retry, rebalance, statistics tick), never per event; every label value
//! comes from a bounded set.
//!
//! This module is a leaf: it takes plain values (names, counts, durations),
//! not rankflow's domain types.

use std::fmt::Display;
use std::time::Duration;

use super::codes::{DlqReason, Outcome, RedisErrorKind};
use super::names::*;

/// Events of one topic and type that ended with one outcome in a batch.
pub(crate) struct EventsCounted<'a> {
    pub(crate) topic: &'a str,
    /// Event type name, or `unknown` when the message had none.
    pub(crate) kind: &'static str,
    pub(crate) outcome: Outcome,
    pub(crate) count: u64,
}

impl EventsCounted<'_> {
    pub(crate) fn emit(self) {
        if self.count == 0 {
            return;
        }
        metrics::counter!(
            EVENTS,
            "topic" => self.topic.to_string(),
            "type" => self.kind,
            "outcome" => self.outcome.label()
        )
        .increment(self.count);
    }
}

/// What one acknowledged batch wrote to one board.
pub(crate) struct BoardWritten<'a> {
    pub(crate) board: &'a str,
    /// Aggregated member updates written.
    pub(crate) updates: u64,
    /// Window bucket entries evicted by the batch's calls.
    pub(crate) evicted: u64,
    /// Updates refused because the total would leave ±2^53.
    pub(crate) overflow: u64,
}

impl BoardWritten<'_> {
    pub(crate) fn emit(self) {
        if self.updates > 0 {
            metrics::counter!(BOARD_UPDATES, "board" => self.board.to_string())
                .increment(self.updates);
        }
        WindowEvicted {
            board: self.board,
            entries: self.evicted,
        }
        .emit();
        if self.overflow > 0 {
            metrics::counter!(SCORE_OVERFLOW, "board" => self.board.to_string())
                .increment(self.overflow);
            tracing::error!(board = %self.board, updates = self.overflow, "Updates refused: the total would leave the exact range ±2^53.");
        }
    }
}

/// Window bucket entries evicted (by a batch's calls or the trimmer).
pub(crate) struct WindowEvicted<'a> {
    pub(crate) board: &'a str,
    pub(crate) entries: u64,
}

impl WindowEvicted<'_> {
    pub(crate) fn emit(self) {
        if self.entries > 0 {
            metrics::counter!(WINDOW_EVICTIONS, "board" => self.board.to_string())
                .increment(self.entries);
        }
    }
}

/// An acknowledged batch: its size and how long Redis took.
pub(crate) struct BatchFlushed {
    pub(crate) messages: usize,
    pub(crate) took: Duration,
}

impl BatchFlushed {
    pub(crate) fn emit(self) {
        metrics::histogram!(BATCH_EVENTS).record(self.messages as f64);
        metrics::histogram!(BATCH_FLUSH_SECONDS).record(self.took.as_secs_f64());
    }
}

/// Partition ranges the offset fences skipped (already applied).
pub(crate) struct DuplicatesSkipped {
    pub(crate) ranges: u64,
}

impl DuplicatesSkipped {
    pub(crate) fn emit(self) {
        if self.ranges == 0 {
            return;
        }
        metrics::counter!(DUPLICATES).increment(self.ranges);
        tracing::info!(
            ranges = self.ranges,
            "Skipped partition ranges that were already applied (redelivery after a restart or rebalance)."
        );
    }
}

/// Invalid messages a batch skipped (one line per batch, with the first).
pub(crate) struct InvalidSkipped<'a> {
    pub(crate) count: usize,
    pub(crate) first_reason: DlqReason,
    pub(crate) first_detail: &'a str,
    /// `topic/partition/offset` of the first.
    pub(crate) first_source: String,
}

impl InvalidSkipped<'_> {
    pub(crate) fn emit(self) {
        if self.count == 0 {
            return;
        }
        tracing::warn!(
            count = self.count,
            first_reason = %self.first_reason,
            first_detail = %self.first_detail,
            first_source = %self.first_source,
            "Invalid events were skipped."
        );
    }
}

/// Dead letters written to the dead-letter topic, per reason.
pub(crate) struct DeadLettered {
    pub(crate) reason: DlqReason,
    pub(crate) count: u64,
}

impl DeadLettered {
    pub(crate) fn emit(self) {
        if self.count > 0 {
            metrics::counter!(DLQ, "reason" => self.reason.code()).increment(self.count);
        }
    }
}

/// Events of an acknowledged batch that failed a check, per check.
pub(crate) struct Quarantined<'a> {
    pub(crate) check: &'a str,
    pub(crate) count: u64,
}

impl Quarantined<'_> {
    pub(crate) fn emit(self) {
        if self.count > 0 {
            metrics::counter!(QUARANTINED, "check" => self.check.to_string()).increment(self.count);
        }
    }
}

/// Dead letters could not be written; the batch waits and is retried.
pub(crate) struct DeadLetterWriteFailed<'a> {
    pub(crate) error: &'a dyn Display,
    pub(crate) letters: usize,
    pub(crate) retry_in: Duration,
}

impl DeadLetterWriteFailed<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!(DLQ_ERRORS).increment(1);
        tracing::warn!(
            error = %self.error,
            letters = self.letters,
            retry_in_ms = self.retry_in.as_millis() as u64,
            "Could not write dead letters; the batch is not acknowledged until they are written."
        );
    }
}

/// Redis answered (a batch, a connection, a health ping).
pub(crate) struct RedisReachable;

impl RedisReachable {
    pub(crate) fn emit(self) {
        metrics::gauge!(REDIS_UP).set(1.0);
    }
}

/// Where a Redis failure happened, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedisCall {
    /// Applying a batch (retried with backoff).
    Batch,
    /// Connecting at start-up (retried).
    Connect,
    /// The periodic health ping.
    Ping,
    /// Redis lost its scripts: the consumer re-reads from its positions.
    LostState,
}

/// A Redis call failed.
pub(crate) struct RedisFailed<'a> {
    pub(crate) call: RedisCall,
    pub(crate) kind: RedisErrorKind,
    pub(crate) error: &'a dyn Display,
    /// Attempt number (connect) or events in the batch (batch); 0 if none.
    pub(crate) attempt: u32,
    pub(crate) events: usize,
    pub(crate) retry_in: Duration,
}

impl RedisFailed<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!(REDIS_ERRORS, "kind" => self.kind.label()).increment(1);
        let retry_in_ms = self.retry_in.as_millis() as u64;
        let kind = self.kind.label();
        let retriable = self.kind.is_retriable();
        match self.call {
            RedisCall::LostState => return,
            RedisCall::Batch => tracing::warn!(
                error = %self.error,
                kind,
                retriable,
                events = self.events,
                retry_in_ms,
                "Could not apply a batch to Redis; retrying it (fetching stops once the backlog is full)."
            ),
            RedisCall::Connect => tracing::warn!(
                attempt = self.attempt,
                error = %self.error,
                kind,
                retry_in_ms,
                "Redis is not reachable yet; retrying."
            ),
            RedisCall::Ping => {
                tracing::debug!(error = %self.error, kind, "Redis did not answer the health ping.")
            }
        }
        metrics::gauge!(REDIS_UP).set(0.0);
    }
}

/// Partitions assigned to or revoked from this consumer.
pub(crate) struct Rebalanced<'a> {
    pub(crate) assigned: bool,
    pub(crate) partitions: &'a dyn std::fmt::Debug,
}

impl Rebalanced<'_> {
    pub(crate) fn emit(self) {
        let kind = if self.assigned { "assign" } else { "revoke" };
        metrics::counter!(REBALANCES, "kind" => kind).increment(1);
        if self.assigned {
            tracing::info!(partitions = ?self.partitions, "Partitions assigned.");
        } else {
            tracing::info!(partitions = ?self.partitions, "Partitions revoked.");
        }
    }
}

/// One assigned partition's lag, from librdkafka's statistics.
pub(crate) struct BackfillLag<'a> {
    pub(crate) board: &'a str,
    pub(crate) lag: i64,
}

impl BackfillLag<'_> {
    pub(crate) fn emit(self) {
        metrics::gauge!(BACKFILL_LAG, "board" => self.board.to_string())
            .set(self.lag.max(0) as f64);
    }
}

pub(crate) struct PartitionLag<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) lag: i64,
}

impl PartitionLag<'_> {
    pub(crate) fn emit(self) {
        metrics::gauge!(CONSUMER_LAG, "topic" => self.topic.to_string(), "partition" => self.partition.to_string())
            .set(self.lag.max(0) as f64);
    }
}

/// Event lags of a batch's applied events, pre-bucketed so the recorder is
/// called once per non-empty bucket rather than once per event.
pub(crate) struct EventLags<'a> {
    pub(crate) now_ms: i64,
    pub(crate) event_ts: &'a [i64],
}

impl EventLags<'_> {
    pub(crate) fn emit(self) {
        if self.event_ts.is_empty() {
            return;
        }
        let mut sums = [0.0f64; LAG_BUCKETS.len() + 1];
        let mut counts = [0u64; LAG_BUCKETS.len() + 1];
        for &ts in self.event_ts {
            let lag = ((self.now_ms - ts) as f64 / 1000.0).max(0.0);
            let i = LAG_BUCKETS.partition_point(|&b| b < lag);
            sums[i] += lag;
            counts[i] += 1;
        }
        let h = metrics::histogram!(EVENT_LAG_SECONDS);
        for i in 0..counts.len() {
            if counts[i] > 0 {
                // The bucket's mean keeps `_sum` right and lands in the same bucket.
                h.record_many(sums[i] / counts[i] as f64, counts[i] as usize);
            }
        }
    }
}

/// The archiver's backlog, measured once per tick.
pub(crate) struct ArchiveBacklog {
    /// Due periods whose close time has passed.
    pub(crate) pending: u64,
    /// Age past its close of the oldest of them, seconds (0 when none).
    pub(crate) oldest_seconds: f64,
}

impl ArchiveBacklog {
    pub(crate) fn emit(self) {
        metrics::gauge!(ARCHIVE_PENDING).set(self.pending as f64);
        metrics::gauge!(ARCHIVE_OLDEST_PENDING).set(self.oldest_seconds);
        if self.pending > 0 {
            tracing::debug!(
                pending = self.pending,
                oldest_seconds = self.oldest_seconds,
                "Closed periods are waiting to be archived."
            );
        }
    }
}

/// One closed period copied to the archive.
pub(crate) struct PeriodArchived<'a> {
    pub(crate) board: &'a str,
    /// `board/scope/view/period`.
    pub(crate) period: &'a str,
    pub(crate) members: u64,
    pub(crate) took: Duration,
}

impl PeriodArchived<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!(ARCHIVE_PERIODS, "board" => self.board.to_string()).increment(1);
        metrics::counter!(ARCHIVE_ROWS, "board" => self.board.to_string()).increment(self.members);
        metrics::histogram!(ARCHIVE_COPY_SECONDS).record(self.took.as_secs_f64());
        tracing::info!(
            period = %self.period,
            members = self.members,
            took_ms = self.took.as_millis() as u64,
            "Archived a closed period."
        );
    }
}

/// A step of the archiver failed; the period stays due and is retried.
pub(crate) struct ArchiveFailed<'a> {
    /// Bounded: `ArchiveError::kind()`.
    pub(crate) kind: &'static str,
    /// `board/scope/view/period`, or the due item when it has none.
    pub(crate) period: &'a str,
    pub(crate) error: &'a dyn Display,
    pub(crate) retry_in: Duration,
}

impl ArchiveFailed<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!(ARCHIVE_ERRORS, "kind" => self.kind).increment(1);
        tracing::warn!(
            period = %self.period,
            kind = self.kind,
            error = %self.error,
            retry_in_ms = self.retry_in.as_millis() as u64,
            "Could not archive a closed period; its keys are kept and it is tried again."
        );
    }
}

/// The number of Server-Sent Events streams open changed.
pub(crate) struct StreamsOpen {
    pub(crate) open: usize,
}

impl StreamsOpen {
    pub(crate) fn emit(self) {
        metrics::gauge!(STREAMS_OPEN).set(self.open as f64);
    }
}

/// A live-view poller found its view changed and pushed it to all of its
/// subscribers at once.
pub(crate) struct StreamPushed {
    /// `top` or `member`.
    pub(crate) kind: &'static str,
}

impl StreamPushed {
    pub(crate) fn emit(self) {
        metrics::counter!(STREAM_EVENTS, "kind" => self.kind).increment(1);
    }
}
