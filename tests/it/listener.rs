//! The HTTP listener's bounds (docs/http-api.md, "Connections"; issue 28
//! point 2) against the real `rankflow run` binary, with raw sockets:
//!
//! - a client that sends nothing, or half a request head, is dropped once
//!   `[http] header_timeout` has passed, and not before; one that sends
//!   its head slowly but in time is served;
//! - an idle keep-alive connection is closed `header_timeout` after its
//!   last response (the timer starts again at each response);
//! - with `[http] max_connections` = N and N connections open, the next
//!   one is not served until one of them closes, then at once;
//! - SIGTERM with an idle, a half-open, a silent and a streaming client
//!   connected exits 0 within 10 s, though the head timeout (60 s) would
//!   keep the half-open one for much longer.
//!
//! The first three need neither Kafka nor Redis: rankflow serves `/healthz`
//! (a 503 then) while it waits for them. Times are measured on the
//! client's side; every wait has a deadline.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
"#;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: rankflow\r\n\r\n";
const HALF_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: rankflow\r\n";

/// A setup whose Kafka and Redis nobody answers: the listener still runs.
fn offline() -> Setup {
    Setup {
        brokers: format!("127.0.0.1:{}", free_port()),
        redis_url: format!("\"redis://127.0.0.1:{}\"", free_port()),
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
    }
}

/// Starts `rankflow run` with `env` and waits until it answers HTTP.
async fn started(setup: &Setup, env: &[(&str, &str)]) -> Process {
    let p = Process::start_env(setup, env);
    wait_for(Duration::from_secs(20), "the HTTP listener", || async {
        get_text(&p.url("/healthz")).await.map(|_| ())
    })
    .await;
    p
}

async fn connect(p: &Process) -> TcpStream {
    TcpStream::connect(("127.0.0.1", p.http_port))
        .await
        .expect("connect")
}

/// Reads until the server closes the connection (EOF or reset), at most
/// `limit`; returns how long that took from `since` and what was read, or
/// `None` if the connection was still open at `limit`.
async fn closed_within(
    s: &mut TcpStream,
    since: Instant,
    limit: Duration,
) -> Option<(Duration, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::from_std(since + limit);
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((since.elapsed(), got)),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one whole response (head and `Content-Length` body) within
/// `limit`; `None` if it did not arrive complete in time.
async fn response(s: &mut TcpStream, limit: Duration) -> Option<(u16, String)> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(done) = parse_response(&got) {
            return Some(done);
        }
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

/// Status and body of a complete response in `bytes`, if it is complete.
fn parse_response(bytes: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    (body.len() >= length).then(|| (status, body[..length].to_string()))
}

/// Sends a request and reads its response within 5 s, on an open
/// keep-alive connection.
async fn request(s: &mut TcpStream, req: &[u8]) -> (u16, String) {
    s.write_all(req).await.expect("send");
    response(s, Duration::from_secs(5))
        .await
        .expect("a response within 5 s")
}

const SLACK: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_whole_head_in_time_is_dropped() {
    let p = started(&offline(), &[("RANKFLOW_HTTP_HEADER_TIMEOUT", "1s")]).await;
    let timeout = Duration::from_secs(1);

    let mut silent = connect(&p).await;
    let silent_since = Instant::now();
    let mut half = connect(&p).await;
    half.write_all(HALF_HEAD).await.expect("half a head");
    let half_since = Instant::now();
    // In time, though slowly: three pieces over 0.6 s.
    let mut slow = connect(&p).await;
    for piece in HEALTHZ.chunks(HEALTHZ.len() / 3 + 1) {
        slow.write_all(piece).await.expect("a piece");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = response(&mut slow, Duration::from_secs(2))
        .await
        .expect("a head sent in time is served");
    assert_eq!(status, 503, "{body}");

    let (silent_after, said) = closed_within(&mut silent, silent_since, timeout + SLACK)
        .await
        .expect("a silent client is dropped");
    assert!(said.is_empty(), "{}", String::from_utf8_lossy(&said));
    let (half_after, said) = closed_within(&mut half, half_since, timeout + SLACK)
        .await
        .expect("half a head is dropped");
    assert!(said.is_empty(), "{}", String::from_utf8_lossy(&said));
    for (who, after) in [("silent", silent_after), ("half a head", half_after)] {
        assert!(
            after >= timeout - Duration::from_millis(200),
            "{who}: dropped after {after:?}, before the {timeout:?} it has"
        );
    }
    println!(
        "verified: header_timeout 1s: a silent client dropped after {silent_after:?}, half a head after {half_after:?}; a head in three pieces over 0.6 s answered {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_head_timeout() {
    let p = started(&offline(), &[("RANKFLOW_HTTP_HEADER_TIMEOUT", "1s")]).await;
    let timeout = Duration::from_secs(1);
    let mut s = connect(&p).await;
    let (first, _) = request(&mut s, HEALTHZ).await;
    // 0.7 s later the connection is still open, and serves again: the
    // time runs from the last response, not from connecting.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (second, _) = request(&mut s, HEALTHZ).await;
    let answered = Instant::now();
    let (after, said) = closed_within(&mut s, answered, timeout + SLACK)
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(said.is_empty(), "{}", String::from_utf8_lossy(&said));
    assert!(
        after >= timeout - Duration::from_millis(200),
        "closed {after:?} after its response, before {timeout:?}"
    );
    println!(
        "verified: keep-alive served twice ({first}, {second}, 0.7 s apart), then closed {after:?} after the last response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_client_waits_until_one_closes() {
    const N: usize = 3;
    let p = started(
        &offline(),
        &[
            ("RANKFLOW_HTTP_MAX_CONNECTIONS", "3"),
            ("RANKFLOW_HTTP_MAX_STREAMS", "1"),
            ("RANKFLOW_HTTP_HEADER_TIMEOUT", "30s"),
        ],
    )
    .await;
    // N connections, each served once and then left open, idle.
    let mut open = Vec::new();
    for _ in 0..N {
        let mut s = connect(&p).await;
        let (status, _) = request(&mut s, HEALTHZ).await;
        assert_eq!(status, 503);
        open.push(s);
    }
    let mut extra = connect(&p).await;
    extra.write_all(HEALTHZ).await.expect("send");
    assert!(
        response(&mut extra, Duration::from_millis(1500))
            .await
            .is_none(),
        "connection {} was served beside {N} open ones",
        N + 1
    );
    let closed = Instant::now();
    drop(open.remove(0));
    let (status, _) = response(&mut extra, Duration::from_secs(3))
        .await
        .expect("served once one of the others closed");
    let waited = closed.elapsed();
    assert_eq!(status, 503);
    // The others are still open and still served.
    for s in &mut open {
        assert_eq!(request(s, HEALTHZ).await.0, 503);
    }
    println!(
        "verified: max_connections {N}: connection {} unanswered for 1.5 s beside {N} idle ones, answered {waited:?} after one closed",
        N + 1
    );
}

/// Opens a top stream on a raw socket and reads until its first event.
async fn streaming(p: &Process) -> TcpStream {
    let mut s = connect(p).await;
    s.write_all(
        b"GET /v1/boards/points/all/top/stream HTTP/1.1\r\nHost: rankflow\r\nAccept: text/event-stream\r\n\r\n",
    )
    .await
    .expect("send");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\ndata:") {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            other => panic!(
                "no first event on the stream ({other:?}): {}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_0_within_10s_with_idle_half_open_and_streaming_clients() {
    let broker = Broker::start();
    let redis = Redis::start();
    let setup = Setup::new(&broker, &redis, BOARDS);
    broker.create_topic(&setup.topic, 1).await;
    // A head timeout far past the shutdown budget: only the shutdown
    // itself may end these connections.
    let mut p = started(&setup, &[("RANKFLOW_HTTP_HEADER_TIMEOUT", "60s")]).await;
    wait_for(Duration::from_secs(60), "/healthz 200", || async {
        (status_of(&p.url("/healthz")).await == 200).then_some(())
    })
    .await;
    let stream = streaming(&p).await;
    let mut idle = connect(&p).await;
    assert_eq!(request(&mut idle, HEALTHZ).await.0, 200);
    let mut half = connect(&p).await;
    half.write_all(HALF_HEAD).await.expect("half a head");
    let silent = connect(&p).await;
    // Let the server take in the half head before the signal.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let asked = Instant::now();
    let watched: Vec<_> = [
        ("stream", stream),
        ("idle", idle),
        ("half-open", half),
        ("silent", silent),
    ]
    .into_iter()
    .map(|(who, mut s)| {
        tokio::spawn(async move {
            let closed = closed_within(&mut s, asked, Duration::from_secs(12)).await;
            (who, closed.map(|(after, _)| after))
        })
    })
    .collect();
    p.sigterm();
    let code = loop {
        if let Some(code) = p.child.try_wait().expect("the child's status") {
            break code;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM:\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let exited = asked.elapsed();
    assert_eq!(code.code(), Some(0), "{}", p.log());
    let mut ends = Vec::new();
    for task in watched {
        let (who, after) = task.await.expect("watcher");
        let after = after.unwrap_or_else(|| panic!("the {who} connection outlived the exit"));
        // Only the half-open one waits for the drain's deadline: the others
        // end as soon as they are asked to.
        if who != "half-open" {
            assert!(
                after < Duration::from_secs(1),
                "{who} ended after {after:?}"
            );
        }
        ends.push(format!("{who} {after:?}"));
    }
    println!(
        "verified: SIGTERM with a stream, an idle, a half-open and a silent client: exit 0 after {exited:?}; connections ended: {}",
        ends.join(", ")
    );
}
