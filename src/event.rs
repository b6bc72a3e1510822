//! Input events (docs/events.md): decoding a Kafka message value into a validated
//! [`Event`], with the JSON Schemas in `schemas/` as the source of truth.
//!
//! Two decodes give the same answers (tests/it/decode_equivalence.rs): the
//! typed one every message takes ([`typed`] parses, [`check`] applies the
//! schemas as field rules) and the generic one ([`generic`]: a
//! `serde_json::Value` checked by the compiled schemas), kept as the
//! reference and the benchmark's baseline. Both give the event's fields as
//! [`Fields`] ([`fields`]): declared fields in slots that rule expressions
//! resolve when they compile, any other field by name.
//!
//! Decoding never panics. Every rejection is a [`DecodeError`] whose
//! [`reason`](DecodeError::reason) is the stable code that goes into metrics
//! and the dead-letter header `rankflow-error`.
//!
//! What both decodes share lives in leaf modules that they import and this
//! file re-exports: `kind` ([`EventType`]), `decoded` ([`Event`]), `error`
//! ([`DecodeError`]) and `ids` (the id byte-length rule). This file holds
//! the [`Decoder`] that picks the decode.

mod check;
mod decoded;
mod error;
mod fields;
mod generic;
mod ids;
mod kind;
mod typed;

pub use decoded::Event;
pub use error::DecodeError;
pub use fields::Fields;
pub use fields::Slot;
pub use generic::SchemaBuildError;
use generic::Validators;
pub use kind::EventType;
use typed::{Object, Top};

/// Compiled schemas plus limits; build once, share across tasks.
pub struct Decoder {
    validators: Validators,
    max_bytes: usize,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// Compiles the embedded schemas; a message over `max_bytes`
    /// (`kafka.max_event_bytes`) is refused as `too_large` before parsing.
    /// Fails only if the embedded schemas do not compile (a build defect).
    pub fn new(max_bytes: usize) -> Result<Decoder, SchemaBuildError> {
        Ok(Decoder {
            validators: Validators::new()?,
            max_bytes,
        })
    }

    /// Decodes and validates one message value: the typed decode, which
    /// reads the payload once into typed, borrowed slots and applies the
    /// schemas as rules ([`check`]), accepting exactly what
    /// [`decode_generic`](Decoder::decode_generic) accepts.
    pub fn decode(&self, payload: &[u8]) -> Result<Event, DecodeError> {
        let text = self.text(payload)?;
        let mut object = Object::default();
        match typed::parse(text, &mut object)? {
            Top::Object => check::event(&mut object),
            Top::NotObject => Err(DecodeError::NotObject),
            Top::RawValueToken => self.validators.decode(text),
        }
    }

    /// The same decode through a generic `serde_json::Value` and the
    /// compiled JSON Schema validators: the reference the typed decode is
    /// tested against, and the "before" of `benches/decode.rs`.
    pub fn decode_generic(&self, payload: &[u8]) -> Result<Event, DecodeError> {
        self.validators.decode(self.text(payload)?)
    }

    fn text<'a>(&self, payload: &'a [u8]) -> Result<&'a str, DecodeError> {
        if payload.len() > self.max_bytes {
            return Err(DecodeError::TooLarge {
                size: payload.len(),
                max: self.max_bytes,
            });
        }
        // Checked separately so invalid UTF-8 gets its own reason rather
        // than a generic JSON error.
        Ok(std::str::from_utf8(payload)?)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::ids::MAX_ID_BYTES;
    use super::*;
    use crate::telemetry::DlqReason;

    fn dec() -> Decoder {
        Decoder::new(64 * 1024).unwrap()
    }

    fn gift() -> Value {
        serde_json::json!({
            "type": "gift", "event_id": "e1", "ts": 1_763_700_000_000i64,
            "sender_id": "u1", "receiver_id": 42, "gift_id": "flower",
            "count": 3, "value": 1.5, "extra": {"k": "v"}
        })
    }

    fn reason(payload: &[u8]) -> &'static str {
        dec().decode(payload).unwrap_err().reason().code()
    }

    #[test]
    fn valid_gift_is_normalized() {
        let e = dec().decode(gift().to_string().as_bytes()).unwrap();
        assert_eq!(e.kind, EventType::Gift);
        assert_eq!(e.ts, 1_763_700_000_000);
        assert_eq!(e.fields["receiver_id"], "42");
        assert_eq!(e.fields["extra"]["k"], "v");
    }

    #[test]
    fn integral_floats_become_integers() {
        let mut g = gift();
        g["count"] = serde_json::json!(3.0);
        g["sender_id"] = serde_json::json!(7.0);
        let e = dec().decode(g.to_string().as_bytes()).unwrap();
        assert!(e.fields["count"].is_i64());
        assert_eq!(e.fields["sender_id"], "7");
    }

    #[test]
    fn each_kind_of_bad_input_has_its_reason() {
        assert_eq!(reason(b"not json"), "invalid_json");
        assert_eq!(reason(b"[1,2]"), "not_object");
        assert_eq!(reason(b"{\"type\":\"gift\""), "invalid_json");
        assert_eq!(reason(b"\xff\xfe"), "invalid_utf8");
        assert_eq!(reason(b"{\"type\":\"gift\",\"count\":NaN}"), "invalid_json");
        assert_eq!(
            reason(b"{\"type\":\"gift\",\"count\":1e400}"),
            "invalid_json"
        );
        assert_eq!(reason(b"{\"type\":\"bogus\"}"), "unknown_type");
        assert_eq!(reason(b"{\"event_id\":\"x\"}"), "schema");
        let big = vec![b' '; 64 * 1024 + 1];
        assert_eq!(reason(&big), "too_large");
        let mut g = gift();
        g["count"] = serde_json::json!(0);
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        let mut g = gift();
        g["count"] = serde_json::json!("3");
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        let mut g = gift();
        g.as_object_mut().unwrap().remove("sender_id");
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        let mut g = gift();
        g["ts"] = serde_json::json!(-1);
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        // Seconds sent as milliseconds, or an unset field: before 2000.
        g["ts"] = serde_json::json!(1_763_700_000);
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        g["ts"] = serde_json::json!(0);
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        // Control characters in an id (escaped, so the JSON itself is valid).
        let mut g = gift();
        g["sender_id"] = serde_json::json!("a\u{1}b");
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        let mut g = gift();
        g["sender_id"] = serde_json::json!("{x}:%y z 😀");
        assert!(
            dec().decode(g.to_string().as_bytes()).is_ok(),
            "delimiters, spaces and emoji are fine"
        );
    }

    #[test]
    fn id_limits_are_bytes_not_characters() {
        let mut g = gift();
        // 100 characters, 400 bytes: the schema accepts it, the byte rule not.
        g["sender_id"] = Value::String("😀".repeat(100));
        let err = dec().decode(g.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.reason(), DlqReason::Schema);
        assert!(err.to_string().contains("400 bytes"), "{err}");
        g["sender_id"] = Value::String(String::new());
        assert_eq!(reason(g.to_string().as_bytes()), "schema");
        g["sender_id"] = Value::String("é".repeat(64));
        assert!(dec().decode(g.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
        assert_eq!(reason(deep.as_bytes()), "invalid_json");
        let deep_obj = format!(
            "{{\"type\":\"gift\",\"x\":{}1{}}}",
            "{\"a\":".repeat(10_000),
            "}".repeat(10_000)
        );
        assert_eq!(reason(deep_obj.as_bytes()), "invalid_json");
    }

    mod fuzz {
        //! Bounded fuzzing of the decoder (it runs in every `cargo test`):
        //! arbitrary bytes and arbitrary JSON shaped like events never
        //! panic, and every rejection has one of the known reasons.
        use super::*;
        use proptest::prelude::*;

        const REASONS: [&str; 6] = [
            "too_large",
            "invalid_utf8",
            "invalid_json",
            "not_object",
            "unknown_type",
            "schema",
        ];

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(serde_json::Value::from),
                "\\PC{0,20}".prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(4, 32, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                    prop::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn event_like() -> impl Strategy<Value = serde_json::Value> {
            let field = prop_oneof![
                Just("type"),
                Just("event_id"),
                Just("ts"),
                Just("sender_id"),
                Just("receiver_id"),
                Just("gift_id"),
                Just("count"),
                Just("value"),
                Just("user_id"),
                Just("game_id"),
                Just("points"),
                Just("duration_ms"),
                Just("revives"),
                Just("cleared"),
                Just("room_id"),
            ];
            let kind = prop_oneof![Just("gift"), Just("score"), Just("play"), Just("other")];
            (kind, prop::collection::vec((field, json_value()), 0..14)).prop_map(|(k, fields)| {
                let mut m = serde_json::Map::new();
                m.insert("type".into(), serde_json::Value::from(k));
                for (f, v) in fields {
                    m.insert(f.to_string(), v);
                }
                serde_json::Value::Object(m)
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
                if let Err(e) = dec().decode(&bytes) {
                    prop_assert!(REASONS.contains(&e.reason().code()));
                }
            }

            #[test]
            fn arbitrary_event_shaped_json_never_panics(v in event_like()) {
                match dec().decode(v.to_string().as_bytes()) {
                    Ok(e) => {
                        // Whatever passes is a well-formed event.
                        prop_assert!(e.ts >= 946_684_800_000);
                        prop_assert!(!e.event_id().is_empty() && e.event_id().len() <= MAX_ID_BYTES);
                    }
                    Err(e) => prop_assert!(REASONS.contains(&e.reason().code())),
                }
            }
        }
    }

    #[test]
    fn all_three_types_decode() {
        let s = serde_json::json!({"type":"score","event_id":"s","ts":1_763_700_000_000i64,"user_id":"u","game_id":"g","points":-5});
        assert_eq!(
            dec().decode(s.to_string().as_bytes()).unwrap().kind,
            EventType::Score
        );
        let p = serde_json::json!({"type":"play","event_id":"p","ts":1_763_700_000_000i64,"user_id":"u","game_id":"g","duration_ms":5});
        assert_eq!(
            dec().decode(p.to_string().as_bytes()).unwrap().kind,
            EventType::Play
        );
    }
}
