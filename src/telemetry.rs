//! Metric names (SPEC §6, a contract with the dashboards), their buckets and
//! descriptions, the Prometheus recorder behind `/metrics`, and logging set-up.
//!
//! Metrics are emitted per batch, not per event, and every label value comes
//! from a bounded set: topics and partitions of the configuration, board
//! names, reason and error codes.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

pub const EVENTS: &str = "rankflow_events_total";
pub const BOARD_UPDATES: &str = "rankflow_board_updates_total";
pub const BATCH_EVENTS: &str = "rankflow_batch_events";
pub const BATCH_FLUSH_SECONDS: &str = "rankflow_batch_flush_seconds";
pub const EVENT_LAG_SECONDS: &str = "rankflow_event_lag_seconds";
pub const CONSUMER_LAG: &str = "rankflow_consumer_lag";
pub const REDIS_ERRORS: &str = "rankflow_redis_errors_total";
pub const DLQ: &str = "rankflow_dlq_total";
pub const REBALANCES: &str = "rankflow_rebalances_total";
pub const WINDOW_EVICTIONS: &str = "rankflow_window_evictions_total";
/// Updates refused because the total would leave the exact range.
pub const SCORE_OVERFLOW: &str = "rankflow_score_overflow_total";
/// Partition groups skipped because their offsets were already applied.
pub const DUPLICATES: &str = "rankflow_duplicate_batches_total";
/// Failed attempts to write dead letters (the batch waits and is retried).
pub const DLQ_ERRORS: &str = "rankflow_dlq_errors_total";
/// 1 while the consumer can write to Redis, 0 during an outage.
pub const REDIS_UP: &str = "rankflow_redis_up";

const BATCH_EVENTS_BUCKETS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 20000.0, 50000.0,
];
const FLUSH_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds of the event-lag histogram; also used to pre-bucket a
/// batch's lags locally so the recorder sees one call per bucket.
pub const LAG_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder once per process and returns its handle.
/// Later calls (tests run several consumers in one process) share it.
pub fn install() -> Result<PrometheusHandle, String> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(BATCH_EVENTS.into()), BATCH_EVENTS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(BATCH_FLUSH_SECONDS.into()), FLUSH_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(EVENT_LAG_SECONDS.into()), LAG_BUCKETS)
        })
        .map_err(|e| e.to_string())?
        // A partition that moved to another consumer stops being reported
        // here once its gauge has not been refreshed for a while.
        .idle_timeout(MetricKindMask::GAUGE, Some(Duration::from_secs(30)));
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        // Another recorder won the race (or a test installed one).
        return HANDLE
            .get()
            .cloned()
            .ok_or_else(|| "a different metrics recorder is already installed".to_string());
    }
    describe();
    let _ = HANDLE.set(handle.clone());
    Ok(handle)
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        EVENTS,
        "Events taken from Kafka, by topic, type and outcome."
    );
    describe_counter!(
        BOARD_UPDATES,
        "Aggregated member updates written to a board."
    );
    describe_histogram!(BATCH_EVENTS, Unit::Count, "Events per flushed batch.");
    describe_histogram!(
        BATCH_FLUSH_SECONDS,
        Unit::Seconds,
        "Time to apply one batch to Redis."
    );
    describe_histogram!(
        EVENT_LAG_SECONDS,
        Unit::Seconds,
        "Apply time minus event time."
    );
    describe_gauge!(
        CONSUMER_LAG,
        "High watermark minus the consumer position, per partition."
    );
    describe_counter!(REDIS_ERRORS, "Redis failures by kind.");
    describe_counter!(DLQ, "Messages sent to the dead-letter topic, by reason.");
    describe_counter!(REBALANCES, "Partition assignments and revocations.");
    describe_counter!(
        WINDOW_EVICTIONS,
        "Window bucket entries evicted as windows slide."
    );
    describe_counter!(
        SCORE_OVERFLOW,
        "Updates refused because the total would leave ±2^53."
    );
    describe_counter!(
        DUPLICATES,
        "Partition groups skipped by the offset fence (already applied)."
    );
    describe_gauge!(
        REDIS_UP,
        "1 while Redis accepts batches, 0 during an outage."
    );
}

/// Reasons a message goes to the dead-letter topic (the `reason` label).
pub const DLQ_REASONS: &[&str] = &[
    "too_large",
    "invalid_utf8",
    "invalid_json",
    "not_object",
    "unknown_type",
    "schema",
    "future_ts",
    "expression",
];

/// Creates every counter series with its bounded label values at zero, so
/// dashboards and alerts see them (and `rate()` starts from 0) before the
/// first event of a kind.
pub fn register_series(boards: &[String], topics: &[String]) {
    for topic in topics {
        for kind in ["gift", "score", "play"] {
            for outcome in ["applied", "filtered", "invalid", "late"] {
                metrics::counter!(EVENTS, "topic" => topic.clone(), "type" => kind, "outcome" => outcome)
                    .absolute(0);
            }
        }
        metrics::counter!(EVENTS, "topic" => topic.clone(), "type" => "unknown", "outcome" => "invalid")
            .absolute(0);
    }
    for board in boards {
        metrics::counter!(BOARD_UPDATES, "board" => board.clone()).absolute(0);
        metrics::counter!(WINDOW_EVICTIONS, "board" => board.clone()).absolute(0);
        metrics::counter!(SCORE_OVERFLOW, "board" => board.clone()).absolute(0);
    }
    for reason in DLQ_REASONS {
        metrics::counter!(DLQ, "reason" => *reason).absolute(0);
    }
    for kind in ["io", "timeout", "noscript", "replication", "server"] {
        metrics::counter!(REDIS_ERRORS, "kind" => kind).absolute(0);
    }
    for kind in ["assign", "revoke"] {
        metrics::counter!(REBALANCES, "kind" => kind).absolute(0);
    }
    metrics::counter!(DUPLICATES).absolute(0);
    metrics::counter!(DLQ_ERRORS).absolute(0);
}

/// Records a batch's event lags, pre-bucketed so the recorder is called
/// once per non-empty bucket rather than once per event.
pub fn record_event_lags(now_ms: i64, event_ts: &[i64]) {
    if event_ts.is_empty() {
        return;
    }
    let mut sums = [0.0f64; 16];
    let mut counts = [0u64; 16];
    for &ts in event_ts {
        let lag = ((now_ms - ts) as f64 / 1000.0).max(0.0);
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

/// Log set-up: `RANKFLOW_LOG` (an EnvFilter, default `info`) and
/// `RANKFLOW_LOG_FORMAT=json` for machine-readable lines.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RANKFLOW_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,librdkafka=warn,redis=error"));
    // Colours only on a terminal: log files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let json = std::env::var("RANKFLOW_LOG_FORMAT").is_ok_and(|v| v == "json");
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
