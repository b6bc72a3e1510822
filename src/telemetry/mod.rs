//! Everything rankflow reports about itself: the bounded label vocabularies
//! ([`codes`]), the internal events that log and count together
//! ([`events`], the only place that writes a metric), the metric names
//! (docs/metrics.md), the Prometheus recorder behind `/metrics` with the metrics'
//! descriptions, and logging set-up.
//!
//! Metrics are emitted per batch, not per event, and every label value comes
//! from a bounded set: topics and partitions of the configuration, board
//! names, reason and error codes.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

pub(crate) mod codes;
pub(crate) mod events;
mod names;

pub use codes::Outcome;
pub use codes::{DlqReason, RedisErrorKind};
use names::*;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder once per process and returns its handle.
/// Later calls (tests run several consumers in one process) share it.
pub(crate) fn install() -> Result<PrometheusHandle, String> {
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
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(ARCHIVE_COPY_SECONDS.into()),
                ARCHIVE_COPY_BUCKETS,
            )
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

/// Gives every metric in [`names::METRICS`] its help text and unit.
fn describe() {
    use metrics::Unit;
    for m in METRICS {
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, m.help),
            Kind::Gauge => metrics::describe_gauge!(m.name, m.help),
            Kind::Histogram if m.name.ends_with("_seconds") => {
                metrics::describe_histogram!(m.name, Unit::Seconds, m.help)
            }
            Kind::Histogram => metrics::describe_histogram!(m.name, Unit::Count, m.help),
        }
    }
}

/// Creates every counter series with its bounded label values at zero, so
/// dashboards and alerts see them (and `rate()` starts from 0) before the
/// first event of a kind.
pub(crate) fn register_series(boards: &[String], topics: &[String]) {
    for topic in topics {
        for kind in ["gift", "score", "play"] {
            for outcome in Outcome::ALL {
                metrics::counter!(EVENTS, "topic" => topic.clone(), "type" => kind, "outcome" => outcome.label())
                    .absolute(0);
            }
        }
        metrics::counter!(EVENTS, "topic" => topic.clone(), "type" => "unknown", "outcome" => Outcome::Invalid.label())
            .absolute(0);
    }
    for board in boards {
        metrics::counter!(BOARD_UPDATES, "board" => board.clone()).absolute(0);
        metrics::counter!(WINDOW_EVICTIONS, "board" => board.clone()).absolute(0);
        metrics::counter!(SCORE_OVERFLOW, "board" => board.clone()).absolute(0);
    }
    for reason in DlqReason::ALL {
        metrics::counter!(DLQ, "reason" => reason.code()).absolute(0);
    }
    for kind in RedisErrorKind::ALL {
        metrics::counter!(REDIS_ERRORS, "kind" => kind.label()).absolute(0);
    }
    for kind in ["assign", "revoke"] {
        metrics::counter!(REBALANCES, "kind" => kind).absolute(0);
    }
    metrics::counter!(DUPLICATES).absolute(0);
    metrics::counter!(DLQ_ERRORS).absolute(0);
    for kind in ["top", "member"] {
        metrics::counter!(STREAM_EVENTS, "kind" => kind).absolute(0);
    }
    metrics::gauge!(STREAMS_OPEN).set(0.0);
}

/// `rankflow_quarantined_total` at zero for every configured check.
pub(crate) fn register_check_series(checks: &[std::sync::Arc<str>]) {
    for check in checks {
        metrics::counter!(QUARANTINED, "check" => check.to_string()).absolute(0);
    }
}

/// The archive's series at zero before the first period closes: the
/// counters of each archived board, every error kind, and an empty backlog.
pub(crate) fn register_archive_series(boards: &[String], error_kinds: &[&'static str]) {
    for board in boards {
        metrics::counter!(ARCHIVE_PERIODS, "board" => board.clone()).absolute(0);
        metrics::counter!(ARCHIVE_ROWS, "board" => board.clone()).absolute(0);
    }
    for kind in error_kinds {
        metrics::counter!(ARCHIVE_ERRORS, "kind" => *kind).absolute(0);
    }
    metrics::gauge!(ARCHIVE_PENDING).set(0.0);
    metrics::gauge!(ARCHIVE_OLDEST_PENDING).set(0.0);
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
