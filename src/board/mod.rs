//! What a board is: its compiled definition ([`model`]), the calendar and
//! window time math ([`period`], [`window`], [`duration`]), where an event
//! lands ([`resolve`]), Redis key names ([`keys`]) and the score encoding of
//! tie-break boards ([`score`]).

pub mod duration;
pub mod keys;
pub mod model;
pub mod period;
pub mod resolve;
pub mod score;
pub mod window;

pub use model::{Board, BoardSet};
