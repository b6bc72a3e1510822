//! A `[[check]]` table as the user writes it (docs/checks.md): the serde
//! shape that [`super::CheckSet::compile`] turns into compiled checks.

use serde::{Deserialize, Serialize};

/// One `[[check]]` as written: a `rule`, or a `member` with a `max_rate`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckSpec {
    pub(crate) name: String,
    pub(crate) event: String,
    /// An expression that must hold (a rule check).
    #[serde(default)]
    pub(crate) rule: Option<String>,
    /// Whose rate a rate check counts (an expression giving a string).
    #[serde(default)]
    pub(crate) member: Option<String>,
    /// `N/length`: at most N events of one member within any sliding
    /// length of event time.
    #[serde(default)]
    pub(crate) max_rate: Option<String>,
}
