//! Rule expression compiler: a CEL-syntax subset over the fields of an
//! event, compiled once per rule and evaluated per event. Fields are read
//! through [`Record`]: an event's [`Fields`](crate::event::Fields) (a
//! declared field's slot is resolved at compile time) or any JSON object.
//!
//! This file owns the public API ([`Program`], [`Expect`], and re-exports
//! of [`Value`], [`Record`] and the error types) and the end-to-end pipeline:
//! source → `lexer` → `parser` (syntax tree, nesting limit) → `compile`
//! (static checks, field paths, constant folding) → evaluation tree
//! (`tree`), walked by `eval` for every event. `value` holds the operator
//! semantics, `record` the [`Record`] trait, `error` [`CompileError`] and
//! [`EvalError`]; the stages import those leaf modules, never this file.
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
mod error;
mod eval;
mod lexer;
mod parser;
mod record;
mod tree;
mod value;

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use compile::Compiler;
use tree::Node;
use value::Kinds;

pub use error::{CompileError, EvalError};
pub use record::Record;
pub use value::Value;

/// Longest accepted source, in bytes; rules are short and this keeps
/// compile time and memory bounded for hostile input.
pub(crate) const MAX_SOURCE_LEN: usize = 4096;

/// Maximum nesting depth of an expression.
#[cfg(test)]
pub(crate) const MAX_NESTING: usize = parser::MAX_DEPTH;

/// The result kind a caller needs from a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A bool, for `filter` (read with [`Program::eval_bool`]).
    Bool,
    /// An int or a double (read with [`Program::eval_number`]).
    Number,
    /// A string, or an int (converted to its decimal form by
    /// [`Program::eval_string`], since ids may be integers).
    String,
    /// Any value, read with [`Program::eval`]: the result's kind is not
    /// checked when compiling.
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
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Top-level field names the expression reads (including in `has()`),
    /// in order of first use.
    pub(crate) fn fields(&self) -> Vec<String> {
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
