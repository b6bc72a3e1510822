//! How a composite board (docs/score-encoding.md) shows itself outside the data path:
//! `GET /v1/boards` lists its fields, `rankflow top` prints every field (a
//! missing one as `-`, never the infinity that encodes "ranks last"), and
//! `rankflow check` prints each field's rule and warns when a field reads an
//! attribute its event schema does not declare. Expected text is written by
//! hand here.

use crate::common;

use std::sync::{Arc, OnceLock};

use common::direct::Direct;
use common::*;
use serde_json::json;

const T0: i64 = 1_763_700_000_000;

const BOARD: &str = r#"
[[board]]
name = "stages"
event = "score"
member = "user_id"
periods = ["all"]
order_by = [
  { field = "levels",  score = "lv", filter = "has(lv)", aggregate = "sum", order = "desc" },
  { field = "revives", score = "rv", filter = "has(rv)", aggregate = "min", order = "asc" },
]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boards_listing_and_top_show_every_field() {
    let redis = Redis::start();
    let prefix = unique("surface");
    let mut direct = Direct::new(&redis.url(), &prefix, BOARD, T0 + 60_000).await;
    let ev = |k: usize, user: &str, lv: Option<i64>, rv: Option<i64>| {
        let mut e = json!({"type": "score", "event_id": format!("e{k}"), "ts": T0 - k as i64,
                           "user_id": user, "game_id": "g", "points": 0});
        if let Some(lv) = lv {
            e["lv"] = json!(lv);
        }
        if let Some(rv) = rv {
            e["rv"] = json!(rv);
        }
        e
    };
    direct
        .apply(&[
            ev(0, "ann", Some(3), Some(2)),
            ev(1, "bob", Some(3), None),
            ev(2, "cy", None, Some(0)),
        ])
        .await;

    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(direct.reader());
    let base = direct.serve(slot).await;
    let boards: serde_json::Value = reqwest::get(format!("{base}/v1/boards"))
        .await
        .expect("GET /v1/boards")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        boards["boards"][0]["order_by"],
        json!([
            {"field": "levels", "aggregate": "sum", "order": "desc"},
            {"field": "revives", "aggregate": "min", "order": "asc"},
        ]),
        "{boards}"
    );

    let out = CliConfig::new(BOARD, &redis.url(), &prefix).run("top stages all", &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let rows: Vec<Vec<String>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    // levels desc, then revives asc, a missing field after every value:
    // ann (3, 2) before bob (3, -); cy has no levels at all.
    let expected: Vec<Vec<&str>> = vec![
        vec!["rank", "member", "levels", "revives"],
        vec!["1", "ann", "3", "2"],
        vec!["2", "bob", "3", "-"],
        vec!["3", "cy", "-", "0"],
    ];
    assert_eq!(
        rows,
        expected,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_describes_fields_and_warns_about_undeclared_attributes() {
    let board = BOARD.replace("score = \"rv\"", "score = \"revive_count\"");
    let out = check_config_output(&board);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("field      levels = lv if has(lv) (Sum, Desc)"),
        "{text}"
    );
    assert!(
        text.contains(
            "warning: field revives reads `revive_count`, which the score schema does not declare"
        ),
        "{text}"
    );
}
