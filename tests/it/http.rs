//! The HTTP read API's error contract (docs/http-api.md) against a real
//! redis-server: every bad query parameter is a 400 whose JSON body names
//! it, unknown things are JSON 404s, a reader not connected yet is a JSON 503,
//! and valid reads still return exactly what the test wrote into Redis itself
//! (plain `ZADD`s on the documented key layout, not rankflow's apply path).
//!
//! No Kafka: the API is served from `api::router` over a `Reader` on a Store,
//! as `rankflow run` wires it once Redis is connected.

use crate::common;

use std::sync::{Arc, OnceLock};

use common::direct::{Direct, ServedApi};
use common::*;
use serde_json::Value;

/// 2026-11-21T12:00:00Z: the day board's current period is `2026-11-21`.
const NOW: i64 = 1_795_262_400_000;

const BOARDS: &str = r#"
[[board]]
name = "total"
event = "score"
member = "user_id"
score = "points"
periods = ["all", "day"]

[[board]]
name = "fans"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["all"]

[[board]]
name = "recent"
event = "score"
member = "user_id"
score = "points"
windows = ["1h/1m"]
"#;

/// Members on the `total` all-time board: 1,200, more than one page of the
/// largest `limit`.
const MEMBERS: u64 = 1200;

/// The reference: member `m<i>` has score `(i × 7919) mod 1200 + 1`, a
/// permutation of 1..=1200 (7919 is prime to 1200), so no two scores tie and
/// the ranking is the scores sorted, descending.
fn reference() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = (0..MEMBERS)
        .map(|i| (format!("m{i:04}"), ((i * 7919) % MEMBERS + 1) as i64))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

/// The read API on a free port, over its own redis-server and key prefix.
struct Api(ServedApi);

impl std::ops::Deref for Api {
    type Target = ServedApi;
    fn deref(&self) -> &ServedApi {
        &self.0
    }
}

impl Api {
    async fn start() -> Api {
        Api(ServedApi::start("http", BOARDS, NOW).await)
    }

    /// Writes the reference boards with plain Redis commands.
    async fn write_reference(&self) {
        let mut c = self.redis.conn().await;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(format!("{}:{{total}}:all", self.prefix));
        for (m, s) in reference() {
            zadd.arg(s).arg(m);
        }
        let added: u64 = zadd.query_async(&mut c).await.expect("ZADD all");
        assert_eq!(added, MEMBERS);
        let day: u64 = redis::cmd("ZADD")
            .arg(format!("{}:{{total}}:day:2026-11-20", self.prefix))
            .arg(&[(7, "yesterday_a"), (9, "yesterday_b")])
            .query_async(&mut c)
            .await
            .expect("ZADD day");
        assert_eq!(day, 2);
        let fans: u64 = redis::cmd("ZADD")
            .arg(format!("{}:{{fans:s1}}:all", self.prefix))
            .arg(&[(3, "f1"), (5, "f2")])
            .query_async(&mut c)
            .await
            .expect("ZADD fans");
        assert_eq!(fans, 2);
    }
}

/// Status, content type and JSON body (Null if not JSON) of a request.
async fn call(method: reqwest::Method, url: &str) -> (u16, String, Value) {
    let resp = reqwest::Client::new()
        .request(method, url)
        .send()
        .await
        .expect("HTTP request");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, ctype, body)
}

async fn get(url: &str) -> (u16, String, Value) {
    call(reqwest::Method::GET, url).await
}

/// Asserts a JSON error answer with `status` whose message contains `says`.
async fn expect_error(api: &Api, path: &str, status: u16, says: &str) -> Value {
    let (code, ctype, body) = get(&api.url(path)).await;
    assert_eq!(code, status, "{path}: {body}");
    assert_eq!(ctype, "application/json", "{path}: content type");
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{path}: {body}"));
    assert!(error.contains(says), "{path}: {error:?} lacks {says:?}");
    body
}

/// Asserts a 400 whose JSON names `param`, in the message and the field.
async fn expect_400(api: &Api, path: &str, param: &str) {
    let body = expect_error(api, path, 400, param).await;
    assert_eq!(body["parameter"], param, "{path}: {body}");
}

/// (member, score) of a list's entries, checking the ranks run on from
/// `first_rank`.
fn rows(list: &Value, first_rank: u64) -> Vec<(String, i64)> {
    let entries = list["entries"].as_array().expect("entries");
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["rank"], first_rank + i as u64, "{e}");
            (
                e["member"].as_str().expect("member").to_string(),
                e["score"].as_i64().expect("integral score"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_are_json_400s_naming_them() {
    let api = Api::start().await;
    api.write_reference().await;
    let top = "/v1/boards/total/all/top";
    let around = "/v1/boards/total/all/around/m0001";
    let cases: &[(String, &str)] = &[
        (format!("{top}?limit=abc"), "limit"),
        (format!("{top}?limit=-1"), "limit"),
        (format!("{top}?limit=1001"), "limit"),
        (format!("{top}?limit=1.5"), "limit"),
        (format!("{top}?limit="), "limit"),
        (format!("{top}?limit=%FF"), "limit"),
        (format!("{top}?offset=-5"), "offset"),
        (format!("{top}?offset=4294967296"), "offset"),
        (format!("{top}?offset=9223372036854775808"), "offset"), // 2^63
        (format!("{top}?offset=18446744073709551616"), "offset"), // 2^64
        (format!("{around}?radius=x"), "radius"),
        (format!("{around}?radius=501"), "radius"),
        (format!("{around}?radius=18446744073709551616"), "radius"),
        (format!("{top}?limt=5"), "limt"),
        (format!("{top}?radius=2"), "radius"),
        (format!("{top}?limit=5&limit=6"), "limit"),
        (format!("{top}?rank=Dense"), "rank"),
        (format!("{around}?rank="), "rank"),
        (format!("{top}?ids=a"), "ids"),
        ("/v1/boards/total/all/members?ids=".into(), "ids"),
        (
            "/v1/boards/total/all/members/m0001?offset=1".into(),
            "offset",
        ),
        ("/v1/boards/total/day/top?period=garbage".into(), "period"),
        ("/v1/boards/total/day/top?period=".into(), "period"),
        (
            "/v1/boards/total/day/top?period=2026-11-31".into(),
            "period",
        ),
        (
            "/v1/boards/total/all/top?period=2026-11-21".into(),
            "period",
        ),
        (
            "/v1/boards/recent/win:1h/top?period=2026-11-21".into(),
            "period",
        ),
        ("/v1/boards/fans/all/top".into(), "scope"),
        ("/v1/boards/total/all/top?scope=s1".into(), "scope"),
    ];
    for (path, param) in cases {
        expect_400(&api, path, param).await;
    }
    // The message says what is allowed, not only what is wrong.
    let body = expect_error(&api, &format!("{top}?limit=1001"), 400, "limit").await;
    assert_eq!(
        body["error"],
        "limit must be a whole number from 0 to 1000, got \"1001\""
    );
    let body = expect_error(&api, &format!("{top}?limt=5"), 400, "limt").await;
    assert_eq!(
        body["error"],
        "unknown query parameter \"limt\"; top takes: scope, period, limit, offset, rank"
    );
    let body = expect_error(&api, &format!("{top}?rank=olympic"), 400, "rank").await;
    assert_eq!(
        body["error"],
        "rank must be one of ordinal, competition, dense, got \"olympic\""
    );
    println!(
        "verified: {} bad-parameter cases are JSON 400s naming the parameter",
        cases.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_reads_match_what_was_written() {
    let api = Api::start().await;
    api.write_reference().await;
    let want = reference();

    // The largest page is served whole, not capped below it.
    let (code, ctype, page) = get(&api.url("/v1/boards/total/all/top?limit=1000")).await;
    assert_eq!((code, ctype.as_str()), (200, "application/json"), "{page}");
    assert_eq!(page["total"], MEMBERS);
    assert_eq!(rows(&page, 1), want[..1000].to_vec());

    // The last page runs short at the end of the board.
    let (code, _, page) = get(&api.url("/v1/boards/total/all/top?offset=1190&limit=20")).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(rows(&page, 1191), want[1190..].to_vec());

    // The largest offset is valid and simply past every board.
    let (code, _, page) =
        get(&api.url("/v1/boards/total/all/top?offset=4294967295&limit=1000")).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(
        (page["total"].as_u64(), rows(&page, 1).len()),
        (Some(MEMBERS), 0)
    );

    // Default page: 10.
    let (_, _, page) = get(&api.url("/v1/boards/total/all/top")).await;
    assert_eq!(rows(&page, 1), want[..10].to_vec());

    // A member, and its neighbours.
    let (name, score) = want[41].clone();
    let (code, _, entry) = get(&api.url(&format!("/v1/boards/total/all/members/{name}"))).await;
    assert_eq!(code, 200, "{entry}");
    assert_eq!(
        (entry["rank"].as_u64(), entry["score"].as_i64()),
        (Some(42), Some(score))
    );
    let path = format!("/v1/boards/total/all/around/{name}?radius=3");
    let (code, _, list) = get(&api.url(&path)).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(rows(&list, 39), want[38..45].to_vec());
    let path = format!("/v1/boards/total/all/around/{}?radius=500", want[0].0);
    let (_, _, list) = get(&api.url(&path)).await;
    assert_eq!(rows(&list, 1), want[..501].to_vec());

    // A past period, a scope, and a window trimmed on read (empty).
    let (code, _, day) = get(&api.url("/v1/boards/total/day/top?period=2026-11-20")).await;
    assert_eq!(code, 200, "{day}");
    assert_eq!(day["period"], "2026-11-20");
    assert_eq!(
        rows(&day, 1),
        [("yesterday_b".into(), 9), ("yesterday_a".into(), 7)]
    );
    let (code, _, fans) = get(&api.url("/v1/boards/fans/all/top?scope=s1&limit=0")).await;
    assert_eq!(
        (code, fans["total"].as_u64(), rows(&fans, 1).len()),
        (200, Some(2), 0)
    );
    let (code, _, win) = get(&api.url("/v1/boards/recent/win:1h/top")).await;
    assert_eq!((code, win["total"].as_u64()), (200, Some(0)), "{win}");
    println!(
        "verified: limit=1000, last page, max offset, member, around, period, scope and window reads match the reference"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_things_are_json_404s_and_no_reader_is_a_json_503() {
    let api = Api::start().await;
    api.write_reference().await;
    for (path, says) in [
        (
            "/v1/boards/total/all/members/nobody",
            "\"nobody\" is not on this board",
        ),
        (
            "/v1/boards/total/all/around/nobody",
            "\"nobody\" is not on this board",
        ),
        ("/v1/boards/nope/all/top", "no board named \"nope\""),
        ("/v1/boards/total/week/top", "has no view \"week\""),
        (
            "/v1/boards/total/all/bottom",
            "no route for GET /v1/boards/total/all/bottom",
        ),
        ("/nothing/here", "no route for GET /nothing/here"),
    ] {
        let body = expect_error(&api, path, 404, says).await;
        assert!(body.get("parameter").is_none(), "{path}: {body}");
    }
    // A path segment that does not decode to UTF-8.
    expect_error(&api, "/v1/boards/%FF/all/top", 400, "malformed path").await;
    let (code, ctype, body) =
        call(reqwest::Method::POST, &api.url("/v1/boards/total/all/top")).await;
    assert_eq!((code, ctype.as_str()), (405, "application/json"), "{body}");
    assert_eq!(
        body["error"],
        "/v1/boards/total/all/top takes GET, not POST"
    );

    // Before Redis is reached there is no reader: a temporary 503, not a
    // configuration error; a request that could never be served is still a
    // 400 or 404, not a 503 that invites a retry.
    let direct = Direct::new(&api.redis.url(), &unique("none"), BOARDS, NOW).await;
    let base = direct.serve(Arc::new(OnceLock::new())).await;
    let resp = reqwest::get(format!("{base}/v1/boards/total/all/top"))
        .await
        .expect("HTTP request");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = resp.json().await.expect("JSON body");
    assert_eq!(
        body["error"],
        "not connected to Redis yet; try again shortly"
    );
    for (path, code, param) in [
        ("/v1/boards/total/all/top?limit=x", 400, Some("limit")),
        ("/v1/boards/total/day/top?period=junk", 400, Some("period")),
        ("/v1/boards/fans/all/members/f1", 400, Some("scope")),
        ("/v1/boards/nope/all/top", 404, None),
        ("/v1/boards/total/week/top", 404, None),
    ] {
        let (got, ctype, body) = get(&format!("{base}{path}")).await;
        assert_eq!(
            (got, ctype.as_str(), body["parameter"].as_str()),
            (code, "application/json", param),
            "{path} with no reader: {body}"
        );
    }
    println!(
        "verified: 404s for member/board/view/route, 400 for a bad path, 405 JSON, 503 JSON before Redis"
    );
}
