//! How a board ranks, as its definition names it: how the scores of one
//! member combine ([`Aggregate`]), which end of the scores ranks first
//! ([`Order`]) and which of two equal scores ranks first ([`TieBreak`]).
//! A leaf module: the definition (`spec`), the compiled board (`model`)
//! and the score encodings (`score`, `layout`) all name these enums.

use serde::{Deserialize, Serialize};

/// How a board combines the scores of one member within a view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Aggregate {
    #[default]
    Sum,
    Max,
    Min,
    Last,
}

/// Which of two members with equal scores ranks first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TieBreak {
    #[default]
    None,
    Earliest,
    Latest,
}

/// Rank order: `desc` puts the highest score first (the default, and for
/// `min` boards `asc`, because their best is the lowest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Order {
    Desc,
    Asc,
}
