//! What the live consumers' checks decided, for a shadow board's backfill
//! (docs/rebuilds.md): checks decide once, when the live consumers first
//! see an event, and a replay must not decide again (rate states forget,
//! and a rule may have changed). The record of their decisions is the
//! quarantine topic: its letters' `rankflow-source` headers name every
//! quarantined message.
//!
//! A backfill batch may only be applied once that record is complete for
//! it: the live consumers record a partition's position only after the
//! batch's letters were delivered, so once their positions have passed the
//! batch's last offsets, a read of the quarantine topic to its end holds
//! every letter of the batch's messages. [`Verdicts::settle`] waits for
//! that, reads on from where its last read ended, and drops the quarantined
//! events from the batch.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::{Mutex, watch};

use crate::board::keys;
use crate::config::KafkaConfig;
use crate::sink::store::Store;
use crate::sink::updates::EventSet;
use crate::source::client::Role;
use crate::source::scan::{self, Next, Start};

/// How long one read of the quarantine topic may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between looks at the live consumers' positions, and after a
/// failed read.
const PAUSE: Duration = Duration::from_millis(200);

/// The quarantined messages, read from the quarantine topic.
pub(crate) struct Verdicts {
    kafka: KafkaConfig,
    topic: String,
    store: Store,
    prefix: String,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// Per quarantine partition, the next offset to read.
    read: HashMap<i32, i64>,
    /// Quarantined sources: partition field (`<topic>/<partition>`) →
    /// offsets.
    quarantined: HashMap<String, HashSet<i64>>,
    /// Per partition field, the live position below which `quarantined`
    /// is complete.
    complete: HashMap<String, i64>,
}

impl Seen {
    fn complete_to(&self, ends: &[(String, i64)]) -> bool {
        ends.iter()
            .all(|(f, next)| self.complete.get(f).is_some_and(|c| c >= next))
    }
}

/// Which of `events` (index into `fields`, offset) `seen` names
/// quarantined.
fn answer(seen: &Seen, fields: &[String], events: EventSet) -> EventSet {
    events
        .into_iter()
        .filter(|(i, o)| {
            fields
                .get(*i as usize)
                .and_then(|f| seen.quarantined.get(f))
                .is_some_and(|q| q.contains(o))
        })
        .collect()
}

/// Reads a letter's `rankflow-source` header: `topic/partition/offset`
/// → (`topic/partition`, offset).
fn source_of(header: &str) -> Option<(String, i64)> {
    let (field, offset) = header.rsplit_once('/')?;
    let (_, partition) = field.rsplit_once('/')?;
    partition.parse::<i32>().ok()?;
    Some((field.to_string(), offset.parse().ok()?))
}

impl Verdicts {
    pub(crate) fn new(kafka: &KafkaConfig, topic: &str, store: Store, prefix: &str) -> Verdicts {
        Verdicts {
            kafka: kafka.clone(),
            topic: topic.to_string(),
            store,
            prefix: prefix.to_string(),
            seen: Mutex::default(),
        }
    }

    /// Waits until the record is complete for messages below `ends`
    /// (partition field, next offset), then answers which of `events`
    /// (index into `fields`, offset) were quarantined. `None` at shutdown.
    pub(crate) async fn quarantined(
        &self,
        ends: &[(String, i64)],
        fields: &[String],
        events: EventSet,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<EventSet> {
        loop {
            {
                let seen = self.seen.lock().await;
                if seen.complete_to(ends) {
                    return Some(answer(&seen, fields, events));
                }
            }
            // Waited for without the record locked: a live batch may ask
            // it meanwhile (`quarantined_now`), and the live positions
            // this waits for may depend on that batch.
            let live = self.live_beyond(ends, shutdown).await?;
            let mut seen = self.seen.lock().await;
            if seen.complete_to(ends) {
                continue;
            }
            match self.read_on(&mut seen).await {
                Ok(()) => seen.complete.extend(live),
                Err(e) => {
                    drop(seen);
                    tracing::warn!(topic = %self.topic, error = %e, "Could not read the quarantine topic for a backfill; trying again.");
                    tokio::select! {
                        _ = tokio::time::sleep(PAUSE) => {}
                        _ = shutdown.wait_for(|s| *s) => return None,
                    }
                }
            }
        }
    }

    /// [`Verdicts::quarantined`] without waiting: `None` unless the live
    /// consumers' positions have reached `ends` already (a live batch asks
    /// of events an earlier batch dealt with; if that batch's positions
    /// are not recorded, only the batch asking could record them).
    pub(crate) async fn quarantined_now(
        &self,
        ends: &[(String, i64)],
        fields: &[String],
        events: EventSet,
    ) -> Option<EventSet> {
        let live = self.live_at(ends).await?;
        let mut seen = self.seen.lock().await;
        if !seen.complete_to(ends) {
            self.read_on(&mut seen).await.ok()?;
            seen.complete.extend(live);
        }
        Some(answer(&seen, fields, events))
    }

    /// The live consumers' positions of `ends`' partitions, if they have
    /// reached `ends`.
    async fn live_at(&self, ends: &[(String, i64)]) -> Option<Vec<(String, i64)>> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(keys::positions_key(&self.prefix));
        for (f, _) in ends {
            cmd.arg(f);
        }
        let live = self.store.query::<Vec<Option<i64>>>(&cmd).await.ok()?;
        let at: Vec<(String, i64)> = ends
            .iter()
            .zip(live)
            .map(|((f, _), l)| (f.clone(), l.unwrap_or(0)))
            .collect();
        at.iter()
            .zip(ends)
            .all(|((_, l), (_, e))| l >= e)
            .then_some(at)
    }

    /// Waits until the live consumers' positions reach `ends`; answers
    /// them.
    async fn live_beyond(
        &self,
        ends: &[(String, i64)],
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Vec<(String, i64)>> {
        loop {
            if let Some(at) = self.live_at(ends).await {
                return Some(at);
            }
            tokio::select! {
                _ = tokio::time::sleep(PAUSE) => {}
                _ = shutdown.wait_for(|s| *s) => return None,
            }
        }
    }

    /// Reads the quarantine topic on from where the last read ended, to its
    /// end.
    async fn read_on(&self, seen: &mut Seen) -> Result<(), String> {
        let kafka = self.kafka.clone();
        let topic = self.topic.clone();
        let start = Start::After(seen.read.iter().map(|(p, o)| (*p, *o)).collect());
        let read = tokio::task::spawn_blocking(move || {
            let mut letters = Vec::new();
            scan::scan(
                &kafka,
                Role::BackfillReader,
                &topic,
                start,
                READ_TIMEOUT,
                |m| {
                    use rdkafka::Message;
                    use rdkafka::message::Headers;
                    let source = m.headers().and_then(|h| {
                        h.iter()
                            .find(|h| h.key == "rankflow-source")
                            .and_then(|h| h.value)
                            .and_then(|v| std::str::from_utf8(v).ok())
                            .and_then(source_of)
                    });
                    letters.push((m.partition(), m.offset(), source));
                    Next::More
                },
            )
            .map(|()| letters)
        })
        .await
        .map_err(|e| e.to_string())??;
        for (partition, offset, source) in read {
            let next = seen.read.entry(partition).or_insert(0);
            *next = (*next).max(offset + 1);
            if let Some((field, offset)) = source {
                seen.quarantined.entry(field).or_default().insert(offset);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_name_a_partition_field_and_an_offset() {
        assert_eq!(source_of("events/3/120"), Some(("events/3".into(), 120)));
        assert_eq!(
            source_of("a/b/0/7"),
            Some(("a/b/0".into(), 7)),
            "a slash in a topic name"
        );
        for bad in ["events/3", "events/x/1", "events/3/x", ""] {
            assert_eq!(source_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_record_is_complete_only_below_every_position_it_was_read_after() {
        let mut seen = Seen::default();
        let ends = vec![("t/0".to_string(), 10), ("t/1".to_string(), 5)];
        assert!(!seen.complete_to(&ends));
        seen.complete.insert("t/0".into(), 10);
        assert!(!seen.complete_to(&ends), "t/1 not yet");
        seen.complete.insert("t/1".into(), 4);
        assert!(!seen.complete_to(&ends), "t/1 behind");
        seen.complete.insert("t/1".into(), 9);
        assert!(seen.complete_to(&ends));
    }
}
