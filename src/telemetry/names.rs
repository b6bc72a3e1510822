//! Metric names (docs/metrics.md, a contract with the dashboards) and histogram
//! buckets. Only [`super::events`] and the recorder set-up use them.

pub(crate) const EVENTS: &str = "rankflow_events_total";
pub(crate) const BOARD_UPDATES: &str = "rankflow_board_updates_total";
pub(crate) const BATCH_EVENTS: &str = "rankflow_batch_events";
pub(crate) const BATCH_FLUSH_SECONDS: &str = "rankflow_batch_flush_seconds";
pub(crate) const EVENT_LAG_SECONDS: &str = "rankflow_event_lag_seconds";
pub(crate) const CONSUMER_LAG: &str = "rankflow_consumer_lag";
pub(crate) const REDIS_ERRORS: &str = "rankflow_redis_errors_total";
pub(crate) const DLQ: &str = "rankflow_dlq_total";
pub(crate) const REBALANCES: &str = "rankflow_rebalances_total";
pub(crate) const WINDOW_EVICTIONS: &str = "rankflow_window_evictions_total";
/// Updates refused because the total would leave the exact range.
pub(crate) const SCORE_OVERFLOW: &str = "rankflow_score_overflow_total";
/// Partition groups skipped because their offsets were already applied.
pub(crate) const DUPLICATES: &str = "rankflow_duplicate_batches_total";
/// Events that failed a check and went to the quarantine topic, per check.
pub(crate) const QUARANTINED: &str = "rankflow_quarantined_total";
/// A shadow board's backfill: messages it still has to replay to reach
/// the live consumers.
pub(crate) const BACKFILL_LAG: &str = "rankflow_backfill_lag";
/// Failed attempts to write dead letters (the batch waits and is retried).
pub(crate) const DLQ_ERRORS: &str = "rankflow_dlq_errors_total";
/// 1 while the consumer can write to Redis, 0 during an outage.
pub(crate) const REDIS_UP: &str = "rankflow_redis_up";
/// Closed periods copied to the archive, per board.
pub(crate) const ARCHIVE_PERIODS: &str = "rankflow_archive_periods_total";
/// Member rows copied to the archive, per board.
pub(crate) const ARCHIVE_ROWS: &str = "rankflow_archive_rows_total";
/// Due periods whose close time has passed, not yet archived.
pub(crate) const ARCHIVE_PENDING: &str = "rankflow_archive_pending";
/// Age past its close of the oldest pending period (0 when none).
pub(crate) const ARCHIVE_OLDEST_PENDING: &str = "rankflow_archive_oldest_pending_seconds";
/// Archiver failures, by kind.
pub(crate) const ARCHIVE_ERRORS: &str = "rankflow_archive_errors_total";
/// Time to copy one period.
pub(crate) const ARCHIVE_COPY_SECONDS: &str = "rankflow_archive_copy_seconds";
/// Server-Sent Events streams open now (docs/http-api.md).
pub(crate) const STREAMS_OPEN: &str = "rankflow_streams_open";
/// Changes pushed by the live-view pollers, by kind (`top`, `member`):
/// counted once per poller tick that changed, not once per client.
pub(crate) const STREAM_EVENTS: &str = "rankflow_stream_events_total";

pub(crate) const BATCH_EVENTS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 20000.0, 50000.0,
    100000.0, 250000.0,
];
pub(crate) const FLUSH_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// One period's copy: a small one takes milliseconds, 1,000,000 members
/// some seconds, a slow database minutes.
pub(crate) const ARCHIVE_COPY_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Upper bounds of the event-lag histogram; also used to pre-bucket a
/// batch's lags locally so the recorder sees one call per bucket.
pub(crate) const LAG_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0,
];

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric rankflow emits, with its help text for `/metrics`.
pub(crate) struct Metric {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) help: &'static str,
}

/// Every metric rankflow emits; `describe` covers exactly these (a test
/// checks that no name above is missing).
pub(crate) const METRICS: &[Metric] = &[
    Metric {
        name: EVENTS,
        kind: Kind::Counter,
        help: "Events taken from Kafka, by topic, type and outcome.",
    },
    Metric {
        name: BOARD_UPDATES,
        kind: Kind::Counter,
        help: "Aggregated member updates written to a board.",
    },
    Metric {
        name: BATCH_EVENTS,
        kind: Kind::Histogram,
        help: "Events per flushed batch.",
    },
    Metric {
        name: BATCH_FLUSH_SECONDS,
        kind: Kind::Histogram,
        help: "Time to apply one batch to Redis.",
    },
    Metric {
        name: EVENT_LAG_SECONDS,
        kind: Kind::Histogram,
        help: "Apply time minus event time.",
    },
    Metric {
        name: CONSUMER_LAG,
        kind: Kind::Gauge,
        help: "High watermark minus the consumer position, per partition.",
    },
    Metric {
        name: REDIS_ERRORS,
        kind: Kind::Counter,
        help: "Redis failures by kind.",
    },
    Metric {
        name: DLQ,
        kind: Kind::Counter,
        help: "Messages sent to the dead-letter topic, by reason.",
    },
    Metric {
        name: BACKFILL_LAG,
        kind: Kind::Gauge,
        help: "Messages a shadow board's backfill has still to replay to reach the live consumers, by board.",
    },
    Metric {
        name: QUARANTINED,
        kind: Kind::Counter,
        help: "Events that failed a check and went to the quarantine topic, by check.",
    },
    Metric {
        name: REBALANCES,
        kind: Kind::Counter,
        help: "Partition assignments and revocations.",
    },
    Metric {
        name: WINDOW_EVICTIONS,
        kind: Kind::Counter,
        help: "Window bucket entries evicted as windows slide.",
    },
    Metric {
        name: SCORE_OVERFLOW,
        kind: Kind::Counter,
        help: "Updates refused because the total would leave ±2^53.",
    },
    Metric {
        name: DUPLICATES,
        kind: Kind::Counter,
        help: "Partition ranges skipped by the offset fence (already applied).",
    },
    Metric {
        name: DLQ_ERRORS,
        kind: Kind::Counter,
        help: "Failed attempts to write dead letters (the batch waits and is retried).",
    },
    Metric {
        name: REDIS_UP,
        kind: Kind::Gauge,
        help: "1 while Redis accepts batches, 0 during an outage.",
    },
    Metric {
        name: ARCHIVE_PERIODS,
        kind: Kind::Counter,
        help: "Closed periods copied to the archive, by board.",
    },
    Metric {
        name: ARCHIVE_ROWS,
        kind: Kind::Counter,
        help: "Member rows copied to the archive, by board.",
    },
    Metric {
        name: ARCHIVE_PENDING,
        kind: Kind::Gauge,
        help: "Closed periods waiting to be archived (close time passed).",
    },
    Metric {
        name: ARCHIVE_OLDEST_PENDING,
        kind: Kind::Gauge,
        help: "How long past its close the oldest waiting period is (0 when none).",
    },
    Metric {
        name: ARCHIVE_ERRORS,
        kind: Kind::Counter,
        help: "Archiver failures by kind (the period is retried on the next tick).",
    },
    Metric {
        name: ARCHIVE_COPY_SECONDS,
        kind: Kind::Histogram,
        help: "Time to copy one closed period to the archive.",
    },
    Metric {
        name: STREAMS_OPEN,
        kind: Kind::Gauge,
        help: "Server-Sent Events streams open now.",
    },
    Metric {
        name: STREAM_EVENTS,
        kind: Kind::Counter,
        help: "Live-view changes pushed, by kind (top, member); one per change, whatever the number of clients.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `rankflow_*` name declared in this file is described.
    #[test]
    fn every_metric_is_described() {
        let source = include_str!("names.rs");
        let declared: Vec<&str> = source
            .lines()
            .filter(|l| l.starts_with("pub") && l.contains(" const ") && l.contains("\"rankflow_"))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        assert!(declared.len() >= 14, "{declared:?}");
        for name in declared {
            assert!(
                METRICS.iter().any(|m| m.name == name),
                "{name} is declared but not in METRICS"
            );
        }
    }
}
