//! The period-closed message (docs/history.md, `schemas/period-closed.schema.json`)
//! and its producer: one JSON message per completed copy on
//! `[archive] closed_topic`, keyed `board/scope/view/period`, with the final
//! top `closed_top` entries read back from PostgreSQL (so the message says
//! what the archive holds); entries of composite boards carry `"fields"`
//! as the API's do.
//!
//! Announcing runs in its own transaction under the period's advisory lock:
//! only if `announced_at` is NULL, the message is published and its
//! delivery awaited, then `announced_at` is set and the transaction
//! commits. At least once; exactly once unless the archiver dies between
//! the delivery and the commit.

use std::time::Duration;

use chrono::SecondsFormat;
use serde::Serialize;
use tokio_postgres::types::ToSql;

use crate::board::composite::FieldValues;
use crate::board::score::MAX_EXACT;
use crate::config::KafkaConfig;
use crate::source::client::{self, ClientError, Role};
use crate::source::producer::{Producer, Record};

use super::ArchiveError;
use super::copy::{Archive, PeriodKey};
use super::schema::LOCK_CLASS;

/// The message, field for field as the schema has it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClosedMessage {
    pub(crate) board: String,
    pub(crate) scope: String,
    pub(crate) view: String,
    pub(crate) period: String,
    pub(crate) start: String,
    pub(crate) end: String,
    pub(crate) members: u64,
    pub(crate) archived_at: String,
    /// The top entries, as the HTTP API shows them.
    pub(crate) entries: Vec<Entry>,
}

/// One ranked member, shaped as the HTTP API's entries (not imported from
/// the reader, which reads the archive: no import cycle).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub(crate) rank: u64,
    pub member: String,
    /// `null` when not a number: a composite member without a first field.
    #[serde(serialize_with = "score_json")]
    pub(crate) score: f64,
    /// A composite board's fields by name (docs/score-encoding.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<FieldValues>,
}

/// Integral scores as JSON integers (`42`, not `42.0`), as the API writes them.
fn score_json<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() <= MAX_EXACT {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// The archived period's row, as the message needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PeriodRow {
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) members: u64,
    pub(crate) archived_at_ms: i64,
}

/// RFC 3339 UTC: whole seconds when the instant has no fraction (period
/// bounds), else milliseconds.
fn rfc3339(ms: i64) -> String {
    let format = if ms % 1000 == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Millis
    };
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(format, true))
        .unwrap_or_default()
}

impl ClosedMessage {
    pub fn new(key: &PeriodKey, row: PeriodRow, entries: Vec<Entry>) -> ClosedMessage {
        ClosedMessage {
            board: key.board.clone(),
            scope: key.scope.clone(),
            view: key.view.clone(),
            period: key.period.clone(),
            start: rfc3339(row.start_ms),
            end: rfc3339(row.end_ms),
            members: row.members,
            archived_at: rfc3339(row.archived_at_ms),
            entries,
        }
    }
}

/// How announcing a period ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announced {
    /// Published now.
    Sent,
    /// It had been announced before.
    Already,
    /// Another archiver holds the period.
    Busy,
}

/// Publishes period-closed messages; cheap to clone.
#[derive(Clone)]
pub struct Announcer {
    producer: Producer,
    topic: String,
    top: usize,
}

/// The producer's properties: `[kafka.client]` for producers, then
/// idempotence (a retry inside librdkafka neither duplicates nor loses it).
pub(crate) fn properties(kafka: &KafkaConfig) -> Result<client::Properties, ClientError> {
    client::producer_properties(
        kafka,
        Role::ClosedProducer,
        &[],
        &[
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "10000"),
        ],
    )
}

impl Announcer {
    /// `None` without a closed topic.
    pub fn new(
        kafka: &KafkaConfig,
        topic: Option<&str>,
        top: usize,
    ) -> Result<Option<Announcer>, ClientError> {
        let Some(topic) = topic else {
            return Ok(None);
        };
        Ok(Some(Announcer {
            producer: properties(kafka)?.create_producer()?,
            topic: topic.to_string(),
            top,
        }))
    }

    /// Announces `key` unless it was announced already; see the module doc.
    pub(crate) async fn announce(
        &self,
        archive: &mut Archive,
        key: &PeriodKey,
    ) -> Result<Announced, ArchiveError> {
        let tx = archive.client().transaction().await?;
        let locked: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock($1, hashtext($2))",
                &[&LOCK_CLASS, &key.path()],
            )
            .await?
            .try_get(0)?;
        if !locked {
            return Ok(Announced::Busy);
        }
        let params: [&(dyn ToSql + Sync); 4] = [&key.board, &key.scope, &key.view, &key.period];
        let row = tx
            .query_opt(
                "SELECT members,
                        (extract(epoch FROM period_start) * 1000)::int8,
                        (extract(epoch FROM period_end) * 1000)::int8,
                        floor(extract(epoch FROM archived_at) * 1000)::int8,
                        announced_at IS NOT NULL,
                        fields
                   FROM rankflow_archived_periods
                  WHERE board = $1 AND scope = $2 AND view = $3 AND period = $4",
                &params,
            )
            .await?;
        let Some(row) = row else {
            // Only called after a completed copy; a period removed since
            // (by hand) has nothing to announce.
            return Ok(Announced::Already);
        };
        if row.try_get::<_, bool>(4)? {
            return Ok(Announced::Already);
        }
        let period = PeriodRow {
            members: row.try_get::<_, i64>(0)?.max(0) as u64,
            start_ms: row.try_get(1)?,
            end_ms: row.try_get(2)?,
            archived_at_ms: row.try_get(3)?,
        };
        let names: Option<Vec<String>> = row.try_get(5)?;
        let top = i64::try_from(self.top).unwrap_or(i64::MAX);
        let rows = tx
            .query(
                "SELECT rank, member, score::float8, fields FROM rankflow_archive
                  WHERE board = $1 AND scope = $2 AND view = $3 AND period = $4
                  ORDER BY rank LIMIT $5",
                &[&key.board, &key.scope, &key.view, &key.period, &top],
            )
            .await?;
        let mut entries = Vec::with_capacity(rows.len());
        for r in &rows {
            let member: String = r.try_get(1)?;
            let fields = super::read::named(names.as_deref(), r.try_get(3)?, &member)
                .map_err(ArchiveError::Source)?;
            entries.push(Entry {
                rank: r.try_get::<_, i64>(0)?.max(0) as u64,
                member,
                score: r.try_get(2)?,
                fields,
            });
        }
        let message = ClosedMessage::new(key, period, entries);
        self.publish(&key.path(), &message).await?;
        tx.execute(
            "UPDATE rankflow_archived_periods SET announced_at = now()
              WHERE board = $1 AND scope = $2 AND view = $3 AND period = $4",
            &params,
        )
        .await?;
        tx.commit().await?;
        Ok(Announced::Sent)
    }

    /// Sends one message and waits for its delivery.
    async fn publish(&self, key: &str, message: &ClosedMessage) -> Result<(), ArchiveError> {
        let payload =
            serde_json::to_vec(message).map_err(|e| ArchiveError::Announce(e.to_string()))?;
        let mut record = Record::to(&self.topic, &payload);
        record.key = Some(key.as_bytes());
        self.producer
            .send(record, Duration::from_secs(10))
            .await
            .map(drop)
            .map_err(|e| ArchiveError::Announce(format!("topic {}: {e}", self.topic)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = include_str!("../../schemas/period-closed.schema.json");

    fn message() -> ClosedMessage {
        let key = PeriodKey {
            board: "star_fans".into(),
            scope: "u42".into(),
            view: "week".into(),
            period: "2026-W47".into(),
        };
        let row = PeriodRow {
            start_ms: 1_794_787_200_000,
            end_ms: 1_795_392_000_000,
            members: 1234,
            archived_at_ms: 1_795_392_603_512,
        };
        let entries = vec![
            Entry {
                rank: 1,
                member: "u1".into(),
                score: 42.0,
                fields: None,
            },
            Entry {
                rank: 2,
                member: "u2".into(),
                score: 0.5,
                fields: None,
            },
        ];
        ClosedMessage::new(&key, row, entries)
    }

    #[test]
    fn the_message_matches_the_design_example() {
        let v = serde_json::to_value(message()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "board": "star_fans", "scope": "u42", "view": "week", "period": "2026-W47",
                "start": "2026-11-16T00:00:00Z", "end": "2026-11-23T00:00:00Z",
                "members": 1234, "archived_at": "2026-11-23T00:10:03.512Z",
                "entries": [{"rank": 1, "member": "u1", "score": 42},
                            {"rank": 2, "member": "u2", "score": 0.5}]
            })
        );
    }

    #[test]
    fn a_produced_message_validates_against_the_schema() {
        let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let good = serde_json::to_value(message()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&good)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        // The schema is not vacuous: it refuses what the message never is.
        for broken in [
            serde_json::json!({"board": "b"}),
            {
                let mut v = good.clone();
                v["entries"][0]["rank"] = serde_json::json!(0);
                v
            },
            {
                let mut v = good.clone();
                v["start"] = serde_json::json!("monday");
                v
            },
            {
                let mut v = good.clone();
                v["extra"] = serde_json::json!(1);
                v
            },
        ] {
            assert!(!validator.is_valid(&broken), "accepted {broken}");
        }
    }

    /// A composite board's entries: `"fields"` by name, exact at ±2^53, a
    /// missing field `null`, and a member without a first field has the
    /// score `null` (its -inf in Redis has no JSON number).
    #[test]
    fn composite_entries_carry_fields_and_validate() {
        let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        let mut m = message();
        let max = 1i64 << 53;
        m.entries = vec![
            Entry {
                rank: 1,
                member: "u1".into(),
                score: max as f64,
                fields: Some(FieldValues(vec![
                    ("levels".into(), Some(max)),
                    ("revives".into(), Some(-max)),
                    ("first".into(), None),
                ])),
            },
            Entry {
                rank: 2,
                member: "u2".into(),
                score: f64::NEG_INFINITY,
                fields: Some(FieldValues(vec![
                    ("levels".into(), None),
                    ("revives".into(), Some(0)),
                    ("first".into(), None),
                ])),
            },
        ];
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["entries"],
            serde_json::json!([
                {"rank": 1, "member": "u1", "score": 9_007_199_254_740_992_i64,
                 "fields": {"levels": 9_007_199_254_740_992_i64,
                            "revives": -9_007_199_254_740_992_i64, "first": null}},
                {"rank": 2, "member": "u2", "score": null,
                 "fields": {"levels": null, "revives": 0, "first": null}}
            ])
        );
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
        for bad in [
            serde_json::json!(1.5),
            serde_json::json!("5"),
            serde_json::json!(9_007_199_254_740_993_i64),
        ] {
            let mut broken = v.clone();
            broken["entries"][0]["fields"]["levels"] = bad;
            assert!(!validator.is_valid(&broken), "accepted {broken}");
        }
    }
}
