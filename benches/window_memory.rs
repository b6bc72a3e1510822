//! Memory of a full sliding window, measured with Redis's MEMORY USAGE:
//! 10,000 members each active in every minute of a 3h/1m window (180
//! buckets, 1,800,000 bucket entries), against a day board holding the same
//! 10,000 members (the baseline, measured in the same run), and that day
//! board with a tie-break. Prints bytes per member and per bucket entry.
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench window_memory`).

#[path = "../tests/it/common/mod.rs"]
mod common;

use common::direct::Direct;
use common::*;

const MEMBERS: usize = 10_000;
const MINUTES: i64 = 180;

async fn memory(redis: &Redis, pattern: &str) -> (usize, i64) {
    let mut c = redis.conn().await;
    let keys = redis.keys(pattern).await;
    let mut total = 0i64;
    for k in &keys {
        let n: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut c)
            .await
            .expect("MEMORY USAGE");
        total += n.unwrap_or(0);
    }
    (keys.len(), total)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let redis = Redis::start();
    let prefix = unique("mem");
    let boards = r#"
[[board]]
name = "win"
event = "gift"
member = "sender_id"
score = "count"
windows = ["3h/1m"]

[[board]]
name = "day"
event = "gift"
member = "sender_id"
score = "count"
periods = ["day"]

[[board]]
name = "day_tb"
event = "gift"
member = "sender_id"
score = "count"
periods = ["day"]
tie_break = "earliest"
"#;
    let real_now = rankflow::clock::Clock::now_ms(&rankflow::clock::SystemClock);
    let start = (real_now / 60_000) * 60_000 - MINUTES * 60_000;
    let mut d = Direct::new(&redis.url(), &prefix, boards, start).await;
    eprintln!(
        "applying {MEMBERS} members x {MINUTES} minutes = {} events...",
        MEMBERS as i64 * MINUTES
    );
    for minute in 0..MINUTES {
        let ts = start + minute * 60_000 + 1_000;
        d.clock.set(ts);
        let batch: Vec<serde_json::Value> = (0..MEMBERS)
            .map(|m| {
                serde_json::json!({"type": "gift", "event_id": format!("{minute}-{m}"), "ts": ts,
                    "sender_id": format!("user{m:05}"), "receiver_id": "s", "gift_id": "rose",
                    "count": 1, "value": 1})
            })
            .collect();
        for chunk in batch.chunks(5_000) {
            d.apply(chunk).await;
        }
    }
    // Every bucket still in the window.
    let (win_keys, win_bytes) = memory(&redis, &format!("{prefix}:{{win}}:win:*")).await;
    let (day_keys, day_bytes) = memory(&redis, &format!("{prefix}:{{day}}:day:*")).await;
    let (_, agg_bytes) = memory(&redis, &format!("{prefix}:{{win}}:win:3h")).await;
    let (buckets, bucket_bytes) = memory(&redis, &format!("{prefix}:{{win}}:win:3h:b:*")).await;
    let entries = MEMBERS as i64 * MINUTES;
    println!("window memory (MEMORY USAGE)");
    println!(
        "  3h/1m window, {MEMBERS} members x {MINUTES} buckets: {win_bytes} bytes in {win_keys} keys"
    );
    println!(
        "    aggregate sorted set:      {agg_bytes:>10} bytes = {:>6.1} per member",
        agg_bytes as f64 / MEMBERS as f64
    );
    println!(
        "    {buckets} bucket hashes:      {bucket_bytes:>10} bytes = {:>6.1} per bucket entry",
        bucket_bytes as f64 / entries as f64
    );
    println!(
        "    whole window:              {win_bytes:>10} bytes = {:>6.1} per member, {:>5.1} per bucket entry",
        win_bytes as f64 / MEMBERS as f64,
        win_bytes as f64 / entries as f64
    );
    // The day board may span two days (UTC midnight in the last 3 hours).
    let day_per_member = day_bytes as f64 / (MEMBERS * day_keys.max(1)) as f64;
    println!(
        "  baseline, a day board holding the same members: {day_per_member:.1} bytes per member ({day_keys} key(s), {day_bytes} bytes)"
    );
    // A tie-break view is its sorted set and a `:t` hash (member → time).
    let (tb_keys, tb_bytes) = memory(&redis, &format!("{prefix}:{{day_tb}}:day:*")).await;
    let tb_days = redis
        .keys(&format!("{prefix}:{{day_tb}}:day:*"))
        .await
        .iter()
        .filter(|k| !k.ends_with(":t"))
        .count();
    println!(
        "  the same day board with tie_break = \"earliest\": {:.1} bytes per member ({tb_keys} keys for {tb_days} day(s), {tb_bytes} bytes)",
        tb_bytes as f64 / (MEMBERS * tb_days.max(1)) as f64
    );
    println!(
        "  ratio window / day board per member: {:.1}x (bounded by the bucket count, {MINUTES}, not by events)",
        win_bytes as f64 / MEMBERS as f64 / day_per_member
    );
}
