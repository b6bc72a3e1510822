//! Request bodies and error bodies (docs/http-api.md, "Errors and limits";
//! issue 28 points 3 and 6):
//!
//! - a body over 64 KiB is a JSON 413, whether its length is declared or
//!   chunked; one of exactly 64 KiB is read;
//! - a body that is not JSON, a `Content-Type` that is not JSON, a method a
//!   route does not take: each the API's JSON error with a sentence;
//! - `POST .../members` reads at most 1000 ids (1000 → 200, 1001 → 400
//!   naming the cap), and a body of 64 KiB of non-strings or of nesting is
//!   refused at its first item, at once;
//! - `/healthz` with Redis and Kafka down, and a read while Redis is down,
//!   say what is wrong in a sentence without an address, a port or the
//!   driver's error, which the log has.
//!
//! The body checks run the API in-process over a real redis-server
//! (`Direct`, as in `http.rs`); the health checks run `rankflow run`.

use crate::common;

use std::time::{Duration, Instant};

use common::direct::ServedApi;
use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
"#;

/// 2026-11-21T12:00:00Z.
const NOW: i64 = 1_795_262_400_000;

const MEMBERS: &str = "/v1/boards/points/all/members";

/// The API over its own Redis; `base` is `http://127.0.0.1:<port>`.
struct Api(ServedApi);

impl std::ops::Deref for Api {
    type Target = ServedApi;
    fn deref(&self) -> &ServedApi {
        &self.0
    }
}

impl Api {
    async fn start() -> Api {
        Api(ServedApi::start("bodies", BOARDS, NOW).await)
    }

    /// Sends `head` (without the blank line) and `body` on a raw socket and
    /// reads the whole answer: status, content type and JSON body.
    async fn raw(&self, head: &str, body: &[u8]) -> (u16, String, Value) {
        let addr = self.base.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut req = format!("{head}\r\nHost: rankflow\r\nConnection: close\r\n\r\n").into_bytes();
        req.extend_from_slice(body);
        // The server may answer (and close) before reading all of a body
        // it refuses; what it answered is still read below.
        let _ = s.write_all(&req).await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "no answer within 5 s: {}",
            String::from_utf8_lossy(&got)
        );
        let text = String::from_utf8_lossy(&got).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let ctype = head
            .lines()
            .find_map(|l| l.strip_prefix("content-type: "))
            .unwrap_or("")
            .to_string();
        (
            status,
            ctype,
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    }
}

async fn post(url: &str, ctype: Option<&str>, body: Vec<u8>) -> (u16, String, Value) {
    let mut req = reqwest::Client::new().post(url).body(body);
    if let Some(t) = ctype {
        req = req.header("content-type", t);
    }
    let r = req.send().await.expect("POST");
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, ctype, r.json().await.unwrap_or(Value::Null))
}

async fn post_json(url: &str, body: Vec<u8>) -> (u16, String, Value) {
    post(url, Some("application/json"), body).await
}

/// Asserts a JSON error answer with `status` whose sentence contains `says`.
fn assert_error(what: &str, got: &(u16, String, Value), status: u16, says: &str) {
    let (code, ctype, body) = got;
    assert_eq!(*code, status, "{what}: {body}");
    assert!(ctype.starts_with("application/json"), "{what}: {ctype}");
    let error = body["error"].as_str().unwrap_or("");
    assert!(error.contains(says), "{what}: {body}");
    assert!(
        error.len() > 12 && error.contains(' '),
        "{what}: not a sentence: {body}"
    );
}

/// A JSON list of `n` ids padded with spaces to exactly `len` bytes.
fn id_list(n: usize, len: usize) -> Vec<u8> {
    let ids: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
    let mut body = serde_json::to_vec(&ids).expect("json");
    assert!(body.len() <= len, "{} ids take {} bytes", n, body.len());
    body.resize(len, b' ');
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_64_kib_and_framework_rejections_are_json_errors() {
    let api = Api::start().await;
    let url = api.url(MEMBERS);

    let (status, _, list) = post_json(&url, id_list(3, 64 * 1024)).await;
    assert_eq!(status, 200, "a body of exactly 64 KiB is read: {list}");
    assert_eq!(list["missing"].as_array().map(Vec::len), Some(3), "{list}");
    let over = post_json(&url, id_list(3, 64 * 1024 + 1)).await;
    assert_error("64 KiB + 1", &over, 413, "64 KiB");
    let chunk = id_list(3, 65 * 1024);
    let mut chunked = format!("{:x}\r\n", chunk.len()).into_bytes();
    chunked.extend_from_slice(&chunk);
    chunked.extend_from_slice(b"\r\n0\r\n\r\n");
    let head = format!(
        "POST {MEMBERS} HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
    );
    assert_error(
        "65 KiB chunked",
        &api.raw(&head, &chunked).await,
        413,
        "64 KiB",
    );

    let bad = post_json(&url, b"[\"a\",".to_vec()).await;
    assert_error("bad JSON", &bad, 400, "not JSON");
    assert_eq!(bad.2["parameter"], "ids", "{}", bad.2);
    for ctype in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let got = post(&url, ctype, b"[\"a\"]".to_vec()).await;
        assert_error(&format!("{ctype:?}"), &got, 415, "application/json");
    }
    // No type, JSON with a charset, and a +json type are all read as JSON.
    for ctype in [
        None,
        Some("application/json; charset=utf-8"),
        Some("application/vnd.x+json"),
    ] {
        let (status, _, body) = post(&url, ctype, b"[\"a\"]".to_vec()).await;
        assert_eq!(status, 200, "{ctype:?}: {body}");
    }
    for (head, says) in [
        ("FOO /v1/boards HTTP/1.1", "not FOO"),
        ("OPTIONS /healthz HTTP/1.1", "not OPTIONS"),
        (
            &format!("DELETE {MEMBERS} HTTP/1.1"),
            "GET or POST, not DELETE",
        ),
        (
            "POST /v1/boards/points/all/top HTTP/1.1\r\nContent-Length: 2",
            "takes GET, not POST",
        ),
    ] {
        let body: &[u8] = if head.contains("Content-Length") {
            b"[]"
        } else {
            b""
        };
        assert_error(head, &api.raw(head, body).await, 405, says);
    }
    println!(
        "verified: 64 KiB read, 64 KiB + 1 and 65 KiB chunked 413; bad JSON 400, 3 content types 415, 4 methods 405: all JSON sentences"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_post_reads_at_most_1000_ids_and_stops_at_the_first_bad_item() {
    let api = Api::start().await;
    let url = api.url(MEMBERS);

    let empty = post_json(&url, Vec::new()).await;
    assert_error("an empty body", &empty, 400, "empty");
    let ids: Vec<String> = (0..1000).map(|i| format!("u{i}")).collect();
    let (status, _, list) = post_json(&url, serde_json::to_vec(&ids).expect("json")).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["missing"].as_array().map(Vec::len), Some(1000));
    let more: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let over = post_json(&url, serde_json::to_vec(&more).expect("json")).await;
    assert_error("1001 ids", &over, 400, "at most 1000");
    assert_eq!(over.2["parameter"], "ids");

    // 64 KiB bodies a generic parse would build whole: refused at the
    // first item (or the first past the cap), in well under a second.
    // What follows the point of refusal is not even read: a generic parse
    // would call these bodies "not JSON".
    let first = serde_json::to_string(&more[..1000]).expect("json");
    let cut = format!("{},@@@", first.trim_end_matches(']'));
    assert_error(
        "1001st item not JSON",
        &post_json(&url, cut.into_bytes()).await,
        400,
        "at most 1000",
    );
    let late = post_json(&url, b"[\"a\", 2, @@@".to_vec()).await;
    assert_error(
        "a number, then not JSON",
        &late,
        400,
        "item 1 is not a string but a number",
    );
    let mut timings = Vec::new();
    for (what, body, says) in [
        (
            "32,000 numbers",
            format!("[{}1]", "1,".repeat(32_000)),
            "item 0 is not a string but a number",
        ),
        (
            "16,000 nested lists",
            format!("[{}{}]", "[".repeat(16_000), "]".repeat(16_000)),
            "item 0 is not a string but a list",
        ),
        (
            "a string, then 16,000 objects",
            format!("[\"a\",{}{{}}]", "{},".repeat(16_000)),
            "item 1 is not a string but an object",
        ),
        (
            "16,000 ids",
            format!("[{}\"x\"]", "\"x\",".repeat(16_000)),
            "at most 1000 members",
        ),
    ] {
        assert!(body.len() <= 64 * 1024, "{what}: {} bytes", body.len());
        let asked = Instant::now();
        let got = post_json(&url, body.into_bytes()).await;
        let took = asked.elapsed();
        assert_error(what, &got, 400, says);
        assert!(took < Duration::from_millis(500), "{what}: {took:?}");
        timings.push(format!("{what} {took:?}"));
    }
    println!(
        "verified: 1000 ids 200, 1001 ids 400 naming the cap; refused at once: {}",
        timings.join(", ")
    );
}

/// Texts an anonymous client must not see: the servers' addresses and
/// ports, and what the drivers say.
fn leaks(text: &str, ports: &[u16]) -> Vec<String> {
    let mut found: Vec<String> = [
        "127.0.0.1",
        "redis://",
        "refused",
        "os error",
        "transport",
        "broken pipe",
    ]
    .iter()
    .filter(|t| text.to_lowercase().contains(&t.to_lowercase()))
    .map(|t| t.to_string())
    .collect();
    found.extend(
        ports
            .iter()
            .filter(|p| text.contains(&p.to_string()))
            .map(|p| format!("port {p}")),
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_says_what_is_down_without_addresses_or_driver_errors() {
    let (redis_port, kafka_port) = (free_port(), free_port());
    let setup = Setup {
        brokers: format!("127.0.0.1:{kafka_port}"),
        redis_url: format!("\"redis://127.0.0.1:{redis_port}\""),
        topic: unique("events"),
        group: unique("group"),
        prefix: unique("rf"),
        timezone: "UTC".into(),
        batch: (500, 20),
        extra: String::new(),
        boards: BOARDS.to_string(),
        dlq: None,
        quarantine: None,
        client: Vec::new(),
    };
    let p = Process::start(&setup);
    let body = wait_for(
        Duration::from_secs(30),
        "/healthz naming both down",
        || async {
            let text = get_text(&p.url("/healthz")).await?;
            let body: Value = serde_json::from_str(&text).ok()?;
            let log = p.log();
            (body["redis"]["detail"] != "not connected yet"
                && body["kafka"]["detail"] != "not connected yet"
                && log.contains("Redis is not reachable yet")
                && log.contains("Kafka is not reachable yet"))
            .then_some(body)
        },
    )
    .await;
    let text = body.to_string();
    assert_eq!(body["status"], "unavailable", "{text}");
    let redis = body["redis"]["detail"].as_str().unwrap_or("");
    let kafka = body["kafka"]["detail"].as_str().unwrap_or("");
    assert!(redis.starts_with("Redis is not reachable"), "{text}");
    assert!(kafka.starts_with("no Kafka broker is reachable"), "{text}");
    let shown = leaks(&text, &[redis_port, kafka_port]);
    assert!(shown.is_empty(), "/healthz shows {shown:?}: {text}");
    let log = p.log();
    assert!(
        log.contains(&format!("redis://127.0.0.1:{redis_port}"))
            && log.contains("Connection refused"),
        "the log has Redis's detail:\n{log}"
    );
    assert!(
        log.contains(&format!("127.0.0.1:{kafka_port}")),
        "the log has Kafka's:\n{log}"
    );
    println!(
        "verified: /healthz says {redis:?} and {kafka:?}; the log has the addresses and errors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_while_redis_is_down_says_so_without_its_error() {
    let broker = Broker::start();
    let mut redis = Redis::start();
    let setup = Setup::new(&broker, &redis, BOARDS);
    broker.create_topic(&setup.topic, 1).await;
    let p = Process::start(&setup);
    let top = p.url("/v1/boards/points/all/top");
    wait_for(Duration::from_secs(60), "a read served", || async {
        (status_of(&top).await == 200).then_some(())
    })
    .await;
    redis.kill9();
    let (status, body) = wait_for(Duration::from_secs(30), "a 5xx read", || async {
        let (status, body) = get_json(&top).await;
        (status >= 500).then_some((status, body))
    })
    .await;
    assert_eq!(status, 503, "{body}");
    let text = body.to_string();
    let error = body["error"].as_str().unwrap_or("");
    assert!(error.starts_with("Redis did not answer"), "{text}");
    let port: u16 = redis
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let shown = leaks(&text, &[port]);
    assert!(shown.is_empty(), "the 503 shows {shown:?}: {text}");
    let log = wait_for(
        Duration::from_secs(5),
        "the read's failure logged",
        || async {
            let log = p.log();
            log.lines()
                .any(|l| l.contains("A board read failed in Redis") && l.contains("error="))
                .then_some(log)
        },
    )
    .await;
    let line = log
        .lines()
        .find(|l| l.contains("A board read failed in Redis"))
        .unwrap_or("");
    println!("verified: a read with Redis down answers 503 {error:?}; the log says: {line}");
}
