//! Rebuilding a lost moderation record from the audit topic
//! (docs/moderation.md, "When Redis loses its data"). The record lives in
//! Redis; if Redis loses its data and the fleet replays the topics into
//! an empty Redis, a record that is gone would let erased members back on
//! the boards. Every action's audit message says what the record held for
//! the member once the action was done, so `rankflow run` reads the whole
//! audit topic at start-up when the record is missing, and writes the
//! record again before any consumer starts.
//!
//! The record is claimed with `HSETNX ~gen` (from the clock, see
//! `super::record::raise`): instances starting together write it once.
//! A member action that finds the record missing rebuilds it the same
//! way first, so consumers that kept running through the loss read it
//! whole when the action's generation makes them read it again. An action taken on a member while its record is being
//! rebuilt can be overwritten by the rebuild; the docs say to start the
//! fleet before acting.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::Message;

use crate::board::keys;
use crate::config::KafkaConfig;
use crate::moderation::{
    ERASED_PREFIX, ErasedEntry, GEN_FIELD, HIDDEN_PREFIX, HiddenEntry, MemberHasher,
};
use crate::sink::store::{Store, StoreError};
use crate::source::client::Role;
use crate::source::scan::{Next, Start, scan};

use super::audit::AuditEntry;
use super::record;

/// Longest the whole read of the audit topic may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the record could not be rebuilt; `rankflow run` stops rather than
/// consume without it.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The audit topic could not be read.
    #[error("reading the audit topic {topic}: {reason}")]
    Kafka {
        /// `[admin] audit_topic`.
        topic: String,
        /// What failed.
        reason: String,
    },
    /// Redis failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a rebuild wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Members hidden from some board.
    pub hidden: usize,
    /// Erased members.
    pub erased: usize,
}

/// The record's entries, folded from the audit messages in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Folded {
    /// Member id → its entry after its last action (`None`: visible).
    hidden: BTreeMap<String, Option<HiddenEntry>>,
    /// Keyed hash → erasure.
    erased: BTreeMap<String, ErasedEntry>,
}

impl Folded {
    /// Takes one audit message; messages of one target come in the order
    /// they were published (the target is the message key).
    pub(crate) fn add(&mut self, e: &AuditEntry) {
        let at = e.detail["at"].as_i64().unwrap_or_else(|| {
            chrono::DateTime::parse_from_rfc3339(&e.at).map_or(0, |t| t.timestamp_millis())
        });
        match (e.action.as_str(), e.target.split_once(':')) {
            ("member.hide" | "member.restore", Some(("member", id))) => {
                let entry = serde_json::from_value(e.detail["hidden"].clone()).ok();
                self.hidden.insert(id.to_string(), entry);
            }
            ("member.erase", Some(("member-hash", hex))) => {
                let erased = ErasedEntry {
                    at,
                    actor: e.actor.clone(),
                };
                self.erased.insert(hex.to_string(), erased);
            }
            _ => {}
        }
    }

    /// The record's fields: `h:` for members still hidden and not erased
    /// since, `e:` for erased ones.
    pub(crate) fn fields(&self, hasher: &MemberHasher) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (id, entry) in &self.hidden {
            if let Some(e) = entry
                && !self.erased.contains_key(&hasher.hex(id))
            {
                let json = serde_json::to_string(e).unwrap_or_default();
                out.push((format!("{HIDDEN_PREFIX}{id}"), json));
            }
        }
        for (hex, e) in &self.erased {
            let json = serde_json::to_string(e).unwrap_or_default();
            out.push((format!("{ERASED_PREFIX}{hex}"), json));
        }
        out
    }
}

/// When the record under `prefix` is missing, rebuilds it from `topic`;
/// `None` when it was there (or another instance rebuilt it first).
pub async fn rebuild_if_lost(
    store: &Store,
    prefix: &str,
    kafka: &KafkaConfig,
    topic: &str,
    hasher: &MemberHasher,
    now_ms: i64,
) -> Result<Option<Rebuilt>, RecoverError> {
    let record = keys::moderation_key(prefix);
    let folded = fold_if_missing(store, (&record, GEN_FIELD), kafka, topic, Folded::add).await?;
    let Some(folded) = folded else {
        return Ok(None);
    };
    let fields = folded.fields(hasher);
    if fields.is_empty() {
        return Ok(None);
    }
    let claimed: bool = store
        .query(redis::cmd("HSETNX").arg(&record).arg(GEN_FIELD).arg(now_ms))
        .await?;
    if !claimed {
        return Ok(None);
    }
    let mut hset = redis::cmd("HSET");
    hset.arg(&record);
    for (field, value) in &fields {
        hset.arg(field).arg(value);
    }
    // Consumers that read the record before it was written read it again.
    record::raise(store, &record, vec![hset], &hasher.key_id(), now_ms).await?;
    let count = |prefix: &str| fields.iter().filter(|(f, _)| f.starts_with(prefix)).count();
    Ok(Some(Rebuilt {
        hidden: count(HIDDEN_PREFIX),
        erased: count(ERASED_PREFIX),
    }))
}

/// Unless `field` of hash `key` is there (what is kept whole is whole):
/// every audit message of `topic` folded with `add`, on a blocking
/// thread. Also what rebuilds lost promotions (`super::promote`).
pub(crate) async fn fold_if_missing<F: Default + Send + 'static>(
    store: &Store,
    (key, field): (&str, &str),
    kafka: &KafkaConfig,
    topic: &str,
    add: fn(&mut F, &AuditEntry),
) -> Result<Option<F>, RecoverError> {
    let present: bool = store
        .query(redis::cmd("HEXISTS").arg(key).arg(field))
        .await?;
    if present {
        return Ok(None);
    }
    let (kafka, name) = (kafka.clone(), topic.to_string());
    let folded = tokio::task::spawn_blocking(move || {
        let mut folded = F::default();
        read_audit(&kafka, &name, |entry| add(&mut folded, entry)).map(|()| folded)
    })
    .await
    .map_err(|e| RecoverError::Kafka {
        topic: topic.to_string(),
        reason: e.to_string(),
    })??;
    Ok(Some(folded))
}

/// Hands every message of `topic`, from the beginning of each partition
/// to its end when the read started, to `visit` (blocking).
fn read_audit(
    kafka: &KafkaConfig,
    topic: &str,
    mut visit: impl FnMut(&AuditEntry),
) -> Result<(), RecoverError> {
    scan(
        kafka,
        Role::AuditReader,
        topic,
        Start::Beginning,
        READ_TIMEOUT,
        |message| {
            if let Some(entry) = message
                .payload()
                .and_then(|p| serde_json::from_slice::<AuditEntry>(p).ok())
            {
                visit(&entry);
            }
            Next::More
        },
    )
    .map_err(|reason| RecoverError::Kafka {
        topic: topic.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: &str, target: &str, detail: serde_json::Value) -> AuditEntry {
        AuditEntry {
            at: "2026-11-26T00:00:00.000Z".to_string(),
            actor: "ops".to_string(),
            action: action.to_string(),
            target: target.to_string(),
            detail,
        }
    }

    /// A hand-made history: u1 hidden then restored, u2 hidden from one
    /// board, u3 hidden then erased, u4 erased. The record keeps u2's entry
    /// and the two erasures, nothing of u1, and no `h:` for u3.
    #[test]
    fn the_record_is_the_last_state_of_each_member() {
        let hasher = MemberHasher::new(Some("recover-test-key"));
        let hidden = |boards: Option<Vec<&str>>| serde_json::json!({"boards": boards, "at": 5, "actor": "ops"});
        let mut f = Folded::default();
        for e in [
            entry(
                "member.hide",
                "member:u1",
                serde_json::json!({"hidden": hidden(None)}),
            ),
            entry(
                "member.hide",
                "member:u2",
                serde_json::json!({"hidden": hidden(Some(vec!["b"]))}),
            ),
            entry(
                "member.restore",
                "member:u1",
                serde_json::json!({"hidden": null}),
            ),
            entry(
                "member.hide",
                "member:u3",
                serde_json::json!({"hidden": hidden(None)}),
            ),
            entry(
                "member.erase",
                &format!("member-hash:{}", hasher.hex("u3")),
                serde_json::json!({"at": 9}),
            ),
            entry(
                "member.erase",
                &format!("member-hash:{}", hasher.hex("u4")),
                serde_json::json!({}),
            ),
            entry("member.hide", "nonsense", serde_json::json!({})),
        ] {
            f.add(&e);
        }
        let mut fields = f.fields(&hasher);
        fields.sort();
        let mut want = vec![
            (
                "h:u2".to_string(),
                r#"{"boards":["b"],"at":5,"actor":"ops"}"#.to_string(),
            ),
            (
                format!("e:{}", hasher.hex("u3")),
                r#"{"at":9,"actor":"ops"}"#.to_string(),
            ),
            (
                format!("e:{}", hasher.hex("u4")),
                // No `at` in the detail: the message's own time.
                r#"{"at":1795651200000,"actor":"ops"}"#.to_string(),
            ),
        ];
        want.sort();
        assert_eq!(fields, want);
    }
}
