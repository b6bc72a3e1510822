//! The expression errors: [`CompileError`] (rejected source, located at a
//! column) and [`EvalError`] (one evaluation failed, with a stable reason
//! code). Every stage names them from here.

/// A compile-time error, located at a 1-based character column of the
/// source (newlines count as characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at column {position}")]
pub struct CompileError {
    pub(crate) position: usize,
    pub(crate) message: String,
}

/// An error evaluating a program against one event.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A field (or nested path, as written) is missing from the event.
    #[error("no such field: {0}")]
    NoSuchField(String),
    /// A list index (`a[i]`) outside the list.
    #[error("index {index} out of bounds for list of length {len}")]
    IndexOutOfBounds {
        /// The index as evaluated (negative ones are out of bounds too).
        index: i64,
        /// The list's length.
        len: usize,
    },
    /// `/` or `%` by zero, int or double (on doubles CEL would give ±Inf or NaN).
    #[error("division by zero")]
    DivisionByZero,
    /// Int arithmetic or a conversion to int went beyond the 64-bit range.
    #[error("integer overflow")]
    Overflow,
    /// A double result is NaN or infinite: scores must stay finite.
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
    #[cfg(test)]
    pub(crate) fn code(&self) -> &'static str {
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
