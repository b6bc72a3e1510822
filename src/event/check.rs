//! The typed decode's validation: each event type's JSON Schema
//! (`schemas/*.schema.json`) written as a table of field rules, applied to
//! the slots [`super::typed`] parsed, plus the rules the schemas cannot say
//! (id and event id byte lengths, integral-float normalization) exactly as
//! the generic decode applies them. tests/it/decode_equivalence.rs holds the
//! two decodes to the same answers; a schema change must change both.

use std::borrow::Cow;

use serde_json::Value;

use super::decoded::Event;
use super::error::{DecodeError, shorten};
use super::fields::{Fields, Slot};
use super::ids::check_id_bytes;
use super::kind::EventType;
use super::typed::{Key, Object, Raw};

/// What one schema property demands of its value.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// A string of 1-128 characters, none a control character (`event_id`).
    Text,
    /// An identifier: a [`Rule::Text`] string or an integer.
    Id,
    /// An integer (JSON Schema's: `3.0` is one) within optional bounds.
    Int {
        min: Option<i64>,
        max: Option<i64>,
    },
    /// A number of at least 0 (`value`).
    NonNegative,
    Bool,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    key: Key,
    required: bool,
    rule: Rule,
}

const fn field(key: Key, required: bool, rule: Rule) -> Field {
    Field {
        key,
        required,
        rule,
    }
}

const fn int(min: Option<i64>, max: Option<i64>) -> Rule {
    Rule::Int { min, max }
}

const EVENT_ID: Field = field(Key::EventId, true, Rule::Text);
/// 2000-01-01 to the end of year 9999, in ms.
const TS: Field = field(
    Key::Ts,
    true,
    int(Some(946_684_800_000), Some(253_402_300_799_999)),
);

const GIFT: [Field; 8] = [
    EVENT_ID,
    TS,
    field(Key::SenderId, true, Rule::Id),
    field(Key::ReceiverId, true, Rule::Id),
    field(Key::GiftId, true, Rule::Id),
    field(Key::Count, true, int(Some(1), Some(1_000_000))),
    field(Key::Value, true, Rule::NonNegative),
    field(Key::RoomId, false, Rule::Id),
];

const SCORE: [Field; 8] = [
    EVENT_ID,
    TS,
    field(Key::UserId, true, Rule::Id),
    field(Key::GameId, true, Rule::Id),
    field(
        Key::Points,
        true,
        int(Some(-1_000_000_000_000), Some(1_000_000_000_000)),
    ),
    field(Key::DurationMs, false, int(Some(0), None)),
    field(Key::Revives, false, int(Some(0), None)),
    field(Key::Cleared, false, Rule::Bool),
];

const PLAY: [Field; 5] = [
    EVENT_ID,
    TS,
    field(Key::UserId, true, Rule::Id),
    field(Key::GameId, true, Rule::Id),
    field(Key::DurationMs, true, int(Some(0), None)),
];

fn fields_of(kind: EventType) -> &'static [Field] {
    match kind {
        EventType::Gift => &GIFT,
        EventType::Score => &SCORE,
        EventType::Play => &PLAY,
    }
}

/// The largest integer every f64 up to it represents exactly (2^53).
const EXACT_F64: f64 = 9_007_199_254_740_992.0;

/// Validates a parsed object against its type's schema and builds the
/// same [`Event`] the generic decode would.
pub(super) fn event(object: &mut Object<'_>) -> Result<Event, DecodeError> {
    let kind = kind_of(object)?;
    let mut fields = Fields::with_extra(std::mem::take(&mut object.extra));
    let mut ts = None;
    for f in fields_of(kind) {
        let Some(raw) = object.take(f.key) else {
            if f.required {
                return Err(DecodeError::Schema(format!(
                    "\"{}\" is a required property",
                    f.key.name()
                )));
            }
            continue;
        };
        check(f, &raw)?;
        let value = match (f.key, raw) {
            (Key::Ts, Raw::U64(t)) => {
                // In range, so it fits.
                ts = i64::try_from(t).ok();
                Value::Number(t.into())
            }
            (_, raw) => normalized(f, raw)?,
        };
        fields.set(f.key, value);
    }
    // The type itself and fields only other types declare: plain values.
    for key in Key::ALL {
        if let Some(raw) = object.take(key) {
            fields.set(key, raw.into_value());
        }
    }
    // Both were checked above; these only repeat the generic decode's own
    // checks after the schema (an integral float `ts` passes the schema).
    match fields.field("event_id", Some(Slot::EVENT_ID)) {
        Some(Value::String(id)) => check_id_bytes("event_id", id)?,
        _ => return Err(DecodeError::Schema("/event_id: not a string".into())),
    }
    let ts = ts.ok_or_else(|| DecodeError::Schema("/ts: not an integer".into()))?;
    Ok(Event { kind, ts, fields })
}

/// The event type, from `"type"` (each schema's `const`).
fn kind_of(object: &Object<'_>) -> Result<EventType, DecodeError> {
    match object.get(Key::Type) {
        Some(Raw::Str(t)) => {
            EventType::parse(t).ok_or_else(|| DecodeError::UnknownType(t.to_string()))
        }
        Some(other) => Err(DecodeError::Schema(format!(
            "/type: {other} is not a string"
        ))),
        None => Err(DecodeError::Schema("missing required field `type`".into())),
    }
}

/// Whether `raw` satisfies the field's schema, worded as the validator.
fn check(f: &Field, raw: &Raw<'_>) -> Result<(), DecodeError> {
    let problem = match f.rule {
        Rule::Text => match raw {
            Raw::Str(s) => text_problem(s),
            _ => Some(Cow::Borrowed("is not of type \"string\"")),
        },
        Rule::Id => match raw {
            Raw::Str(s) if text_problem(s).is_none() => None,
            Raw::U64(_) | Raw::I64(_) => None,
            Raw::F64(x) if x.fract() == 0.0 => None,
            _ => Some(Cow::Borrowed(
                "is not an id (a string of 1-128 bytes without control characters, or an integer)",
            )),
        },
        Rule::Int { min, max } => int_problem(raw, min, max),
        Rule::NonNegative => match raw {
            Raw::U64(_) => None,
            Raw::F64(x) if *x >= 0.0 => None,
            Raw::I64(_) | Raw::F64(_) => Some(Cow::Borrowed("is less than the minimum of 0")),
            _ => Some(Cow::Borrowed("is not of type \"number\"")),
        },
        Rule::Bool => match raw {
            Raw::Bool(_) => None,
            _ => Some(Cow::Borrowed("is not of type \"boolean\"")),
        },
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(DecodeError::Schema(format!(
            "/{}: {}",
            f.key.name(),
            shorten(format!("{raw} {p}"))
        ))),
    }
}

/// `minLength: 1`, `maxLength: 128` (characters) and the pattern without
/// control characters.
fn text_problem(s: &str) -> Option<Cow<'static, str>> {
    if s.is_empty() {
        return Some(Cow::Borrowed("is shorter than 1 character"));
    }
    // Bytes bound characters: only a long string needs counting.
    if s.len() > 128 && s.chars().count() > 128 {
        return Some(Cow::Borrowed("is longer than 128 characters"));
    }
    // Control characters are ASCII, and in UTF-8 an ASCII byte is always
    // that character: a byte scan is the same test as a char scan, cheaper.
    if s.bytes().any(|b| b <= 0x1f || b == 0x7f) {
        return Some(Cow::Borrowed(
            "does not match \"^[^\\\\u0000-\\\\u001F\\\\u007F]*$\"",
        ));
    }
    None
}

fn int_problem(raw: &Raw<'_>, min: Option<i64>, max: Option<i64>) -> Option<Cow<'static, str>> {
    // Exact for every bound in the schemas (all below 2^53 in magnitude).
    let (below, above) = match *raw {
        Raw::U64(u) => (
            min.is_some_and(|m| i128::from(u) < i128::from(m)),
            max.is_some_and(|m| i128::from(u) > i128::from(m)),
        ),
        Raw::I64(i) => (min.is_some_and(|m| i < m), max.is_some_and(|m| i > m)),
        Raw::F64(x) if x.fract() == 0.0 => (
            min.is_some_and(|m| x < m as f64),
            max.is_some_and(|m| x > m as f64),
        ),
        _ => return Some(Cow::Borrowed("is not of type \"integer\"")),
    };
    if below {
        Some(Cow::Owned(format!(
            "is less than the minimum of {}",
            min.unwrap_or_default()
        )))
    } else if above {
        Some(Cow::Owned(format!(
            "is greater than the maximum of {}",
            max.unwrap_or_default()
        )))
    } else {
        None
    }
}

/// The value rules see: ids as strings, integral floats in integer fields
/// as integers (as the generic decode's `normalize`).
fn normalized(f: &Field, raw: Raw<'_>) -> Result<Value, DecodeError> {
    let name = f.key.name();
    match (f.rule, raw) {
        (Rule::Id, Raw::Str(s)) => {
            check_id_bytes(name, &s)?;
            Ok(Value::String(s.into_owned()))
        }
        (Rule::Id, Raw::U64(u)) => Ok(Value::String(u.to_string())),
        (Rule::Id, Raw::I64(i)) => Ok(Value::String(i.to_string())),
        (Rule::Id, Raw::F64(x)) if x.abs() < 1e18 => Ok(Value::String(format!("{x:.0}"))),
        (Rule::Id, _) => Err(DecodeError::Schema(format!("/{name}: not an integer id"))),
        (Rule::Int { .. }, Raw::F64(x)) if x.fract() == 0.0 && x.abs() <= EXACT_F64 => {
            Ok(Value::from(x as i64))
        }
        (_, raw) => Ok(raw.into_value()),
    }
}
