//! Composite boards (docs/score-encoding.md) with windows, sliding (`10m/1m`, `3m/1m`)
//! and rolling (`3d/1d` in Tokyo, and in New York just after a 23-hour
//! day), through the rules, the
//! batch and the Lua script into a real Redis, checked against references
//! written from the spec, never from the code under test (the composite
//! model of `tests/it/common/composite.rs`, and the windows' buckets here):
//! - random composite boards fed random events with out-of-order times
//!   while the clock moves: after every step each window ranks and holds
//!   exactly what the fields' rules give over the events whose bucket is
//!   still in the window (computed here from the bucket arithmetic);
//! - a hand-made table of one board with a field of each rule, whose
//!   buckets leave one by one: sums lose the leaving bucket, max/min fall
//!   back to the next best bucket, `last` stays exact with out-of-order
//!   events and becomes missing when its latest event leaves, a member
//!   with no field left leaves; late events count `late`; a redelivery is
//!   fenced off; every key carries an expiry;
//! - a scoped composite board with both windows on a Redis Cluster through
//!   tansu, before and after the clock slides with no event;
//! - an eviction of more entries than one call's budget finishing over
//!   several calls;
//! - `rankflow check` accepts composite windows and says what they keep;
//! - a plain window's one-member bucket gets its expiry (the same rule).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::composite::*;
use common::direct::Direct;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use rankflow::telemetry::Outcome;
use serde_json::json;

/// The clock starts at the real time's last whole minute: keys expire in
/// Redis's real time, so a clock in the past would see its windows' keys
/// expire as they are written.
fn t0() -> i64 {
    let now = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    now.div_euclid(MIN) * MIN
}
const SEC: i64 = 1000;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;

/// The windows every random board keeps: view, length, and the end of the
/// bucket holding an event, written from docs/redis-layout.md (epoch-aligned minutes;
/// local days of Asia/Tokyo, UTC+9 without DST).
struct WindowDef {
    view: &'static str,
    length: i64,
    bucket_end: fn(i64) -> i64,
}

const WINDOWS: [WindowDef; 2] = [
    WindowDef {
        view: "win:10m",
        length: 10 * MIN,
        bucket_end: |ts| ts.div_euclid(MIN) * MIN + MIN,
    },
    WindowDef {
        view: "win:3d",
        length: 3 * DAY,
        bucket_end: |ts| (ts + 9 * HOUR).div_euclid(DAY) * DAY + DAY - 9 * HOUR,
    },
];

/// What every random board keeps: both windows, in Tokyo.
const WINDOWED: &str = "windows = [\"10m/1m\", \"3d/1d\"]\ntimezone = \"Asia/Tokyo\"";

/// `n` events at clock `now`, out of order: most within the last 15
/// minutes (some already out of the 10-minute window), a quarter up to four
/// days back (most out of it, some out of the 3-day window too).
fn random_events(g: &mut Gen, n: usize, now: i64, next_id: &mut u64) -> Vec<serde_json::Value> {
    (0..n)
        .map(|_| {
            *next_id += 1;
            let back = if g.below(4) == 0 {
                g.below(4 * DAY as u64) as i64
            } else {
                g.below(15 * MIN as u64) as i64
            };
            // Whole seconds, so equal times happen.
            let ts = (now - back).div_euclid(SEC) * SEC;
            let mut e = json!({
                "type": "score", "event_id": format!("e{next_id}"), "ts": ts,
                "user_id": format!("u{}", g.below(10)), "game_id": "g0", "points": 1,
            });
            random_fields(g, &mut e, &[MAX, -MAX, MAX - 1]);
            e
        })
        .collect()
}

/// A window of `def` as read through the reader (which trims it to the
/// clock first): members in rank order with their fields, after checking
/// each member's own rank (found through K:f, without a scan).
async fn read_window(
    direct: &Direct,
    def: &BoardDef,
    view: &str,
) -> Vec<(String, Vec<Option<i64>>)> {
    read_view(&direct.reader(), def, view).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_composite_windows_hold_what_the_model_of_their_buckets_gives() {
    let redis = Redis::start();
    random_rounds(&redis, &WINDOWS, "Asia/Tokyo", t0(), 4).await;
}

/// The same just after the start of daylight saving time in New York
/// (Sunday 2027-03-14, a 23-hour local day), in the future so no key
/// expires early: rolling `3d/1d` buckets are local days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_rolling_composite_windows_hold_the_model_across_a_dst_change() {
    let redis = Redis::start();
    let windows = [
        WindowDef {
            view: "win:10m",
            length: 10 * MIN,
            bucket_end: WINDOWS[0].bucket_end,
        },
        WindowDef {
            view: "win:3d",
            length: 3 * DAY,
            bucket_end: new_york_day_end,
        },
    ];
    // 2027-03-18 00:05 EDT: the 3-day cutoff sits in the hour after the
    // 23-hour day's end (00:00 EDT on the 15th) and before 24 hours would
    // have ended it, so that day has left the window only if buckets are
    // local days; events reach four days back, into it and before it.
    let start = 1_805_342_700_000;
    random_rounds(&redis, &windows, "America/New_York", start, 2).await;
}

/// The next local midnight in New York after `ts`, from chrono-tz alone.
fn new_york_day_end(ts: i64) -> i64 {
    use chrono::TimeZone;
    let tz = chrono_tz::America::New_York;
    let date = tz
        .timestamp_millis_opt(ts)
        .single()
        .expect("a valid time")
        .date_naive();
    let next = date.succ_opt().expect("a next day");
    tz.from_local_datetime(&next.and_hms_opt(0, 0, 0).expect("midnight"))
        .earliest()
        .expect("midnight exists in New York")
        .timestamp_millis()
}

/// `rounds` rounds of 4 random composite boards with `windows` in `zone`,
/// the clock starting at `start`: 10 steps each, the clock moving minutes
/// or most of a day, events applied on 2 steps out of 3, and after every
/// step each window of each board checked against the model of the events
/// whose bucket is still in it.
async fn random_rounds(redis: &Redis, windows: &[WindowDef], zone: &str, start: i64, rounds: u64) {
    let (mut checks, mut late_events, mut members_seen) = (0, 0, 0);
    for round in 0..rounds {
        let mut g = Gen(0x51ED_270B_A1C3_9F05 ^ (round + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let defs: Vec<BoardDef> = (0..4)
            .map(|b| BoardDef::random(&mut g, format!("w{b}")))
            .collect();
        let text: String = defs
            .iter()
            .map(|d| d.toml(WINDOWED).replace("Asia/Tokyo", zone))
            .collect();
        let mut direct = Direct::new(&redis.url(), &unique("rfw"), &text, start).await;
        let mut applied: Vec<serde_json::Value> = Vec::new();
        let mut next_id = 0;
        for step in 0..10 {
            // Minutes mostly, now and then most of a day: both windows slide.
            let advance = match g.below(6) {
                0 => 20 * HOUR + g.below(6) as i64 * HOUR,
                _ => g.below(4) as i64 * MIN + g.below(60) as i64 * SEC,
            };
            direct.clock.advance(advance);
            let now = direct.now();
            // Every third step only moves the clock: the windows must slide
            // without new events.
            if step % 3 != 2 {
                let events = random_events(&mut g, 40, now, &mut next_id);
                let (outcomes, report) = direct.apply(&events).await;
                for c in &report.boards {
                    assert_eq!(c.overflow, 0, "no sum can overflow here");
                }
                for (e, outcome) in events.iter().zip(&outcomes) {
                    let ts = e["ts"].as_i64().unwrap_or_default();
                    let late = windows.iter().all(|w| (w.bucket_end)(ts) <= now - w.length);
                    // Events no field of any board takes are filtered.
                    let taken = defs
                        .iter()
                        .any(|d| (0..d.fields.len()).any(|i| e[d.source(i)].is_i64()));
                    if late && taken {
                        assert_eq!(*outcome, Outcome::Late, "{e}");
                        late_events += 1;
                    }
                }
                applied.extend(events);
                if step == 4 {
                    let again = direct.redeliver_last().await;
                    assert!(again.conflicts > 0, "the fences caught the redelivery");
                }
            }
            for w in windows {
                let cutoff = now - w.length;
                for def in &defs {
                    let inside = applied
                        .iter()
                        .filter(|e| (w.bucket_end)(e["ts"].as_i64().unwrap_or_default()) > cutoff);
                    let expected = ranked(def, &model(def, inside));
                    let got = read_window(&direct, def, w.view).await;
                    assert_eq!(
                        got, expected,
                        "round {round} step {step} {} at {now}: {def:?}",
                        w.view
                    );
                    members_seen += got.len();
                    checks += 1;
                }
            }
        }
    }
    assert!(late_events > 0, "some events arrived late for both windows");
    println!(
        "{zone}: checked {checks} composite windows ({members_seen} member rows) against the model; {late_events} events late on arrival"
    );
}

/// One board with a field of each rule in a `3m/1m` window (buckets A, B, C
/// of minutes 0, 1, 2 after t0), fed by hand; the expected fields are
/// worked out below from the rules, bucket by bucket.
const TRIO: &str = r#"
[[board]]
name = "trio"
event = "score"
member = "user_id"
windows = ["3m/1m"]
order_by = [
  { field = "l", score = "l", filter = "has(l)", aggregate = "last", order = "desc" },
  { field = "s", score = "s", filter = "has(s)", aggregate = "sum", order = "desc" },
  { field = "x", score = "x", filter = "has(x)", aggregate = "max", order = "desc" },
  { field = "n", score = "n", filter = "has(n)", aggregate = "min", order = "asc" },
]
"#;

fn ev(t0: i64, id: &str, user: &str, at_s: i64, fields: serde_json::Value) -> serde_json::Value {
    let mut e = json!({"type": "score", "event_id": id, "ts": t0 + at_s * SEC, "user_id": user, "game_id": "g0", "points": 1});
    if let (Some(e), Some(f)) = (e.as_object_mut(), fields.as_object()) {
        e.extend(f.clone());
    }
    e
}

type Row = (&'static str, [Option<i64>; 4]);

async fn trio(direct: &Direct) -> Vec<(String, [Option<i64>; 4])> {
    let list = direct
        .reader()
        .top(&query("trio", "win:3m"), 0, 100)
        .await
        .expect("top");
    list.entries
        .iter()
        .map(|e| {
            let f = serde_json::to_value(&e.fields).expect("fields");
            (
                e.member.clone(),
                [
                    f["l"].as_i64(),
                    f["s"].as_i64(),
                    f["x"].as_i64(),
                    f["n"].as_i64(),
                ],
            )
        })
        .collect()
}

fn rows(want: &[Row]) -> Vec<(String, [Option<i64>; 4])> {
    want.iter().map(|(m, f)| (m.to_string(), *f)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_leave_one_by_one_and_each_rule_stays_exact() {
    let redis = Redis::start();
    let prefix = unique("rfw");
    let t0 = t0();
    let mut direct = Direct::new(&redis.url(), &prefix, TRIO, t0 + 150 * SEC).await;
    // Bucket A = [t0, t0+60s), B = [+60s, +120s), C = [+120s, +180s).
    let first = [
        ev(t0, "e1", "u", 10, json!({"l": 5, "s": 2, "x": 10, "n": 5})), // A
        ev(t0, "e2", "u", 70, json!({"l": 7, "s": 3, "x": 3})),          // B
        ev(t0, "e3", "u", 130, json!({"x": 7, "n": 2})),                 // C
        ev(t0, "f1", "v", 100, json!({"l": 4, "n": 6})),                 // B
    ];
    direct.apply(&first).await;
    // Out of order: older events of bucket A arrive after newer ones.
    let second = [
        ev(t0, "e4", "u", 30, json!({"l": 9, "s": 4})), // A
        ev(t0, "f2", "v", 20, json!({"l": 8, "s": 1, "x": 1})), // A
    ];
    let (_, report) = direct.apply(&second).await;
    assert_eq!(report.boards[0].late, 0);
    // At +150 s all three buckets are in (cutoff +150 s - 3 min = -30 s).
    // u: last l is e2's (t=70 is its latest), s = 2+3+4, x = max(10,3,7),
    // n = min(5,2). v: l from f1 (t=100), s = 1, x = 1, n = 6.
    let all_in: [Row; 2] = [
        ("u", [Some(7), Some(9), Some(10), Some(2)]),
        ("v", [Some(4), Some(1), Some(1), Some(6)]),
    ];
    assert_eq!(trio(&direct).await, rows(&all_in));
    // A redelivery of the second batch is fenced off.
    let again = direct.redeliver_last().await;
    assert!(again.conflicts > 0);
    assert_eq!(trio(&direct).await, rows(&all_in), "nothing counted twice");

    // Every key of the window carries an expiry (the dense-rank index K:v
    // included), and composite windows keep no K:n.
    let tag = rankflow::board::keys::instance_tag("trio", None);
    let key = rankflow::board::keys::view_key(&prefix, &tag, "win:3m");
    let mut conn = redis.conn().await;
    let all: Vec<String> = redis.keys(&format!("{key}*")).await;
    let mut names: Vec<String> = all
        .iter()
        .map(|k| match &k[key.len()..] {
            bucket if bucket.starts_with(":b:") => ":b".to_string(),
            helper => helper.to_string(),
        })
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
        ["", ":b", ":cut", ":f", ":log", ":ord", ":v"].map(String::from)
    );
    assert_eq!(
        all.len(),
        6 + 3,
        "K, K:f, K:log, K:ord, K:cut, K:v and 3 buckets: {all:?}"
    );
    for k in &all {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(k)
            .query_async(&mut conn)
            .await
            .expect("pttl");
        assert!(ttl > 0, "{k} has no expiry ({ttl})");
    }

    // +240 s: cutoff +60 s, bucket A leaves. u: l stays e2's 7 (its latest
    // event is in B), s = 3 (B), x = max(3, 7), n = 2 (C). v: l = 4 (f1),
    // s and x had only A's f2: missing; n = 6 (B).
    direct.clock.set(t0 + 240 * SEC);
    // A late event for A counts late and changes nothing.
    let (outcomes, report) = direct
        .apply(&[ev(t0, "e5", "u", 40, json!({"l": 100, "s": 100}))])
        .await;
    assert_eq!(outcomes, [Outcome::Late], "late on arrival");
    assert_eq!(report.boards[0].applied, 0);
    let a_gone: [Row; 2] = [
        ("u", [Some(7), Some(3), Some(7), Some(2)]),
        ("v", [Some(4), None, None, Some(6)]),
    ];
    assert_eq!(trio(&direct).await, rows(&a_gone));

    // +300 s: cutoff +120 s, B leaves. u: l's latest event (e2, t=70) left,
    // and no older one can remain: missing; s had A and B only: missing;
    // x = n = C's. v had events in A and B only: gone.
    direct.clock.set(t0 + 300 * SEC);
    let b_gone: [Row; 1] = [("u", [None, None, Some(7), Some(2)])];
    assert_eq!(trio(&direct).await, rows(&b_gone));

    // A new event in C's minute for l: it is the latest again.
    let (outcomes, _) = direct
        .apply(&[ev(t0, "e6", "u", 125, json!({"l": -3, "x": 8}))])
        .await;
    assert_eq!(outcomes, [Outcome::Applied]);
    let relit: [Row; 1] = [("u", [Some(-3), None, Some(8), Some(2)])];
    assert_eq!(trio(&direct).await, rows(&relit));

    // +360 s: C leaves too; the board and its helpers are empty.
    direct.clock.set(t0 + 360 * SEC);
    assert_eq!(trio(&direct).await, rows(&[]));
    let left: Vec<String> = redis.keys(&format!("{key}*")).await;
    let left: Vec<&str> = left.iter().map(|k| &k[key.len()..]).collect();
    assert_eq!(left, [":cut"], "only the cutoff marker is left");
    println!("trio: 3 buckets left one by one; last, sum, max and min exact at each step");
}

#[test]
fn check_accepts_composite_windows_and_says_what_they_keep() {
    let (code, out) = check_config(TRIO);
    assert_eq!(code, Some(0), "{out}");
    for says in [
        "s = the total of its events in the window",
        "x = the greatest of its events in the window",
        "n = the least of its events in the window",
        "l = the value of its latest event in the window, exact",
        "a member with no field left leaves the window",
        "win:3m",
    ] {
        assert!(out.contains(says), "{says}: {out}");
    }
    println!("{out}");
}

/// Not composite, but the same bucket rule: a plain window's bucket gets
/// its expiry even when its first member is its only one (the expiry used
/// to be set before the bucket existed, and was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_window_bucket_with_one_member_expires() {
    let redis = Redis::start();
    let prefix = unique("rfw");
    let board = "[[board]]\nname = \"solo\"\nevent = \"score\"\nmember = \"user_id\"\nscore = \"points\"\nwindows = [\"3m/1m\"]\n";
    let t0 = t0();
    let mut direct = Direct::new(&redis.url(), &prefix, board, t0 + 30 * SEC).await;
    direct
        .apply(&[ev(t0, "p1", "u", 10, json!({"points": 4}))])
        .await;
    let tag = rankflow::board::keys::instance_tag("solo", None);
    let key = rankflow::board::keys::view_key(&prefix, &tag, "win:3m");
    let bucket = format!("{key}:b:{}", t0 + MIN);
    let mut conn = redis.conn().await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&bucket)
        .query_async(&mut conn)
        .await
        .expect("pttl");
    // Its end + the window + a day, from the real clock (t0 is real).
    assert!(ttl > 3 * MIN + DAY - MIN, "{bucket}: PTTL {ttl}");
}

/// A scoped composite board with both windows on a 3-primary Redis
/// Cluster through tansu: every game's instance (its buckets, K:f and K:ord
/// in its own slot) holds the model of its game's events in the window,
/// and still does after the clock moved 4 minutes with no new event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_composite_windows_hold_the_model_on_a_cluster() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let mut g = Gen(0x0BAD_CAFE_7777_0001);
    let def = BoardDef {
        name: "per_game".into(),
        fields: vec![
            FieldDef {
                rule: Rule::Sum,
                desc: true,
            },
            FieldDef {
                rule: Rule::Max,
                desc: false,
            },
            FieldDef {
                rule: Rule::Last,
                desc: true,
            },
        ],
        tie: "earliest",
    };
    let text = def.toml(&format!("scope = \"game_id\"\n{WINDOWED}"));
    let setup = Setup::new_cluster(&broker, &cluster, &text);
    broker.create_topic(&setup.topic, 4).await;
    let start = t0() + 30 * SEC;
    let mut next_id = 0;
    let mut events = random_events(&mut g, 400, start, &mut next_id);
    for (k, e) in events.iter_mut().enumerate() {
        e["game_id"] = json!(format!("g{}", k % 5));
    }
    send_round_robin(&broker.producer(), &setup.topic, &events, 4).await;
    let clock = ManualClock::new(start);
    let shared: SharedClock = Arc::new(clock.clone());
    let app = InProcess::start(&setup, shared).await;
    let games: Vec<String> = (0..5).map(|i| format!("g{i}")).collect();
    let n = def.fields.len();
    let expected = |now: i64| -> Vec<Vec<(String, Vec<Option<i64>>)>> {
        let mut out = Vec::new();
        for w in &WINDOWS {
            for game in &games {
                let inside = events.iter().filter(|e| {
                    e["game_id"] == *game
                        && (w.bucket_end)(e["ts"].as_i64().unwrap_or_default()) > now - w.length
                });
                out.push(ranked(&def, &model(&def, inside)));
            }
        }
        out
    };
    let read_all = || async {
        let mut out = Vec::new();
        for w in &WINDOWS {
            for game in &games {
                out.push(api_rows(&app, "per_game", w.view, game, n).await?);
            }
        }
        Some(out)
    };
    let want = expected(start);
    assert!(want.iter().all(|rows| !rows.is_empty()), "{want:?}");
    wait_steady(
        Duration::from_secs(90),
        QUIET,
        "every game's windows as the model",
        || async {
            let got = read_all().await?;
            (got == want).then_some(())
        },
    )
    .await;
    // Four minutes on, no new events: the 10-minute windows lost buckets.
    clock.advance(4 * MIN);
    let later = expected(start + 4 * MIN);
    assert_ne!(later, want, "the move must evict something");
    let got = read_all().await.expect("windows answer");
    assert_eq!(got, later, "after the clock moved");
    let per_node = cluster
        .spread(&format!("{}:{{per_game:*", setup.prefix))
        .await;
    println!(
        "cluster: 400 events, 5 games x 2 composite windows as the model, before and after a 4-minute slide (keys per node {per_node:?})"
    );
    app.stop().await;
}

/// More bucket entries than one call may evict (the script's budget is
/// 20 000 a call): the trim goes on over several calls until the old bucket
/// is gone, every member of it leaves with its K:f and K:ord entries, and
/// the member of the newer bucket keeps exactly its own fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_larger_than_one_calls_budget_finishes_over_several_calls() {
    const CROWD: usize = 25_000;
    let redis = Redis::start();
    let prefix = unique("rfw");
    let board = "[[board]]\nname = \"crowd\"\nevent = \"score\"\nmember = \"user_id\"\nwindows = [\"2m/1m\"]\norder_by = [\n  { field = \"s\", score = \"points\", aggregate = \"sum\", order = \"desc\" },\n  { field = \"x\", score = \"points\", aggregate = \"max\", order = \"desc\" },\n]\n";
    let t0 = t0();
    let mut direct = Direct::new(&redis.url(), &prefix, board, t0 + 90 * SEC).await;
    let mut events: Vec<serde_json::Value> = (0..CROWD)
        .map(|i| {
            ev(
                t0,
                &format!("c{i}"),
                &format!("m{i}"),
                5,
                json!({"points": 1 + i % 7}),
            )
        })
        .collect();
    // "keep" is in both buckets: after the first leaves, only its second
    // event counts (sum 3, max 3), though its first was larger.
    events.push(ev(t0, "k1", "keep", 20, json!({"points": 50})));
    events.push(ev(t0, "k2", "keep", 70, json!({"points": 3})));
    for chunk in events.chunks(5000) {
        let (_, report) = direct.apply(chunk).await;
        assert_eq!(report.boards[0].late, 0);
    }
    let tag = rankflow::board::keys::instance_tag("crowd", None);
    let key = rankflow::board::keys::view_key(&prefix, &tag, "win:2m");
    let base = redis.conn().await;
    let mut conn = base.clone();
    let card = |key: String| {
        let mut conn = base.clone();
        async move {
            let n: i64 = redis::cmd("ZCARD")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("zcard");
            n
        }
    };
    assert_eq!(card(key.clone()).await, CROWD as i64 + 1);
    assert_eq!(card(format!("{key}:ord")).await, CROWD as i64 + 2);
    // The window (2 min) has passed the first bucket's end (+1 min): it
    // leaves; the second (ends +2 min) stays.
    direct.clock.set(t0 + 3 * MIN + 5 * SEC);
    let evicted = direct.reader().trim_window(0, &tag).await.expect("trim");
    assert_eq!(evicted, CROWD as u64 + 1, "every entry of the old bucket");
    let list = direct
        .reader()
        .top(&query("crowd", "win:2m"), 0, 10)
        .await
        .expect("top");
    assert_eq!(list.total, 1);
    let fields = serde_json::to_value(&list.entries[0].fields).expect("fields");
    assert_eq!(
        (list.entries[0].member.as_str(), fields),
        ("keep", json!({"s": 3, "x": 3}))
    );
    let f: i64 = redis::cmd("HLEN")
        .arg(format!("{key}:f"))
        .query_async(&mut conn)
        .await
        .expect("hlen");
    assert_eq!(f, 1, "only keep's K:f entry is left");
    assert_eq!(
        card(format!("{key}:ord")).await,
        1,
        "only keep's K:ord entry"
    );
    println!("evicted {evicted} entries of one bucket over several calls");
}
