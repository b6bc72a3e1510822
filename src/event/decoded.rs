//! The decoded event, [`Event`]: what both decodes give and rules read.

use super::fields::{Fields, Slot};
use super::kind::EventType;

/// A decoded, schema-valid event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its `type`: which boards consume it.
    pub kind: EventType,
    /// Event time, ms since the Unix epoch.
    pub ts: i64,
    /// The whole object (ids normalized to strings), read by rules.
    pub fields: Fields,
}

impl Event {
    /// The producer's id of the event (checked present, 1-128 bytes, by
    /// the decode; kept in the fields rather than copied out, since the
    /// hot path never reads it).
    pub fn event_id(&self) -> &str {
        match self.fields.field("event_id", Some(Slot::EVENT_ID)) {
            Some(serde_json::Value::String(s)) => s,
            _ => "",
        }
    }
}
