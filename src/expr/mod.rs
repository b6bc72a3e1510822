//! Rule expression compiler: a CEL-syntax subset over the fields of an
//! event, compiled once per rule and evaluated per event. Fields are read
//! through [`Record`]: an event's [`Fields`] (a declared field's slot is
//! resolved at compile time) or any JSON object.
//!
//! This file owns the public API ([`Program`], [`Expect`], [`Value`], the
//! error types) and the end-to-end pipeline:
//! source → `lexer` → `parser` (syntax tree, nesting limit) → `compile`
//! (static checks, field paths, constant folding) → evaluation tree, walked
//! by `eval` for every event. `value` holds the operator semantics.
//!
//! # Language
//!
//! Literals (ints, `0x` hex, doubles, quoted/raw/triple-quoted strings with
//! CEL escapes, `true`, `false`, `null`, lists `[a, b]`); field names and
//! paths (`a.b.c`, `a["k"]`, `a[0]`); `+ - * / %`, `== != < <= > >= in`,
//! `&& || !`, `c ? a : b` with CEL precedence; functions `has(a.b)`,
//! `string`, `int`, `double`, `size`, `min`, `max`.
//!
//! # Differences from CEL (deliberate)
//!
//! - int and double operands mix, promoting to double (`count * value`);
//!   `%` is defined on doubles too. CEL has no mixed arithmetic.
//! - doubles must stay finite: `x / 0.0` is `DivisionByZero` and any
//!   NaN/infinite result is `NotFinite` (CEL yields ±Inf/NaN).
//! - `has(a.b.c)` is `false` when `a` or `a.b` is missing or null (CEL
//!   errors on a missing parent); `has(x)` on a bare name tests for a
//!   top-level field (CEL requires a selection).
//! - statically impossible operand kinds (`"a" * 2`, `!3`, `1 + true`,
//!   `false && 1`) are compile errors, even where CEL's runtime would
//!   short-circuit past them; so is a constant sub-expression that fails on
//!   every event (`count + 1 / 0`), unless an enclosing `&&`, `||` or `?:`
//!   branch may skip or absorb it.
//! - `min`/`max` accept numbers only (also as one list argument) and keep
//!   the winner's type; `size` of a map counts its keys.
//! - `string(double)` uses Rust's shortest round-trip formatting
//!   (`string(1e21)` is `"1000000000000000000000"`; cel-go gives `1e+21`).
//! - not supported: unsigned ints, bytes, map literals, macros other than
//!   `has`, method-call syntax (`x.size()`), timestamps and durations.

mod compile;
mod eval;
mod lexer;
mod parser;
mod value;

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use serde_json::{Map, Value as Json};

use crate::event::{Fields, Slot};
use compile::{Compiler, Node};
use value::Kinds;

pub use value::Value;

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

/// Longest accepted source, in bytes; rules are short and this keeps
/// compile time and memory bounded for hostile input.
pub const MAX_SOURCE_LEN: usize = 4096;

/// Maximum nesting depth of an expression.
pub const MAX_NESTING: usize = parser::MAX_DEPTH;

/// The result kind a caller needs from a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Bool,
    /// An int or a double (read with [`Program::eval_number`]).
    Number,
    /// A string, or an int (converted to its decimal form by
    /// [`Program::eval_string`], since ids may be integers).
    String,
    Any,
}

impl Expect {
    fn kinds(self) -> Kinds {
        match self {
            Expect::Bool => Kinds::BOOL,
            Expect::Number => Kinds::NUM,
            Expect::String => Kinds::STR | Kinds::INT,
            Expect::Any => Kinds::ANY,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Expect::Bool => "a bool",
            Expect::Number => "a number",
            Expect::String => "a string",
            Expect::Any => "a value",
        }
    }
}

/// A compile-time error, located at a 1-based character column of the
/// source (newlines count as characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at column {position}")]
pub struct CompileError {
    pub position: usize,
    pub message: String,
}

/// An error evaluating a program against one event.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A field (or nested path, as written) is missing from the event.
    #[error("no such field: {0}")]
    NoSuchField(String),
    #[error("index {index} out of bounds for list of length {len}")]
    IndexOutOfBounds { index: i64, len: usize },
    #[error("division by zero")]
    DivisionByZero,
    #[error("integer overflow")]
    Overflow,
    #[error("result is not a finite number")]
    NotFinite,
    /// An int score beyond ±2^53, which a double (Redis score) cannot hold
    /// exactly.
    #[error("integer {0} exceeds 2^53 and cannot be used exactly as a score")]
    Inexact(i64),
    /// An operand or result of the wrong type.
    #[error("type error: {0}")]
    Type(String),
    /// A string that does not parse as the requested number.
    #[error("conversion error: {0}")]
    Conversion(String),
}

impl EvalError {
    /// A short, stable reason code (for metrics labels and logs).
    pub fn code(&self) -> &'static str {
        match self {
            EvalError::NoSuchField(_) => "no_such_field",
            EvalError::IndexOutOfBounds { .. } => "index_out_of_bounds",
            EvalError::DivisionByZero => "division_by_zero",
            EvalError::Overflow => "overflow",
            EvalError::NotFinite => "not_finite",
            EvalError::Inexact(_) => "inexact",
            EvalError::Type(_) => "type",
            EvalError::Conversion(_) => "conversion",
        }
    }
}

/// A compiled expression. Immutable, `Send + Sync`, cheap to evaluate.
#[derive(Debug)]
pub struct Program {
    source: Box<str>,
    root: Node,
    fields: Box<[String]>,
}

/// Largest integer magnitude a double holds exactly.
const MAX_EXACT_INT: u64 = 1 << 53;

impl Program {
    /// Parse, check and compile. `expect` is the result kind the caller
    /// needs; a statically known different kind is a `CompileError`.
    pub fn compile(source: &str, expect: Expect) -> Result<Program, CompileError> {
        if source.len() > MAX_SOURCE_LEN {
            return Err(CompileError {
                position: 1,
                message: format!(
                    "expression is too long ({} bytes, at most {MAX_SOURCE_LEN})",
                    source.len()
                ),
            });
        }
        let tokens = lexer::tokenize(source)?;
        let ast = parser::parse(&tokens)?;
        let mut compiler = Compiler::new();
        let (root, kinds) = compiler.compile_root(&ast)?;
        if !kinds.has(expect.kinds()) {
            return Err(CompileError {
                position: 1,
                message: format!(
                    "expression yields {kinds}, but {} is required",
                    expect.describe()
                ),
            });
        }
        Ok(Program {
            source: source.into(),
            root,
            fields: compiler.fields.into_boxed_slice(),
        })
    }

    /// The source text this program was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Top-level field names the expression reads (including in `has()`),
    /// in order of first use.
    pub fn fields(&self) -> Vec<String> {
        self.fields.to_vec()
    }

    /// Evaluates to a value. Strings read from the event are borrowed; a
    /// string constant that is itself the result is copied.
    pub fn eval<'e>(&self, event: &'e dyn Record) -> Result<Value<'e>, EvalError> {
        eval::eval(&self.root, event)
    }

    /// Evaluates a predicate.
    pub fn eval_bool(&self, event: &dyn Record) -> Result<bool, EvalError> {
        eval::truth(&self.root, event)
    }

    /// Number result as f64. An int result whose magnitude exceeds 2^53 is
    /// an error (it would not be exact as a Redis score); doubles are
    /// always finite.
    pub fn eval_number(&self, event: &dyn Record) -> Result<f64, EvalError> {
        match self.eval(event)? {
            Value::Int(i) if i.unsigned_abs() > MAX_EXACT_INT => Err(EvalError::Inexact(i)),
            // Exact: |i| <= 2^53.
            Value::Int(i) => Ok(i as f64),
            Value::Double(d) if d.is_finite() => Ok(d),
            Value::Double(_) => Err(EvalError::NotFinite),
            other => Err(EvalError::Type(format!(
                "expected a number, found {}",
                other.type_name()
            ))),
        }
    }

    /// String result; an int result is converted to its decimal string
    /// (ids may be integers). Other kinds are errors.
    pub fn eval_string<'e>(&self, event: &'e dyn Record) -> Result<Cow<'e, str>, EvalError> {
        match self.eval(event)? {
            Value::Str(s) => Ok(s),
            Value::Int(i) => Ok(Cow::Owned(i.to_string())),
            other => Err(EvalError::Type(format!(
                "expected a string, found {}",
                other.type_name()
            ))),
        }
    }
}
