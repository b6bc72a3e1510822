//! Live views (docs/http-api.md, issue 13 points 1–3 and 7) against the real
//! `rankflow run` binary with tansu and redis-server: the top stream sends
//! the list at connect, again (with a higher `id:`) when events change it and
//! not otherwise; `Last-Event-ID` gets the list at once; a rolling view
//! (`last:2d`) and a window (`win:1h`) stream too; the member stream names who overtook whom; bad
//! queries are the usual JSON errors; 50 subscribers of one view cost the
//! Redis reads of one (`INFO commandstats`); the cap answers 503; SIGTERM
//! with open streams still exits 0 within 10 s; an archived period (a
//! private PostgreSQL) is sent once and the stream stays open.
//!
//! Expected lists come from the scores the test sent (summed here), and
//! the SSE wire format is parsed here from the raw bytes.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::reference::now_ms;
use common::sse::{Item, Stream};
use common::*;
use serde_json::{Value, json};

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all", "day"]
windows = ["1h/1m"]
"#;

#[test]
fn the_block_parser_reads_comments_ids_and_names() {
    use common::sse::parse_block;
    assert!(matches!(parse_block(":"), Item::Comment));
    match parse_block("event: absent\nid: 7\ndata: {\"member\":\"x\"}") {
        Item::Event(e) => {
            assert_eq!(e.id, 7);
            assert_eq!(e.event.as_deref(), Some("absent"));
            assert_eq!(e.data, json!({"member": "x"}));
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- helpers

/// Scores sent so far, per member: the reference.
#[derive(Default)]
struct Sent {
    totals: BTreeMap<String, i64>,
    n: u64,
}

impl Sent {
    fn message(&mut self, user: &str, points: i64) -> (i32, Vec<u8>) {
        self.n += 1;
        *self.totals.entry(user.to_string()).or_default() += points;
        let e = json!({"type": "score", "event_id": format!("e{}", self.n), "ts": now_ms(),
                       "user_id": user, "game_id": "g1", "points": points});
        (0, serde_json::to_vec(&e).unwrap())
    }

    /// `[(member, score)]` in rank order (no ties in these tests).
    fn top(&self) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = self.totals.clone().into_iter().collect();
        v.sort_by_key(|(m, s)| (std::cmp::Reverse(*s), m.clone()));
        v
    }
}

fn entries(list: &Value) -> Vec<(String, i64)> {
    list["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["member"].as_str().unwrap().to_string(),
                e["score"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list of names")
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// A running rankflow with its broker and Redis, and the events sent.
struct Rig {
    _broker: Broker,
    redis: Redis,
    setup: Setup,
    producer: rdkafka::producer::FutureProducer,
    process: Process,
    sent: Sent,
}

impl Rig {
    async fn start(env: &[(&str, &str)], first: &[(&str, i64)]) -> Rig {
        let broker = Broker::start();
        let redis = Redis::start();
        let setup = Setup::new(&broker, &redis, BOARDS);
        broker.create_topic(&setup.topic, 1).await;
        let producer = broker.producer();
        let process = Process::start_env(&setup, env);
        let mut rig = Rig {
            _broker: broker,
            redis,
            setup,
            producer,
            process,
            sent: Sent::default(),
        };
        rig.send(first).await;
        rig
    }

    /// Sends one message per `(user, points)` and waits until `top` shows
    /// the reference.
    async fn send(&mut self, scores: &[(&str, i64)]) {
        let messages: Vec<_> = scores
            .iter()
            .map(|(u, p)| self.sent.message(u, *p))
            .collect();
        send_all(&self.producer, &self.setup.topic, &messages).await;
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    async fn top_json(&self, view: &str) -> Value {
        let (status, body) =
            get_json(&self.url(&format!("/v1/boards/points/{view}/top?limit=5"))).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn until_top_is_reference(&self) {
        let want = self.sent.top();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = Value::Null;
        while Instant::now() < deadline {
            // Refused connections while the process starts are retried.
            if let Some(text) = get_text(&self.url("/v1/boards/points/all/top?limit=5")).await {
                got = serde_json::from_str(&text).unwrap_or(Value::Null);
                if got["entries"].is_array() && entries(&got) == want {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "top is not {want:?} after 60 s: {got}; log:\n{}",
            self.process.log()
        );
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_and_member_streams_follow_events_and_end_on_sigterm() {
    let mut rig = Rig::start(&[], &[("u1", 50), ("u2", 40), ("u3", 30), ("u5", 10)]).await;
    rig.until_top_is_reference().await;
    let top_url = rig.url("/v1/boards/points/all/top/stream?limit=5");

    // At connect: exactly what `top` answers, which is the reference.
    let mut top = Stream::open(&top_url, None).await;
    let first = top.event(Duration::from_secs(5), "first top event").await;
    assert_eq!(first.event, None);
    assert_eq!(first.data, rig.top_json("all").await);
    assert_eq!(entries(&first.data), rig.sent.top());

    let mut me = Stream::open(&rig.url("/v1/boards/points/all/members/u3/stream"), None).await;
    let m0 = me.event(Duration::from_secs(5), "first member event").await;
    assert_eq!(
        (&m0.data["rank"], &m0.data["score"], &m0.data["source"]),
        (&json!(3), &json!(30), &json!("live"))
    );
    assert_eq!(m0.data["overtaken_by"], json!([]));

    // Nothing changes: no event for 1 s (heartbeats would be allowed).
    let quiet_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < quiet_until {
        match top.next(quiet_until - Instant::now()).await {
            Item::Quiet | Item::Comment => {}
            other => panic!("an unchanged list was sent again: {other:?}"),
        }
    }

    // u5 passes u3 and u2 in one event.
    rig.send(&[("u5", 35)]).await;
    let want = rig.sent.top();
    let changed = top
        .event_until(Duration::from_secs(30), "changed top", |e| {
            entries(&e.data) == want
        })
        .await;
    assert!(changed.id > first.id, "{} after {}", changed.id, first.id);
    let m1 = me.event(Duration::from_secs(10), "u3 overtaken").await;
    assert_eq!(
        (&m1.data["rank"], &m1.data["score"]),
        (&json!(4), &json!(30))
    );
    assert_eq!(names(&m1.data["overtaken_by"]), vec!["u5"]);
    assert_eq!(names(&m1.data["overtook"]), Vec::<String>::new());
    assert!(m1.id > m0.id);

    // u3 passes everyone: it overtook u1, u5 and u2, in rank order.
    rig.send(&[("u3", 30)]).await;
    let m2 = me.event(Duration::from_secs(30), "u3 overtaking").await;
    assert_eq!(
        (&m2.data["rank"], &m2.data["score"]),
        (&json!(1), &json!(60))
    );
    assert_eq!(names(&m2.data["overtook"]), vec!["u1", "u5", "u2"]);
    assert_eq!(names(&m2.data["overtaken_by"]), Vec::<String>::new());
    let want = rig.sent.top();
    let latest = top
        .event_until(Duration::from_secs(10), "top after u3", |e| {
            entries(&e.data) == want
        })
        .await;

    // A reconnect with Last-Event-ID gets the current list at once.
    let asked = Instant::now();
    let mut again = Stream::open(&top_url, Some(latest.id)).await;
    let resumed = again.event(Duration::from_secs(1), "resumed list").await;
    println!("Last-Event-ID reconnect answered in {:?}", asked.elapsed());
    assert_eq!(entries(&resumed.data), want);
    assert!(resumed.id >= latest.id);

    // A rolling view streams the same JSON as its `top`.
    let mut union = Stream::open(
        &rig.url("/v1/boards/points/last:2d/top/stream?limit=5"),
        None,
    )
    .await;
    let u0 = union.event(Duration::from_secs(10), "union list").await;
    assert_eq!(u0.data["view"], json!("last:2d"));
    assert_eq!(entries(&u0.data), want);
    rig.send(&[("u2", 100)]).await;
    let want = rig.sent.top();
    union
        .event_until(Duration::from_secs(30), "union after u2", |e| {
            entries(&e.data) == want
        })
        .await;

    // So does a window (every event of this test is inside the hour).
    let mut window = Stream::open(
        &rig.url("/v1/boards/points/win:1h/top/stream?limit=5"),
        None,
    )
    .await;
    let w0 = window.event(Duration::from_secs(10), "window list").await;
    assert_eq!(w0.data["view"], json!("win:1h"));
    assert_eq!(entries(&w0.data), want);
    rig.send(&[("u3", 100)]).await;
    let want = rig.sent.top();
    window
        .event_until(Duration::from_secs(30), "window after u3", |e| {
            entries(&e.data) == want
        })
        .await;

    // Bad queries are the usual JSON errors, before any stream.
    for (path, status, parameter) in [
        (
            "/v1/boards/points/all/top/stream?limit=abc",
            400,
            Some("limit"),
        ),
        ("/v1/boards/points/all/top/stream?limt=5", 400, Some("limt")),
        ("/v1/boards/nope/all/top/stream", 404, None),
        ("/v1/boards/points/all/members/nobody/stream", 404, None),
        (
            "/v1/boards/points/all/members/u1/stream?limit=3",
            400,
            Some("limit"),
        ),
    ] {
        let (got, body) = get_json(&rig.url(path)).await;
        assert_eq!(got, status, "{path}: {body}");
        assert!(body["error"].is_string(), "{path}: {body}");
        assert_eq!(body["parameter"].as_str(), parameter, "{path}: {body}");
    }

    // SIGTERM with four streams open: all end, the process exits 0 in 10 s.
    let sent = Instant::now();
    rig.process.sigterm();
    let status = loop {
        if let Some(s) = rig.process.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM; log:\n{}",
            rig.process.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "exited {status:?} {:?} after SIGTERM with 4 streams open",
        sent.elapsed()
    );
    assert!(status.success(), "{status:?}; log:\n{}", rig.process.log());
    for s in [&mut top, &mut me, &mut again, &mut union] {
        loop {
            match s.next(Duration::from_secs(2)).await {
                Item::End => break,
                Item::Event(_) | Item::Comment => continue,
                Item::Quiet => panic!("a stream stayed open after the exit"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscribers_cost_the_redis_reads_of_one_and_the_cap_answers_503() {
    let rig = Rig::start(
        &[("RANKFLOW_HTTP_MAX_STREAMS", "51")],
        &[("a", 3), ("b", 2), ("c", 1)],
    )
    .await;
    rig.until_top_is_reference().await;
    let url = rig.url("/v1/boards/points/all/top/stream?limit=3");
    let window = Duration::from_secs(3);

    // ZREVRANGE is the page read of `top` (ordinal ranks); nothing else in
    // this setup sends it, and the GETs above are over.
    let mut streams = vec![Stream::open(&url, None).await];
    streams[0].event(Duration::from_secs(5), "first").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rig.redis.calls("zrevrange");
    tokio::time::sleep(window).await;
    let one = rig.redis.calls("zrevrange") - before;

    for i in 1..50 {
        let mut s = Stream::open(&url, None).await;
        s.event(Duration::from_secs(5), &format!("subscriber {i}"))
            .await;
        streams.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rig.redis.calls("zrevrange");
    tokio::time::sleep(window).await;
    let fifty = rig.redis.calls("zrevrange") - before;
    println!("ZREVRANGE calls in {window:?}: 1 subscriber {one}, 50 subscribers {fifty}");
    // One read per 250 ms tick: about 12 in 3 s, whatever the count.
    assert!((6..=16).contains(&one), "{one}");
    assert!(
        fifty <= one + 3,
        "50 subscribers read {fifty} times, 1 read {one}"
    );

    let metrics = get_text(&rig.url("/metrics")).await.expect("metrics");
    assert_eq!(metric_sum(&metrics, "rankflow_streams_open", &[]), 50.0);
    // Pushed once (the first read), not once per client.
    assert_eq!(
        metric_sum(&metrics, "rankflow_stream_events_total", &[("kind", "top")]),
        1.0
    );

    // The 51st fits, the 52nd is refused with a JSON 503.
    streams.push(Stream::open(&url, None).await);
    let resp = reqwest::get(&url).await.expect("request");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: Value = resp.json().await.expect("JSON");
    assert!(
        body["error"].as_str().unwrap().contains("max_streams"),
        "{body}"
    );
    // Leaving frees places: the gauge follows. A quiet stream gets a `:`
    // heartbeat within 15 s. The server notices a client that left when it
    // reads the connection's end or, at the latest, when a write fails: TCP
    // takes the first write after the client closed (and answers it with a
    // reset), so that is the second heartbeat after the stream's last
    // event, 30 s; the 51st stream's was just now.
    streams.truncate(10);
    let quiet_since = Instant::now();
    match streams[0].next(Duration::from_secs(17)).await {
        Item::Comment => println!("heartbeat after {:?}", quiet_since.elapsed()),
        other => panic!("expected a heartbeat comment, got {other:?}"),
    }
    let last = std::cell::Cell::new(f64::NAN);
    wait_for(
        Duration::from_secs(35).saturating_sub(quiet_since.elapsed()),
        "streams_open back to 10",
        || async {
            let m = get_text(&rig.url("/metrics")).await?;
            let open = metric_sum(&m, "rankflow_streams_open", &[]);
            if open != last.get() {
                println!("streams_open {open} after {:?}", quiet_since.elapsed());
                last.set(open);
            }
            (open == 10.0).then_some(())
        },
    )
    .await;
}

/// 2026-11-21T12:00:00Z: week 2026-W47 is current.
const NOW: i64 = 1_795_262_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_period_is_sent_once_and_the_stream_stays_open() {
    use common::archive_env::{ArchiveEnv, PLAIN, archive_table};

    let mut env = ArchiveEnv::start("streams", |pg| archive_table(pg) + PLAIN, NOW).await;
    let standings = [("x", 9.0), ("y", 5.0), ("z", 2.0)].map(|(m, s)| (m.to_string(), s, 0));
    env.archive("plain", None, "2026-W45", &standings).await;

    let url = format!(
        "{}/v1/boards/plain/week/top/stream?period=2026-W45",
        env.base
    );
    let mut s = Stream::open(&url, None).await;
    let first = s.event(Duration::from_secs(10), "archived list").await;
    assert_eq!(first.data["source"], json!("archive"));
    assert_eq!(first.data["period"], json!("2026-W45"));
    assert_eq!(
        entries(&first.data),
        vec![("x".into(), 9), ("y".into(), 5), ("z".into(), 2)]
    );
    let (status, top) = get_json(&format!(
        "{}/v1/boards/plain/week/top?period=2026-W45",
        env.base
    ))
    .await;
    assert_eq!(status, 200);
    assert_eq!(first.data, top);
    // Then nothing, and the stream is still open.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        match s.next(until - Instant::now()).await {
            Item::Quiet | Item::Comment => {}
            other => panic!("an archived period was sent again or ended: {other:?}"),
        }
    }
    // A past period that never had events is the 404 of `top`.
    let (status, body) = get_json(&format!(
        "{}/v1/boards/plain/week/top/stream?period=2026-W40",
        env.base
    ))
    .await;
    assert_eq!(status, 404, "{body}");
}
