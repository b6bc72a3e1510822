//! What a board is: its definition as written ([`spec`]), its ranking
//! enums ([`ranking`]), the compiled board ([`model`]), the calendar and
//! window time math ([`period`], [`window`], [`duration`]), where an event
//! lands ([`resolve`]), Redis key names ([`keys`]) and the score encoding of
//! tie-break boards ([`score`]) and of composite boards ([`layout`], with
//! the reader helpers in [`composite`]), and what makes a board the shadow
//! of another ([`shadow`]) and which shadow serves a promoted board
//! ([`serving`]).

pub mod composite;
pub(crate) mod duration;
pub mod keys;
pub(crate) mod layout;
pub(crate) mod model;
pub(crate) mod period;
pub(crate) mod ranking;
pub mod resolve;
pub(crate) mod score;
pub(crate) mod serving;
pub(crate) mod shadow;
pub(crate) mod spec;
pub(crate) mod window;

pub use model::{Board, BoardSet};
pub(crate) use ranking::{Aggregate, Order};
pub(crate) use spec::{BoardError, BoardSpec, Globals};
