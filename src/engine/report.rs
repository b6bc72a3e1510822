//! What an acknowledged batch reports: its settled outcome counts (see
//! [`Batch::settle`]), what it wrote per board, the ranges the fences
//! skipped, its invalid events, its size and time, and its events' lags.
//! Once per batch, through `telemetry::events`.

use std::time::Duration;

use crate::board::BoardSet;
use crate::deadletter::Verdict;
use crate::sink::report::FlushReport;
use crate::telemetry::events;

use super::batch::Batch;

/// Emits all of a batch's metrics and log lines.
pub(crate) fn emit_batch(
    boards: &BoardSet,
    batch: &Batch,
    report: &FlushReport,
    took: Duration,
    now: i64,
) {
    emit_writes(boards, report);
    let settled = batch.settle(report);
    for (topic, kind, outcome, count) in &settled.outcomes {
        events::EventsCounted {
            topic,
            kind: kind.map_or("unknown", |k| k.name()),
            outcome: *outcome,
            count: *count,
        }
        .emit();
    }
    let invalid = || {
        batch
            .record
            .dead_letters
            .iter()
            .filter_map(|d| match d.why {
                Verdict::Invalid(reason) => Some((d, reason)),
                Verdict::Quarantined(_) => None,
            })
    };
    let mut quarantined = std::collections::BTreeMap::<&str, u64>::new();
    for d in &batch.record.dead_letters {
        if let Verdict::Quarantined(check) = &d.why {
            *quarantined.entry(check).or_default() += 1;
        }
    }
    for (check, count) in quarantined {
        events::Quarantined { check, count }.emit();
    }
    if let Some((first, first_reason)) = invalid().next() {
        events::InvalidSkipped {
            count: invalid().count(),
            first_reason,
            first_detail: &first.detail,
            first_source: format!("{}/{}/{}", first.topic, first.partition, first.offset),
        }
        .emit();
    }
    events::BatchFlushed {
        messages: batch.messages(),
        took,
    }
    .emit();
    events::EventLags {
        now_ms: now,
        event_ts: &settled.applied_ts,
    }
    .emit();
}

/// What a batch wrote per board and the ranges the fences skipped: all a
/// backfill's batch reports, since the live consumers count its events.
pub(crate) fn emit_writes(boards: &BoardSet, report: &FlushReport) {
    for (i, c) in report.boards.iter().enumerate() {
        events::BoardWritten {
            board: &boards.boards[i].name,
            updates: c.applied,
            evicted: c.evicted,
            overflow: c.overflow,
        }
        .emit();
    }
    events::DuplicatesSkipped {
        ranges: report.conflicts,
    }
    .emit();
}
