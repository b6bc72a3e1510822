//! What a board is: its definition as written ([`spec`]), the compiled
//! board and its domain enums ([`model`]), the calendar and
//! window time math ([`period`], [`window`], [`duration`]), where an event
//! lands ([`resolve`]), Redis key names ([`keys`]) and the score encoding of
//! tie-break boards ([`score`]) and of composite boards ([`composite`]).

pub mod composite;
pub mod duration;
pub mod keys;
pub mod model;
pub mod period;
pub mod resolve;
pub mod score;
pub mod spec;
pub mod window;

pub use model::{Aggregate, Board, BoardSet, Order, TieBreak};
pub use spec::{BoardError, BoardSpec, Globals};
