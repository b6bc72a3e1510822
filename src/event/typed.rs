//! The typed decode's parse: one pass over the payload that keeps the
//! fields any schema gives a rule for in typed slots, their strings
//! borrowed from the payload (owned only when the JSON escapes them), and
//! every other field as a generic value (rules may read them).
//!
//! It is not a `#[derive(Deserialize)]` struct per event type on purpose:
//! the schemas allow extra fields (`additionalProperties: true`), which
//! would need `#[serde(flatten)]` (buffers every field); `"type"` may come
//! after the fields it governs; a duplicate key must keep the last value
//! (as `serde_json::Value` does) where derive reports an error; and a field
//! of the wrong JSON type must become a schema error, not a parse error.
//! [`super::check`] then applies each type's schema to the slots.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Top-level fields some schema has a rule for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Type,
    EventId,
    Ts,
    SenderId,
    ReceiverId,
    GiftId,
    Count,
    Value,
    RoomId,
    UserId,
    GameId,
    Points,
    DurationMs,
    Revives,
    Cleared,
}

impl Key {
    pub(super) const ALL: [Key; 15] = [
        Key::Type,
        Key::EventId,
        Key::Ts,
        Key::SenderId,
        Key::ReceiverId,
        Key::GiftId,
        Key::Count,
        Key::Value,
        Key::RoomId,
        Key::UserId,
        Key::GameId,
        Key::Points,
        Key::DurationMs,
        Key::Revives,
        Key::Cleared,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Type => "type",
            Key::EventId => "event_id",
            Key::Ts => "ts",
            Key::SenderId => "sender_id",
            Key::ReceiverId => "receiver_id",
            Key::GiftId => "gift_id",
            Key::Count => "count",
            Key::Value => "value",
            Key::RoomId => "room_id",
            Key::UserId => "user_id",
            Key::GameId => "game_id",
            Key::Points => "points",
            Key::DurationMs => "duration_ms",
            Key::Revives => "revives",
            Key::Cleared => "cleared",
        }
    }

    /// The key named `s` (a `match`, which the compiler dispatches on the
    /// length first: every top-level key of every event goes through it).
    pub(super) fn find(s: &str) -> Option<Key> {
        Some(match s {
            "type" => Key::Type,
            "event_id" => Key::EventId,
            "ts" => Key::Ts,
            "sender_id" => Key::SenderId,
            "receiver_id" => Key::ReceiverId,
            "gift_id" => Key::GiftId,
            "count" => Key::Count,
            "value" => Key::Value,
            "room_id" => Key::RoomId,
            "user_id" => Key::UserId,
            "game_id" => Key::GameId,
            "points" => Key::Points,
            "duration_ms" => Key::DurationMs,
            "revives" => Key::Revives,
            "cleared" => Key::Cleared,
            _ => return None,
        })
    }
}

/// A field value as parsed: scalars as they came (numbers in the same
/// representation `serde_json::Value` would pick), strings borrowed where
/// possible, arrays and objects as generic values.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Raw<'a> {
    Str(Cow<'a, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Null,
    Other(Value),
}

impl Raw<'_> {
    /// The value `serde_json::Value` would have held.
    pub(super) fn into_value(self) -> Value {
        match self {
            Raw::Str(s) => Value::String(s.into_owned()),
            Raw::U64(u) => Value::Number(u.into()),
            Raw::I64(i) => Value::Number(i.into()),
            // serde_json rejects non-finite numbers, so `None` cannot
            // happen; `Null` is what its own visitor would produce.
            Raw::F64(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Raw::Bool(b) => Value::Bool(b),
            Raw::Null => Value::Null,
            Raw::Other(v) => v,
        }
    }
}

/// The value as JSON text (error messages quote it the way the schema
/// validator does).
impl fmt::Display for Raw<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::Str(s) => match serde_json::to_string(s.as_ref()) {
                Ok(text) => f.write_str(&text),
                Err(_) => write!(f, "{s:?}"),
            },
            Raw::U64(u) => write!(f, "{u}"),
            Raw::I64(i) => write!(f, "{i}"),
            Raw::F64(x) => write!(f, "{}", Raw::F64(*x).into_value()),
            Raw::Bool(b) => write!(f, "{b}"),
            Raw::Null => f.write_str("null"),
            Raw::Other(v) => write!(f, "{v}"),
        }
    }
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(Cow::Owned(s)))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Raw<'de>, E> {
        Ok(Raw::U64(u))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Raw<'de>, E> {
        // As `Value` does: a non-negative i64 is stored as unsigned.
        Ok(u64::try_from(i).map_or(Raw::I64(i), Raw::U64))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Raw<'de>, E> {
        Ok(Raw::F64(x))
    }
    fn visit_bool<E>(self, b: bool) -> Result<Raw<'de>, E> {
        Ok(Raw::Bool(b))
    }
    fn visit_unit<E>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Null)
    }
    fn visit_none<E>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Raw<'de>, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq)).map(Raw::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Raw<'de>, A::Error> {
        Value::deserialize(MapAccessDeserializer::new(map)).map(Raw::Other)
    }
}

/// A parsed top-level object.
#[derive(Debug, Default)]
pub(super) struct Object<'a> {
    /// Indexed by `Key as usize`.
    pub(super) known: [Option<Raw<'a>>; 15],
    pub(super) extra: Map<String, Value>,
}

impl<'a> Object<'a> {
    pub(super) fn take(&mut self, key: Key) -> Option<Raw<'a>> {
        self.known[key as usize].take()
    }
    pub(super) fn get(&self, key: Key) -> Option<&Raw<'a>> {
        self.known[key as usize].as_ref()
    }
}

/// What the payload held at the top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Top {
    /// An object, parsed into the caller's [`Object`].
    Object,
    NotObject,
    /// An object whose first key is serde_json's private raw-value token:
    /// with its `raw_value` feature on (another crate turns it on),
    /// `serde_json::Value` reads such an object as the JSON inside its
    /// string. Left to the generic decode so both paths agree.
    RawValueToken,
}

/// serde_json's private marker key (see [`Top::RawValueToken`]).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Parses one payload (already checked as UTF-8) into `object` (empty on
/// entry), with the same errors as `serde_json::from_str::<Value>`: syntax,
/// depth, trailing characters. The object is filled in place rather than
/// returned: it is over 600 bytes, and moving it out of the parser and
/// into the check cost a tenth of the decode in copies (issue 14).
pub(super) fn parse<'a>(text: &'a str, object: &mut Object<'a>) -> Result<Top, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = de.deserialize_any(TopVisitor { object })?;
    de.end()?;
    Ok(top)
}

struct TopVisitor<'o, 'a> {
    object: &'o mut Object<'a>,
}

impl<'de> Visitor<'de> for TopVisitor<'_, 'de> {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let object = self.object;
        let mut first = true;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key {
                Field::Known(k) => object.known[k as usize] = Some(map.next_value()?),
                Field::Other(name) => {
                    if first && name == RAW_VALUE_TOKEN {
                        // Consume the rest so syntax errors still surface.
                        map.next_value::<de::IgnoredAny>()?;
                        while map
                            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                            .is_some()
                        {}
                        return Ok(Top::RawValueToken);
                    }
                    // Last one wins, as in `Value`'s map.
                    object.extra.insert(name, map.next_value()?);
                }
            }
            first = false;
        }
        Ok(Top::Object)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Top, A::Error> {
        // Read as `Value` would, so nesting limits give the same errors.
        Value::deserialize(SeqAccessDeserializer::new(seq)).map(|_| Top::NotObject)
    }
    fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
}

/// A top-level key: a known field without allocating, or another name.
enum Field {
    Known(Key),
    Other(String),
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Field;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E>(self, s: &str) -> Result<Field, E> {
        Ok(Key::find(s).map_or_else(|| Field::Other(s.to_owned()), Field::Known))
    }
    fn visit_string<E>(self, s: String) -> Result<Field, E> {
        Ok(Key::find(&s).map_or(Field::Other(s), Field::Known))
    }
}
