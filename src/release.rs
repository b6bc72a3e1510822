//! `rankflow release` (docs/checks.md): applies one reviewed quarantined
//! message to the boards as if it had passed its checks, exactly once.
//!
//! The message is taken from its letter in `[kafka] quarantine_topic` (the
//! letter whose `rankflow-source` is the given source; the read starts at
//! the original message's time when the original is still in its topic),
//! so only a message that was quarantined can be released. Its payload goes
//! through the board rules, not the checks, and moderation treats it as
//! any event. Its updates are applied under a fence field of their own,
//! `release:<topic>/<partition>/<offset>`, in every board instance they
//! touch: releasing it again finds them applied and changes nothing. The
//! original's redeliveries keep failing their check (rule checks are
//! deterministic, rate decisions remembered), so the event is never counted
//! twice; a released event does not count toward its member's rate.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::Message;
use rdkafka::message::Headers;

use crate::admin::audit::{Audit, AuditEntry, AuditError, rfc3339};
use crate::board::BoardSet;
use crate::board::resolve::Resolver;
use crate::config::Config;
use crate::engine::batch::{Batch, Taken};
use crate::event::Decoder;
use crate::moderation::{Cell, MemberHasher};
use crate::sink::store::{Store, StoreError};
use crate::sink::writer::Writer;
use crate::source::client::Role;
use crate::source::scan::{Next, Start, scan};
use crate::telemetry::Outcome;

/// How long reading the quarantine topic for the letter may take.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(300);

/// How long reading the original message may take.
const ORIGINAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Read the letter's original this long before its time: producers'
/// clocks and the topic's timestamps need not agree to the millisecond.
const TIME_SLACK_MS: i64 = 60_000;

/// Why a release did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// `--source` is not `topic/partition/offset`, or the configuration has
    /// no quarantine topic: permanent.
    #[error("{0}")]
    Invalid(String),
    /// No letter with that source in the quarantine topic: nothing applied.
    #[error("no letter with rankflow-source {at} in the quarantine topic {topic}: nothing applied")]
    NotFound {
        /// The source asked for.
        at: String,
        /// The quarantine topic.
        topic: String,
    },
    /// The letter's payload is not a valid event, or a rule fails on it.
    #[error("the quarantined message {at} cannot be applied: {reason}")]
    Unusable {
        /// The source asked for.
        at: String,
        /// What the decoder or the rules said.
        reason: String,
    },
    /// Kafka could not be read.
    #[error("reading {topic}: {reason}")]
    Kafka {
        /// The topic being read.
        topic: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// Redis failed; running the release again is safe.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The release was applied but not announced on the audit topic.
    #[error("applied, but not announced: {0}")]
    Audit(#[from] AuditError),
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The check that had quarantined it (`rankflow-check`).
    pub check: String,
    /// `applied`, `already released`, `hidden`, `erased`, `late` or
    /// `filtered`.
    pub outcome: &'static str,
}

/// A quarantined message as its letter carries it.
struct Letter {
    check: String,
    payload: Vec<u8>,
}

/// Releases the message at `source` (`topic/partition/offset`).
pub async fn release(
    config: &Config,
    boards: Arc<BoardSet>,
    store: Store,
    source: &str,
    now_ms: i64,
) -> Result<Released, ReleaseError> {
    let (topic, partition, offset) = parse_source(source)?;
    let quarantine = config.kafka.quarantine_topic.clone().ok_or_else(|| {
        ReleaseError::Invalid(
            "setting `kafka.quarantine_topic` is not set: there is nothing to release".into(),
        )
    })?;
    let letter = {
        let (kafka, source) = (config.kafka.clone(), source.to_string());
        let (topic, name) = (topic.clone(), quarantine.clone());
        tokio::task::spawn_blocking(move || {
            find_letter(&kafka, &topic, partition, offset, &name, &source)
        })
        .await
        .map_err(|e| ReleaseError::Kafka {
            topic: quarantine.clone(),
            reason: e.to_string(),
        })??
    };
    let outcome = apply(
        config,
        boards,
        store,
        source,
        offset,
        &letter.payload,
        now_ms,
    )
    .await?;
    let audit = Audit::new(&config.kafka, config.admin.audit_topic.as_deref())?;
    audit
        .record(&AuditEntry {
            at: rfc3339(now_ms),
            actor: "cli".into(),
            action: "release".into(),
            target: format!("source:{source}"),
            detail: serde_json::json!({"check": letter.check, "outcome": outcome, "at": now_ms}),
        })
        .await?;
    Ok(Released {
        check: letter.check,
        outcome,
    })
}

fn parse_source(source: &str) -> Result<(String, i32, i64), ReleaseError> {
    let bad = || {
        ReleaseError::Invalid(format!(
            "--source {source:?}: expected topic/partition/offset, as in the letter's rankflow-source header"
        ))
    };
    let mut parts = source.rsplitn(3, '/');
    let offset = parts.next().and_then(|o| o.parse().ok()).ok_or_else(bad)?;
    let partition = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let topic = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
    Ok((topic.to_string(), partition, offset))
}

/// Finds the letter of `source` in the quarantine topic, reading from the
/// original message's time when the original can still be read.
fn find_letter(
    kafka: &crate::config::KafkaConfig,
    topic: &str,
    partition: i32,
    offset: i64,
    quarantine: &str,
    source: &str,
) -> Result<Letter, ReleaseError> {
    let failed = |topic: &str| {
        let topic = topic.to_string();
        move |reason| ReleaseError::Kafka { topic, reason }
    };
    // The original's time, if it can still be read (a brief read: an
    // offset past its partition's end may get no answer at all).
    let mut original_ms = None;
    let at = Start::At(partition, offset);
    let read = scan(
        kafka,
        Role::ReleaseReader,
        topic,
        at,
        ORIGINAL_TIMEOUT,
        |m| {
            if m.offset() == offset {
                original_ms = m.timestamp().to_millis();
            }
            Next::Stop
        },
    );
    if let Err(reason) = read {
        tracing::debug!(
            topic,
            partition,
            offset,
            reason,
            "The original message could not be read; searching the quarantine topic from its start."
        );
    }
    let start = original_ms.map_or(Start::Beginning, |ms| Start::Time(ms - TIME_SLACK_MS));
    let mut found = None;
    scan(
        kafka,
        Role::ReleaseReader,
        quarantine,
        start,
        SEARCH_TIMEOUT,
        |m| {
            let header = |name: &str| {
                m.headers()?
                    .iter()
                    .find(|h| h.key == name)
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            };
            if header("rankflow-source").as_deref() != Some(source) {
                return Next::More;
            }
            found = Some(Letter {
                check: header("rankflow-check").unwrap_or_default(),
                payload: m.payload().unwrap_or_default().to_vec(),
            });
            Next::Stop
        },
    )
    .map_err(failed(quarantine))?;
    found.ok_or_else(|| ReleaseError::NotFound {
        at: source.to_string(),
        topic: quarantine.to_string(),
    })
}

/// Applies the payload's updates under the release's own fence; answers
/// what became of them.
async fn apply(
    config: &Config,
    boards: Arc<BoardSet>,
    store: Store,
    source: &str,
    offset: i64,
    payload: &[u8],
    now_ms: i64,
) -> Result<&'static str, ReleaseError> {
    let unusable = |reason: String| ReleaseError::Unusable {
        at: source.to_string(),
        reason,
    };
    let decoder =
        Decoder::new(config.kafka.max_event_bytes.get()).map_err(|e| unusable(e.to_string()))?;
    let event = decoder
        .decode(payload)
        .map_err(|e| unusable(e.to_string()))?;
    let mut updates = Vec::new();
    crate::rules::evaluate(&boards, &event, &mut updates).map_err(|e| unusable(e.to_string()))?;
    let hasher = MemberHasher::new(config.admin.erase_key.as_ref().map(|k| k.expose()));
    let writer =
        Writer::new(store.clone(), boards.clone()).with_moderation(Arc::new(Cell::new(hasher)));
    writer.load_moderation().await?;
    let mut batch = Batch::default();
    let part = batch.take_release(&Arc::from(source), offset);
    let taken = Taken {
        part,
        offset,
        ts: event.ts,
        kind: event.kind,
    };
    let snapshot = writer.moderation().current();
    let mut resolver = Resolver::new(&boards);
    batch.add_moderated_event(
        &boards,
        &mut resolver,
        taken,
        &mut updates,
        now_ms,
        &snapshot,
    );
    let prepared = writer.prepare(&batch.updates);
    let report = writer
        .apply(&batch.updates, &prepared, &store.scripts(), now_ms)
        .await?;
    let settled = batch.settle(&report);
    let outcome = settled.outcomes.first().map(|(_, _, o, _)| *o);
    Ok(match outcome {
        None => "already released",
        Some(Outcome::Applied) => "applied",
        Some(o) => o.label(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_as_in_the_letters_headers() {
        assert_eq!(
            parse_source("events/3/1200").ok(),
            Some(("events".to_string(), 3, 1200))
        );
        assert_eq!(
            parse_source("a.b-c_d/0/0").ok(),
            Some(("a.b-c_d".to_string(), 0, 0))
        );
        for bad in ["events/3", "events/x/1", "/3/4", "events/3/-"] {
            assert!(parse_source(bad).is_err(), "{bad}");
        }
    }
}
