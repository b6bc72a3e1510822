//! Composite boards (docs/score-encoding.md) against the reference model of
//! `tests/it/common/composite.rs`, written from the spec, never from the code
//! under test:
//! - random composite boards (1-4 fields, random orders, aggregates and
//!   tie-breaks) fed random events with out-of-order times, in several
//!   batches, through the rules, the batch and the Lua script into a real
//!   Redis: the order, every field and each member's rank match the model;
//! - the seed 000 stage-clear board end to end through tansu, Redis and
//!   the HTTP API, and its raw `ZREVRANGE` decoded the way
//!   docs/score-encoding.md tells any client to;
//! - `rankflow check` refuses bad `order_by` definitions with located
//!   messages (exit 2) and prints each field's exact range.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::composite::*;
use common::direct::Direct;
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use rankflow::reader::ranks::RankStyle;
use serde_json::json;

const T0: i64 = 1_763_700_000_000;
/// What the random boards keep.
const ALL: &str = "periods = [\"all\"]";

/// `n` events of `members` users over `games` games (the scope of scoped
/// boards), with random field values and out-of-order times.
fn random_events(g: &mut Gen, n: usize, members: u64, games: u64) -> Vec<serde_json::Value> {
    (0..n)
        .map(|k| {
            let mut e = json!({
                "type": "score", "event_id": format!("e{k}"),
                // Out of order: up to 20 s back, often equal times.
                "ts": T0 - (g.below(20) as i64) * 1000,
                "user_id": format!("u{}", g.below(members)),
                "game_id": format!("g{}", g.below(games)), "points": 1,
            });
            random_fields(g, &mut e, &[MAX, -MAX, MAX - 1, -(MAX - 1)]);
            e
        })
        .collect()
}

/// Reference ranks in rank order, per style [ordinal, competition, dense],
/// from the model's order alone: tied = all fields equal (docs/http-api.md).
fn styled_ranks(expected: &[(String, Vec<Option<i64>>)]) -> Vec<[u64; 3]> {
    let (mut comp, mut dense) = (0, 0);
    let mut out = Vec::with_capacity(expected.len());
    for (i, (_, fields)) in expected.iter().enumerate() {
        if i == 0 || expected[i - 1].1 != *fields {
            comp = i as u64 + 1;
            dense += 1;
        }
        out.push([i as u64 + 1, comp, dense]);
    }
    out
}

const STYLES: [RankStyle; 3] = [RankStyle::Ordinal, RankStyle::Competition, RankStyle::Dense];

/// Every rank style through the read API (pages of random sizes, so ties
/// straddle page boundaries; `around`; one member; a member list with an
/// unknown and a duplicate id) against [`styled_ranks`], and the dense
/// index holding exactly one entry per distinct tuple.
async fn check_styles(
    g: &mut Gen,
    redis: &Redis,
    reader: &rankflow::reader::Reader,
    def: &BoardDef,
    expected: &[(String, Vec<Option<i64>>)],
    index_key: &str,
) {
    let want = styled_ranks(expected);
    let q = query(&def.name, "all");
    let ranks_of = |l: &[rankflow::reader::Entry]| -> Vec<(String, u64)> {
        l.iter().map(|e| (e.member.clone(), e.rank)).collect()
    };
    let reference = |from: usize, to: usize, s: usize| -> Vec<(String, u64)> {
        (from..to.min(expected.len()))
            .map(|i| (expected[i].0.clone(), want[i][s]))
            .collect()
    };
    for (s, style) in STYLES.into_iter().enumerate() {
        let mut offset = 0;
        while offset < expected.len() {
            let limit = 1 + g.below(4) as usize;
            let page = reader
                .top_ranked(&q, offset, limit, style)
                .await
                .expect("top");
            assert_eq!(
                ranks_of(&page.entries),
                reference(offset, offset + limit, s),
                "{style:?} page at {offset}+{limit} of {def:?}"
            );
            offset += limit;
        }
        for (i, (member, fields)) in expected.iter().enumerate() {
            let m = reader
                .member_ranked(&q, member, style)
                .await
                .expect("member");
            assert_eq!(m.rank, want[i][s], "{style:?} rank of {member} in {def:?}");
            let got = serde_json::to_value(&m.fields).expect("fields");
            assert_eq!(&field_values(&got, def.fields.len()), fields);
            let radius = 1 + g.below(3) as usize;
            let around = reader
                .around_ranked(&q, member, radius, style)
                .await
                .expect("around");
            let from = i.saturating_sub(radius);
            assert_eq!(
                ranks_of(&around.entries),
                reference(from, i + radius + 1, s),
                "{style:?} around {member} in {def:?}"
            );
        }
        // A friends list: some members, one twice, one unknown.
        let mut ids: Vec<String> = expected
            .iter()
            .filter(|_| g.below(2) == 0)
            .map(|(m, _)| m.clone())
            .collect();
        if let Some(first) = ids.first().cloned() {
            ids.push(first);
        }
        ids.insert(0, "nobody".to_string());
        let list = reader.members(&q, &ids, style).await.expect("members");
        let listed: Vec<(String, u64)> = expected
            .iter()
            .enumerate()
            .filter(|(_, (m, _))| ids.contains(m))
            .map(|(i, (m, _))| (m.clone(), want[i][s]))
            .collect();
        assert_eq!(ranks_of(&list.entries), listed, "{style:?} list in {def:?}");
        assert_eq!(list.missing, ["nobody"], "{def:?}");
        for e in &list.entries {
            let got = serde_json::to_value(&e.fields).expect("fields");
            let i = expected
                .iter()
                .position(|(m, _)| *m == e.member)
                .expect("listed");
            assert_eq!(field_values(&got, def.fields.len()), expected[i].1);
        }
    }
    let distinct = want.last().map_or(0, |r| r[2]);
    let held = redis.zset(index_key).await.len() as u64;
    assert_eq!(
        held, distinct,
        "{index_key}: one entry per distinct tuple of {def:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_composite_boards_in_redis_rank_as_the_reference_model() {
    let redis = Redis::start();
    let mut total_members = 0;
    let mut checked_boards = 0;
    for round in 0..6u64 {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15 ^ (round + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let defs: Vec<BoardDef> = (0..6)
            .map(|b| BoardDef::random(&mut g, format!("c{b}")))
            .collect();
        let text: String = defs.iter().map(|d| d.toml(ALL)).collect();
        let prefix = unique("rf");
        let mut direct = Direct::new(&redis.url(), &prefix, &text, T0 + 60_000).await;
        let events = random_events(&mut g, 120, 12, 1);
        // Three batches: pre-aggregation in Rust, then combining in Lua;
        // rank styles and the dense index are checked after each, so that
        // tuples left behind by every member must leave the index.
        for (b, chunk) in events.chunks(40).enumerate() {
            let (_, report) = direct.apply(chunk).await;
            for (i, c) in report.boards.iter().enumerate() {
                assert_eq!(c.overflow, 0, "board {i}: no sum can overflow here");
            }
            let reader = direct.reader();
            let so_far = &events[..(b + 1) * 40];
            for def in &defs {
                let expected = ranked(def, &model(def, so_far));
                let index = format!("{prefix}:{{{}}}:all:v", def.name);
                check_styles(&mut g, &redis, &reader, def, &expected, &index).await;
            }
        }
        // A redelivery of the last batch is fenced off: nothing counts twice
        // (the checks below would see doubled sums).
        let again = direct.redeliver_last().await;
        assert!(again.conflicts > 0, "the fences caught the redelivery");
        let reader = direct.reader();
        for def in &defs {
            let expected = ranked(def, &model(def, &events));
            // Each listed member's own rank is checked too, found without
            // scanning (K:f lookup).
            let (entries, got) = read_view(&reader, def, "all").await;
            assert_eq!(got, expected, "round {round}, {def:?}");
            for (e, (_, want)) in entries.iter().zip(&expected) {
                // "score" is the first field; a board without it lists last.
                match want[0] {
                    Some(v) => assert_eq!(e.score, v as f64, "{def:?}"),
                    None => assert!(e.score.is_infinite(), "{def:?}"),
                }
            }
            total_members += expected.len();
            checked_boards += 1;
        }
    }
    println!(
        "checked {checked_boards} random composite boards ({total_members} members) against the model"
    );
}

/// A scoped random composite board on a 3-primary Redis Cluster through
/// tansu: each game's instance (its own hash slot, with its `K:f` in the
/// same slot) ranks as the model of that game's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_composite_boards_rank_as_the_model_on_a_cluster() {
    let broker = Broker::start();
    let cluster = RedisCluster::start();
    let mut g = Gen(0x00C0_FFEE_1234_5678);
    let mut def = BoardDef::random(&mut g, "per_game".into());
    def.fields = vec![
        FieldDef {
            rule: Rule::Sum,
            desc: true,
        },
        FieldDef {
            rule: Rule::Min,
            desc: false,
        },
        FieldDef {
            rule: Rule::Last,
            desc: true,
        },
    ];
    def.tie = "earliest";
    let text = def.toml(&format!("scope = \"game_id\"\n{ALL}"));
    let setup = Setup::new_cluster(&broker, &cluster, &text);
    broker.create_topic(&setup.topic, 4).await;
    let events = random_events(&mut g, 600, 20, 6);
    send_round_robin(&broker.producer(), &setup.topic, &events, 4).await;
    let shared: SharedClock = Arc::new(ManualClock::new(T0 + 60_000));
    let app = InProcess::start(&setup, shared).await;
    let games: Vec<String> = (0..6).map(|i| format!("g{i}")).collect();
    let expected: Vec<_> = games
        .iter()
        .map(|game| {
            let mine: Vec<_> = events
                .iter()
                .filter(|e| e["game_id"] == *game)
                .cloned()
                .collect();
            ranked(&def, &model(&def, &mine))
        })
        .collect();
    let n = def.fields.len();
    wait_steady(
        Duration::from_secs(90),
        QUIET,
        "every game's board as the model",
        || async {
            for (game, want) in games.iter().zip(&expected) {
                let got = api_rows(&app, "per_game", "all", game, n).await?;
                if got != *want {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let mut slots: Vec<u16> = games
        .iter()
        .map(|g| {
            rankflow::board::keys::hash_slot(&rankflow::board::keys::instance_tag(
                "per_game",
                Some(g),
            ))
        })
        .collect();
    slots.sort_unstable();
    slots.dedup();
    // The instances (each with its K:f beside it) really are spread.
    let per_node = cluster
        .spread(&format!("{}:{{per_game:*", setup.prefix))
        .await;
    assert_eq!(
        per_node.iter().sum::<usize>(),
        24,
        "K, K:f, the dense index K:v and the fence hash of 6 instances"
    );
    println!(
        "cluster: 600 events, 6 scoped composite instances in {} slots (keys per node {per_node:?}), each as the model",
        slots.len()
    );
    app.stop().await;
}

/// A sum just past 2^53 is refused and counted, never rounded onto 2^53:
/// within one batch (pre-aggregated in Rust) and across batches (in Lua).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sum_past_two_to_the_53_is_an_overflow_not_a_rounding() {
    let redis = Redis::start();
    let board = "[[board]]\nname = \"big\"\nevent = \"score\"\nmember = \"user_id\"\nperiods = [\"all\"]\norder_by = [ { field = \"total\", score = \"s0\" }, { field = \"n\", score = \"1\" } ]\n";
    let mut direct = Direct::new(&redis.url(), &unique("rf"), board, T0 + 60_000).await;
    let ev = |k: usize, user: &str, v: i64| {
        json!({"type": "score", "event_id": format!("b{k}"), "ts": T0 - k as i64,
               "user_id": user, "game_id": "g", "points": 0, "s0": v})
    };
    // One batch: MAX + 1 in total for a.
    let (_, report) = direct.apply(&[ev(0, "a", MAX), ev(1, "a", 1)]).await;
    assert_eq!(report.boards[0].overflow, 1, "{report:?}");
    // Two batches: b reaches MAX, then one more is refused.
    let (_, report) = direct.apply(&[ev(2, "b", MAX)]).await;
    assert_eq!(report.boards[0].overflow, 0);
    let (_, report) = direct.apply(&[ev(3, "b", 1)]).await;
    assert_eq!(report.boards[0].overflow, 1, "{report:?}");
    let list = direct
        .reader()
        .top(&query("big", "all"), 0, 10)
        .await
        .expect("top");
    let rows: Vec<(String, f64, serde_json::Value)> = list
        .entries
        .iter()
        .map(|e| {
            (
                e.member.clone(),
                e.score,
                serde_json::to_value(&e.fields).expect("fields"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("b".to_string(), MAX as f64, json!({"total": MAX, "n": 1}))],
        "a was refused whole; b kept 2^53 and its count"
    );
}

// ------------------------------------------------------------ seed 000

const STAGES: &str = r#"
[[board]]
name = "stage_clears"
event = "score"
member = "user_id"
periods = ["day", "all"]
order_by = [
  { field = "levels",      score = "cleared ? 1 : 0", filter = "has(cleared)", aggregate = "sum", order = "desc" },
  { field = "revives",     score = "revives", filter = "has(revives)", aggregate = "sum", order = "asc" },
  { field = "first_clear", score = "ts", filter = "has(cleared) && cleared", aggregate = "min", order = "asc" },
]
"#;

/// (levels, revives, first_clear), `None` for a field without a value.
type Stage = (Option<i64>, Option<i64>, Option<i64>);

/// Decodes a raw stage-clear entry as docs/score-encoding.md tells any
/// client to: score = levels; then two 15-hex codes; the first field is
/// `desc`, so the listing is descending and `asc` fields are complemented.
fn decode_raw(member: &str, score: &str) -> (String, Option<i64>, Option<i64>, Option<i64>) {
    let code = |hex: &str| -> Option<i64> {
        if hex == "000000000000000" {
            return None; // no value: the code listed last
        }
        // asc field in a desc listing: complemented digits.
        let plain = 0xfff_ffff_ffff_ffff_i64 - i64::from_str_radix(hex, 16).ok()?;
        let (sign, rest) = (plain >> 56, plain & ((1 << 56) - 1));
        Some(if sign == 1 { rest - MAX } else { rest })
    };
    let levels = score
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite())
        .map(|s| s as i64);
    (
        member[30..].to_string(),
        levels,
        code(&member[..15]),
        code(&member[15..30]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stage_clear_board_ranks_end_to_end_through_kafka() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, STAGES);
    broker.create_topic(&setup.topic, 2).await;
    // Noon of the real day: Redis expires day keys by the real clock.
    let real_now = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    let now = (real_now / 86_400_000) * 86_400_000 + 12 * 3_600_000;
    // (user, cleared, revives, seconds before now): deliberately out of order.
    let plays: &[(&str, Option<bool>, Option<i64>, i64)] = &[
        ("ann", Some(true), Some(2), 300),
        ("bob", Some(true), Some(0), 100),
        ("ann", Some(true), Some(1), 900), // earlier clear, sent later
        ("cid", Some(false), Some(5), 50),
        ("bob", Some(true), Some(3), 1000), // bob's first clear
        ("dee", Some(true), Some(3), 400),
        ("dee", Some(true), None, 800),
        ("eve", None, Some(1), 10), // revives only: no levels, no clear
        ("cid", Some(true), Some(0), 20),
        ("fay", Some(true), Some(3), 400), // ties dee but for first_clear
    ];
    let events: Vec<serde_json::Value> = plays
        .iter()
        .enumerate()
        .map(|(i, (u, cleared, revives, ago))| {
            let mut e = json!({"type": "score", "event_id": format!("p{i}"), "ts": now - ago * 1000,
                               "user_id": u, "game_id": "g1", "points": 0});
            if let Some(c) = cleared {
                e["cleared"] = json!(c);
            }
            if let Some(r) = revives {
                e["revives"] = json!(r);
            }
            e
        })
        .collect();
    // The model: levels = clears, revives = sum, first_clear = earliest clear.
    let mut want: BTreeMap<&str, Stage> = BTreeMap::new();
    for (u, cleared, revives, ago) in plays {
        let w = want.entry(u).or_default();
        if let Some(c) = cleared {
            w.0 = Some(w.0.unwrap_or(0) + i64::from(*c));
            if *c {
                let t = now - ago * 1000;
                w.2 = Some(w.2.map_or(t, |x: i64| x.min(t)));
            }
        }
        if let Some(r) = revives {
            w.1 = Some(w.1.unwrap_or(0) + r);
        }
    }
    // Ranked by hand: bob, ann and dee tie on 2 levels and 3 revives, and
    // cleared first in that order; fay beats cid on revives; eve never cleared.
    let order = ["bob", "ann", "dee", "fay", "cid", "eve"];
    let mut by_model: Vec<&str> = want.keys().copied().collect();
    by_model.sort_by_key(|m| {
        let w = want[m];
        // (levels desc, missing last), (revives asc), (first_clear asc, missing last)
        (
            w.0.map_or((1, 0), |v| (0, -v)),
            w.1.map_or((1, 0), |v| (0, v)),
            w.2.map_or((1, 0), |v| (0, v)),
        )
    });
    assert_eq!(by_model, order, "the hand ranking agrees with the model");
    send_round_robin(&broker.producer(), &setup.topic, &events, 2).await;
    let shared: SharedClock = Arc::new(ManualClock::new(now));
    let app = InProcess::start(&setup, shared).await;
    let metrics = app.url("/metrics");
    wait_steady(
        Duration::from_secs(60),
        QUIET,
        "every play applied",
        || async {
            let n = events_counted(&metrics, &setup.topic, "applied").await;
            (n == events.len() as f64).then_some(n)
        },
    )
    .await;

    for view in ["all", "day"] {
        let (status, body) =
            get_json(&app.url(&format!("/v1/boards/stage_clears/{view}/top"))).await;
        assert_eq!(status, 200, "{body}");
        let entries = body["entries"].as_array().expect("entries");
        let members: Vec<&str> = entries
            .iter()
            .filter_map(|e| e["member"].as_str())
            .collect();
        assert_eq!(members, order, "{view}: {body}");
        for (i, e) in entries.iter().enumerate() {
            let w = want[order[i]];
            assert_eq!(e["rank"], i + 1);
            assert_eq!(e["score"].as_i64(), w.0, "{e}");
            assert_eq!(e["fields"]["levels"].as_i64(), w.0, "{e}");
            assert_eq!(e["fields"]["revives"].as_i64(), w.1, "{e}");
            assert_eq!(e["fields"]["first_clear"].as_i64(), w.2, "{e}");
        }
    }
    // eve never cleared: her levels and first clear are null, score null.
    let (status, eve) = get_json(&app.url("/v1/boards/stage_clears/all/members/eve")).await;
    assert_eq!(status, 200, "{eve}");
    assert_eq!(eve["rank"], 6);
    assert!(
        eve["score"].is_null() && eve["fields"]["levels"].is_null(),
        "{eve}"
    );
    assert_eq!(eve["fields"]["revives"], 1);
    let (status, around) =
        get_json(&app.url("/v1/boards/stage_clears/all/around/dee?radius=1")).await;
    assert_eq!(status, 200, "{around}");
    let near: Vec<&str> = around["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["member"].as_str())
        .collect();
    assert_eq!(near, ["ann", "dee", "fay"]);
    // Rank styles and lists of members on the composite board: no two
    // players tie on all three fields, so every style ranks 1..6.
    let (status, body) = get_json(&app.url("/v1/boards/stage_clears/all/top?rank=dense")).await;
    assert_eq!(status, 200, "{body}");
    let ranks: Vec<u64> = body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["rank"].as_u64())
        .collect();
    assert_eq!(ranks, [1, 2, 3, 4, 5, 6], "{body}");
    let (status, body) = get_json(
        &app.url("/v1/boards/stage_clears/all/members?ids=eve,dee,zed,dee&rank=competition"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<(&str, u64)> = body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| Some((e["member"].as_str()?, e["rank"].as_u64()?)))
        .collect();
    assert_eq!(listed, [("dee", 3), ("eve", 6)], "{body}");
    assert_eq!(body["missing"], json!(["zed"]), "{body}");
    assert_eq!(body["entries"][0]["fields"]["revives"], 3, "{body}");

    // Any client: ZREVRANGE lists rank order; the fields decode by hand.
    let raw = redis.cli(&[
        "ZREVRANGE",
        &setup.key("stage_clears", "all"),
        "0",
        "-1",
        "WITHSCORES",
    ]);
    let lines: Vec<&str> = raw.lines().collect();
    let decoded: Vec<_> = lines.chunks(2).map(|p| decode_raw(p[0], p[1])).collect();
    let expected: Vec<_> = order
        .iter()
        .map(|m| {
            let w = want[m];
            (m.to_string(), w.0, w.1, w.2)
        })
        .collect();
    assert_eq!(decoded, expected, "{raw}");
    println!(
        "stage_clears: {} plays, order {order:?}, raw listing decoded by hand",
        events.len()
    );
    app.stop().await;
}

// ------------------------------------------------------------ check

#[test]
fn check_prints_field_ranges_and_refuses_bad_definitions_where_they_are() {
    let (code, out) = check_config(STAGES);
    assert_eq!(code, Some(0), "{out}");
    for field in [
        "levels (sum desc)",
        "revives (sum asc)",
        "first_clear (min asc)",
    ] {
        assert!(
            out.contains(&format!("{field}: integers exact in [-2^53, 2^53]")),
            "{field}: {out}"
        );
    }
    for (from, to, says) in [
        (
            "order = \"desc\" }",
            "order = \"desc\", weight = 1 }",
            "field `order_by`[0].weight: unknown key",
        ),
        (
            "\"revives\",     score",
            "\"levels\",     score",
            "field `order_by`[1].field",
        ),
        (
            "periods = [\"day\", \"all\"]",
            "periods = [\"day\"]\nscore = \"points\"",
            "field `score`: is given as well as `order_by`",
        ),
        (
            "periods = [\"day\", \"all\"]",
            "periods = [\"day\"]\naggregate = \"max\"",
            "field `aggregate`: is set per field",
        ),
        (
            "\n]",
            "\n  { field = \"d\", score = \"1\" },\n  { field = \"e\", score = \"1\" },\n]",
            "field `order_by`: has 5 fields",
        ),
        (
            "score = \"revives\"",
            "score = \"0.5\"",
            "field `order_by`[1].score: always gives 0.5, which a composite field cannot hold",
        ),
        (
            "score = \"revives\"",
            "score = \"9007199254740993\"",
            "field `order_by`[1].score: always fails",
        ),
    ] {
        let text = STAGES.replacen(from, to, 1);
        assert_ne!(text, STAGES, "{from}");
        let (code, out) = check_config(&text);
        assert_eq!(code, Some(2), "{to}: {out}");
        assert!(
            out.contains("board `stage_clears` (#1)") && out.contains(says),
            "{to}: {out}"
        );
    }
    println!("check: ranges printed; 7 bad definitions refused with exit 2 and their location");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_board_without_a_dense_index_refuses_dense_ranks_only() {
    let redis = Redis::start();
    let boards = r#"
[[board]]
name = "noidx"
event = "score"
member = "user_id"
periods = ["all"]
dense_ranks = false
order_by = [
  { field = "a", score = "s0", filter = "has(s0)", aggregate = "max", order = "desc" },
  { field = "b", score = "s1", filter = "has(s1)", aggregate = "sum", order = "asc" },
]
"#;
    let prefix = unique("rf");
    let mut direct = Direct::new(&redis.url(), &prefix, boards, T0 + 60_000).await;
    // (user, a, b): u1 and u2 tie on both fields, u3 shares only a.
    let plays = [("u1", 5, 1), ("u2", 5, 1), ("u3", 5, 2), ("u4", 7, 9)];
    let events: Vec<serde_json::Value> = plays
        .iter()
        .enumerate()
        .map(|(i, (u, a, b))| {
            json!({"type": "score", "event_id": format!("n{i}"), "ts": T0, "user_id": u,
                   "game_id": "g", "points": 1, "s0": a, "s1": b})
        })
        .collect();
    direct.apply(&events).await;
    assert!(
        redis.keys(&format!("{prefix}:*:v")).await.is_empty(),
        "no index kept"
    );
    let reader = direct.reader();
    let q = query("noidx", "all");
    let page = reader
        .top_ranked(&q, 0, 10, RankStyle::Competition)
        .await
        .expect("competition");
    let ranks: Vec<(String, u64)> = page
        .entries
        .iter()
        .map(|e| (e.member.clone(), e.rank))
        .collect();
    // By hand: u4 (7), then a = 5 with b ascending: u2/u1 (b 1, tied; member
    // bytes descending), u3 (b 2).
    let want = [("u4", 1), ("u2", 2), ("u1", 2), ("u3", 4)];
    let want: Vec<(String, u64)> = want.iter().map(|(m, r)| (m.to_string(), *r)).collect();
    assert_eq!(ranks, want);
    let err = reader
        .top_ranked(&q, 0, 10, RankStyle::Dense)
        .await
        .expect_err("dense needs the index");
    match err {
        rankflow::reader::ReadError::BadRequest(p) => {
            assert_eq!(p.param, "rank");
            assert!(p.message.contains("dense_ranks"), "{}", p.message);
        }
        other => panic!("not a 400 naming rank: {other}"),
    }
}
