//! Tests of the rule expression compiler: unit tests per operator, error
//! and column; property tests (no panics on arbitrary input, and a
//! differential test against the `cel` crate's interpreter).
//!
//! The differential test generates well-typed expressions over int, string
//! and bool literals and fields, where our semantics and CEL's coincide: it
//! avoids doubles (mixed arithmetic and non-finite results differ on
//! purpose, see the module docs) and static type errors. Both sides failing
//! counts as agreement, whatever the error; a constant expression that
//! always fails is our compile error and CEL's run-time error.

use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Map, Value as Json, json};

use super::tree::Node;
use super::*;

fn event() -> Map<String, Json> {
    let v = json!({
        "user_id": "u1",
        "receiver_id": "r42",
        "gift_id": "flower",
        "count": 12,
        "value": 2.5,
        "vip": true,
        "tags": ["a", "b"],
        "nums": [1, 2.5, 3],
        "meta": {"region": "eu", "level": 3, "nested": {"x": 1}, "nothing": null},
        "nothing": null,
        "big": 9_007_199_254_740_993_i64,
        "limit": 9_007_199_254_740_992_i64,
        "min_int": i64::MIN,
        "max_int": i64::MAX,
        "huge": u64::MAX,
        "id_num": 12345,
        "zero": 0,
        "zero_d": 0.0,
        "empty": "",
        "uni": "héllo",
        "hugeD": 1e19,
        "maxD": 1.7e308,
        "numstr": "42",
    });
    match v {
        Json::Object(m) => m,
        _ => unreachable!(),
    }
}

fn compile_any(src: &str) -> Program {
    match Program::compile(src, Expect::Any) {
        Ok(p) => p,
        Err(e) => panic!("{src:?} failed to compile: {e}"),
    }
}

/// Evaluates against the standard event; the value detached from it.
fn run(src: &str) -> Result<Value<'static>, EvalError> {
    let ev = event();
    compile_any(src)
        .eval(&ev)
        .map(|v| v.into_static().unwrap_or(Value::Null))
}

fn ok(src: &str) -> Value<'static> {
    match run(src) {
        Ok(v) => v,
        Err(e) => panic!("{src:?} failed: {e}"),
    }
}

fn yes(src: &str) {
    assert_eq!(ok(src), Value::Bool(true), "{src}");
}

fn no(src: &str) {
    assert_eq!(ok(src), Value::Bool(false), "{src}");
}

fn eval_err(src: &str) -> EvalError {
    match run(src) {
        Ok(v) => panic!("{src:?} should fail, got {v:?}"),
        Err(e) => e,
    }
}

fn compile_err(src: &str) -> CompileError {
    match Program::compile(src, Expect::Any) {
        Ok(p) => panic!("{src:?} should not compile: {p:?}"),
        Err(e) => e,
    }
}

/// Asserts a compile error at `column` whose message contains `needle`.
fn compile_err_at(src: &str, column: usize, needle: &str) {
    let e = compile_err(src);
    assert_eq!(e.position, column, "{src:?}: {e}");
    assert!(
        e.message.contains(needle),
        "{src:?}: {e} (wanted {needle:?})"
    );
}

fn int(i: i64) -> Value<'static> {
    Value::Int(i)
}

fn dbl(d: f64) -> Value<'static> {
    Value::Double(d)
}

fn s(x: &str) -> Value<'static> {
    Value::Str(Cow::Owned(x.to_owned()))
}

// ---------------------------------------------------------------- literals

#[test]
fn int_literals() {
    assert_eq!(ok("0"), int(0));
    assert_eq!(ok("42"), int(42));
    assert_eq!(ok("0x1F"), int(31));
    assert_eq!(ok("0XfF"), int(255));
    assert_eq!(ok("-7"), int(-7));
    assert_eq!(ok("9223372036854775807"), int(i64::MAX));
    assert_eq!(ok("-9223372036854775808"), int(i64::MIN));
    assert_eq!(ok("-0x8000000000000000"), int(i64::MIN));
    assert_eq!(ok("- -3"), int(3));
}

#[test]
fn double_literals() {
    assert_eq!(ok("1.5"), dbl(1.5));
    assert_eq!(ok("1e3"), dbl(1000.0));
    assert_eq!(ok("1E-2"), dbl(0.01));
    assert_eq!(ok("2.5e+1"), dbl(25.0));
    assert_eq!(ok(".5"), dbl(0.5));
    assert_eq!(ok("-0.25"), dbl(-0.25));
}

#[test]
fn string_literals_and_escapes() {
    assert_eq!(ok("'abc'"), s("abc"));
    assert_eq!(ok("\"abc\""), s("abc"));
    assert_eq!(ok(r#""a\nb\tc""#), s("a\nb\tc"));
    assert_eq!(ok(r#""\\ \" \' \` \?""#), s("\\ \" ' ` ?"));
    assert_eq!(ok(r#"'\u00e9\x41\101\U0001F600'"#), s("éAA😀"));
    assert_eq!(ok(r#""\a\b\f\v\r""#), s("\u{7}\u{8}\u{c}\u{b}\r"));
    assert_eq!(ok(r#"'say "hi"'"#), s("say \"hi\""));
    assert_eq!(ok(r#"r"a\nb""#), s("a\\nb"));
    assert_eq!(ok(r#"R'\d+'"#), s("\\d+"));
    assert_eq!(ok("'''multi\nline'''"), s("multi\nline"));
    assert_eq!(ok(r#""""a "quoted" b""""#), s("a \"quoted\" b"));
    assert_eq!(ok("''"), s(""));
}

#[test]
fn keyword_literals() {
    assert_eq!(ok("true"), Value::Bool(true));
    assert_eq!(ok("false"), Value::Bool(false));
    assert_eq!(ok("null"), Value::Null);
    assert_eq!(
        ok("[1, 'a', true, null]"),
        Value::List(vec![int(1), s("a"), Value::Bool(true), Value::Null])
    );
    assert_eq!(ok("[1, 2,]"), Value::List(vec![int(1), int(2)]));
    assert_eq!(ok("[]"), Value::List(vec![]));
}

#[test]
fn comments_and_whitespace() {
    assert_eq!(ok("1 + // one\n 2 // two"), int(3));
    assert_eq!(ok("\n\t count\n"), int(12));
}

// ---------------------------------------------------------------- arithmetic

#[test]
fn int_arithmetic() {
    assert_eq!(ok("count + 3"), int(15));
    assert_eq!(ok("count - 20"), int(-8));
    assert_eq!(ok("count * 3"), int(36));
    assert_eq!(ok("count / 5"), int(2));
    assert_eq!(ok("-count / 5"), int(-2), "division truncates toward zero");
    assert_eq!(ok("count % 5"), int(2));
    assert_eq!(
        ok("-count % 5"),
        int(-2),
        "remainder takes the dividend's sign"
    );
    assert_eq!(ok("count % -5"), int(2));
    assert_eq!(ok("-count"), int(-12));
}

#[test]
fn int_overflow_is_an_error() {
    assert_eq!(eval_err("max_int + 1"), EvalError::Overflow);
    assert_eq!(eval_err("min_int - 1"), EvalError::Overflow);
    assert_eq!(eval_err("max_int * 2"), EvalError::Overflow);
    assert_eq!(eval_err("-min_int"), EvalError::Overflow);
    assert_eq!(eval_err("min_int / -1"), EvalError::Overflow);
    assert_eq!(eval_err("min_int % -1"), EvalError::Overflow);
    assert_eq!(ok("min_int / 1"), int(i64::MIN));
    assert_eq!(ok("max_int + min_int"), int(-1));
}

#[test]
fn division_by_zero() {
    assert_eq!(eval_err("count / zero"), EvalError::DivisionByZero);
    assert_eq!(eval_err("count % zero"), EvalError::DivisionByZero);
    assert_eq!(eval_err("value / zero_d"), EvalError::DivisionByZero);
    assert_eq!(eval_err("value / zero"), EvalError::DivisionByZero);
    assert_eq!(eval_err("count / zero_d"), EvalError::DivisionByZero);
    assert_eq!(eval_err("value % zero_d"), EvalError::DivisionByZero);
}

#[test]
fn double_arithmetic_and_promotion() {
    assert_eq!(ok("count * value"), dbl(30.0));
    assert_eq!(ok("value * count"), dbl(30.0));
    assert_eq!(ok("value + 1"), dbl(3.5));
    assert_eq!(ok("value - 0.5"), dbl(2.0));
    assert_eq!(ok("count / 8.0"), dbl(1.5));
    assert_eq!(ok("value % 1.0"), dbl(0.5));
    assert_eq!(ok("-value"), dbl(-2.5));
    assert_eq!(ok("huge * 1"), dbl(18_446_744_073_709_551_615.0));
}

#[test]
fn non_finite_results_are_errors() {
    assert_eq!(eval_err("maxD * 10"), EvalError::NotFinite);
    assert_eq!(eval_err("maxD + maxD"), EvalError::NotFinite);
    assert_eq!(eval_err("-maxD - maxD"), EvalError::NotFinite);
}

#[test]
fn concatenation() {
    assert_eq!(ok("gift_id + '-' + user_id"), s("flower-u1"));
    assert_eq!(ok("'a' + 'b'"), s("ab"));
    assert_eq!(
        ok("tags + ['c']"),
        Value::List(vec![s("a"), s("b"), s("c")])
    );
}

#[test]
fn runtime_type_errors() {
    assert!(matches!(eval_err("gift_id * 2"), EvalError::Type(_)));
    assert!(matches!(eval_err("gift_id + count"), EvalError::Type(_)));
    assert!(matches!(eval_err("-gift_id"), EvalError::Type(_)));
    assert!(matches!(eval_err("!count"), EvalError::Type(_)));
    assert!(matches!(eval_err("count ? 1 : 2"), EvalError::Type(_)));
    assert!(matches!(eval_err("nothing + 1"), EvalError::Type(_)));
}

// ---------------------------------------------------------------- comparisons

#[test]
fn comparisons_ints() {
    yes("count == 12");
    no("count != 12");
    yes("count < 13");
    no("count < 12");
    yes("count <= 12");
    yes("count > 11");
    no("count > 12");
    yes("count >= 12");
    no("count >= 13");
}

#[test]
fn comparisons_mixed_numbers() {
    yes("count == 12.0");
    yes("12.0 == count");
    yes("count < 12.5");
    yes("value > 2");
    yes("value >= 2.5");
    no("value < 2");
    // Exact: 2^53 + 1 is not equal to the double 2^53.
    no("big == 9007199254740992.0");
    yes("big > 9007199254740992.0");
    yes("max_int < 9223372036854775808.0");
    yes("min_int == -9223372036854775808.0");
    yes("huge > max_int");
}

#[test]
fn comparisons_strings_and_bools() {
    yes("gift_id == 'flower'");
    no("gift_id == 'rose'");
    yes("gift_id != 'rose'");
    yes("'a' < 'b'");
    yes("'B' < 'a'"); // bytewise
    yes("'abc' < 'abd'");
    yes("'ab' < 'abc'");
    yes("'é' > 'z'");
    yes("false < true");
    yes("vip == true");
    yes("vip >= false");
}

#[test]
fn heterogeneous_equality() {
    no("count == '12'");
    yes("count != '12'");
    no("vip == 1");
    no("nothing == 0");
    yes("nothing == null");
    yes("tags == ['a', 'b']");
    no("tags == ['a']");
    yes("nums == [1, 2.5, 3.0]");
    yes("meta == meta");
    yes("meta.nested == meta.nested");
    no("meta == meta.nested");
}

#[test]
fn ordering_across_types_is_an_error() {
    assert!(matches!(eval_err("gift_id < count"), EvalError::Type(_)));
    assert!(matches!(eval_err("nothing < 1"), EvalError::Type(_)));
    assert!(matches!(eval_err("tags < tags"), EvalError::Type(_)));
}

// ---------------------------------------------------------------- logic

#[test]
fn logic_operators() {
    yes("true && true");
    no("true && false");
    yes("false || true");
    no("false || false");
    yes("!false");
    no("!vip");
    yes("!!vip");
    yes("vip && count > 10 && gift_id == 'flower'");
    no("vip && count > 20 && gift_id == 'flower'");
    yes("count > 20 || gift_id == 'flower' || missing");
}

#[test]
fn short_circuit_and_error_absorption() {
    // Short-circuit past an error on the right.
    no("false && missing");
    yes("true || missing");
    // CEL absorption: an error on the left loses to a decisive right side.
    no("missing && false");
    yes("missing || true");
    no("missing.x > 1 && count == 0");
    // Otherwise the (first) error propagates.
    assert_eq!(
        eval_err("missing && true"),
        EvalError::NoSuchField("missing".into())
    );
    assert_eq!(
        eval_err("missing || false"),
        EvalError::NoSuchField("missing".into())
    );
    assert_eq!(
        eval_err("true && missing"),
        EvalError::NoSuchField("missing".into())
    );
    assert_eq!(
        eval_err("missing || other"),
        EvalError::NoSuchField("missing".into())
    );
    // Errors of any kind are absorbed, type errors included.
    yes("(count / zero > 1) || true");
    no("(gift_id < 1) && false");
    // A non-bool operand is an error, not a truthy value.
    assert!(matches!(eval_err("count && true"), EvalError::Type(_)));
    assert!(matches!(eval_err("false || gift_id"), EvalError::Type(_)));
}

#[test]
fn ternary() {
    assert_eq!(ok("vip ? 'gold' : 'basic'"), s("gold"));
    assert_eq!(ok("!vip ? 'gold' : 'basic'"), s("basic"));
    assert_eq!(ok("count > 100 ? 3 : count > 10 ? 2 : 1"), int(2));
    // Only the chosen branch is evaluated.
    assert_eq!(ok("vip ? 1 : missing"), int(1));
    assert_eq!(ok("!vip ? missing : 2"), int(2));
    assert_eq!(
        eval_err("missing ? 1 : 2"),
        EvalError::NoSuchField("missing".into())
    );
}

// ---------------------------------------------------------------- precedence

#[test]
fn precedence() {
    assert_eq!(ok("1 + 2 * 3"), int(7));
    assert_eq!(ok("(1 + 2) * 3"), int(9));
    assert_eq!(ok("10 - 4 - 3"), int(3), "left associative");
    assert_eq!(ok("100 / 10 / 5"), int(2), "left associative");
    assert_eq!(ok("7 % 4 * 2"), int(6));
    assert_eq!(ok("-2 * 3"), int(-6));
    assert_eq!(ok("-meta.level"), int(-3));
    assert_eq!(ok("2 * -count"), int(-24));
    yes("1 + 1 == 2");
    yes("1 < 2 == true");
    yes("true || false && false");
    no("(true || false) && false");
    yes("!false && true");
    yes("'a' in tags && count == 12");
    yes("1 + 1 in [2, 3]");
    assert_eq!(ok("true ? 1 : 2 + 3"), int(1));
    assert_eq!(ok("false ? 1 : 2 + 3"), int(5));
    assert_eq!(ok("false || true ? 'y' : 'n'"), s("y"));
    assert_eq!(ok("tags[1] + meta.region"), s("beu"));
}

// ---------------------------------------------------------------- fields

#[test]
fn field_access_and_paths() {
    assert_eq!(ok("receiver_id"), s("r42"));
    assert_eq!(ok("meta.region"), s("eu"));
    assert_eq!(ok("meta['region']"), s("eu"));
    assert_eq!(ok("meta.nested.x"), int(1));
    assert_eq!(ok("meta[\"nested\"]['x']"), int(1));
    assert_eq!(ok("tags[0]"), s("a"));
    assert_eq!(ok("nums[1]"), dbl(2.5));
    assert_eq!(ok("tags[count - 11]"), s("b"));
    assert_eq!(ok("meta[true ? 'region' : 'x']"), s("eu"));
    assert_eq!(ok("[10, 20, 30][1]"), int(20));
    assert_eq!(ok("(vip ? meta : meta.nested).region"), s("eu"));
    assert_eq!(ok("nothing"), Value::Null);
    assert_eq!(ok("meta.nothing"), Value::Null);
    assert_eq!(ok("huge"), dbl(18_446_744_073_709_551_615.0));
    assert_eq!(ok("uni"), s("héllo"));
}

#[test]
fn missing_fields() {
    assert_eq!(
        eval_err("missing"),
        EvalError::NoSuchField("missing".into())
    );
    assert_eq!(
        eval_err("meta.missing"),
        EvalError::NoSuchField("meta.missing".into())
    );
    assert_eq!(
        eval_err("meta.nested.y + 1"),
        EvalError::NoSuchField("meta.nested.y".into())
    );
    assert_eq!(
        eval_err("nothing.x"),
        EvalError::NoSuchField("nothing.x".into())
    );
    assert_eq!(
        eval_err("meta['a b']"),
        EvalError::NoSuchField("meta[\"a b\"]".into())
    );
    assert_eq!(
        eval_err("meta[gift_id]"),
        EvalError::NoSuchField("flower".into())
    );
    assert!(matches!(eval_err("gift_id.x"), EvalError::Type(_)));
    assert!(matches!(eval_err("meta[0]"), EvalError::Type(_)));
    assert!(matches!(eval_err("tags['a']"), EvalError::Type(_)));
}

#[test]
fn index_out_of_bounds() {
    assert_eq!(
        eval_err("tags[2]"),
        EvalError::IndexOutOfBounds { index: 2, len: 2 }
    );
    assert_eq!(
        eval_err("tags[-1]"),
        EvalError::IndexOutOfBounds { index: -1, len: 2 }
    );
    assert_eq!(
        eval_err("tags[count]"),
        EvalError::IndexOutOfBounds { index: 12, len: 2 }
    );
    assert_eq!(
        eval_err("[1][count]"),
        EvalError::IndexOutOfBounds { index: 12, len: 1 }
    );
}

#[test]
fn plain_field_strings_are_borrowed() {
    let ev = event();
    let p = compile_any("receiver_id");
    assert!(matches!(p.eval(&ev), Ok(Value::Str(Cow::Borrowed("r42")))));
    let p = Program::compile("meta.region", Expect::String).unwrap();
    assert!(matches!(p.eval_string(&ev), Ok(Cow::Borrowed("eu"))));
}

#[test]
fn object_values() {
    let ev = event();
    let p = compile_any("meta.nested");
    match p.eval(&ev) {
        Ok(Value::Object(m)) => assert_eq!(m.get("x"), Some(&json!(1))),
        other => panic!("unexpected {other:?}"),
    }
}

// ---------------------------------------------------------------- has

#[test]
fn has_macro() {
    yes("has(vip)");
    no("has(missing)");
    yes("has(meta.region)");
    yes("has(meta.nothing)");
    no("has(meta.missing)");
    yes("has(meta.nested.x)");
    no("has(meta.nested.y)");
    // Missing or null parents mean "not present", not an error.
    no("has(missing.x)");
    no("has(missing.x.y)");
    no("has(nothing.x)");
    no("has(meta.nothing.x)");
    assert!(matches!(eval_err("has(gift_id.x)"), EvalError::Type(_)));
    assert!(matches!(eval_err("has(tags.x)"), EvalError::Type(_)));
    yes("has(meta.level) && meta.level > 2");
    no("has(meta.bonus) && meta.bonus > 2");
}

#[test]
fn has_requires_a_selection() {
    compile_err_at("has(1)", 5, "field selection");
    compile_err_at("has(tags[0])", 9, "field selection");
    compile_err_at("has(a + b)", 7, "field selection");
    compile_err_at("has()", 1, "takes 1 argument");
    compile_err_at("has(a, b)", 1, "takes 1 argument");
}

// ---------------------------------------------------------------- in

#[test]
fn in_operator() {
    yes("'a' in tags");
    no("'z' in tags");
    yes("gift_id in ['rose', 'flower']");
    no("gift_id in ['rose', 'tulip']");
    yes("count in [1, 12]");
    yes("12.0 in [12]");
    yes("2.5 in nums");
    yes("3 in nums");
    no("'3' in nums");
    yes("count in [1, count]");
    yes("'region' in meta");
    no("'missing' in meta");
    no("1 in meta");
    yes("'b' in (vip ? tags : [])");
    no("count in []");
    yes("[1] in [[1], [2]]");
    assert!(matches!(eval_err("'a' in gift_id"), EvalError::Type(_)));
    assert!(matches!(eval_err("'a' in count"), EvalError::Type(_)));
    assert_eq!(
        eval_err("'a' in missing"),
        EvalError::NoSuchField("missing".into())
    );
}

// ---------------------------------------------------------------- functions

#[test]
fn string_function() {
    assert_eq!(ok("string(count)"), s("12"));
    assert_eq!(ok("string(-5)"), s("-5"));
    assert_eq!(ok("string(value)"), s("2.5"));
    assert_eq!(ok("string(vip)"), s("true"));
    assert_eq!(ok("string(gift_id)"), s("flower"));
    assert_eq!(ok("'id:' + string(id_num)"), s("id:12345"));
    assert!(matches!(eval_err("string(nothing)"), EvalError::Type(_)));
    assert!(matches!(eval_err("string(tags)"), EvalError::Type(_)));
}

#[test]
fn int_function() {
    assert_eq!(ok("int(count)"), int(12));
    assert_eq!(ok("int(2.9)"), int(2));
    assert_eq!(ok("int(-2.9)"), int(-2));
    assert_eq!(ok("int(value)"), int(2));
    assert_eq!(ok("int(numstr)"), int(42));
    assert_eq!(ok("int('-17')"), int(-17));
    assert_eq!(ok("int(-9223372036854775808.0)"), int(i64::MIN));
    assert_eq!(eval_err("int(hugeD)"), EvalError::Overflow);
    assert_eq!(eval_err("int(-hugeD)"), EvalError::Overflow);
    assert!(matches!(eval_err("int(gift_id)"), EvalError::Conversion(_)));
    assert!(matches!(eval_err("int(vip)"), EvalError::Type(_)));
}

#[test]
fn double_function() {
    assert_eq!(ok("double(count)"), dbl(12.0));
    assert_eq!(ok("double(value)"), dbl(2.5));
    assert_eq!(ok("double('1.5')"), dbl(1.5));
    assert_eq!(ok("double(numstr)"), dbl(42.0));
    assert_eq!(ok("double(count) / 8"), dbl(1.5));
    assert!(matches!(
        eval_err("double(gift_id)"),
        EvalError::Conversion(_)
    ));
    assert!(matches!(
        eval_err("double(uni + 'inf')"),
        EvalError::Conversion(_)
    ));
    assert!(matches!(eval_err("double(vip)"), EvalError::Type(_)));
    compile_err_at("double('inf')", 1, "always fails");
}

#[test]
fn size_function() {
    assert_eq!(ok("size(uni)"), int(5), "chars, not bytes");
    assert_eq!(ok("size(empty)"), int(0));
    assert_eq!(ok("size(tags)"), int(2));
    assert_eq!(ok("size(meta)"), int(4));
    assert_eq!(ok("size('abc')"), int(3));
    assert_eq!(ok("size([1, 2, 3])"), int(3));
    assert_eq!(ok("size(gift_id + 'x')"), int(7));
    assert!(matches!(eval_err("size(count)"), EvalError::Type(_)));
}

#[test]
fn min_max_functions() {
    assert_eq!(ok("min(3, 1, 2)"), int(1));
    assert_eq!(ok("max(3, 1, 2)"), int(3));
    assert_eq!(ok("min(count)"), int(12));
    assert_eq!(ok("max(count, value)"), int(12));
    assert_eq!(ok("min(count, value)"), dbl(2.5));
    assert_eq!(ok("max(count * value, 100)"), int(100));
    assert_eq!(ok("min(nums)"), int(1));
    assert_eq!(ok("max(nums)"), int(3));
    assert_eq!(ok("max([1.5, 2])"), int(2));
    assert!(matches!(
        eval_err("min(count, gift_id)"),
        EvalError::Type(_)
    ));
    assert!(matches!(eval_err("max(tags)"), EvalError::Type(_)));
    compile_err_at("min([])", 1, "empty list");
    compile_err_at("max()", 1, "at least 1 argument");
    compile_err_at("max(1, 'a')", 1, "numbers");
}

// ---------------------------------------------------------------- compile errors

#[test]
fn static_type_errors() {
    compile_err_at("\"a\" * 2", 5, "cannot apply '*' to string and int");
    compile_err_at("!3", 1, "cannot apply '!' to int");
    compile_err_at("1 + true", 3, "cannot apply '+' to int and bool");
    compile_err_at("-'x'", 1, "cannot apply '-' to string");
    compile_err_at("count + (1 < 2)", 7, "cannot apply '+' to dyn and bool");
    compile_err_at("'x' < 1", 5, "cannot apply '<' to string and int");
    compile_err_at("null < 1", 6, "cannot apply '<'");
    compile_err_at("1 in 2", 3, "right side of 'in'");
    compile_err_at("true && 1", 6, "must be bool");
    compile_err_at("a || 'x' || b", 3, "must be bool");
    compile_err_at("1 ? 2 : 3", 3, "condition of '?:' must be bool");
    compile_err_at("(1 + 2) * 'x'", 9, "cannot apply '*' to int and string");
    compile_err_at(
        "(a + 1) * 'x'",
        9,
        "cannot apply '*' to int|double and string",
    );
    compile_err_at("int(true)", 1, "int() accepts");
    compile_err_at("string([1])", 1, "string() accepts");
    compile_err_at("size(1)", 1, "size() accepts");
    compile_err_at("'abc'[0]", 6, "cannot index");
    compile_err_at("1 .x", 4, "cannot select field 'x'");
    compile_err_at("\"é\" * 2", 5, "cannot apply '*'");
}

#[test]
fn function_errors() {
    compile_err_at("foo(1)", 1, "unknown function 'foo'");
    compile_err_at("count + bar()", 9, "unknown function 'bar'");
    compile_err_at("int(1, 2)", 1, "int() takes 1 argument, got 2");
    compile_err_at("string()", 1, "string() takes 1 argument, got 0");
    compile_err_at("size(a, b)", 1, "size() takes 1 argument");
    compile_err_at("tags.size()", 6, "method calls are not supported");
}

#[test]
fn syntax_errors() {
    compile_err_at("", 1, "empty expression");
    compile_err_at("   ", 4, "empty expression");
    compile_err_at("count +", 8, "unexpected end of expression");
    compile_err_at("(count", 7, "expected ')'");
    compile_err_at("count = 1", 7, "use '=='");
    compile_err_at("a & b", 3, "use '&&'");
    compile_err_at("a | b", 3, "use '||'");
    compile_err_at("1 2", 3, "after end of expression");
    compile_err_at("count)", 6, "after end of expression");
    compile_err_at("[1, 2", 6, "expected ',' or ']'");
    compile_err_at("f(1 2)", 5, "expected ',' or ')'");
    compile_err_at("a ? b", 6, "expected ':'");
    compile_err_at("a.", 3, "expected field name");
    compile_err_at("a.1", 2, "after end of expression");
    compile_err_at("1.", 3, "expected field name");
    compile_err_at("{}", 1, "map and message literals");
    compile_err_at("#", 1, "unexpected character '#'");
    compile_err_at("é", 1, "unexpected character");
    compile_err_at("count + é", 9, "unexpected character");
    compile_err_at(".a", 1, "leading '.'");
    compile_err_at("a[]", 3, "expected an expression");
    compile_err_at("f(,)", 3, "expected an expression");
}

#[test]
fn literal_errors() {
    compile_err_at("'abc", 1, "unterminated string");
    compile_err_at("x + \"abc\nd\"", 5, "unterminated string");
    compile_err_at("'''abc''", 1, "unterminated string");
    compile_err_at(r#""a\qb""#, 3, "invalid escape sequence '\\q'");
    compile_err_at(r#""\u12""#, 2, "invalid escape");
    compile_err_at(r#""\ud800""#, 2, "not a valid code point");
    compile_err_at("'\\", 2, "unterminated escape");
    compile_err_at("9223372036854775808", 1, "integer literal out of range");
    compile_err_at("-9223372036854775809", 1, "integer literal out of range");
    compile_err_at("99999999999999999999", 1, "integer literal out of range");
    compile_err_at("0x10000000000000000", 1, "integer literal out of range");
    compile_err_at("0x", 1, "no digits");
    compile_err_at("1e", 1, "exponent has no digits");
    compile_err_at("1e400", 1, "double literal out of range");
    compile_err_at("12u", 1, "unsigned");
    compile_err_at("1abc", 1, "invalid number literal");
    compile_err_at("b'x'", 1, "bytes literals");
}

#[test]
fn constant_errors_are_compile_errors() {
    compile_err_at("1 / 0", 3, "always fails: division by zero");
    compile_err_at("count + 1 % 0", 11, "division by zero");
    compile_err_at("9223372036854775807 + 1", 21, "integer overflow");
    compile_err_at("-9223372036854775808 / -1", 22, "integer overflow");
    compile_err_at("1.0 / 0.0", 5, "division by zero");
    compile_err_at("1e308 * 10.0", 7, "not a finite number");
    compile_err_at("int(1e19)", 1, "integer overflow");
    compile_err_at("int('abc')", 1, "conversion error");
    compile_err_at("[1][5]", 4, "out of bounds");
    compile_err_at("-(-9223372036854775808)", 1, "integer overflow");
    compile_err_at("- -9223372036854775808", 1, "integer overflow");
    // An absorbed constant error is fine, even in a constant expression.
    assert_eq!(ok("1 / 0 == 1 || true"), Value::Bool(true));
    // A failing constant under `&&`, `||` or a `?:` branch is left to
    // evaluation, where it may be skipped or absorbed.
    yes("vip || 1 / 0 > 1");
    assert_eq!(ok("vip ? 1 : 1 / 0"), int(1));
    compile_err_at("(vip ? 1 : 2) + 1 / 0", 19, "division by zero");
    compile_err_at("1 / 0 > 1 || 2 / 0 > 1", 3, "division by zero");
    assert_eq!(eval_err("!vip || 1 / 0 > 1"), EvalError::DivisionByZero);
}

#[test]
fn constant_folding() {
    let folded = |src: &str| matches!(compile_any(src).root, Node::Const(_));
    assert!(folded("1 + 2 * 3"));
    assert!(folded("'a' + 'b' == 'ab'"));
    assert!(folded("size('abc') > 2 ? [1, 2] : []"));
    assert!(folded("min(1, 2.5) + int('4')"));
    assert!(!folded("count + 1"));
    let p = compile_any("count + (2 * 3)");
    match &p.root {
        Node::Arith(_, pair) => assert!(matches!(pair.1, Node::Const(Value::Int(6)))),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn expected_kind_is_checked() {
    let err = |src: &str, expect: Expect| match Program::compile(src, expect) {
        Ok(_) => panic!("{src:?} should not compile for {expect:?}"),
        Err(e) => e,
    };
    let e = err("gift_id == 'a'", Expect::Number);
    assert_eq!(e.position, 1);
    assert_eq!(
        e.to_string(),
        "expression yields bool, but a number is required at column 1"
    );
    err("'a'", Expect::Bool);
    err("1.5", Expect::String);
    err("'a' + gift_id", Expect::Number);
    err("count > 1", Expect::String);
    err("[1]", Expect::Number);
    // Kinds that may match at run time are accepted.
    for (src, expect) in [
        ("count", Expect::Number),
        ("count", Expect::Bool),
        ("count", Expect::String),
        ("1", Expect::String),
        ("vip ? 1 : 'a'", Expect::String),
        ("count * value", Expect::Number),
        ("has(a)", Expect::Bool),
        ("'x'", Expect::Any),
    ] {
        assert!(Program::compile(src, expect).is_ok(), "{src} as {expect:?}");
    }
}

// ---------------------------------------------------------------- limits

#[test]
fn too_long_source_is_rejected() {
    let src = "1 + ".repeat(1100) + "1";
    assert!(src.len() > MAX_SOURCE_LEN);
    let e = compile_err(&src);
    assert_eq!(e.position, 1);
    assert!(e.message.contains("too long"), "{e}");
    // Just under the limit compiles (a flat list of 1000 items).
    let items = vec!["1"; 1000].join(",");
    let src = format!("[{items}]");
    assert!(src.len() <= MAX_SOURCE_LEN);
    compile_any(&src);
}

#[test]
fn deep_nesting_is_rejected() {
    let deep_parens = format!("{}1{}", "(".repeat(200), ")".repeat(200));
    compile_err_at(&deep_parens, 65, "nested too deeply");
    let deep_not = format!("{}true", "!".repeat(1000));
    assert!(compile_err(&deep_not).message.contains("nested too deeply"));
    let deep_neg = format!("{}1", "-".repeat(1000));
    assert!(compile_err(&deep_neg).message.contains("nested too deeply"));
    let long_chain = format!("count{}", " + count".repeat(100));
    assert!(
        compile_err(&long_chain)
            .message
            .contains("nested too deeply")
    );
    let deep_lists = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    assert!(
        compile_err(&deep_lists)
            .message
            .contains("nested too deeply")
    );
    let deep_calls = format!("{}1{}", "int(".repeat(100), ")".repeat(100));
    assert!(
        compile_err(&deep_calls)
            .message
            .contains("nested too deeply")
    );
    let deep_index = format!("tags{}", "[0]".repeat(100));
    assert!(
        compile_err(&deep_index)
            .message
            .contains("nested too deeply")
    );
    let deep_ternary = format!("{}1", "vip ? 1 : ".repeat(100));
    assert!(
        compile_err(&deep_ternary)
            .message
            .contains("nested too deeply")
    );
    // Within the limit is fine.
    let ok_parens = format!("{}1{}", "(".repeat(40), ")".repeat(40));
    assert_eq!(ok(&ok_parens), int(1));
    let ok_chain = format!("count{}", " + count".repeat(50));
    assert_eq!(ok(&ok_chain), int(12 * 51));
    // `&&`/`||` chains are flat, so long ones are fine.
    let long_or = format!("{}vip", "count == 1 || ".repeat(200));
    yes(&long_or);
}

#[test]
fn deepest_accepted_nesting_fits_the_stack() {
    // Each construct nests parser recursion (parens, call arguments, unary
    // operators, branches) or tree height up to the limit; the deepest
    // accepted form is compiled and evaluated on a thread with half the
    // default 2 MiB stack, in debug builds too.
    let n = MAX_NESTING;
    let constructs: [fn(usize) -> String; 6] = [
        |k| format!("{}count{}", "(".repeat(k), ")".repeat(k)),
        |k| format!("{}count{}", "min(".repeat(k), ")".repeat(k)),
        |k| format!("{}count", "-".repeat(k)),
        |k| format!("count{}", " * 1".repeat(k)),
        |k| format!("{}count{}", "(1 + -(".repeat(k / 3), "))".repeat(k / 3)),
        |k| format!("{}1.5", "vip ? count : ".repeat(k)),
    ];
    let handle = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let ev = event();
            for make in constructs {
                // The deepest form that compiles (searching down from n).
                let src = (1..=n)
                    .rev()
                    .map(make)
                    .find(|src| Program::compile(src, Expect::Number).is_ok())
                    .ok_or("nothing compiles")?;
                if src.len() < n {
                    return Err(format!("{src}: limit reached too early"));
                }
                let p = Program::compile(&src, Expect::Number).map_err(|e| e.to_string())?;
                p.eval_number(&ev).map_err(|e| format!("{src}: {e}"))?;
                let deeper = make(2 * n);
                if Program::compile(&deeper, Expect::Number).is_ok() {
                    return Err(format!("{deeper} should exceed the limit"));
                }
            }
            Ok::<(), String>(())
        });
    let result = handle.map(|h| h.join());
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
}

// ---------------------------------------------------------------- typed evaluation

#[test]
fn eval_number() {
    let ev = event();
    let num = |src: &str| {
        Program::compile(src, Expect::Number)
            .unwrap()
            .eval_number(&ev)
    };
    assert_eq!(num("count * value"), Ok(30.0));
    assert_eq!(num("count"), Ok(12.0));
    assert_eq!(num("limit"), Ok(9_007_199_254_740_992.0));
    assert_eq!(num("-limit"), Ok(-9_007_199_254_740_992.0));
    assert_eq!(num("big"), Err(EvalError::Inexact(9_007_199_254_740_993)));
    assert_eq!(num("-big"), Err(EvalError::Inexact(-9_007_199_254_740_993)));
    assert_eq!(
        num("limit + 1"),
        Err(EvalError::Inexact(9_007_199_254_740_993))
    );
    assert_eq!(num("min_int"), Err(EvalError::Inexact(i64::MIN)));
    // Doubles are not subject to the 2^53 limit (they are what they are).
    assert_eq!(num("huge"), Ok(18_446_744_073_709_551_615.0));
    assert_eq!(num("big * 1.0"), Ok(9_007_199_254_740_992.0));
    assert!(matches!(num("gift_id"), Err(EvalError::Type(_))));
    assert!(matches!(num("missing"), Err(EvalError::NoSuchField(_))));
}

#[test]
fn eval_bool_and_string() {
    let ev = event();
    let p = Program::compile("gift_id == \"flower\" && count >= 10", Expect::Bool).unwrap();
    assert_eq!(p.eval_bool(&ev), Ok(true));
    let p = Program::compile("count", Expect::Bool).unwrap();
    assert!(matches!(p.eval_bool(&ev), Err(EvalError::Type(_))));
    let p = Program::compile("vip", Expect::Bool).unwrap();
    assert_eq!(p.eval_bool(&ev), Ok(true));
    let p = Program::compile("vip ? count > 1 : false", Expect::Bool).unwrap();
    assert_eq!(p.eval_bool(&ev), Ok(true));

    let string = |src: &str| {
        Program::compile(src, Expect::String)
            .unwrap()
            .eval_string(&ev)
            .map(Cow::into_owned)
    };
    assert_eq!(string("receiver_id"), Ok("r42".to_owned()));
    assert_eq!(string("id_num"), Ok("12345".to_owned()));
    assert_eq!(string("-id_num"), Ok("-12345".to_owned()));
    assert_eq!(string("'u:' + user_id"), Ok("u:u1".to_owned()));
    assert!(matches!(string("value"), Err(EvalError::Type(_))));
    assert!(matches!(string("nothing"), Err(EvalError::Type(_))));
}

#[test]
fn fields_and_source() {
    let src = "gift_id == 'flower' && count >= 10 || has(meta.region) && meta.level > count";
    let p = Program::compile(src, Expect::Bool).unwrap();
    assert_eq!(p.fields(), vec!["gift_id", "count", "meta"]);
    assert_eq!(p.source(), src);
    assert!(compile_any("1 + 2").fields().is_empty());
    assert_eq!(compile_any("tags[0] + x['y']").fields(), vec!["tags", "x"]);
}

#[test]
fn program_is_send_sync_debug() {
    fn check<T: Send + Sync + std::fmt::Debug>() {}
    check::<Program>();
    let text = format!("{:?}", compile_any("count * 2"));
    assert!(text.contains("count"));
}

#[test]
fn error_codes_and_messages() {
    let cases = [
        (
            EvalError::NoSuchField("a.b".into()),
            "no_such_field",
            "no such field: a.b",
        ),
        (
            EvalError::IndexOutOfBounds { index: 3, len: 2 },
            "index_out_of_bounds",
            "index 3 out of bounds for list of length 2",
        ),
        (
            EvalError::DivisionByZero,
            "division_by_zero",
            "division by zero",
        ),
        (EvalError::Overflow, "overflow", "integer overflow"),
        (
            EvalError::NotFinite,
            "not_finite",
            "result is not a finite number",
        ),
        (
            EvalError::Inexact(1),
            "inexact",
            "integer 1 exceeds 2^53 and cannot be used exactly as a score",
        ),
        (EvalError::Type("x".into()), "type", "type error: x"),
        (
            EvalError::Conversion("y".into()),
            "conversion",
            "conversion error: y",
        ),
    ];
    for (e, code, msg) in cases {
        assert_eq!(e.code(), code);
        assert_eq!(e.to_string(), msg);
    }
    let e = compile_err("1 +");
    assert_eq!(
        e.to_string(),
        "unexpected end of expression, expected an expression at column 4"
    );
}

#[test]
fn value_display_and_type_names() {
    assert_eq!(
        ok("[1, 2.5, 'a', true, null]").to_string(),
        "[1, 2.5, \"a\", true, null]"
    );
    assert_eq!(ok("1.0").to_string(), "1.0");
    assert_eq!(ok("'x'").type_name(), "string");
    assert_eq!(ok("[]").type_name(), "list");
}

// ---------------------------------------------------------------- properties

/// Fragments that make parser-relevant inputs much likelier than uniform
/// random strings do.
fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "(",
        ")",
        "[",
        "]",
        ",",
        ".",
        "?",
        ":",
        "!",
        "-",
        "+",
        "*",
        "/",
        "%",
        "&&",
        "||",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        " in ",
        "has(",
        "int(",
        "size(",
        "min(",
        "string(",
        "count",
        "value",
        "meta",
        "tags",
        "gift_id",
        "x",
        "0",
        "1",
        "9223372036854775807",
        "9223372036854775808",
        "1.5",
        ".5",
        "1e3",
        "0x1f",
        "'a'",
        "\"b\"",
        "r'c'",
        "'''d'''",
        "'\\u00e9'",
        "\\",
        "'",
        "\"",
        "true",
        "false",
        "null",
        " ",
        "é",
        "\n",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn compile_never_panics_on_arbitrary_strings(src in any::<String>()) {
        let ev = event();
        if let Ok(p) = Program::compile(&src, Expect::Any) {
            let _ = p.eval(&ev);
        }
    }

    #[test]
    fn compile_and_eval_never_panic_on_token_soup(
        parts in prop::collection::vec(fragment(), 0..60)
    ) {
        let src: String = parts.concat();
        let ev = event();
        match Program::compile(&src, Expect::Any) {
            Ok(p) => {
                let _ = p.eval(&ev);
                let _ = p.eval_bool(&ev);
                let _ = p.eval_number(&ev);
                let _ = p.eval_string(&ev);
            }
            Err(e) => {
                // Columns point into the source (or just past its end).
                prop_assert!(e.position >= 1 && e.position <= src.chars().count() + 1, "{e}");
            }
        }
    }
}

// ------------------------------------------------ differential test vs `cel`

/// Draws choices from a proptest-generated stream; running out means 0,
/// and 0 always picks a leaf, so shrinking the stream simplifies the
/// expression.
struct Choices<'a> {
    stream: &'a [u32],
    next: usize,
}

impl Choices<'_> {
    fn pick(&mut self, n: u32) -> u32 {
        let c = self.stream.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        c % n
    }

    fn from<'x>(&mut self, items: &[&'x str]) -> &'x str {
        items[self.pick(items.len() as u32) as usize]
    }
}

const INT_LITERALS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "10",
    "(-1)",
    "(-13)",
    "100",
    "0x10",
    "9223372036854775807",
    "(-9223372036854775808)",
    "4611686018427387904",
];
const STR_LITERALS: &[&str] = &[
    "''", "'a'", "'ab'", "'B'", "'héllo'", "'12'", "'-3'", "\"x y\"", "'a\\tb'",
];

fn gen_int(c: &mut Choices, depth: u32) -> String {
    let k = if depth == 0 { c.pick(4) } else { c.pick(15) };
    let sub = |c: &mut Choices| gen_int(c, depth - 1);
    match k {
        0 => c.from(INT_LITERALS).to_owned(),
        1 => "i1".to_owned(),
        2 => "i2".to_owned(),
        3 => "m.i".to_owned(),
        4..=8 => {
            let op = ["+", "-", "*", "/", "%"][(k - 4) as usize];
            format!("({} {op} {})", sub(c), sub(c))
        }
        9 => format!("(-{})", sub(c)),
        10 => format!("({} ? {} : {})", gen_bool(c, depth - 1), sub(c), sub(c)),
        11 => format!("size({})", gen_str(c, depth - 1)),
        12 => format!("min({}, {})", sub(c), sub(c)),
        13 => format!("max({}, {}, {})", sub(c), sub(c), sub(c)),
        _ => format!("int({})", gen_str(c, depth - 1)),
    }
}

fn gen_str(c: &mut Choices, depth: u32) -> String {
    let k = if depth == 0 { c.pick(4) } else { c.pick(7) };
    match k {
        0 => c.from(STR_LITERALS).to_owned(),
        1 => "s1".to_owned(),
        2 => "s2".to_owned(),
        3 => "m.s".to_owned(),
        4 => format!("({} + {})", gen_str(c, depth - 1), gen_str(c, depth - 1)),
        5 => format!("string({})", gen_int(c, depth - 1)),
        _ => format!(
            "({} ? {} : {})",
            gen_bool(c, depth - 1),
            gen_str(c, depth - 1),
            gen_str(c, depth - 1)
        ),
    }
}

fn gen_bool(c: &mut Choices, depth: u32) -> String {
    let k = if depth == 0 { c.pick(5) } else { c.pick(16) };
    let cmp = ["==", "!=", "<", "<=", ">", ">="];
    match k {
        0 => c.from(&["true", "false"]).to_owned(),
        1 => "b1".to_owned(),
        2 => "has(m.i)".to_owned(),
        3 => "has(m.zz)".to_owned(),
        4 => "m.b".to_owned(),
        5 => format!("(!{})", gen_bool(c, depth - 1)),
        6 => format!("({} && {})", gen_bool(c, depth - 1), gen_bool(c, depth - 1)),
        7 => format!("({} || {})", gen_bool(c, depth - 1), gen_bool(c, depth - 1)),
        8 | 9 => {
            let op = c.from(&cmp);
            format!("({} {op} {})", gen_int(c, depth - 1), gen_int(c, depth - 1))
        }
        10 => {
            let op = c.from(&cmp);
            format!("({} {op} {})", gen_str(c, depth - 1), gen_str(c, depth - 1))
        }
        11 => {
            let op = c.from(&["==", "!="]);
            format!(
                "({} {op} {})",
                gen_bool(c, depth - 1),
                gen_bool(c, depth - 1)
            )
        }
        12 => format!(
            "({} ? {} : {})",
            gen_bool(c, depth - 1),
            gen_bool(c, depth - 1),
            gen_bool(c, depth - 1)
        ),
        13 => format!(
            "({} in [{}, {}])",
            gen_int(c, depth - 1),
            gen_int(c, depth - 1),
            gen_int(c, depth - 1)
        ),
        14 => format!(
            "({} in [{}, {}])",
            gen_str(c, depth - 1),
            gen_str(c, depth - 1),
            gen_str(c, depth - 1)
        ),
        // Heterogeneous equality: always false / true in both.
        _ => {
            let op = c.from(&["==", "!="]);
            format!("({} {op} {})", gen_int(c, depth - 1), gen_str(c, depth - 1))
        }
    }
}

fn gen_expr(stream: &[u32]) -> String {
    let mut c = Choices { stream, next: 0 };
    match c.pick(3) {
        0 => gen_bool(&mut c, 4),
        1 => gen_int(&mut c, 4),
        _ => gen_str(&mut c, 4),
    }
}

#[derive(Debug, Clone)]
struct Vars {
    i1: i64,
    i2: i64,
    mi: i64,
    s1: &'static str,
    s2: &'static str,
    ms: &'static str,
    b1: bool,
    mb: bool,
}

fn int_var() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -20i64..20,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>(),
    ]
}

fn str_var() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "a", "ab", "B", "héllo", "12", "-3", "zz"])
}

fn vars() -> impl Strategy<Value = Vars> {
    (
        int_var(),
        int_var(),
        int_var(),
        str_var(),
        str_var(),
        str_var(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(i1, i2, mi, s1, s2, ms, b1, mb)| Vars {
            i1,
            i2,
            mi,
            s1,
            s2,
            ms,
            b1,
            mb,
        })
}

/// What both implementations agree on: a value, or "some error".
#[derive(Debug, PartialEq)]
enum Outcome {
    Int(i64),
    Str(String),
    Bool(bool),
    Error,
}

fn ours(src: &str, v: &Vars) -> Result<Outcome, String> {
    let event = json!({
        "i1": v.i1, "i2": v.i2, "s1": v.s1, "s2": v.s2, "b1": v.b1,
        "m": {"i": v.mi, "s": v.ms, "b": v.mb},
    });
    let Json::Object(event) = event else {
        return Err("event is not an object".into());
    };
    let program = match Program::compile(src, Expect::Any) {
        Ok(p) => p,
        // A constant expression that always fails is rejected at compile
        // time; CEL fails at run time instead. Any other compile error is a
        // bug: the generator only writes well-typed expressions.
        Err(e) if e.message.contains("always fails") => return Ok(Outcome::Error),
        Err(e) => return Err(format!("compile error: {e}")),
    };
    Ok(match program.eval(&event) {
        Ok(Value::Int(i)) => Outcome::Int(i),
        Ok(Value::Str(s)) => Outcome::Str(s.into_owned()),
        Ok(Value::Bool(b)) => Outcome::Bool(b),
        Ok(other) => return Err(format!("unexpected value {other:?}")),
        Err(_) => Outcome::Error,
    })
}

thread_local! {
    static CEL_ENV: std::sync::Arc<cel::Env> = std::sync::Arc::new(cel::Env::stdlib());
}

fn reference(src: &str, v: &Vars) -> Result<Outcome, String> {
    use std::collections::HashMap;
    let program = cel::Program::compile(src).map_err(|e| format!("cel parse error: {e}"))?;
    let mut ctx = CEL_ENV.with(|env| cel::Context::with_env(env.clone()));
    ctx.add_variable_from_value("i1", v.i1);
    ctx.add_variable_from_value("i2", v.i2);
    ctx.add_variable_from_value("s1", v.s1);
    ctx.add_variable_from_value("s2", v.s2);
    ctx.add_variable_from_value("b1", v.b1);
    let m: HashMap<&str, cel::Value> = HashMap::from([
        ("i", cel::Value::Int(v.mi)),
        ("s", cel::Value::from(v.ms)),
        ("b", cel::Value::Bool(v.mb)),
    ]);
    ctx.add_variable_from_value("m", m);
    ctx.add_function("min", cel::functions::min)
        .map_err(|e| e.to_string())?;
    ctx.add_function("max", cel::functions::max)
        .map_err(|e| e.to_string())?;
    Ok(match program.execute(&ctx) {
        Ok(cel::Value::Int(i)) => Outcome::Int(i),
        Ok(cel::Value::String(s)) => Outcome::Str(s.to_string()),
        Ok(cel::Value::Bool(b)) => Outcome::Bool(b),
        Ok(other) => return Err(format!("unexpected cel value {other:?}")),
        Err(_) => Outcome::Error,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn agrees_with_cel_interpreter(
        stream in prop::collection::vec(any::<u32>(), 0..80),
        v in vars(),
    ) {
        let src = gen_expr(&stream);
        let expected = reference(&src, &v);
        let actual = ours(&src, &v);
        prop_assert!(expected.is_ok(), "{src}: {expected:?}");
        prop_assert!(actual.is_ok(), "{src}: {actual:?}");
        prop_assert_eq!(actual, expected, "{} with {:?}", src, v);
    }
}
