//! The compiled evaluation tree: [`Node`], the built-in functions
//! ([`Func`]) and the field paths resolved at compile time ([`Path`],
//! [`Seg`]). `compile` builds it and `eval` walks it, so it lives apart
//! from both.

use super::value::{Arith, Cmp, Value};
use crate::event::Slot;

/// The evaluation tree. Binary operators keep both operands in one box so
/// that each node costs a single allocation and stays close in memory.
#[derive(Debug)]
pub(crate) enum Node {
    Const(Value<'static>),
    /// Read of an event field (possibly nested); the hot path.
    Field(Path),
    Has(Path),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<[Node]>),
    Or(Box<[Node]>),
    Cond(Box<(Node, Node, Node)>),
    Arith(Arith, Box<(Node, Node)>),
    Cmp(Cmp, Box<(Node, Node)>),
    In(Box<(Node, Node)>),
    /// Indexing whose base is not a plain path or whose index is dynamic.
    Index(Box<(Node, Node)>),
    /// Field selection on a computed object (e.g. `(c ? a : b).x`).
    Select(Box<Node>, Box<str>),
    List(Box<[Node]>),
    Call(Func, Box<[Node]>),
}

/// Built-in functions other than `has` (which takes a path, not a value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    String,
    Int,
    Double,
    Size,
    Min,
    Max,
}

impl Func {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Func::String => "string",
            Func::Int => "int",
            Func::Double => "double",
            Func::Size => "size",
            Func::Min => "min",
            Func::Max => "max",
        }
    }
}

/// A field path resolved at compile time: the top-level key, then nested
/// keys / array indexes.
#[derive(Debug, Clone)]
pub(crate) struct Path {
    pub(crate) root: Box<str>,
    /// `root`'s slot in an event's fields, resolved once here.
    pub(crate) slot: Option<Slot>,
    pub(crate) segs: Box<[Seg]>,
    /// The path as written, for `NoSuchField` messages.
    pub(crate) text: Box<str>,
}

#[derive(Debug, Clone)]
pub(crate) enum Seg {
    Key(Box<str>),
    Index(usize),
}

impl Path {
    pub(super) fn push(&self, seg: Seg) -> Path {
        let text = match &seg {
            Seg::Key(k) if is_ident(k) => format!("{}.{k}", self.text),
            Seg::Key(k) => format!("{}[{k:?}]", self.text),
            Seg::Index(i) => format!("{}[{i}]", self.text),
        };
        let mut segs = self.segs.to_vec();
        segs.push(seg);
        Path {
            root: self.root.clone(),
            slot: self.slot,
            segs: segs.into_boxed_slice(),
            text: text.into_boxed_str(),
        }
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}
