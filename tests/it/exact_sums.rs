//! Sums on plain, tie-break and window boards stay exact over ±2^53 or are
//! refused as overflow (docs/guarantees.md): a total just past 2^53 is never rounded
//! back onto 2^53, whether the two halves meet in one batch (pre-aggregated
//! in Rust) or in two (added in the Lua script). The expected boards are
//! written by hand below.

use crate::common;

use common::direct::Direct;
use common::*;
use serde_json::json;

const MAX: i64 = 1 << 53;
const T0: i64 = 1_763_700_000_000;

const BOARDS: &str = r#"
[[board]]
name = "plain"
event = "score"
member = "user_id"
score = "s0"
periods = ["all"]

[[board]]
name = "tied"
event = "score"
member = "user_id"
score = "s0"
tie_break = "earliest"
periods = ["all"]

[[board]]
name = "windowed"
event = "score"
member = "user_id"
score = "s0"
windows = ["1h/1m"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sum_past_two_to_the_53_is_an_overflow_on_every_board_kind() {
    let redis = Redis::start();
    let mut direct = Direct::new(&redis.url(), &unique("rf"), BOARDS, T0 + 60_000).await;
    let ev = |k: usize, user: &str, v: i64| {
        json!({"type": "score", "event_id": format!("e{k}"), "ts": T0 - 1 - k as i64,
               "user_id": user, "game_id": "g", "points": 0, "s0": v})
    };
    // Every event falls in one minute bucket, so the window sums as a period.
    // One batch: MAX + 1 in total for a (combined before the script).
    let (_, report) = direct.apply(&[ev(0, "a", MAX), ev(1, "a", 1)]).await;
    let overflow: Vec<u64> = report.boards.iter().map(|b| b.overflow).collect();
    assert_eq!(overflow, [1, 1, 1], "one batch: {report:?}");
    // Two batches: b reaches MAX, then one more is refused by the script.
    let (_, report) = direct.apply(&[ev(2, "b", MAX), ev(3, "c", -MAX)]).await;
    let overflow: Vec<u64> = report.boards.iter().map(|b| b.overflow).collect();
    assert_eq!(overflow, [0, 0, 0], "{report:?}");
    let (_, report) = direct.apply(&[ev(4, "b", 1), ev(5, "c", -1)]).await;
    let overflow: Vec<u64> = report.boards.iter().map(|b| b.overflow).collect();
    assert_eq!(overflow, [2, 2, 2], "two batches: {report:?}");

    let expected = [
        ("b".to_string(), MAX as f64),
        ("c".to_string(), -MAX as f64),
    ];
    for (board, view) in [("plain", "all"), ("tied", "all"), ("windowed", "win:1h")] {
        let list = direct
            .reader()
            .top(&query(board, view), 0, 10)
            .await
            .expect("top");
        let rows: Vec<(String, f64)> = list
            .entries
            .iter()
            .map(|e| (e.member.clone(), e.score))
            .collect();
        assert_eq!(
            rows, expected,
            "{board}: a refused whole, b and c kept ±2^53"
        );
    }
}
