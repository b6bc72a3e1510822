//! The generic decode: the whole payload into a `serde_json::Value`,
//! validated by the compiled JSON Schemas, then normalized. It was the only
//! path before the typed decode ([`super::typed`]); it stays as the
//! reference the typed path is proven equal to (tests/it/decode_equivalence.rs)
//! and as the "before" of benches/decode.rs.

use serde_json::{Map, Value};

use super::decoded::Event;
use super::error::{DecodeError, shorten};
use super::ids::check_id_bytes;
use super::kind::EventType;

/// The compiled schemas of the three event types.
pub(super) struct Validators([jsonschema::Validator; 3]);

/// The embedded schemas failed to compile: a build defect, reported rather
/// than panicking so `check` can still say what happened.
#[derive(Debug, thiserror::Error)]
#[error("embedded schema for {kind} is invalid: {message}")]
pub struct SchemaBuildError {
    kind: &'static str,
    message: String,
}

impl Validators {
    pub(super) fn new() -> Result<Validators, SchemaBuildError> {
        let build = |kind: EventType| -> Result<jsonschema::Validator, SchemaBuildError> {
            let err = |message: String| SchemaBuildError {
                kind: kind.name(),
                message,
            };
            let schema: Value =
                serde_json::from_str(kind.schema_text()).map_err(|e| err(e.to_string()))?;
            jsonschema::draft202012::new(&schema).map_err(|e| err(e.to_string()))
        };
        Ok(Validators([
            build(EventType::Gift)?,
            build(EventType::Score)?,
            build(EventType::Play)?,
        ]))
    }

    /// Decodes a payload already checked for size and UTF-8.
    pub(super) fn decode(&self, text: &str) -> Result<Event, DecodeError> {
        let value: Value = serde_json::from_str(text)?;
        let Value::Object(mut fields) = value else {
            return Err(DecodeError::NotObject);
        };
        let kind = match fields.get("type") {
            Some(Value::String(t)) => {
                EventType::parse(t).ok_or_else(|| DecodeError::UnknownType(t.clone()))?
            }
            Some(other) => {
                return Err(DecodeError::Schema(format!(
                    "/type: {other} is not a string"
                )));
            }
            None => return Err(DecodeError::Schema("missing required field `type`".into())),
        };
        let object = Value::Object(fields);
        if let Err(e) = self.0[kind.index()].validate(&object) {
            return Err(DecodeError::Schema(schema_message(&e)));
        }
        let Value::Object(taken) = object else {
            return Err(DecodeError::NotObject);
        };
        fields = taken;
        normalize(kind, &mut fields)?;
        match fields.get("event_id") {
            Some(Value::String(s)) => check_id_bytes("event_id", s)?,
            _ => return Err(DecodeError::Schema("/event_id: not a string".into())),
        }
        let ts = fields
            .get("ts")
            .and_then(Value::as_i64)
            .ok_or_else(|| DecodeError::Schema("/ts: not an integer".into()))?;
        Ok(Event {
            kind,
            ts,
            fields: fields.into(),
        })
    }
}

fn schema_message(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().to_string();
    let message = shorten(e.to_string());
    if path.is_empty() {
        message
    } else {
        format!("{path}: {message}")
    }
}

/// Ids become strings (checked for byte length), integer fields become
/// integers. The schema has already accepted the shapes.
fn normalize(kind: EventType, fields: &mut Map<String, Value>) -> Result<(), DecodeError> {
    for field in kind.id_fields() {
        let Some(v) = fields.get_mut(*field) else {
            continue;
        };
        match v {
            Value::String(s) => check_id_bytes(field, s)?,
            Value::Number(n) => {
                let text = if let Some(i) = n.as_i64() {
                    i.to_string()
                } else if let Some(u) = n.as_u64() {
                    u.to_string()
                } else if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e18) {
                    // Integral per JSON Schema (e.g. `7.0`): its integer text.
                    format!("{f:.0}")
                } else {
                    return Err(DecodeError::Schema(format!("/{field}: not an integer id")));
                };
                *v = Value::String(text);
            }
            _ => {}
        }
    }
    for field in kind.integer_fields() {
        if let Some(v) = fields.get_mut(*field)
            && let Some(f) = v.as_f64()
            && !v.is_i64()
            && f.fract() == 0.0
            && f.abs() <= 9.007_199_254_740_992e15
        {
            *v = Value::from(f as i64);
        }
    }
    Ok(())
}
