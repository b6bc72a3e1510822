//! What a board is: its definition as written ([`spec`]), its ranking
//! enums ([`ranking`]), the compiled board ([`model`]), the calendar and
//! window time math ([`period`], [`window`], [`duration`]), where an event
//! lands ([`resolve`]), Redis key names ([`keys`]) and the score encoding of
//! tie-break boards ([`score`]) and of composite boards ([`layout`], with
//! the reader helpers in [`composite`]).

pub mod composite;
pub mod duration;
pub mod keys;
pub mod layout;
pub mod model;
pub mod period;
pub mod ranking;
pub mod resolve;
pub mod score;
pub mod spec;
pub mod window;

pub use model::{Board, BoardSet};
pub use ranking::{Aggregate, Order, TieBreak};
pub use spec::{BoardError, BoardSpec, Globals};
