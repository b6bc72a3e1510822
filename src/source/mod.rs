//! The Kafka side: the consumer-group member (rdkafka `StreamConsumer` on
//! tokio), its client properties, and the callbacks librdkafka runs inside
//! `poll`: rebalances (reported to the consumer loop over a channel, with a
//! synchronous commit before partitions are revoked) and statistics (the
//! per-partition `rankflow_consumer_lag` gauge, computed from librdkafka's
//! own figures so no watermark query blocks an async worker). The error
//! type, [`SourceError`], lives in `error.rs` and is re-exported here.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::TopicPartitionList;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::KafkaConfig;
use crate::health::Health;
use crate::telemetry::events::{PartitionLag, Rebalanced};

pub(crate) mod client;
pub(crate) mod error;
pub(crate) mod outage;
pub(crate) mod probe;
pub(crate) mod producer;
pub(crate) mod scan;

pub(crate) use client::client_config;
pub use error::SourceError;

/// A partition: topic and number.
pub(crate) type TopicPartition = (Arc<str>, i32);

/// What the rebalance and statistics callbacks tell the consumer loop.
#[derive(Debug, Clone)]
pub(crate) enum RebalanceEvent {
    Assigned(Vec<TopicPartition>),
    Revoked(Vec<TopicPartition>),
    /// librdkafka has started the fetchers of these assigned partitions
    /// (repeated with every statistics report), so the application may now
    /// seek and resume them without racing the start
    /// (src/engine/partitions.rs).
    FetchersStarted(Vec<TopicPartition>),
}

/// librdkafka's fetch states once a partition's fetcher has started.
const STARTED_FETCH_STATES: &[&str] = &[
    "offset-query",
    "offset-wait",
    "validate-epoch-wait",
    "active",
];

/// Callbacks run by librdkafka; shared with the consumer loop.
pub(crate) struct Context {
    events: UnboundedSender<RebalanceEvent>,
    health: Arc<Health>,
    /// Currently assigned partitions: the lag gauge reports only these.
    assigned: Mutex<HashSet<(String, i32)>>,
    /// Rate-limited logging of Kafka errors.
    pub(crate) reports: outage::KafkaReports,
    /// Whether statistics come (`statistics.interval.ms` > 0): they tell
    /// when a fetcher started; without them the loop is told at once.
    stats_enabled: bool,
    /// Whether the statistics feed `rankflow_consumer_lag` (the live
    /// consumer's; a backfill reads the same partitions again).
    reports_lag: bool,
}

impl Context {
    pub fn new(events: UnboundedSender<RebalanceEvent>, health: Arc<Health>) -> Context {
        Context {
            events,
            health,
            assigned: Mutex::new(HashSet::new()),
            reports: outage::KafkaReports::default(),
            stats_enabled: true,
            reports_lag: true,
        }
    }

    /// A context whose statistics leave `rankflow_consumer_lag` alone.
    pub(crate) fn without_lag(mut self) -> Context {
        self.reports_lag = false;
        self
    }

    /// Tells the loop which assigned partitions' fetchers have started
    /// (statistics come in order with the rebalance callbacks, so a report
    /// never speaks of an earlier assignment's fetcher; the loop ignores
    /// partitions it already knows started). Sent on every statistics tick
    /// while anything is assigned, even when none started: the loop then
    /// also looks for partitions whose start is overdue (such a partition
    /// has no lag series: librdkafka learns its watermarks from fetches).
    fn report_started(&self, stats: &Statistics, assigned: &HashSet<(String, i32)>) {
        let mut started = Vec::new();
        for (topic, t) in &stats.topics {
            for (id, p) in &t.partitions {
                if assigned.contains(&(topic.clone(), *id))
                    && STARTED_FETCH_STATES.contains(&p.fetch_state.as_str())
                {
                    started.push((Arc::from(topic.as_str()), *id));
                }
            }
        }
        if !assigned.is_empty() {
            let _ = self.events.send(RebalanceEvent::FetchersStarted(started));
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| (Arc::from(e.topic()), e.partition()))
        .collect()
}

impl ClientContext for Context {
    fn stats(&self, stats: Statistics) {
        let assigned = match self.assigned.lock() {
            Ok(a) => a.clone(),
            Err(_) => return,
        };
        if stats.brokers.values().any(|b| b.state == "UP") {
            self.health.kafka_ok();
            self.reports.reachable();
        }
        self.report_started(&stats, &assigned);
        if !self.reports_lag {
            return;
        }
        for (topic, t) in &stats.topics {
            for (id, p) in &t.partitions {
                if *id < 0 || !assigned.contains(&(topic.clone(), *id)) {
                    continue;
                }
                // Position: the next offset the consumer hands to rankflow;
                // before anything was fetched, the committed offset.
                let position = if p.app_offset >= 0 {
                    p.app_offset
                } else if p.committed_offset >= 0 {
                    p.committed_offset
                } else {
                    continue;
                };
                if p.hi_offset < 0 {
                    continue;
                }
                PartitionLag {
                    topic,
                    partition: *id,
                    lag: p.hi_offset - position,
                }
                .emit();
            }
        }
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // Connection failures are also reported through `error` below, as
        // one clear line per retry; librdkafka's own line would repeat it.
        if fac == "FAIL" {
            tracing::debug!(target: "librdkafka", facility = fac, "{message}");
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", facility = fac, "{message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if self.reports.error(&error, reason) {
            self.health
                .kafka_failed(&format!("all brokers down: {reason}"));
        }
    }
}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = partitions(tpl);
            // Commit what Redis has acknowledged before the partitions move,
            // so the next owner starts as late as possible. Offsets are only
            // ever stored after acknowledgement, so this commits nothing unapplied.
            if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
                tracing::debug!(error = %e, "Nothing to commit before revocation.");
            }
            if let Ok(mut a) = self.assigned.lock() {
                for (t, p) in &revoked {
                    a.remove(&(t.to_string(), *p));
                }
                self.health.set_assigned(a.len());
            }
            Rebalanced {
                assigned: false,
                partitions: &revoked,
            }
            .emit();
            let _ = self.events.send(RebalanceEvent::Revoked(revoked));
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let assigned = partitions(tpl);
                // Nothing is fetched until the consumer loop has looked up
                // where Redis says each partition resumes (and sought there).
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!(error = %e, "Could not pause newly assigned partitions; they start at Kafka's committed offsets.");
                }
                if let Ok(mut a) = self.assigned.lock() {
                    for (t, p) in &assigned {
                        a.insert((t.to_string(), *p));
                    }
                    self.health.set_assigned(a.len());
                }
                self.health.kafka_ok();
                Rebalanced {
                    assigned: true,
                    partitions: &assigned,
                }
                .emit();
                let _ = self.events.send(RebalanceEvent::Assigned(assigned.clone()));
                if !self.stats_enabled {
                    let _ = self.events.send(RebalanceEvent::FetchersStarted(assigned));
                }
            }
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "Rebalance failed; the group will retry.");
            }
            Rebalance::Revoke(_) => {}
        }
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        if let Err(e) = result {
            tracing::debug!(error = %e, "Offset commit failed; the next commit carries the offsets again.");
        }
    }
}

/// The consumer type rankflow runs.
pub(crate) type KafkaConsumer = StreamConsumer<Context>;

/// Creates the consumer and subscribes to the configured topics.
pub(crate) fn subscribe(
    config: &KafkaConfig,
    mut context: Context,
) -> Result<KafkaConsumer, SourceError> {
    let mut cc = client_config(config)?;
    context.stats_enabled = cc
        .get("statistics.interval.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|ms| ms > 0);
    let consumer: KafkaConsumer = cc
        .set_log_level(RDKafkaLogLevel::Warning)
        .create_with_context(context)
        .map_err(SourceError::Config)?;
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|source| SourceError::Subscribe {
            topics: config.topics.clone(),
            source,
        })?;
    Ok(consumer)
}

/// A partition list from (topic, partition, offset) triples.
pub(crate) fn offsets_list<'a>(
    offsets: impl Iterator<Item = (&'a Arc<str>, i32, i64)>,
) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition, offset) in offsets {
        let _ = tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset));
    }
    tpl
}
