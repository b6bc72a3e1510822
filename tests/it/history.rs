//! History end to end (docs/history.md, issue 10): events through Kafka into
//! archived hour boards (plain, scoped, tie-break), the hour closed by
//! moving rankflow's clock, then checked from outside: the PostgreSQL rows
//! equal standings computed here, each period is announced on the closed
//! topic with its top entries, reads of the closed hour give the same JSON
//! from the archive as they did live, and events for the closed hour are
//! counted `late` and change nothing.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::history::{self, BOARDS, Expected, HOUR, HOUR_START, MINUTE};
use common::postgres::Postgres;
use common::reference::{Boards, wait_boards};
use common::*;
use rankflow::clock::{ManualClock, SharedClock};
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use serde_json::Value;

const TOP: usize = 5;

fn setup(broker: &Broker, redis: &Redis, pg: &Postgres, closed_topic: &str) -> Setup {
    let mut setup = Setup::new(broker, redis, BOARDS);
    setup.extra = format!(
        "[archive]\nurl = \"{}\"\ngrace = \"1s\"\nclosed_topic = \"{closed_topic}\"\nclosed_top = {TOP}\ninterval_ms = 200\nchunk = 7\n",
        pg.url()
    );
    setup
}

/// The `all` board of `coins`, summed from the events, to wait on: when it
/// is exact with every offset committed, every event has been processed.
fn coins_all(expect: &Expected, extra: &[(String, f64)]) -> Boards {
    let mut all: BTreeMap<String, f64> = expect[&("coins".to_string(), String::new())]
        .iter()
        .cloned()
        .collect();
    for (m, v) in extra {
        *all.entry(m.clone()).or_insert(0.0) += v;
    }
    BTreeMap::from([("coins/all".to_string(), all)])
}

fn read_path(board: &str, scope: &str, what: &str) -> String {
    let scope = if scope.is_empty() {
        String::new()
    } else {
        format!("&scope={scope}")
    };
    format!("/v1/boards/{board}/hour/{what}period={HOUR}{scope}")
}

/// Every read of the closed hour a client might make: pages, one member,
/// the neighbours of a member; JSON without `source`, and the sources seen.
async fn reads(app: &InProcess, expect: &Expected) -> (BTreeMap<String, Value>, BTreeSet<String>) {
    let mut out = BTreeMap::new();
    let mut sources = BTreeSet::new();
    for ((board, scope), standings) in expect {
        let mid = &standings[standings.len() / 2].0;
        for what in [
            "top?limit=1000&".to_string(),
            "top?limit=3&offset=2&".to_string(),
            format!("members/{mid}?"),
            format!("around/{mid}?radius=2&"),
        ] {
            let path = read_path(board, scope, &what);
            let (status, mut body) = get_json(&app.url(&path)).await;
            assert_eq!(status, 200, "GET {path}: {body}");
            if let Some(s) = body.as_object_mut().and_then(|o| o.remove("source")) {
                sources.insert(s.as_str().unwrap_or("?").to_string());
            } else {
                panic!("GET {path} has no \"source\": {body}");
            }
            out.insert(path, body);
        }
    }
    (out, sources)
}

/// The period-closed messages on `topic`, by key (de-duplicated: at least
/// once), once every expected key has arrived.
async fn closed_messages(broker: &Broker, topic: &str, want: usize) -> BTreeMap<String, Value> {
    let consumer: StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("closed-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut got = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while got.len() < want {
        let msg = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {want} period-closed messages: {got:?}",
                    got.len()
                )
            })
            .expect("message");
        let key = String::from_utf8_lossy(msg.key().unwrap_or_default()).to_string();
        let value: Value = serde_json::from_slice(msg.payload().unwrap_or_default()).expect("JSON");
        got.insert(key, value);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closed_hours_are_archived_exactly_announced_and_read_back_the_same() {
    let pg = Postgres::start();
    let broker = Broker::start();
    let redis = Redis::start();
    let closed_topic = unique("closed");
    let setup = setup(&broker, &redis, &pg, &closed_topic);
    broker.create_topic(&setup.topic, 3).await;
    broker.create_topic(&closed_topic, 1).await;
    let clock = ManualClock::new(HOUR_START + 55 * MINUTE);
    let shared: SharedClock = Arc::new(clock.clone());
    let app = InProcess::start(&setup, shared).await;

    let (events, expect) = history::hour_of_events(3000, 10, 3);
    feed(
        &broker,
        &setup.topic,
        events,
        500,
        Duration::from_millis(20),
    );
    wait_boards(
        &redis,
        &setup,
        &coins_all(&expect, &[]),
        Duration::from_secs(90),
    )
    .await;
    let (live, sources) = reads(&app, &expect).await;
    assert_eq!(sources, BTreeSet::from(["live".to_string()]));
    let hour_key = setup.key("coins", &format!("hour:{HOUR}"));
    assert_eq!(
        redis.cli(&["PTTL", &hour_key]).trim(),
        "-1",
        "an archived hour has no expiry before it is archived"
    );

    // Close the hour: its end plus the 1 s grace.
    clock.set(HOUR_START + 60 * MINUTE + 2_000);
    let pg_client = history::connect(&pg.url()).await;
    let done = wait_for(
        Duration::from_secs(60),
        "every instance of the hour archived",
        || async {
            let c = history::completed(&pg_client, HOUR).await;
            (c.len() == expect.len()).then_some(c)
        },
    )
    .await;
    for ((board, scope), standings) in &expect {
        let rows = history::archived(&pg_client, board, scope, HOUR).await;
        assert_eq!(
            &rows, standings,
            "archived {board}/{scope} equals the reference"
        );
        assert_eq!(
            done[&(board.clone(), scope.clone())],
            standings.len() as i64
        );
    }
    println!(
        "archived {} board instances of hour {HOUR}, {} rows, equal to the reference",
        expect.len(),
        expect.values().map(Vec::len).sum::<usize>()
    );

    // Late events for the closed hour: scores (only an hour view) are
    // `late`; gifts still count on the all-time board, not on the hour.
    let before = events_counted(&app.url("/metrics"), &setup.topic, "late").await;
    let late: Vec<(i32, Vec<u8>)> = (0..40)
        .map(|i| {
            let e = if i % 2 == 0 {
                serde_json::json!({"type": "score", "event_id": format!("late{i}"), "ts": HOUR_START + 58 * MINUTE,
                    "user_id": "p1", "game_id": "g1", "points": 1_000})
            } else {
                serde_json::json!({"type": "gift", "event_id": format!("late{i}"), "ts": HOUR_START + 58 * MINUTE,
                    "sender_id": "u1", "receiver_id": "s9", "gift_id": "rose", "count": 1, "value": 1.0})
            };
            (i % 3, e.to_string().into_bytes())
        })
        .collect();
    send_all(&broker.producer(), &setup.topic, &late).await;
    wait_boards(
        &redis,
        &setup,
        &coins_all(&expect, &[("s9".to_string(), 20.0)]),
        Duration::from_secs(60),
    )
    .await;
    let counted = wait_for(
        Duration::from_secs(20),
        "20 late events counted",
        || async {
            let n = events_counted(&app.url("/metrics"), &setup.topic, "late").await - before;
            (n >= 20.0).then_some(n)
        },
    )
    .await;
    assert_eq!(
        counted, 20.0,
        "exactly the 20 score events for the closed hour are late"
    );
    for ((board, scope), standings) in &expect {
        let rows = history::archived(&pg_client, board, scope, HOUR).await;
        assert_eq!(&rows, standings, "{board}/{scope} unchanged by late events");
    }

    // Reads once the hour is gone from Redis equal the live reads.
    for key in redis.keys(&format!("{}:*hour:{HOUR}*", setup.prefix)).await {
        redis.cli(&["DEL", &key]);
    }
    let (archived, sources) = reads(&app, &expect).await;
    assert_eq!(sources, BTreeSet::from(["archive".to_string()]));
    for (path, body) in &live {
        assert_eq!(
            &archived[path], body,
            "GET {path} from the archive equals the live read"
        );
    }
    let (status, _) = get_json(&app.url("/v1/boards/coins/hour/top?period=2026-06-10T09")).await;
    assert_eq!(status, 404, "an hour that never had events");
    println!(
        "{} reads equal live and from the archive; an empty past hour is 404",
        live.len()
    );

    // One announcement per instance, matching the archive.
    let messages = closed_messages(&broker, &closed_topic, expect.len()).await;
    for ((board, scope), standings) in &expect {
        let key = format!("{board}/{scope}/hour/{HOUR}");
        let m = messages
            .get(&key)
            .unwrap_or_else(|| panic!("no message keyed {key}"));
        assert_eq!(m["members"], standings.len(), "{key}");
        let entries: Vec<(String, f64)> = m["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                (
                    e["member"].as_str().unwrap().to_string(),
                    e["score"].as_f64().unwrap(),
                )
            })
            .collect();
        let top: Vec<_> = standings.iter().take(TOP).cloned().collect();
        assert_eq!(
            entries, top,
            "{key}: the message's entries are the archive's top {TOP}"
        );
        assert_eq!(m["entries"][0]["rank"], 1);
    }
    println!(
        "{} period-closed messages match the archive",
        messages.len()
    );
    app.stop().await;
}
