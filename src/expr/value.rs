//! Runtime values and the operator semantics on them: arithmetic with
//! checked overflow and finite-only doubles, numeric comparison across
//! int/double, and CEL heterogeneous equality. Also the static "kind sets"
//! the compiler uses to type-check before evaluation.
//!
//! Everything here is shared by the evaluator and by constant folding, so
//! a folded constant always equals what evaluation would have produced.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use serde_json::Value as Json;

use super::error::EvalError;

/// A value produced by evaluating an expression against an event.
///
/// Strings borrow from the event when they are read straight from it.
/// `PartialEq` is structural (`Int(1) != Double(1.0)`); the expression
/// language's `==` is CEL equality, which compares numbers numerically.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'e> {
    /// `null`, or a JSON null read from the event.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An int literal, a JSON number that fits i64, or an int result; int
    /// arithmetic is checked and fails with `Overflow`.
    Int(i64),
    /// Always finite: operations that would produce NaN or an infinity fail.
    Double(f64),
    /// A string: borrowed when read from the event, owned when built.
    Str(Cow<'e, str>),
    /// A list literal, or a JSON array of the event.
    List(Vec<Value<'e>>),
    /// A JSON object of the event, usable for navigation, `has`, `in` (key
    /// membership), `size` and equality.
    Object(&'e serde_json::Map<String, Json>),
}

impl<'e> Value<'e> {
    /// The CEL-style name of this value's type, for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        self.kind().name()
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Int(_) => Kind::Int,
            Value::Double(_) => Kind::Double,
            Value::Str(_) => Kind::Str,
            Value::List(_) => Kind::List,
            Value::Object(_) => Kind::Object,
        }
    }

    /// Converts a JSON value of the event without copying strings. JSON
    /// numbers that fit i64 are ints, everything else (fractions, exponents,
    /// u64 above i64::MAX) is a double.
    #[inline]
    pub(crate) fn from_json(json: &'e Json) -> Result<Value<'e>, EvalError> {
        match json {
            Json::Null => Ok(Value::Null),
            Json::Bool(b) => Ok(Value::Bool(*b)),
            Json::Number(n) => number_from_json(n),
            Json::String(s) => Ok(Value::Str(Cow::Borrowed(s))),
            Json::Array(items) => list_from_json(items),
            Json::Object(map) => Ok(Value::Object(map)),
        }
    }

    /// Detaches the value from any borrow so it can be stored as a constant.
    /// Objects cannot be detached (they only ever come from events).
    pub(crate) fn into_static(self) -> Option<Value<'static>> {
        Some(match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::Double(d) => Value::Double(d),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::List(items) => Value::List(
                items
                    .into_iter()
                    .map(Value::into_static)
                    .collect::<Option<_>>()?,
            ),
            Value::Object(_) => return None,
        })
    }
}

impl fmt::Display for Value<'_> {
    /// CEL-like rendering, for logs and messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Double(d) => write!(f, "{d:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Value::Object(map) => write!(f, "{}", Json::Object((*map).clone())),
        }
    }
}

/// Arrays are the uncommon, allocating case; kept out of line so that the
/// scalar conversion inlines into the evaluator.
#[inline(never)]
fn list_from_json(items: &[Json]) -> Result<Value<'_>, EvalError> {
    items
        .iter()
        .map(Value::from_json)
        .collect::<Result<_, _>>()
        .map(Value::List)
}

#[inline]
pub(crate) fn number_from_json(n: &serde_json::Number) -> Result<Value<'static>, EvalError> {
    if let Some(i) = n.as_i64() {
        return Ok(Value::Int(i));
    }
    match n.as_f64() {
        Some(d) if d.is_finite() => Ok(Value::Double(d)),
        _ => Err(EvalError::NotFinite),
    }
}

/// The dynamic type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Int,
    Double,
    Str,
    List,
    Object,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Double => "double",
            Kind::Str => "string",
            Kind::List => "list",
            Kind::Object => "map",
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of kinds an expression may produce, known at compile time. A field
/// read may produce anything; literals produce exactly one kind. An
/// operation is a static error when no combination of operand kinds is valid.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kinds(u8);

impl Kinds {
    pub(crate) const NONE: Kinds = Kinds(0);
    pub(crate) const NULL: Kinds = Kinds(Kind::Null.bit());
    pub(crate) const BOOL: Kinds = Kinds(Kind::Bool.bit());
    pub(crate) const INT: Kinds = Kinds(Kind::Int.bit());
    pub(crate) const DOUBLE: Kinds = Kinds(Kind::Double.bit());
    pub(crate) const STR: Kinds = Kinds(Kind::Str.bit());
    pub(crate) const LIST: Kinds = Kinds(Kind::List.bit());
    pub(crate) const OBJECT: Kinds = Kinds(Kind::Object.bit());
    pub(crate) const NUM: Kinds = Kinds(Self::INT.0 | Self::DOUBLE.0);
    pub(crate) const ANY: Kinds = Kinds(0x7f);

    pub(crate) fn of(kind: Kind) -> Kinds {
        Kinds(kind.bit())
    }

    pub(crate) fn union(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    pub(crate) fn meet(self, other: Kinds) -> Kinds {
        Kinds(self.0 & other.0)
    }

    pub(crate) fn has(self, other: Kinds) -> bool {
        self.0 & other.0 != 0
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Kinds {
    type Output = Kinds;

    fn bitor(self, other: Kinds) -> Kinds {
        self.union(other)
    }
}

impl fmt::Debug for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Kinds {
    /// `dyn` for "anything", otherwise the kinds joined by `|`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Kinds::ANY {
            return f.write_str("dyn");
        }
        let all = [
            Kind::Null,
            Kind::Bool,
            Kind::Int,
            Kind::Double,
            Kind::Str,
            Kind::List,
            Kind::Object,
        ];
        let mut first = true;
        for kind in all {
            if self.has(Kinds::of(kind)) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(kind.name())?;
                first = false;
            }
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Arith {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Div => "/",
            Arith::Rem => "%",
        }
    }

    /// Static result kinds for operand kinds `l` and `r`; `NONE` if no
    /// combination is valid.
    pub(crate) fn result_kinds(self, l: Kinds, r: Kinds) -> Kinds {
        let mut out = Kinds::NONE;
        if l.has(Kinds::NUM) && r.has(Kinds::NUM) {
            if l.has(Kinds::INT) && r.has(Kinds::INT) {
                out = out.union(Kinds::INT);
            }
            // Any double operand promotes the result to double.
            if (l.has(Kinds::DOUBLE) && r.has(Kinds::NUM))
                || (r.has(Kinds::DOUBLE) && l.has(Kinds::NUM))
            {
                out = out.union(Kinds::DOUBLE);
            }
        }
        if self == Arith::Add {
            if l.has(Kinds::STR) && r.has(Kinds::STR) {
                out = out.union(Kinds::STR);
            }
            if l.has(Kinds::LIST) && r.has(Kinds::LIST) {
                out = out.union(Kinds::LIST);
            }
        }
        out
    }

    /// Numbers inline (the hot path); everything else out of line.
    #[inline]
    pub(crate) fn apply<'e>(self, l: &Value<'e>, r: &Value<'e>) -> Result<Value<'e>, EvalError> {
        match (l, r) {
            (Value::Int(a), Value::Int(b)) => self.int(*a, *b).map(Value::Int),
            (Value::Int(a), Value::Double(b)) => self.double(*a as f64, *b),
            (Value::Double(a), Value::Int(b)) => self.double(*a, *b as f64),
            (Value::Double(a), Value::Double(b)) => self.double(*a, *b),
            _ => self.apply_other(l, r),
        }
    }

    #[inline(never)]
    fn apply_other<'e>(self, l: &Value<'e>, r: &Value<'e>) -> Result<Value<'e>, EvalError> {
        match (l, r) {
            (Value::Str(a), Value::Str(b)) if self == Arith::Add => {
                let mut s = String::with_capacity(a.len() + b.len());
                s.push_str(a);
                s.push_str(b);
                Ok(Value::Str(Cow::Owned(s)))
            }
            (Value::List(a), Value::List(b)) if self == Arith::Add => {
                let mut items = Vec::with_capacity(a.len() + b.len());
                items.extend(a.iter().cloned());
                items.extend(b.iter().cloned());
                Ok(Value::List(items))
            }
            _ => Err(EvalError::Type(format!(
                "cannot apply '{}' to {} and {}",
                self.symbol(),
                l.type_name(),
                r.type_name()
            ))),
        }
    }

    #[inline]
    fn int(self, a: i64, b: i64) -> Result<i64, EvalError> {
        let result = match self {
            Arith::Add => a.checked_add(b),
            Arith::Sub => a.checked_sub(b),
            Arith::Mul => a.checked_mul(b),
            Arith::Div | Arith::Rem if b == 0 => return Err(EvalError::DivisionByZero),
            // Truncating division; the only overflow is i64::MIN / -1.
            Arith::Div => a.checked_div(b),
            Arith::Rem => a.checked_rem(b),
        };
        result.ok_or(EvalError::Overflow)
    }

    #[inline]
    fn double(self, a: f64, b: f64) -> Result<Value<'static>, EvalError> {
        let result = match self {
            Arith::Add => a + b,
            Arith::Sub => a - b,
            Arith::Mul => a * b,
            Arith::Div | Arith::Rem if b == 0.0 => return Err(EvalError::DivisionByZero),
            Arith::Div => a / b,
            Arith::Rem => a % b,
        };
        finite(result)
    }
}

/// Scores must be finite: NaN and infinities are errors, not values.
#[inline]
pub(crate) fn finite(d: f64) -> Result<Value<'static>, EvalError> {
    if d.is_finite() {
        Ok(Value::Double(d))
    } else {
        Err(EvalError::NotFinite)
    }
}

pub(crate) fn negate<'e>(v: &Value<'e>) -> Result<Value<'e>, EvalError> {
    match v {
        Value::Int(i) => i.checked_neg().map(Value::Int).ok_or(EvalError::Overflow),
        Value::Double(d) => Ok(Value::Double(-d)),
        other => Err(EvalError::Type(format!(
            "cannot negate {}",
            other.type_name()
        ))),
    }
}

impl Cmp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }

    /// Whether ordering `l` against `r` can ever succeed.
    pub(crate) fn statically_valid(self, l: Kinds, r: Kinds) -> bool {
        match self {
            Cmp::Eq | Cmp::Ne => true,
            _ => {
                (l.has(Kinds::NUM) && r.has(Kinds::NUM))
                    || (l.has(Kinds::STR) && r.has(Kinds::STR))
                    || (l.has(Kinds::BOOL) && r.has(Kinds::BOOL))
            }
        }
    }

    /// Ints and strings inline (the hot path); everything else out of line.
    #[inline]
    pub(crate) fn apply(self, l: &Value<'_>, r: &Value<'_>) -> Result<bool, EvalError> {
        let ord = match (l, r) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Str(a), Value::Str(b)) => match self {
                Cmp::Eq => return Ok(a == b),
                Cmp::Ne => return Ok(a != b),
                _ => a.as_bytes().cmp(b.as_bytes()),
            },
            _ => return self.apply_other(l, r),
        };
        Ok(self.holds(ord))
    }

    /// Whether `l op r` holds given `l.cmp(r) == ord`.
    #[inline]
    fn holds(self, ord: Ordering) -> bool {
        match self {
            Cmp::Eq => ord == Ordering::Equal,
            Cmp::Ne => ord != Ordering::Equal,
            Cmp::Lt => ord == Ordering::Less,
            Cmp::Le => ord != Ordering::Greater,
            Cmp::Gt => ord == Ordering::Greater,
            Cmp::Ge => ord != Ordering::Less,
        }
    }

    #[inline(never)]
    fn apply_other(self, l: &Value<'_>, r: &Value<'_>) -> Result<bool, EvalError> {
        match self {
            Cmp::Eq => Ok(equal(l, r)),
            Cmp::Ne => Ok(!equal(l, r)),
            _ => {
                let ord = order(l, r).ok_or_else(|| {
                    EvalError::Type(format!(
                        "cannot compare {} {} {}",
                        l.type_name(),
                        self.symbol(),
                        r.type_name()
                    ))
                })?;
                Ok(self.holds(ord))
            }
        }
    }
}

/// Exact comparison of an int with a finite double (no rounding of the int).
pub(crate) fn cmp_int_double(i: i64, d: f64) -> Option<Ordering> {
    if d.is_nan() {
        return None;
    }
    // 2^63 as f64; every i64 is below it and at or above its negation.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d >= TWO_63 {
        return Some(Ordering::Less);
    }
    if d < -TWO_63 {
        return Some(Ordering::Greater);
    }
    let t = d.trunc();
    // In range by the checks above, so the cast is exact.
    let ti = t as i64;
    Some(match i.cmp(&ti) {
        Ordering::Equal => {
            if d > t {
                Ordering::Less
            } else if d < t {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        other => other,
    })
}

/// Ordering for `< <= > >=` (and `min`/`max`): numbers across int/double,
/// strings bytewise, bools (false < true). `None` for other combinations.
pub(crate) fn order(l: &Value<'_>, r: &Value<'_>) -> Option<Ordering> {
    match (l, r) {
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Double(a), Value::Double(b)) => a.partial_cmp(b),
        (Value::Int(a), Value::Double(b)) => cmp_int_double(*a, *b),
        (Value::Double(a), Value::Int(b)) => cmp_int_double(*b, *a).map(Ordering::reverse),
        (Value::Str(a), Value::Str(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

/// CEL heterogeneous equality: numbers compare numerically across int and
/// double, lists element-wise, and values of different types are unequal.
pub(crate) fn equal(l: &Value<'_>, r: &Value<'_>) -> bool {
    match (l, r) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Str(a), Value::Str(b)) => a == b,
        (Value::Int(_) | Value::Double(_), Value::Int(_) | Value::Double(_)) => {
            order(l, r) == Some(Ordering::Equal)
        }
        (Value::List(a), Value::List(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => std::ptr::eq(*a, *b) || json_maps_equal(a, b),
        _ => false,
    }
}

/// Equality of a value with a JSON value of the event, without converting
/// scalars (the hot path of `x in field`).
pub(crate) fn equal_json(l: &Value<'_>, r: &Json) -> bool {
    match (l, r) {
        (Value::Null, Json::Null) => true,
        (Value::Bool(a), Json::Bool(b)) => a == b,
        (Value::Str(a), Json::String(b)) => a == b,
        (Value::Int(_) | Value::Double(_), Json::Number(n)) => {
            number_from_json(n).is_ok_and(|v| equal(l, &v))
        }
        (Value::List(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal_json(x, y))
        }
        (Value::Object(a), Json::Object(b)) => std::ptr::eq(*a, b) || json_maps_equal(a, b),
        _ => false,
    }
}

/// Map equality with CEL number semantics for the values (`1` equals `1.0`).
fn json_maps_equal(a: &serde_json::Map<String, Json>, b: &serde_json::Map<String, Json>) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, av)| {
            b.get(k)
                .is_some_and(|bv| Value::from_json(av).is_ok_and(|v| equal_json(&v, bv)))
        })
}
