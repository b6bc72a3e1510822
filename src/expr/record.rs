//! What expressions read fields from: the [`Record`] trait, implemented by
//! an event's [`Fields`] and by any JSON object.

use serde_json::{Map, Value as Json};

use crate::event::{Fields, Slot};

/// What expressions read fields from: an event's [`Fields`] (the hot
/// path: a declared field is an array slot) or any JSON object (tests,
/// constant folding).
pub trait Record {
    /// The top-level field `name`, whose [`Slot::of`] is `slot` (resolved
    /// when the expression was compiled).
    fn field(&self, name: &str, slot: Option<Slot>) -> Option<&Json>;
}

impl Record for Fields {
    #[inline]
    fn field(&self, name: &str, slot: Option<Slot>) -> Option<&Json> {
        Fields::field(self, name, slot)
    }
}

impl Record for Map<String, Json> {
    fn field(&self, name: &str, _: Option<Slot>) -> Option<&Json> {
        self.get(name)
    }
}
