//! The typed decode (`Decoder::decode`) against the reference: the generic
//! decode (`Decoder::decode_generic`, a `serde_json::Value` through the
//! compiled JSON Schemas) and the schema validator itself.
//!
//! - A property test generates valid and near-valid payloads of all three
//!   types (fields missing, extra, duplicated, of the wrong type, at and
//!   past their bounds, long and unicode ids, escaped strings) and requires
//!   both decodes to accept the same payloads with equal events, reject the
//!   rest with the same reason, and the typed decode to accept nothing the
//!   schema validator rejects.
//! - A hand-labelled corpus of tricky payloads (tests/data/decode_corpus.txt)
//!   gives each its expected outcome, independent of both decodes.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use rankflow::event::{Decoder, Event, EventType};
use serde_json::Value;

const MAX_BYTES: usize = 64 * 1024;

fn decoder() -> Decoder {
    Decoder::new(MAX_BYTES).expect("embedded schemas compile")
}

fn validators() -> Vec<jsonschema::Validator> {
    EventType::ALL
        .iter()
        .map(|k| {
            let schema: Value = serde_json::from_str(k.schema_text()).expect("schema is JSON");
            jsonschema::draft202012::new(&schema).expect("schema compiles")
        })
        .collect()
}

/// "ok" or the rejection's reason code.
fn outcome(r: &Result<Event, rankflow::event::DecodeError>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.reason().code().to_owned(),
    }
}

/// Both decodes agree on `payload`; returns the outcome.
fn assert_equivalent(d: &Decoder, schemas: &[jsonschema::Validator], payload: &[u8]) -> String {
    let show = String::from_utf8_lossy(payload);
    let typed = d.decode(payload);
    let generic = d.decode_generic(payload);
    assert_eq!(
        outcome(&typed),
        outcome(&generic),
        "payload {show}: typed {typed:?} generic {generic:?}"
    );
    match (&typed, &generic) {
        (Ok(t), Ok(g)) => {
            assert_eq!(t.kind, g.kind, "{show}");
            assert_eq!(t.event_id(), g.event_id(), "{show}");
            assert_eq!(t.ts, g.ts, "{show}");
            assert_eq!(t.fields, g.fields, "{show}");
            // And the schema itself accepts what the typed decode did.
            let value: Value = serde_json::from_slice(payload).expect("accepted, so JSON");
            assert!(schemas[t.kind.index()].is_valid(&value), "{show}");
        }
        (Err(e), _) => {
            let detail = e.to_string();
            assert!(!detail.is_empty() && detail.len() < 700, "{show}: {detail}");
        }
        _ => {}
    }
    outcome(&typed)
}

// ------------------------------------------------------------ generators

/// JSON text of a value for an id field: valid and near-valid.
fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_-]{1,12}".prop_map(|s| json(&s)),
        "\\PC{1,20}".prop_map(|s| json(&s)),
        Just(json("")),
        Just(json(&"x".repeat(128))),
        Just(json(&"x".repeat(129))),
        Just(json(&"😀".repeat(32))),
        Just(json(&"😀".repeat(33))),
        Just(json(&"é".repeat(64))),
        Just(json(&"é".repeat(65))),
        Just(json("a\u{1}b")),
        Just(json("tab\there")),
        Just(json("del\u{7f}")),
        Just(json("ok\u{80}c1")),
        Just(r#""\u0061\/b""#.to_owned()),
        Just(r#""\ud83d\ude00""#.to_owned()),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        Just("7.0".to_owned()),
        Just("7.5".to_owned()),
        Just("-0.0".to_owned()),
        Just("-0".to_owned()),
        Just("1e17".to_owned()),
        Just("1e18".to_owned()),
        Just("1e300".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("[\"a\"]".to_owned()),
        Just("{\"a\":1}".to_owned()),
    ]
}

/// JSON text of a number near the bounds `min`/`max` of an integer field.
fn int_text(min: i64, max: Option<i64>) -> BoxedStrategy<String> {
    let mut edges = vec![min - 1, min, min + 1, 0, -1, 1];
    if let Some(m) = max {
        edges.extend([m - 1, m, m + 1]);
    }
    let edge = prop::sample::select(edges);
    prop_oneof![
        edge.clone().prop_map(|n| n.to_string()),
        edge.clone().prop_map(|n| format!("{n}.0")),
        edge.prop_map(|n| format!("{n}.5")),
        (min..max.unwrap_or(i64::MAX / 2)).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json(&f)),
        Just("18446744073709551615".to_owned()),
        Just("9007199254740993.0".to_owned()),
        Just("1e20".to_owned()),
        Just("-0.0".to_owned()),
        Just("\"3\"".to_owned()),
        Just("null".to_owned()),
        Just("false".to_owned()),
    ]
    .boxed()
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_owned()),
        Just("-0.0".to_owned()),
        Just("-1".to_owned()),
        Just("-0.000001".to_owned()),
        Just("1.5".to_owned()),
        Just("1e300".to_owned()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json(&f)),
        Just("\"1.5\"".to_owned()),
        Just("null".to_owned()),
    ]
}

fn text_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-f0-9-]{1,36}".prop_map(|s| json(&s)),
        1 => id_text(),
    ]
}

fn bool_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("1".to_owned()),
        Just("null".to_owned())
    ]
}

fn other_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("{\"k\":[1,2.5,\"x\"]}".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        "\\PC{0,10}".prop_map(|s| json(&s)),
    ]
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).expect("serializable")
}

/// Mostly a valid value, sometimes a near-valid one: a payload has several
/// fields, and enough of them must be valid together to reach acceptance.
fn mostly<V, N>(valid: V, near: N) -> BoxedStrategy<String>
where
    V: Strategy<Value = String> + 'static,
    N: Strategy<Value = String> + 'static,
{
    prop_oneof![19 => valid, 1 => near].boxed()
}

fn valid_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_-]{1,12}".prop_map(|s| json(&s)),
        "\\PC{1,20}".prop_map(|s| json(&s)),
        any::<i64>().prop_map(|i| i.to_string()),
    ]
}

fn valid_int(min: i64, max: Option<i64>) -> impl Strategy<Value = String> {
    (min..=max.unwrap_or(i64::MAX)).prop_map(|n| n.to_string())
}

/// The fields of one type with a generator of their values.
fn fields_of(kind: &str) -> Vec<(&'static str, BoxedStrategy<String>)> {
    let id = || mostly(valid_id(), id_text());
    let int = |min, max| mostly(valid_int(min, max), int_text(min, max));
    let mut f = vec![
        (
            "event_id",
            mostly("[a-f0-9-]{1,36}".prop_map(|s| json(&s)), text_text()),
        ),
        ("ts", int(946_684_800_000, Some(253_402_300_799_999))),
    ];
    match kind {
        "gift" => f.extend([
            ("sender_id", id()),
            ("receiver_id", id()),
            ("gift_id", id()),
            ("count", int(1, Some(1_000_000))),
            (
                "value",
                mostly((0.0..1e6f64).prop_map(|v| json(&v)), number_text()),
            ),
            ("room_id", id()),
        ]),
        "score" => f.extend([
            ("user_id", id()),
            ("game_id", id()),
            ("points", int(-1_000_000_000_000, Some(1_000_000_000_000))),
            ("duration_ms", int(0, None)),
            ("revives", int(0, None)),
            (
                "cleared",
                mostly(any::<bool>().prop_map(|b| b.to_string()), bool_text()),
            ),
        ]),
        _ => f.extend([
            ("user_id", id()),
            ("game_id", id()),
            ("duration_ms", int(0, None)),
        ]),
    }
    f
}

/// Key text, sometimes with an escape (the typed decode must not rely on
/// borrowed keys).
fn key_text(name: &str, escape: bool) -> String {
    match (escape, name.chars().next()) {
        (true, Some(c)) => format!("\"\\u{:04x}{}\"", c as u32, &name[c.len_utf8()..]),
        _ => json(name),
    }
}

prop_compose! {
    /// One payload: each declared field present (mostly), with a mostly
    /// valid value; some extra and duplicated keys; in any order.
    fn payload()(kind in prop_oneof![
            6 => prop::sample::select(vec!["gift", "score", "play"]),
            1 => prop::sample::select(vec!["gift ", "Gift", "period_closed"]),
        ])
        (entries in fields_of(kind.trim()).into_iter().map(|(name, values)| {
            (prop::bool::weighted(0.97), values, any::<bool>())
                .prop_map(move |(present, v, escape)| (name, present, v, escape))
        }).collect::<Vec<_>>(),
         extra in prop::collection::vec((prop::sample::select(vec!["extra", "meta", "points", "count", "user_id", "cleared", "type", "ts"]), other_text()), 0..3),
         type_text in prop_oneof![18 => Just(json(kind)), 1 => Just("1".to_owned()), 1 => Just("null".to_owned())],
         type_first in any::<bool>(),
         shuffle in any::<u64>())
        -> String
    {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, present, v, escape) in entries {
            if present {
                pairs.push((key_text(name, escape), v));
            }
        }
        for (name, v) in extra {
            pairs.push((json(name), v));
        }
        // A deterministic shuffle from the generated seed.
        let n = pairs.len();
        if n > 1 {
            let mut s = shuffle;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                pairs.swap(i, (s >> 33) as usize % (i + 1));
            }
        }
        let type_pair = ("\"type\"".to_owned(), type_text);
        if type_first { pairs.insert(0, type_pair) } else { pairs.push(type_pair) }
        let body: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!("{{{}}}", body.join(","))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn typed_decode_accepts_what_the_schemas_accept(p in payload()) {
        thread_local! {
            static SETUP: (Decoder, Vec<jsonschema::Validator>) = (decoder(), validators());
        }
        SETUP.with(|(d, schemas)| assert_equivalent(d, schemas, p.as_bytes()));
    }
}

/// The generator reaches both sides often enough to mean something.
#[test]
fn generator_makes_valid_and_invalid_payloads() {
    let d = decoder();
    let schemas = validators();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = payload();
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    let total = 2000;
    for _ in 0..total {
        let p = strategy.new_tree(&mut runner).expect("generates").current();
        *outcomes
            .entry(assert_equivalent(&d, &schemas, p.as_bytes()))
            .or_default() += 1;
    }
    eprintln!("outcomes of {total} generated payloads: {outcomes:?}");
    let ok = outcomes.get("ok").copied().unwrap_or(0);
    assert!(
        ok > total / 20 && ok < total * 19 / 20,
        "{ok} of {total} valid"
    );
}

/// Each corpus line is `<expected outcome> <payload>`; the payload may hold
/// any bytes but a newline. Blank lines and `#` lines are skipped.
#[test]
fn corpus_has_its_hand_labelled_outcomes() {
    let d = decoder();
    let schemas = validators();
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/decode_corpus.txt"
    ))
    .expect("corpus is checked in");
    let mut checked = 0;
    for line in text.split(|b| *b == b'\n') {
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let at = line
            .iter()
            .position(|b| *b == b' ')
            .expect("label then payload");
        let (label, payload) = (String::from_utf8_lossy(&line[..at]), &line[at + 1..]);
        let got = assert_equivalent(&d, &schemas, payload);
        assert_eq!(got, label, "payload {}", String::from_utf8_lossy(payload));
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} corpus lines");
}

/// A payload just over the size limit, and one at it (the corpus file
/// cannot hold 64 KiB lines comfortably).
#[test]
fn size_limit_is_the_same() {
    let d = decoder();
    let schemas = validators();
    let base = r#"{"type":"gift","event_id":"e","ts":1763700000000,"sender_id":"a","receiver_id":"b","gift_id":"g","count":1,"value":1,"pad":""}"#;
    let pad = MAX_BYTES - base.len();
    let at_limit = base.replace(r#""pad":"""#, &format!(r#""pad":"{}""#, "p".repeat(pad)));
    assert_eq!(assert_equivalent(&d, &schemas, at_limit.as_bytes()), "ok");
    let over = format!("{at_limit} ");
    assert_eq!(
        assert_equivalent(&d, &schemas, over.as_bytes()),
        "too_large"
    );
}
