//! What `rank=dense` costs a reader without the dense-rank index, against
//! the same read with it: the read half of deciding `dense_ranks`'s
//! default (the write half is the pipeline benchmark's `plain` against
//! `plain-dense`).
//!
//! Two plain sum boards, `walk` (`dense_ranks = false`) and `indexed`
//! (`dense_ranks = true`), each with one `all` view, are written through
//! the real apply script (`Direct`, no Kafka) with `BENCH_DENSE_VALUES`
//! members (default 200,000), member `u<i>` holding `i` points, so every
//! value is distinct and the member `d` places below the top has dense
//! rank `d + 1` (the reference the answers are checked against). Then, per
//! depth, `GET /v1/boards/<board>/all/members/<member>?rank=dense` through
//! rankflow's HTTP router (in-process, real Redis), `BENCH_DENSE_READS`
//! times (default 20; fewer for the deepest walks): Redis CPU-µs per read
//! (`INFO cpu`), the median latency, and the walk's cost per distinct value.
//!
//! Run with `cargo bench --bench dense` (redis-server on the path).

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::direct::ServedApi;
use support::{env_u64, redis_usage};

const BOARDS: &str = r#"
[[board]]
name = "walk"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
dense_ranks = false

[[board]]
name = "indexed"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
dense_ranks = true
"#;

/// Writes `values` members through the apply script, 10,000 per batch.
async fn load(api: &mut ServedApi, values: u64) {
    let now = api.direct.now();
    let mut i = 1;
    while i <= values {
        let end = (i + 10_000).min(values + 1);
        let batch: Vec<serde_json::Value> = (i..end)
            .map(|n| {
                serde_json::json!({
                    "event_id": format!("e{n}"), "type": "score", "ts": now,
                    "user_id": format!("u{n}"), "game_id": "g", "points": n,
                })
            })
            .collect();
        api.direct.apply(&batch).await;
        i = end;
    }
}

/// One read's dense rank and latency.
async fn read(client: &reqwest::Client, url: &str) -> (u64, Duration) {
    let started = Instant::now();
    let resp = client.get(url).send().await.expect("GET the member");
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.expect("a JSON body");
    let took = started.elapsed();
    assert!(status.is_success(), "{url}: {status} {body}");
    (body["rank"].as_u64().expect("a rank"), took)
}

/// Redis CPU-µs per read and the median latency (ms) of `reads` reads of
/// the member `depth` places below the top of `board`; checks each rank.
async fn measure(api: &ServedApi, board: &str, values: u64, depth: u64, reads: u64) -> (f64, f64) {
    let client = reqwest::Client::new();
    let url = api.url(&format!(
        "/v1/boards/{board}/all/members/u{}?rank=dense",
        values - depth
    ));
    let before = redis_usage(&api.redis).await.0;
    let mut took = Vec::new();
    for _ in 0..reads {
        let (rank, t) = read(&client, &url).await;
        assert_eq!(rank, depth + 1, "{url}: dense rank against the reference");
        took.push(t);
    }
    let cpu = redis_usage(&api.redis).await.0 - before;
    took.sort_unstable();
    let median = took[took.len() / 2].as_secs_f64() * 1e3;
    (1e6 * cpu / reads as f64, median)
}

#[tokio::main]
async fn main() {
    let values = env_u64("BENCH_DENSE_VALUES", 200_000).max(2);
    let reads = env_u64("BENCH_DENSE_READS", 20).max(1);
    let now = chrono::Utc::now().timestamp_millis();
    let mut api = ServedApi::start("dense", BOARDS, now).await;
    eprintln!("writing {values} distinct values into both boards...");
    load(&mut api, values).await;
    let mut depths: Vec<u64> = [0, 100, 1_000, 10_000, 100_000]
        .into_iter()
        .filter(|&d| d < values)
        .collect();
    depths.push(values - 1);
    depths.dedup();
    println!(
        "\ndense reads of one member, {values} distinct values (Redis CPU per read, INFO cpu)"
    );
    println!(
        "  {:>9} {:>14} {:>12} {:>14} {:>12} {:>16}",
        "depth", "walk µs/read", "walk p50 ms", "index µs/read", "index p50 ms", "walk µs/value"
    );
    for depth in depths {
        // The deepest walks take long: a few reads are enough for them.
        let n = if depth >= 10_000 { reads.min(5) } else { reads };
        let (walk, walk_ms) = measure(&api, "walk", values, depth, n).await;
        let (index, index_ms) = measure(&api, "indexed", values, depth, reads).await;
        let per_value = if depth > 0 {
            format!("{:.2}", (walk - index).max(0.0) / depth as f64)
        } else {
            "-".to_string()
        };
        println!(
            "  {depth:>9} {walk:>14.1} {walk_ms:>12.2} {index:>14.1} {index_ms:>12.2} {per_value:>16}"
        );
    }
    let mem = |key: &str| api.redis.cli(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
    let prefix = &api.prefix;
    println!(
        "  memory: the view {} bytes, its index {} bytes (MEMORY USAGE)",
        mem(&format!("{prefix}:{{indexed}}:all")).trim(),
        mem(&format!("{prefix}:{{indexed}}:all:v")).trim()
    );
}
