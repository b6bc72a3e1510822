//! An event's fields as rules read them: the fields some schema declares in
//! fixed slots (one per [`Key`]), every other field in a map by name.
//!
//! Rule expressions resolve a field name to its [`Slot`] once, when they are
//! compiled, so reading `receiver_id` on the hot path is an array index
//! instead of a string-keyed map lookup, and decoding an event fills an
//! array instead of building a map with an owned key per field (issue 14).
//! A name with a slot is never in the map, and the other way round, so a
//! field has exactly one place whichever way the event was built.

use serde_json::{Map, Value};

use super::typed::Key;

/// The slot of a schema-declared field name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u8);

impl Slot {
    pub(super) const EVENT_ID: Slot = Slot(Key::EventId as u8);

    /// The slot of `name`, or `None` when no schema declares it (it then
    /// lives in the map of other fields).
    pub(crate) fn of(name: &str) -> Option<Slot> {
        Key::find(name).map(Slot::from)
    }
}

impl From<Key> for Slot {
    fn from(key: Key) -> Slot {
        // Fewer than 256 keys: `Key::ALL` has 15.
        Slot(key as u8)
    }
}

/// The fields of one event. See the module header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    /// Indexed by [`Slot`] (`Key as usize`).
    known: [Option<Value>; Key::ALL.len()],
    /// Fields no schema declares, by name.
    extra: Map<String, Value>,
}

impl Fields {
    /// Fields with the given undeclared ones and no declared ones yet.
    pub(super) fn with_extra(extra: Map<String, Value>) -> Fields {
        debug_assert!(extra.keys().all(|k| Slot::of(k).is_none()));
        Fields {
            known: Default::default(),
            extra,
        }
    }

    pub(super) fn set(&mut self, key: Key, value: Value) {
        self.known[key as usize] = Some(value);
    }

    /// The field read through a compiled name: `slot` is
    /// [`Slot::of`]`(name)`, worked out once by the caller.
    #[inline]
    pub(crate) fn field(&self, name: &str, slot: Option<Slot>) -> Option<&Value> {
        match slot {
            Some(Slot(i)) => self.known.get(usize::from(i)).and_then(Option::as_ref),
            None => self.extra.get(name),
        }
    }

    /// The field called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.field(name, Slot::of(name))
    }

    /// All fields as one JSON object (for tests and diagnostics; the hot
    /// path never builds it).
    #[cfg(test)]
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        let mut map = self.extra.clone();
        for (key, value) in Key::ALL.iter().zip(&self.known) {
            if let Some(v) = value {
                map.insert(key.name().to_owned(), v.clone());
            }
        }
        map
    }
}

/// `fields["name"]`: the field, or `null` when absent (as indexing a
/// `serde_json::Value` does).
impl std::ops::Index<&str> for Fields {
    type Output = Value;

    fn index(&self, name: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(name).unwrap_or(&NULL)
    }
}

/// Sorts a JSON object's fields into slots and the map.
impl From<Map<String, Value>> for Fields {
    fn from(map: Map<String, Value>) -> Fields {
        let mut fields = Fields::default();
        for (name, value) in map {
            match Key::find(&name) {
                Some(key) => fields.set(key, value),
                None => {
                    fields.extra.insert(name, value);
                }
            }
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test objects are objects"),
        }
    }

    #[test]
    fn every_field_is_found_by_name_and_the_map_round_trips() {
        let map = object(json!({
            "type": "gift", "receiver_id": "r1", "count": 3,
            "note": "hi", "nested": {"a": [1, 2]}, "cleared": true,
        }));
        let fields = Fields::from(map.clone());
        for (name, value) in &map {
            assert_eq!(fields.get(name), Some(value), "{name}");
        }
        assert_eq!(fields.get("absent"), None);
        assert_eq!(fields.get("sender_id"), None);
        assert_eq!(fields.to_map(), map);
    }

    /// Rule expressions read the same through slots as through a plain
    /// JSON object (the reference: a map lookup by name), for objects
    /// mixing declared and other names, nesting, nulls and wrong types.
    mod same_as_a_map {
        use proptest::prelude::*;
        use serde_json::{Map, Value, json};

        use super::super::Fields;
        use crate::expr::{Expect, Program};

        const EXPRESSIONS: [&str; 12] = [
            "receiver_id",
            "count * value",
            "has(note)",
            "has(sender_id)",
            "has(extra.a)",
            "gift_id == 'rose' && count > 2",
            "note",
            "extra.a[1]",
            "size(receiver_id)",
            "'x' in tags",
            "cleared ? points : revives",
            "string(ts) + user_id",
        ];

        fn names() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "receiver_id",
                "sender_id",
                "gift_id",
                "count",
                "value",
                "ts",
                "user_id",
                "points",
                "revives",
                "cleared",
                "note",
                "extra",
                "tags",
                "type",
            ])
        }

        fn values() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (-5i64..5).prop_map(Value::from),
                (0.0f64..4.0).prop_map(Value::from),
                prop::sample::select(vec!["rose", "x", "", "r1"]).prop_map(Value::from),
                Just(json!(["x", "y"])),
                Just(json!({"a": [1, 2]})),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]
            #[test]
            fn every_expression_gives_the_same_answer(
                entries in prop::collection::vec((names(), values()), 0..10)
            ) {
                let map: Map<String, Value> =
                    entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                let fields = Fields::from(map.clone());
                for text in EXPRESSIONS {
                    let program = Program::compile(text, Expect::Any).map_err(|e| {
                        TestCaseError::fail(format!("{text}: {e:?}"))
                    })?;
                    let by_map = format!("{:?}", program.eval(&map));
                    let by_slots = format!("{:?}", program.eval(&fields));
                    prop_assert_eq!(by_map, by_slots, "{} on {:?}", text, map);
                }
            }
        }
    }

    #[test]
    fn declared_names_have_slots_and_others_do_not() {
        for key in Key::ALL {
            assert_eq!(Slot::of(key.name()), Some(Slot::from(key)));
        }
        assert_eq!(Slot::of("note"), None);
        assert_eq!(Slot::of("Receiver_id"), None);
        // A slot read finds only the slot, a name read only the map.
        let fields = Fields::from(object(json!({"gift_id": "rose", "note": 1})));
        assert_eq!(fields.field("gift_id", None), None);
        assert_eq!(
            fields.field("gift_id", Slot::of("gift_id")),
            Some(&json!("rose"))
        );
        assert_eq!(fields.field("note", None), Some(&json!(1)));
    }
}
