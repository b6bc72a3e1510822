//! The fan-out of live views is bounded by the server, not by its clients
//! (docs/http-api.md, "Live views" and "Errors and limits"; issue 28 point
//! 4), against a real redis-server:
//!
//! - streams of one board view that differ in `limit`, `offset` or `rank`
//!   share one poller and its one Redis read per tick: 60 distinct limits
//!   cost the Redis calls of one stream (`INFO commandstats`), and every
//!   stream's first event is exactly what `top` answers for its query
//!   (offsets inside ties, competition and dense ranks included);
//! - a union of scopes listed in another order is the same view: one poller,
//!   each stream still showing its own `"scopes"`;
//! - through `rankflow run` and its configuration (`[http] max_pollers`,
//!   `max_read_entries` set by environment): one distinct view more than
//!   `max_pollers` is a JSON 503 with `Retry-After`; a union or a dense
//!   walk that would read more than `max_read_entries` entries is a JSON 400
//!   naming its parameter and the setting, a stream's dense page too
//!   (where the read it shares walks); and a stream whose page
//!   would make its view's shared read cover more ranks than that is a 503
//!   (a 400 naming `limit` when its page alone is too long).
//!
//! Boards are written with plain Redis commands on the documented layout
//! (docs/redis-layout.md); expected answers are the `top` endpoint's own.

use crate::common;

use std::time::{Duration, Instant};

use common::direct::ServedApi;
use common::sse::Stream;
use common::*;
use serde_json::Value;

/// 2026-11-21T12:00:00Z.
const NOW: i64 = 1_795_262_400_000;

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]

[[board]]
name = "fans"
event = "score"
member = "user_id"
score = "points"
scope = "game_id"
periods = ["all"]
"#;

/// Members on `points`: 210, in tied groups of three (scores 1000, 1000,
/// 1000, 990, ...), so pages start inside ties.
const MEMBERS: usize = 210;

/// The read API over its own redis-server and key prefix, no Kafka.
struct Api(ServedApi);

impl std::ops::Deref for Api {
    type Target = ServedApi;
    fn deref(&self) -> &ServedApi {
        &self.0
    }
}

impl Api {
    async fn start() -> Api {
        Api(ServedApi::start("fan", BOARDS, NOW).await)
    }

    async fn zadd(&self, tag: &str, entries: &[(f64, String)]) {
        let mut c = self.redis.conn().await;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(format!("{}:{{{tag}}}:all", self.prefix));
        for (score, member) in entries {
            zadd.arg(*score).arg(member);
        }
        let _: u64 = zadd.query_async(&mut c).await.expect("ZADD");
    }

    /// Opens the stream of `path?query` and checks that its first event is
    /// what `top` answers for the same query.
    async fn open_as_top(&self, path: &str, query: &str) -> Stream {
        let mut s = Stream::open(&self.url(&format!("{path}/top/stream?{query}")), None).await;
        let first = s.event(Duration::from_secs(10), query).await;
        let (status, top) = get_json(&self.url(&format!("{path}/top?{query}"))).await;
        assert_eq!(status, 200, "{query}: {top}");
        assert_eq!(first.data, top, "{query}: the stream's list is not top's");
        s
    }
}

/// Redis commands served in `window` (what `INFO commandstats` counts,
/// commands run by scripts included, `INFO` itself aside).
async fn calls_in(redis: &Redis, window: Duration, command: Option<&str>) -> u64 {
    let count = |stats: std::collections::BTreeMap<String, u64>| -> u64 {
        stats
            .into_iter()
            .filter(|(c, _)| c != "info" && command.is_none_or(|want| c == want))
            .map(|(_, n)| n)
            .sum()
    };
    let before = count(redis.commandstats());
    tokio::time::sleep(window).await;
    count(redis.commandstats()) - before
}

fn per_second(calls: u64, window: Duration) -> f64 {
    calls as f64 / window.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_distinct_limits_cost_the_redis_calls_of_one_stream() {
    let api = Api::start().await;
    let entries: Vec<(f64, String)> = (0..MEMBERS)
        .map(|i| (1000.0 - (i / 3) as f64 * 10.0, format!("p{i:03}")))
        .collect();
    api.zadd("points", &entries).await;
    let view = "/v1/boards/points/all";
    let window = Duration::from_secs(3);

    let mut streams = vec![api.open_as_top(view, "limit=10").await];
    tokio::time::sleep(Duration::from_millis(500)).await;
    let one = calls_in(&api.redis, window, None).await;

    let opening = Instant::now();
    for limit in (1..=60).filter(|l| *l != 10) {
        streams.push(api.open_as_top(view, &format!("limit={limit}")).await);
    }
    println!("opened 59 more streams in {:?}", opening.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sixty = calls_in(&api.redis, window, None).await;
    println!(
        "Redis calls/s: 1 stream {:.1}, 60 streams of distinct limits {:.1}",
        per_second(one, window),
        per_second(sixty, window)
    );
    assert!(one >= 6, "one stream made only {one} calls in {window:?}");
    assert!(
        sixty <= 2 * one,
        "60 streams of one view made {sixty} Redis calls in {window:?}, one stream {one}"
    );

    // Offsets (inside ties) and rank styles share the same read: each
    // still gets exactly its own `top`.
    for query in [
        "offset=4&limit=6&rank=competition",
        "offset=4&limit=6&rank=dense",
        "offset=7&limit=3&rank=dense",
        "offset=100&limit=20",
        "offset=101&limit=10&rank=competition",
        "offset=150&limit=60&rank=dense",
        "offset=205&limit=10&rank=competition",
        "offset=5000&limit=10",
        "limit=0",
    ] {
        streams.push(api.open_as_top(view, query).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mixed = calls_in(&api.redis, window, None).await;
    println!(
        "Redis calls/s: 69 streams of distinct limits, offsets and rank styles {:.1}",
        per_second(mixed, window)
    );
    assert!(
        mixed <= 5 * one,
        "69 streams of one view made {mixed} Redis calls in {window:?}, one stream {one}"
    );

    // A change reaches every window it touches, each as its own `top`.
    api.zadd("points", &[(5000.0, "p209".to_string())]).await;
    for (i, query) in [(0, "limit=10"), (61, "offset=4&limit=6&rank=dense")] {
        let (_, top) = get_json(&api.url(&format!("{view}/top?{query}"))).await;
        assert_eq!(top["entries"][0]["member"] == "p209", i == 0, "{top}");
        streams[i]
            .event_until(Duration::from_secs(10), query, |e| e.data == top)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_union_of_scopes_in_another_order_is_the_same_poller() {
    let api = Api::start().await;
    for (scope, base) in [("a", 100.0), ("b", 50.0)] {
        let entries: Vec<(f64, String)> = (0..20)
            .map(|i| (base - i as f64, format!("u{i:02}")))
            .collect();
        api.zadd(&format!("fans:{scope}"), &entries).await;
    }
    let view = "/v1/boards/fans/all";
    let window = Duration::from_secs(3);
    let ab = api.open_as_top(view, "scope=a&scope=b&limit=5").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let one = calls_in(&api.redis, window, Some("zrevrange")).await;

    let mut more = Vec::new();
    for query in ["scope=b&scope=a&limit=5", "scope=b&scope=a&scope=b&limit=3"] {
        more.push(api.open_as_top(view, query).await);
    }
    let (_, ba) = get_json(&api.url(&format!("{view}/top?scope=b&scope=a&limit=5"))).await;
    assert_eq!(ba["scopes"], serde_json::json!(["b", "a"]), "{ba}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let three = calls_in(&api.redis, window, Some("zrevrange")).await;
    println!("ZREVRANGE calls in {window:?}: scope=a&scope=b {one}; with b,a and b,a,b {three}");
    assert!((6..=16).contains(&one), "{one}");
    assert!(
        three <= one + 3,
        "one union in three orders read {three} pages in {window:?}, one order {one}"
    );
    drop((ab, more));
}

// ---------------------------------------------------------------- limits

const LIMIT_BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all", "day"]

[[board]]
name = "nodense"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
dense_ranks = false

[[board]]
name = "fans"
event = "score"
member = "user_id"
score = "points"
scope = "game_id"
periods = ["all"]
"#;

/// Asserts a JSON error: its status, the parameter it names, and that it
/// names the setting at fault.
async fn refused(url: &str, status: u16, parameter: Option<&str>, setting: &str) {
    let resp = reqwest::get(url).await.expect("request");
    let got = resp.status().as_u16();
    // A stream that was not refused would never end: fail, not wait.
    assert_eq!(got, status, "{url} was not refused");
    let retry = resp.headers().get("retry-after").cloned();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.json::<Value>()).await;
    let body = body.expect("the refusal's body").unwrap_or(Value::Null);
    assert_eq!(body["parameter"].as_str(), parameter, "{url}: {body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(setting),
        "{url}: {body} does not name {setting}"
    );
    if status == 503 {
        assert_eq!(
            retry.as_ref().map(|v| v.as_bytes()),
            Some(&b"1"[..]),
            "{url}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pollers_and_entries_read_are_bounded_by_the_configuration() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, LIMIT_BOARDS);
    broker.create_topic(&setup.topic, 1).await;
    let process = Process::start_env(
        &setup,
        &[
            ("RANKFLOW_HTTP_MAX_POLLERS", "2"),
            ("RANKFLOW_HTTP_MAX_READ_ENTRIES", "20"),
        ],
    );
    let mut c = redis.conn().await;
    let today = chrono::Utc::now().date_naive();
    let yesterday = today.pred_opt().expect("yesterday");
    let write = |key: String, n: usize, offset: usize| {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(key);
        for i in 0..n {
            zadd.arg(1000.0 - 10.0 * i as f64)
                .arg(format!("m{:03}", i + offset));
        }
        zadd
    };
    for zadd in [
        write(setup.key("points", "all"), 30, 0),
        write(setup.key("points", &format!("day:{today}")), 15, 0),
        write(setup.key("points", &format!("day:{yesterday}")), 10, 100),
        write(setup.key("nodense", "all"), 1_200, 0),
        write(setup.key("fans:a", "all"), 12, 0),
        write(setup.key("fans:b", "all"), 12, 0),
    ] {
        let _: u64 = zadd.query_async(&mut c).await.expect("ZADD");
    }
    let url = |path: &str| process.url(path);
    wait_for(Duration::from_secs(60), "the read API", || async {
        (status_of(&url("/v1/boards/points/all/top")).await == 200).then_some(())
    })
    .await;

    // A union reads the entries of its boards: 15 within the limit of 20,
    // 15 + 10 not; two scopes of 12 not either.
    let setting = "[http] max_read_entries";
    assert_eq!(status_of(&url("/v1/boards/points/last:1d/top")).await, 200);
    refused(
        &url("/v1/boards/points/last:2d/top"),
        400,
        Some("view"),
        setting,
    )
    .await;
    assert_eq!(
        status_of(&url("/v1/boards/fans/all/top?scope=a")).await,
        200
    );
    let both = "/v1/boards/fans/all/top?scope=a&scope=b";
    refused(&url(both), 400, Some("scope"), setting).await;

    // A dense rank without the view's index walks one distinct value a
    // step: 10 steps are within the limit, 40 are not.
    let (status, page) = get_json(&url(
        "/v1/boards/nodense/all/top?offset=10&limit=3&rank=dense",
    ))
    .await;
    assert_eq!(status, 200, "{page}");
    let ranks: Vec<u64> = page["entries"]
        .as_array()
        .map(|es| es.iter().filter_map(|e| e["rank"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(ranks, [11, 12, 13], "{page}");
    let deep = "/v1/boards/nodense/all/top?offset=40&limit=3&rank=dense";
    refused(&url(deep), 400, Some("rank"), setting).await;
    refused(
        &url("/v1/boards/nodense/all/members/m045?rank=dense"),
        400,
        Some("rank"),
        setting,
    )
    .await;

    // Two distinct views are followed; streams of them share their
    // pollers whatever they ask, one more view is refused.
    let points = url("/v1/boards/points/all/top/stream?limit=3");
    let mut open = vec![Stream::open(&points, None).await];
    open.push(Stream::open(&url("/v1/boards/nodense/all/top/stream"), None).await);
    open.push(
        Stream::open(
            &url("/v1/boards/points/all/top/stream?limit=7&rank=competition"),
            None,
        )
        .await,
    );
    open.push(
        Stream::open(
            &url("/v1/boards/nodense/all/top/stream?offset=5&rank=dense"),
            None,
        )
        .await,
    );
    for s in &mut open {
        s.event(Duration::from_secs(10), "first event").await;
    }
    // One read of a view covers at most 20 ranks here: nodense's streams
    // read ranks 1-15; a page of 5 far down is a run of its own (20 in
    // all), its dense walk 1,100 values long: refused as its own read
    // would be, while the streams sharing the read go on.
    refused(
        &url("/v1/boards/nodense/all/top/stream?offset=1100&limit=5&rank=dense"),
        400,
        Some("rank"),
        setting,
    )
    .await;
    let _: u64 = redis::cmd("ZADD")
        .arg(setup.key("nodense", "all"))
        .arg(5000.0)
        .arg("newcomer")
        .query_async(&mut c)
        .await
        .expect("ZADD");
    let query = "offset=5&rank=dense";
    let (_, top) = get_json(&url(&format!("/v1/boards/nodense/all/top?{query}"))).await;
    open[3]
        .event_until(Duration::from_secs(10), query, |e| e.data == top)
        .await;
    // points' streams read ranks 1-7: ranks 1-20 still fit in one read,
    // 1-25 do not (503, the room is taken), and a page of 25 never fits
    // (400, naming limit).
    let fits = url("/v1/boards/points/all/top/stream?offset=7&limit=13");
    let (_, top) = get_json(&url("/v1/boards/points/all/top?offset=7&limit=13")).await;
    let mut fits = Stream::open(&fits, None).await;
    let first = fits.event(Duration::from_secs(10), "ranks 8-20").await;
    assert_eq!(first.data, top);
    drop(fits);
    let wide = "/v1/boards/points/all/top/stream?offset=10&limit=15";
    refused(&url(wide), 503, None, setting).await;
    let long = "/v1/boards/points/all/top/stream?limit=25";
    refused(&url(long), 400, Some("limit"), setting).await;
    let setting = "[http] max_pollers";
    refused(&url("/v1/boards/points/day/top/stream"), 503, None, setting).await;
    refused(
        &url("/v1/boards/points/all/members/m001/stream"),
        503,
        None,
        setting,
    )
    .await;
    refused(
        &url("/v1/boards/fans/all/top/stream?scope=a"),
        503,
        None,
        setting,
    )
    .await;
    // The streams already open go on.
    let (_, top) = get_json(&url("/v1/boards/points/all/top?limit=3")).await;
    let again = Stream::open(&points, None)
        .await
        .event(Duration::from_secs(5), "again")
        .await;
    assert_eq!(again.data, top);
}
