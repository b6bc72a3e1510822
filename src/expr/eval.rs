//! Evaluator of the compiled [`Node`] tree against one event.
//!
//! Owns the per-event hot path, so it avoids allocation where it can:
//! field reads borrow strings from the event, constants are used by
//! reference in operators (never cloned unless they are the result),
//! `in`/`size`/indexing on a field work on the event's JSON directly, and
//! boolean nodes are evaluated by [`truth`] without building `Value`s.
//! Recursion depth is bounded by the parser's nesting limit.

use std::borrow::Cow;

use serde_json::{Map, Value as Json};

use super::error::EvalError;
use super::record::Record;
use super::tree::{Func, Node, Path, Seg};
use super::value::{self, Value};

type Event<'a> = dyn Record + 'a;

/// An operand: a reference to a program constant or a computed value. A
/// `&Value<'static>` is usable as a `&Value<'e>` (the type is covariant),
/// which is what lets constants take part without being cloned.
enum Held<'s, 'e> {
    Ref(&'s Value<'static>),
    Own(Value<'e>),
}

impl<'e> Held<'_, 'e> {
    fn get(&self) -> &Value<'e> {
        match self {
            Held::Ref(v) => v,
            Held::Own(v) => v,
        }
    }
}

/// Operands are mostly constants and field reads; both are handled inline
/// rather than through a recursive `eval` call, which measurably matters
/// on the hot path.
#[inline]
fn held<'s, 'e>(node: &'s Node, ev: &'e Event<'_>) -> Result<Held<'s, 'e>, EvalError> {
    match node {
        Node::Const(v) => Ok(Held::Ref(v)),
        Node::Field(path) => Value::from_json(lookup(path, ev)?).map(Held::Own),
        other => eval(other, ev).map(Held::Own),
    }
}

fn json_type_name(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "bool",
        Json::Number(n) if n.is_i64() => "int",
        Json::Number(_) => "double",
        Json::String(_) => "string",
        Json::Array(_) => "list",
        Json::Object(_) => "map",
    }
}

#[cold]
fn no_such_field(path: &Path) -> EvalError {
    EvalError::NoSuchField(path.text.to_string())
}

fn index_error(index: i64, len: usize) -> EvalError {
    EvalError::IndexOutOfBounds { index, len }
}

/// Navigates a path in the event. Missing keys (and navigating through a
/// JSON `null`) are `NoSuchField`; selecting into a scalar is a type error.
#[inline]
pub(crate) fn lookup<'e>(path: &Path, ev: &'e Event<'_>) -> Result<&'e Json, EvalError> {
    match ev.field(&path.root, path.slot) {
        Some(root) if path.segs.is_empty() => Ok(root),
        Some(root) => lookup_nested(path, root),
        None => Err(no_such_field(path)),
    }
}

#[inline(never)]
fn lookup_nested<'e>(path: &Path, mut cur: &'e Json) -> Result<&'e Json, EvalError> {
    for seg in &path.segs {
        cur = match (seg, cur) {
            (Seg::Key(k), Json::Object(m)) => m.get(&**k).ok_or_else(|| no_such_field(path))?,
            (Seg::Index(i), Json::Array(items)) => items
                .get(*i)
                .ok_or_else(|| index_error(i64::try_from(*i).unwrap_or(i64::MAX), items.len()))?,
            (_, Json::Null) => return Err(no_such_field(path)),
            (Seg::Key(k), other) => {
                return Err(EvalError::Type(format!(
                    "cannot select field '{k}' from {} (in {})",
                    json_type_name(other),
                    path.text
                )));
            }
            (Seg::Index(_), other) => {
                return Err(EvalError::Type(format!(
                    "cannot index {} (in {})",
                    json_type_name(other),
                    path.text
                )));
            }
        };
    }
    Ok(cur)
}

/// `has(path)`: presence of the last key. A missing or null intermediate
/// object means "not present" rather than an error, which is what rules
/// about optional nested objects want.
fn has(path: &Path, ev: &Event<'_>) -> Result<bool, EvalError> {
    let Some(mut cur) = ev.field(&path.root, path.slot) else {
        return Ok(false);
    };
    for seg in &path.segs {
        let Seg::Key(k) = seg else {
            // has() paths are built from selections only.
            return Err(EvalError::Type("has() takes a field selection".to_owned()));
        };
        cur = match cur {
            Json::Object(m) => match m.get(&**k) {
                Some(v) => v,
                None => return Ok(false),
            },
            Json::Null => return Ok(false),
            other => {
                return Err(EvalError::Type(format!(
                    "has(): cannot select field '{k}' from {} (in {})",
                    json_type_name(other),
                    path.text
                )));
            }
        };
    }
    Ok(true)
}

fn not_bool(v: &Value<'_>) -> EvalError {
    EvalError::Type(format!("expected bool, found {}", v.type_name()))
}

/// Evaluates a node that must produce a bool.
pub(crate) fn truth(node: &Node, ev: &Event<'_>) -> Result<bool, EvalError> {
    match node {
        Node::Const(Value::Bool(b)) => Ok(*b),
        Node::Cmp(op, pair) => {
            let (l, r) = &**pair;
            let l = held(l, ev)?;
            let r = held(r, ev)?;
            op.apply(l.get(), r.get())
        }
        Node::And(items) => {
            // CEL: false wins over errors, whichever side they are on.
            let mut error = None;
            for item in items {
                match truth(item, ev) {
                    Ok(false) => return Ok(false),
                    Ok(true) => {}
                    Err(e) => {
                        error.get_or_insert(e);
                    }
                }
            }
            error.map_or(Ok(true), Err)
        }
        Node::Or(items) => {
            // CEL: true wins over errors, whichever side they are on.
            let mut error = None;
            for item in items {
                match truth(item, ev) {
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    Err(e) => {
                        error.get_or_insert(e);
                    }
                }
            }
            error.map_or(Ok(false), Err)
        }
        Node::Not(inner) => truth(inner, ev).map(|b| !b),
        Node::Has(path) => has(path, ev),
        Node::In(pair) => eval_in(&pair.0, &pair.1, ev),
        Node::Field(path) => match lookup(path, ev)? {
            Json::Bool(b) => Ok(*b),
            other => Err(EvalError::Type(format!(
                "expected bool, found {}",
                json_type_name(other)
            ))),
        },
        other => match eval(other, ev)? {
            Value::Bool(b) => Ok(b),
            v => Err(not_bool(&v)),
        },
    }
}

/// Evaluates a node to a value.
pub(crate) fn eval<'e>(node: &Node, ev: &'e Event<'_>) -> Result<Value<'e>, EvalError> {
    match node {
        Node::Field(path) => Value::from_json(lookup(path, ev)?),
        Node::Const(v) => Ok(v.clone()),
        Node::Arith(op, pair) => {
            let (l, r) = &**pair;
            let l = held(l, ev)?;
            let r = held(r, ev)?;
            op.apply(l.get(), r.get())
        }
        Node::Cmp(..) | Node::And(_) | Node::Or(_) | Node::Not(_) | Node::Has(_) | Node::In(_) => {
            truth(node, ev).map(Value::Bool)
        }
        Node::Neg(inner) => value::negate(held(inner, ev)?.get()),
        Node::Cond(parts) => {
            let (c, a, b) = &**parts;
            if truth(c, ev)? {
                eval(a, ev)
            } else {
                eval(b, ev)
            }
        }
        Node::Index(pair) => {
            let (base, index) = &**pair;
            let index = held(index, ev)?;
            match base {
                Node::Field(path) => index_json(lookup(path, ev)?, index.get()),
                other => index_value(eval(other, ev)?, index.get()),
            }
        }
        Node::Select(base, name) => match eval(base, ev)? {
            Value::Object(m) => match m.get(&**name) {
                Some(v) => Value::from_json(v),
                None => Err(EvalError::NoSuchField(name.to_string())),
            },
            Value::Null => Err(EvalError::NoSuchField(name.to_string())),
            other => Err(EvalError::Type(format!(
                "cannot select field '{name}' from {}",
                other.type_name()
            ))),
        },
        Node::List(items) => items
            .iter()
            .map(|item| eval(item, ev))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List),
        Node::Call(func, args) => call(*func, args, ev),
    }
}

fn eval_in(l: &Node, r: &Node, ev: &Event<'_>) -> Result<bool, EvalError> {
    let needle = held(l, ev)?;
    let needle = needle.get();
    match r {
        Node::Field(path) => match lookup(path, ev)? {
            Json::Array(items) => Ok(items.iter().any(|item| value::equal_json(needle, item))),
            Json::Object(m) => Ok(key_in(needle, m)),
            other => Err(EvalError::Type(format!(
                "right side of 'in' must be a list, found {}",
                json_type_name(other)
            ))),
        },
        other => {
            let haystack = held(other, ev)?;
            match haystack.get() {
                Value::List(items) => Ok(items.iter().any(|item| value::equal(needle, item))),
                Value::Object(m) => Ok(key_in(needle, m)),
                v => Err(EvalError::Type(format!(
                    "right side of 'in' must be a list, found {}",
                    v.type_name()
                ))),
            }
        }
    }
}

/// `k in map`: key presence; a non-string never matches a JSON key.
fn key_in(needle: &Value<'_>, m: &Map<String, Json>) -> bool {
    matches!(needle, Value::Str(k) if m.contains_key(k.as_ref()))
}

/// The list item at an int index, or `IndexOutOfBounds` (negative too).
fn list_item<'a, T>(items: &'a [T], index: &Value<'_>) -> Result<&'a T, EvalError> {
    let Value::Int(i) = index else {
        return Err(EvalError::Type(format!(
            "list index must be an int, found {}",
            index.type_name()
        )));
    };
    usize::try_from(*i)
        .ok()
        .and_then(|p| items.get(p))
        .ok_or_else(|| index_error(*i, items.len()))
}

fn index_json<'e>(base: &'e Json, index: &Value<'_>) -> Result<Value<'e>, EvalError> {
    match (base, index) {
        (Json::Array(items), _) => Value::from_json(list_item(items, index)?),
        (Json::Object(m), Value::Str(k)) => match m.get(k.as_ref()) {
            Some(v) => Value::from_json(v),
            None => Err(EvalError::NoSuchField(k.to_string())),
        },
        (other, _) => Err(EvalError::Type(format!(
            "cannot index {} with {}",
            json_type_name(other),
            index.type_name()
        ))),
    }
}

fn index_value<'e>(base: Value<'e>, index: &Value<'_>) -> Result<Value<'e>, EvalError> {
    match (base, index) {
        // Clones the one item (its strings are usually borrowed).
        (Value::List(items), _) => list_item(&items, index).cloned(),
        (Value::Object(m), Value::Str(k)) => match m.get(k.as_ref()) {
            Some(v) => Value::from_json(v),
            None => Err(EvalError::NoSuchField(k.to_string())),
        },
        (other, _) => Err(EvalError::Type(format!(
            "cannot index {} with {}",
            other.type_name(),
            index.type_name()
        ))),
    }
}

fn count(n: usize) -> Result<Value<'static>, EvalError> {
    i64::try_from(n)
        .map(Value::Int)
        .map_err(|_| EvalError::Overflow)
}

fn call<'e>(func: Func, args: &[Node], ev: &'e Event<'_>) -> Result<Value<'e>, EvalError> {
    let [first, ..] = args else {
        return Err(EvalError::Type(format!(
            "{}() needs an argument",
            func.name()
        )));
    };
    match func {
        Func::Size => match first {
            Node::Field(path) => match lookup(path, ev)? {
                Json::String(s) => count(s.chars().count()),
                Json::Array(items) => count(items.len()),
                Json::Object(m) => count(m.len()),
                other => Err(EvalError::Type(format!(
                    "size() accepts a string, list or map, found {}",
                    json_type_name(other)
                ))),
            },
            other => match held(other, ev)?.get() {
                Value::Str(s) => count(s.chars().count()),
                Value::List(items) => count(items.len()),
                Value::Object(m) => count(m.len()),
                v => Err(EvalError::Type(format!(
                    "size() accepts a string, list or map, found {}",
                    v.type_name()
                ))),
            },
        },
        Func::String => match eval(first, ev)? {
            s @ Value::Str(_) => Ok(s),
            Value::Int(i) => Ok(Value::Str(Cow::Owned(i.to_string()))),
            Value::Double(d) => Ok(Value::Str(Cow::Owned(d.to_string()))),
            Value::Bool(b) => Ok(Value::Str(Cow::Borrowed(if b { "true" } else { "false" }))),
            v => Err(EvalError::Type(format!(
                "string() cannot convert {}",
                v.type_name()
            ))),
        },
        Func::Int => match held(first, ev)?.get() {
            Value::Int(i) => Ok(Value::Int(*i)),
            Value::Double(d) => double_to_int(*d).map(Value::Int),
            Value::Str(s) => s
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| EvalError::Conversion(format!("cannot convert string {s:?} to int"))),
            v => Err(EvalError::Type(format!(
                "int() cannot convert {}",
                v.type_name()
            ))),
        },
        Func::Double => match held(first, ev)?.get() {
            Value::Int(i) => Ok(Value::Double(*i as f64)),
            Value::Double(d) => Ok(Value::Double(*d)),
            Value::Str(s) => match s.parse::<f64>() {
                Ok(d) if d.is_finite() => Ok(Value::Double(d)),
                _ => Err(EvalError::Conversion(format!(
                    "cannot convert string {s:?} to a finite double"
                ))),
            },
            v => Err(EvalError::Type(format!(
                "double() cannot convert {}",
                v.type_name()
            ))),
        },
        Func::Min | Func::Max => extremum(func, args, ev),
    }
}

/// Truncates toward zero; doubles outside the i64 range are an overflow.
pub(crate) fn double_to_int(d: f64) -> Result<i64, EvalError> {
    // -2^63 is representable; 2^63 is the first double above i64::MAX.
    if d.is_finite() && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d) {
        Ok(d.trunc() as i64)
    } else {
        Err(EvalError::Overflow)
    }
}

/// `min`/`max` over the arguments, or over a single list argument. Returns
/// the winning value as is (an int stays an int); ties keep the first.
fn extremum<'e>(func: Func, args: &[Node], ev: &'e Event<'_>) -> Result<Value<'e>, EvalError> {
    let values: Vec<Value<'e>> = if let [only] = args {
        match eval(only, ev)? {
            Value::List(items) => items,
            v => vec![v],
        }
    } else {
        args.iter().map(|a| eval(a, ev)).collect::<Result<_, _>>()?
    };
    let mut best: Option<Value<'e>> = None;
    for v in values {
        if !matches!(v, Value::Int(_) | Value::Double(_)) {
            return Err(EvalError::Type(format!(
                "{}() accepts numbers, found {}",
                func.name(),
                v.type_name()
            )));
        }
        best = Some(match best {
            None => v,
            Some(b) => {
                let ord = value::order(&v, &b);
                let better = if func == Func::Min {
                    ord == Some(std::cmp::Ordering::Less)
                } else {
                    ord == Some(std::cmp::Ordering::Greater)
                };
                if better { v } else { b }
            }
        });
    }
    best.ok_or_else(|| EvalError::Type(format!("{}() of an empty list", func.name())))
}
