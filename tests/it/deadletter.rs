//! Bad input end to end (docs/guarantees.md): a corpus of broken and hostile messages,
//! interleaved with valid events, goes through tansu and rankflow; each bad
//! message must arrive in the dead-letter topic with the right reason and
//! its source in the headers, valid neighbours (including members and
//! scopes full of delimiters, spaces and emoji) must be applied exactly, and
//! a dead-letter topic that cannot be written must hold its partition back
//! rather than lose the message.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::reference::{Boards, now_ms, read_boards, wait_boards};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use serde_json::json;

const BOARDS: &str = r#"
[[board]]
name = "coins"
event = "gift"
member = "sender_id"
score = "count"
scope = "receiver_id"
periods = ["all"]

[[board]]
name = "per_revive"
event = "score"
member = "user_id"
score = "points / revives"
periods = ["all"]
"#;

/// The corpus: payload and the reason it must be rejected with.
fn corpus(now: i64) -> Vec<(Vec<u8>, &'static str)> {
    let gift = |patch: &dyn Fn(&mut serde_json::Value)| {
        let mut g = json!({"type": "gift", "event_id": "bad", "ts": now, "sender_id": "a",
                           "receiver_id": "r", "gift_id": "rose", "count": 1, "value": 1});
        patch(&mut g);
        g.to_string().into_bytes()
    };
    let big = {
        let mut v = br#"{"type": "gift", "pad": ""#.to_vec();
        v.resize(1024 * 1024, b'x');
        v.extend_from_slice(br#""}"#);
        v
    };
    vec![
        (b"not json at all".to_vec(), "invalid_json"),
        (b"[1, 2, 3]".to_vec(), "not_object"),
        (b"\"just a string\"".to_vec(), "not_object"),
        (
            br#"{"type": "gift", "event_id": "trunc"#.to_vec(),
            "invalid_json",
        ),
        (big, "too_large"),
        (gift(&|g| g["count"] = json!("3")), "schema"),
        (
            gift(&|g| {
                g.as_object_mut().map(|o| o.remove("sender_id"));
            }),
            "schema",
        ),
        (
            br#"{"type": "tip", "event_id": "x", "ts": 1763700000000}"#.to_vec(),
            "unknown_type",
        ),
        (
            br#"{"type": "gift", "count": NaN}"#.to_vec(),
            "invalid_json",
        ),
        (
            br#"{"type": "gift", "count": Infinity}"#.to_vec(),
            "invalid_json",
        ),
        (
            br#"{"type": "gift", "count": 1e400}"#.to_vec(),
            "invalid_json",
        ),
        (gift(&|g| g["count"] = json!(-5)), "schema"),
        (gift(&|g| g["count"] = json!(10_000_000_000i64)), "schema"),
        (gift(&|g| g["sender_id"] = json!("")), "schema"),
        (
            gift(&|g| g["sender_id"] = json!("x".repeat(10 * 1024))),
            "schema",
        ),
        (
            b"{\"type\": \"gift\", \"event_id\": \"\xff\xfe\"}".to_vec(),
            "invalid_utf8",
        ),
        (
            b"{\"type\": \"gift\", \"event_id\": \"a\x01b\"}".to_vec(),
            "invalid_json",
        ),
        (gift(&|g| g["sender_id"] = json!("a\u{1}b")), "schema"),
        (gift(&|g| g["ts"] = json!(0)), "schema"),
        (gift(&|g| g["ts"] = json!(-1_000)), "schema"),
        (gift(&|g| g["ts"] = json!(now + 86_400_000)), "future_ts"),
        (
            json!({"type": "score", "event_id": "div0", "ts": now, "user_id": "u", "game_id": "g",
                   "points": 10, "revives": 0})
            .to_string()
            .into_bytes(),
            "expression",
        ),
    ]
}

/// Valid events with awkward members and scopes, and what they add up to.
fn valid(now: i64) -> (Vec<Vec<u8>>, Boards) {
    let names = [
        "plain",
        "{curly}",
        "a:b:c",
        "100%",
        "with space",
        "emoji 😀",
        "%7B",
    ];
    let mut out = Vec::new();
    let mut expect: Boards = BTreeMap::new();
    for (i, sender) in names.iter().enumerate() {
        for (j, receiver) in names.iter().enumerate() {
            let count = (i * 7 + j) as i64 % 5 + 1;
            out.push(
                json!({"type": "gift", "event_id": format!("v{i}-{j}"), "ts": now, "sender_id": sender,
                       "receiver_id": receiver, "gift_id": "rose", "count": count, "value": 1})
                .to_string()
                .into_bytes(),
            );
            *expect
                .entry(format!("coins:{receiver}/all"))
                .or_default()
                .entry(sender.to_string())
                .or_insert(0.0) += count as f64;
        }
    }
    out.push(
        json!({"type": "score", "event_id": "ok", "ts": now, "user_id": "u", "game_id": "g",
               "points": 10, "revives": 4})
        .to_string()
        .into_bytes(),
    );
    expect.insert(
        "per_revive/all".into(),
        BTreeMap::from([("u".to_string(), 2.0)]),
    );
    (out, expect)
}

fn big_producer(broker: &Broker) -> rdkafka::producer::FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("message.max.bytes", "4000000")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_message_reaches_the_dead_letter_topic_with_its_reason() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, BOARDS);
    setup.dlq = Some(unique("dlq"));
    broker.create_topic(&setup.topic, 1).await;
    let now = now_ms();
    let bad = corpus(now);
    let (good, expect) = valid(now);
    // Interleave: good, bad, good, bad... in one partition.
    let mut messages = Vec::new();
    let mut expected_reason = BTreeMap::new();
    let mut good_iter = good.into_iter();
    for (payload, reason) in &bad {
        if let Some(g) = good_iter.next() {
            messages.push((0, g));
        }
        expected_reason.insert(messages.len() as i64, *reason);
        messages.push((0, payload.clone()));
    }
    messages.extend(good_iter.map(|g| (0, g)));
    send_all(&big_producer(&broker), &setup.topic, &messages).await;
    let app = Process::start(&setup);
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;

    // Read the dead letters back.
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("dlq-reader"))
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("consumer");
    consumer
        .subscribe(&[setup.dlq.as_deref().unwrap_or("")])
        .expect("subscribe");
    let mut seen: BTreeMap<i64, (String, String, usize)> = BTreeMap::new();
    // Read on for a quiet spell after the last expected one: a bad message
    // sent twice must show, not vanish into the map.
    let mut received = 0;
    let mut complete_at: Option<std::time::Instant> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while complete_at.is_none_or(|t| t.elapsed() < QUIET) && std::time::Instant::now() < deadline {
        if complete_at.is_none() && seen.len() >= bad.len() {
            complete_at = Some(std::time::Instant::now());
        }
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await else {
            continue;
        };
        received += 1;
        let mut header = BTreeMap::new();
        if let Some(h) = m.headers() {
            for i in 0..h.count() {
                let hd = h.get(i);
                header.insert(
                    hd.key.to_string(),
                    String::from_utf8_lossy(hd.value.unwrap_or_default()).to_string(),
                );
            }
        }
        let source = header.get("rankflow-source").cloned().unwrap_or_default();
        let offset: i64 = source
            .rsplit('/')
            .next()
            .and_then(|o| o.parse().ok())
            .unwrap_or(-1);
        assert!(
            source.starts_with(&format!("{}/0/", setup.topic)),
            "{source}"
        );
        assert!(
            !header.get("rankflow-detail").is_none_or(String::is_empty),
            "{header:?}"
        );
        seen.insert(
            offset,
            (
                header.get("rankflow-error").cloned().unwrap_or_default(),
                source,
                m.payload().map_or(0, <[u8]>::len),
            ),
        );
    }
    let got: BTreeMap<i64, &str> = seen.iter().map(|(o, (r, _, _))| (*o, r.as_str())).collect();
    assert_eq!(got, expected_reason, "reason per source offset");
    assert_eq!(received, bad.len(), "one dead letter per bad message");
    // The dead letter keeps the payload (the oversized one up to the limit).
    let (_, _, big_len) = &seen[&expected_reason
        .iter()
        .find(|(_, r)| **r == "too_large")
        .map(|(o, _)| *o)
        .unwrap_or(-1)];
    assert_eq!(*big_len, 64 * 1024);
    let metrics = get_text(&app.url("/metrics")).await.unwrap_or_default();
    for reason in [
        "invalid_json",
        "not_object",
        "too_large",
        "schema",
        "unknown_type",
        "invalid_utf8",
        "future_ts",
        "expression",
    ] {
        let want = expected_reason.values().filter(|r| **r == reason).count() as f64;
        assert_eq!(
            metric_sum(&metrics, "rankflow_dlq_total", &[("reason", reason)]),
            want,
            "{reason}"
        );
    }
    println!(
        "injected: {} bad messages between {} valid ones; verified: each in the dead-letter topic with its reason and source, valid boards exact",
        bad.len(),
        messages.len() - bad.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_dead_letter_topic_holds_the_partition_back() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, BOARDS);
    // Not a legal topic name: every write to it fails.
    setup.dlq = Some("no such topic!".into());
    broker.create_topic(&setup.topic, 1).await;
    let now = now_ms();
    let (good, expect) = valid(now);
    let bad_at = 10i64;
    let mut messages: Vec<(i32, Vec<u8>)> = good
        .iter()
        .take(bad_at as usize)
        .map(|g| (0, g.clone()))
        .collect();
    messages.push((0, b"not json".to_vec()));
    messages.extend(good.iter().skip(bad_at as usize).map(|g| (0, g.clone())));
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let mut first = Process::start(&setup);
    let health = first.url("/healthz");
    wait_for(Duration::from_secs(60), "the consumer running", || async {
        (status_of(&health).await == 200).then_some(())
    })
    .await;
    // While it tries (and fails) to write the dead letter repeatedly, the
    // partition stays held back at every look, not just at the last one.
    let watch = GroupWatch::new(&setup.brokers, &setup.group, &setup.topic);
    let (committed, position) = assert_holds(
        Duration::from_secs(8),
        "the partition held back",
        || async {
            let offsets = watch.read().await?;
            let committed = offsets.partitions[0].committed.unwrap_or(0);
            let position = redis.positions_sum(&setup.prefix).await;
            if committed > bad_at {
                return Err(format!(
                    "committed offset {committed} passed the bad message at {bad_at}"
                ));
            }
            if position > bad_at {
                return Err(format!(
                    "Redis position {position} passed the bad message at {bad_at}"
                ));
            }
            if read_boards(&redis, &setup, &expect).await == expect {
                return Err("the batch behind it was applied".into());
            }
            Ok((committed, position))
        },
    )
    .await;
    assert!(
        first.log().contains("Could not write dead letters"),
        "{}",
        first.log()
    );
    first.sigterm();
    let _ = first.child.wait();
    println!(
        "injected: dead-letter topic unwritable; verified: committed offset {committed}, Redis position {position}, both at or before the bad message {bad_at}"
    );

    setup.dlq = Some(unique("dlq"));
    let _second = Process::start(&setup);
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    println!(
        "verified: with a writable dead-letter topic the partition moves on and every board is exact"
    );
}
