//! Benchmark of the rule expression compiler (`rankflow::expr`)
//! against the `cel` crate's interpreter, on the per-event hot path.
//!
//! Both sides compile once. Ours evaluates straight on the event's
//! `serde_json::Map`; the CEL baseline builds a `Context` per event, as a
//! consumer must, binding the variables the program references (converted
//! from JSON), then executes. A second CEL figure with a prebuilt context
//! shows the interpreter alone. Run with `cargo bench --bench expr`.
//!
//! CEL has no mixed int/double arithmetic, so its `count * value` is
//! written `double(count) * value`; results are checked equal before
//! timing.

use std::collections::HashMap;
use std::error::Error;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use rankflow::expr::{Expect, Program};
use serde_json::{Map, Value as Json, json};

const OURS_ITERS: u32 = 5_000_000;
const CEL_ITERS: u32 = 500_000;

/// A realistic gift event as it arrives from Kafka.
fn gift_event() -> Result<Map<String, Json>, Box<dyn Error>> {
    match json!({
        "event_id": "9f1c2e7a-5b3d-4c1e-8f00-3a7d2b9c4e11",
        "event_type": "gift_sent",
        "ts": 1_732_212_345_123_i64,
        "room_id": "room-42",
        "sender_id": "u-100234",
        "receiver_id": "u-200917",
        "gift_id": "flower",
        "count": 12,
        "value": 1.5,
        "currency": "coin",
        "platform": "ios",
        "app_version": "5.12.0",
        "meta": {"combo": 3, "region": "eu", "vip_level": 2}
    }) {
        Json::Object(m) => Ok(m),
        _ => Err("event is not an object".into()),
    }
}

fn json_to_cel(v: &Json) -> cel::Value {
    match v {
        Json::Null => cel::Value::Null,
        Json::Bool(b) => cel::Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => cel::Value::String(Arc::new(s.clone())),
        Json::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Json::Object(m) => {
            let map: HashMap<String, cel::Value> =
                m.iter().map(|(k, v)| (k.clone(), json_to_cel(v))).collect();
            map.into()
        }
    }
}

/// Average nanoseconds per call of `f` over `iters` calls (after a warm-up).
fn time_ns(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(iters)
}

struct Case {
    ours: &'static str,
    expect: Expect,
    cel: &'static str,
}

/// The value of one evaluation, to check both engines agree.
#[derive(Debug, PartialEq)]
enum Out {
    Num(f64),
    Bool(bool),
    Str(String),
}

fn ours_once(p: &Program, ev: &Map<String, Json>) -> Result<Out, Box<dyn Error>> {
    Ok(match p.eval(ev)? {
        rankflow::expr::Value::Bool(b) => Out::Bool(b),
        rankflow::expr::Value::Str(s) => Out::Str(s.into_owned()),
        _ => Out::Num(p.eval_number(ev)?),
    })
}

fn cel_once(r: Result<cel::Value, cel::ExecutionError>) -> Result<Out, Box<dyn Error>> {
    Ok(match r? {
        cel::Value::Bool(b) => Out::Bool(b),
        cel::Value::String(s) => Out::Str(s.to_string()),
        cel::Value::Float(d) => Out::Num(d),
        cel::Value::Int(i) => Out::Num(i as f64),
        other => return Err(format!("unexpected cel value {other:?}").into()),
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let event = gift_event()?;
    let env = Arc::new(cel::Env::stdlib());
    let cases = [
        Case {
            ours: "count * value",
            expect: Expect::Number,
            cel: "double(count) * value",
        },
        Case {
            ours: "gift_id == \"flower\" && count >= 10",
            expect: Expect::Bool,
            cel: "gift_id == \"flower\" && count >= 10",
        },
        Case {
            ours: "receiver_id",
            expect: Expect::String,
            cel: "receiver_id",
        },
    ];

    println!(
        "{:<40} {:>10} {:>14} {:>14} {:>10}",
        "expression", "ours ns", "cel ns (ctx)", "cel ns (eval)", "cel/ours"
    );
    for case in &cases {
        let ours = Program::compile(case.ours, case.expect)?;
        let cel_program = cel::Program::compile(case.cel)?;
        let vars: Vec<String> = cel_program
            .references()
            .variables()
            .into_iter()
            .map(str::to_owned)
            .collect();

        // What a consumer does per event: bind the referenced fields, run.
        let cel_eval = |ev: &Map<String, Json>| {
            let mut ctx = cel::Context::with_env(Arc::clone(&env));
            for name in &vars {
                if let Some(v) = ev.get(name) {
                    ctx.add_variable_from_value(name.as_str(), json_to_cel(v));
                }
            }
            cel_program.execute(&ctx)
        };

        let a = ours_once(&ours, &event)?;
        let b = cel_once(cel_eval(&event))?;
        if a != b {
            return Err(format!("{}: ours {a:?} != cel {b:?}", case.ours).into());
        }

        let ours_ns = match case.expect {
            Expect::Number => time_ns(OURS_ITERS, || {
                let _ = black_box(ours.eval_number(black_box(&event)));
            }),
            Expect::Bool => time_ns(OURS_ITERS, || {
                let _ = black_box(ours.eval_bool(black_box(&event)));
            }),
            _ => time_ns(OURS_ITERS, || {
                let _ = black_box(ours.eval_string(black_box(&event)));
            }),
        };
        let cel_ns = time_ns(CEL_ITERS, || {
            let _ = black_box(cel_eval(black_box(&event)));
        });
        // The interpreter alone, with a context built once.
        let mut ctx = cel::Context::with_env(Arc::clone(&env));
        for name in &vars {
            if let Some(v) = event.get(name) {
                ctx.add_variable_from_value(name.as_str(), json_to_cel(v));
            }
        }
        let cel_eval_ns = time_ns(CEL_ITERS, || {
            let _ = black_box(cel_program.execute(black_box(&ctx)));
        });
        println!(
            "{:<40} {:>10.1} {:>14.1} {:>14.1} {:>9.1}x",
            case.ours,
            ours_ns,
            cel_ns,
            cel_eval_ns,
            cel_ns / ours_ns
        );
    }
    Ok(())
}
