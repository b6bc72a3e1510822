//! Member actions through `rankflow run` (docs/moderation.md, docs/admin.md),
//! with a real broker and Redis: events of `u1` and others are consumed;
//! `POST /v1/admin/members/u1/hide` with a token answers 200 and from then
//! on reads of `u1` are 404, member lists put it under `"missing"`, the
//! others' ranks close up in the API and in a plain `ZREVRANGE`; events of
//! `u1` meanwhile count `hidden`; `restore` gives back everything,
//! those events included; `erase` leaves no trace, later events count
//! `erased`. Every action is announced on the audit topic with the token's
//! name, the erasure without the id.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::sse::{Ev, Stream};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use serde_json::{Value, json};

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["day", "all"]
"#;

const TOKEN: &str = "ops-token-0123456789abcdef";
const ERASE_KEY: &str = "erase-key-fedcba9876543210";

async fn post(url: &str, body: Value) -> (u16, Value, Duration) {
    let started = Instant::now();
    let resp = reqwest::Client::new()
        .post(url)
        .header("Authorization", format!("Bearer {TOKEN}"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = resp.status().as_u16();
    (
        status,
        resp.json().await.unwrap_or(Value::Null),
        started.elapsed(),
    )
}

async fn admin_json(url: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(url)
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .expect("GET");
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

fn events(from: usize, users: &[(&str, i64)]) -> Vec<(i32, Vec<u8>)> {
    let now = chrono::Utc::now().timestamp_millis();
    users
        .iter()
        .enumerate()
        .map(|(i, (u, p))| {
            let e = json!({"type": "score", "event_id": format!("e{}", from + i), "ts": now,
                           "user_id": u, "game_id": "g", "points": p});
            (0, e.to_string().into_bytes())
        })
        .collect()
}

/// Today's day id (UTC).
fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

/// (member, score) of the `all` view's top, in rank order.
async fn top(app: &Process) -> Vec<(String, f64, u64)> {
    let (_, body) = get_json(&app.url("/v1/boards/points/all/top?limit=10")).await;
    body["entries"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["member"].as_str().unwrap_or_default().to_string(),
                        e["score"].as_f64().unwrap_or_default(),
                        e["rank"].as_u64().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A setup with the admin token, an audit topic and an erase key, its
/// topics created; and the audit topic's name.
async fn audited(broker: &Broker, redis: &Redis) -> (Setup, String) {
    let mut setup = Setup::new(broker, redis, BOARDS);
    let audit_topic = unique("audit");
    setup.extra = format!(
        "[admin]\ntokens = {{ ops = \"{TOKEN}\" }}\naudit_topic = \"{audit_topic}\"\nerase_key = \"{ERASE_KEY}\"\n"
    );
    broker.create_topic(&setup.topic, 1).await;
    broker.create_topic(&audit_topic, 1).await;
    (setup, audit_topic)
}

/// The four members of the Redis-loss tests, and their points.
const USERS: [(&str, i64); 4] = [("u1", 50), ("u2", 30), ("u3", 20), ("u4", 10)];

/// An audited `rankflow run` with [`USERS`]' first events on its board,
/// and the producer that sent them.
async fn four_on_the_board(
    broker: &Broker,
    redis: &Redis,
) -> (Setup, Process, rdkafka::producer::FutureProducer) {
    let (setup, _) = audited(broker, redis).await;
    let app = serving(&setup, &[]).await;
    let producer = broker.producer();
    send_all(&producer, &setup.topic, &events(0, &USERS)).await;
    wait_for(
        Duration::from_secs(60),
        "the events on the board",
        || async { (top(&app).await.len() == 4).then_some(()) },
    )
    .await;
    (setup, app, producer)
}

/// The `all` view's top stays `want` for 2 s.
async fn top_stays(app: &Process, want: &[(String, f64, u64)], what: &str) {
    assert_holds(Duration::from_secs(2), what, || async {
        let got = top(app).await;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// `rankflow run` with `env`, once it answers `/healthz`.
async fn serving(setup: &Setup, env: &[(&str, &str)]) -> Process {
    let app = Process::start_env(setup, env);
    wait_for(
        Duration::from_secs(60),
        "rankflow serving /healthz",
        || async { (status_of(&app.url("/healthz")).await == 200).then_some(()) },
    )
    .await;
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_restore_and_erase_through_the_admin_api() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (setup, audit_topic) = audited(&broker, &redis).await;
    let app = serving(&setup, &[("RANKFLOW_HTTP_UNION_CACHE", "200ms")]).await;
    let producer = broker.producer();
    send_all(
        &producer,
        &setup.topic,
        &events(0, &[("u1", 50), ("u2", 30), ("u3", 20), ("u1", 5)]),
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "the first events on the board",
        || async { (top(&app).await.len() == 3).then_some(()) },
    )
    .await;
    assert_eq!(top(&app).await[0], ("u1".to_string(), 55.0, 1));

    // A rolling view read now is a union a reader keeps for union_cache.
    let rolling = app.url("/v1/boards/points/last:2d/top?limit=10");
    let (_, union) = get_json(&rolling).await;
    assert_eq!(union["entries"][0]["member"], "u1", "{union}");

    // Live streams opened before the hide.
    let mut top_stream =
        Stream::open(&app.url("/v1/boards/points/all/top/stream?limit=10"), None).await;
    let first = top_stream
        .event(Duration::from_secs(10), "the top stream's first list")
        .await;
    assert_eq!(first.data["entries"][0]["member"], "u1", "{:?}", first.data);
    let mut member_stream =
        Stream::open(&app.url("/v1/boards/points/all/members/u1/stream"), None).await;
    let mine = member_stream
        .event(Duration::from_secs(10), "u1's first entry")
        .await;
    assert_eq!(mine.data["rank"], 1, "{:?}", mine.data);

    // Hide.
    let (status, body, took) = post(
        &app.url("/v1/admin/members/u1/hide"),
        json!({"reason": "exploit"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "hidden", "{body}");
    assert!(took < Duration::from_secs(1), "hide took {took:?}");
    let (status, _) = get_json(&app.url("/v1/boards/points/all/members/u1")).await;
    assert_eq!(status, 404);
    let (_, union) = get_json(&rolling).await;
    assert_eq!(
        union["entries"][0]["member"], "u2",
        "the cached union: {union}"
    );
    assert_eq!(
        top(&app).await,
        [("u2".to_string(), 30.0, 1), ("u3".to_string(), 20.0, 2)]
    );
    // The streams drop it at their next update.
    let members_of = |e: &Ev| -> Vec<String> {
        e.data["entries"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["member"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let next = top_stream
        .event_until(Duration::from_secs(5), "the top stream without u1", |e| {
            !members_of(e).contains(&"u1".to_string())
        })
        .await;
    assert_eq!(members_of(&next), ["u2", "u3"]);
    assert_eq!(next.data["entries"][0]["rank"], 1, "{:?}", next.data);
    let gone = member_stream
        .event(Duration::from_secs(5), "u1's stream after the hide")
        .await;
    assert_eq!(gone.event.as_deref(), Some("absent"), "{gone:?}");
    let (_, list) = get_json(&app.url("/v1/boards/points/all/members?ids=u1,u3")).await;
    assert_eq!(list["missing"], json!(["u1"]), "{list}");
    assert_eq!(list["entries"][0]["rank"], 2, "{list}");
    let plain = redis.zset(&setup.key("points", "all")).await;
    assert_eq!(plain.keys().collect::<Vec<_>>(), ["u2", "u3"]);
    let (status, state) = admin_json(&app.url("/v1/admin/members/u1")).await;
    assert_eq!(
        (status, &state["state"]),
        (200, &json!("hidden")),
        "{state}"
    );
    assert_eq!(state["hidden"]["actor"], "ops", "{state}");
    // Its events meanwhile are kept aside.
    send_all(
        &producer,
        &setup.topic,
        &events(10, &[("u1", 7), ("u2", 1)]),
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the events during the hide",
        || async {
            (events_counted(&app.url("/metrics"), &setup.topic, "hidden").await == 1.0)
                .then_some(())
        },
    )
    .await;
    assert_holds(Duration::from_millis(500), "u1 stays hidden", || async {
        let top = top(&app).await;
        if top.iter().all(|(m, _, _)| m != "u1") {
            Ok(())
        } else {
            Err(format!("{top:?}"))
        }
    })
    .await;

    // Restore: everything, the hidden events included.
    let (status, body, _) = post(&app.url("/v1/admin/members/u1/restore"), json!({})).await;
    assert_eq!((status, &body["state"]), (200, &json!("visible")), "{body}");
    assert_eq!(top(&app).await[0], ("u1".to_string(), 62.0, 1));

    // The same from the command line, audited as `cli`.
    let cli = CliConfig::new(
        &format!("[admin]\nerase_key = \"{ERASE_KEY}\"\n[http]\nunion_cache = \"200ms\"\n{BOARDS}"),
        &redis.url(),
        &setup.prefix,
    );
    let out = cli.stdout("member hide u3 --boards points --reason spam", &[]);
    let hidden: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        (
            &hidden["state"],
            &hidden["hidden"]["actor"],
            &hidden["hidden"]["reason"]
        ),
        (&json!("hidden"), &json!("cli"), &json!("spam")),
        "{out}"
    );
    assert!(top(&app).await.iter().all(|(m, _, _)| m != "u3"));
    let (_, state) = admin_json(&app.url("/v1/admin/members/u3")).await;
    assert_eq!(state["state"], "hidden", "{state}");
    let out = cli.stdout("member restore u3", &[]);
    assert!(out.contains("\"visible\""), "{out}");
    let shown: Value = serde_json::from_str(&cli.stdout("member show u3", &[])).expect("JSON");
    assert_eq!(
        shown["boards"][0]["views"],
        json!(["day:".to_string() + &today(), "all".to_string()]),
        "{shown}"
    );
    let refused = cli.run("member hide u3 --boards nosuch", &[]);
    assert_eq!(refused.status.code(), Some(2));

    // Erase.
    let (status, body, _) = post(&app.url("/v1/admin/members/u1/erase"), Value::Null).await;
    assert_eq!((status, &body["state"]), (200, &json!("erased")), "{body}");
    assert!(!body.to_string().contains("u1"), "{body}");
    send_all(
        &producer,
        &setup.topic,
        &events(20, &[("u1", 100), ("u3", 1)]),
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the events after the erasure",
        || async {
            (events_counted(&app.url("/metrics"), &setup.topic, "erased").await == 1.0)
                .then_some(())
        },
    )
    .await;
    let after: Vec<String> = top(&app).await.into_iter().map(|(m, _, _)| m).collect();
    assert_eq!(after, ["u2", "u3"]);
    let (_, state) = admin_json(&app.url("/v1/admin/members/u1")).await;
    assert_eq!(state["state"], "erased", "{state}");
    let mut leftover = String::new();
    for key in redis.keys(&format!("{}:*", setup.prefix)).await {
        leftover.push_str(&key);
        leftover.push_str(&redis.cli(&["DUMP", &key]));
    }
    assert!(!leftover.contains("u1"), "a trace of u1 in Redis");

    // The audit trail: three actions by `ops`, keyed by the target; the
    // erasure names a hash, not the id.
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("audit-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&audit_topic]).expect("subscribe");
    let mut seen: BTreeMap<String, (String, Value)> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 3 && Instant::now() < deadline {
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
        else {
            continue;
        };
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value: Value = serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON");
        seen.insert(
            value["action"].as_str().unwrap_or_default().to_string(),
            (key, value),
        );
    }
    let actions: Vec<&String> = seen.keys().collect();
    assert_eq!(
        actions,
        ["member.erase", "member.hide", "member.restore"],
        "{seen:?}"
    );
    assert_eq!(seen["member.hide"].0, "member:u1");
    assert_eq!(seen["member.hide"].1["actor"], "ops");
    assert_eq!(seen["member.hide"].1["detail"]["reason"], "exploit");
    let (key, erase) = &seen["member.erase"];
    assert!(
        key.starts_with("member-hash:") && !key.contains("u1"),
        "{key}"
    );
    assert!(!erase.to_string().contains("\"u1\""), "{erase}");
    assert!(
        app.log().contains("Admin action done."),
        "the actions are logged"
    );
    println!(
        "verified: hide answered in {} ms; reads 404, \"missing\", ranks closed up; 1 hidden event restored; erased, no trace in Redis; 3 audit messages",
        took.as_millis()
    );
}

/// Redis loses its data (`FLUSHALL`, as a restart without persistence
/// would) after a hide and an erasure, and the topic is replayed into it
/// under a new consumer group: rankflow rebuilds the moderation record from
/// the audit topic before it consumes, so the erased member never comes
/// back and the hidden one stays hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_moderation_record_is_rebuilt_from_the_audit_topic_before_a_replay() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (mut setup, mut app, _) = four_on_the_board(&broker, &redis).await;
    let hide = json!({"boards": ["points"], "reason": "exploit"});
    let (status, body, _) = post(&app.url("/v1/admin/members/u1/hide"), hide).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = post(&app.url("/v1/admin/members/u2/erase"), Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = post(&app.url("/v1/admin/members/u4/hide"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = post(&app.url("/v1/admin/members/u4/restore"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    app.kill9();

    // Redis loses everything; a new group replays the topic from the start.
    redis.cli(&["FLUSHALL"]);
    setup.group = unique("group");
    let app = serving(&setup, &[]).await;
    wait_for(
        Duration::from_secs(60),
        "the replay on the board",
        || async { (top(&app).await.len() == 2).then_some(()) },
    )
    .await;
    let want = [("u3".to_string(), 20.0, 1), ("u4".to_string(), 10.0, 2)];
    top_stays(&app, &want, "u1 hidden, u2 erased").await;
    let (_, u1) = admin_json(&app.url("/v1/admin/members/u1")).await;
    assert_eq!(u1["state"], "hidden", "{u1}");
    // Hidden from every board there is: `null`, as the action answered.
    assert_eq!(u1["hidden"]["boards"], Value::Null, "{u1}");
    assert_eq!(u1["hidden"]["reason"], "exploit", "{u1}");
    let (_, u2) = admin_json(&app.url("/v1/admin/members/u2")).await;
    assert_eq!(u2["state"], "erased", "{u2}");
    let (_, u4) = admin_json(&app.url("/v1/admin/members/u4")).await;
    assert_eq!(u4["state"], "visible", "{u4}");
    println!(
        "verified: after FLUSHALL and a replay, the rebuilt record kept u1 hidden and u2 erased; top {want:?}"
    );
}

/// Redis loses its data while rankflow keeps running (`FLUSHALL`: the
/// consumer does not notice, and keeps the record it read). The next action
/// finds the record missing, rebuilds it from the audit topic and raises
/// its generation above the consumer's, so the consumer reads it again:
/// the new hide applies at once, and the earlier hide and erasure hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_after_redis_lost_its_data_reaches_a_running_consumer() {
    let broker = Broker::start();
    let redis = Redis::start();
    let (setup, app, producer) = four_on_the_board(&broker, &redis).await;
    let users = USERS;
    let (status, body, _) = post(&app.url("/v1/admin/members/u1/hide"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = post(&app.url("/v1/admin/members/u2/erase"), Value::Null).await;
    assert_eq!(status, 200, "{body}");
    // More actions: the record's count of them runs ahead of what a
    // rebuilt record would count.
    for action in ["hide", "restore"].repeat(4) {
        let (status, body, _) = post(
            &app.url(&format!("/v1/admin/members/u4/{action}")),
            json!({}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // Events after the actions: the consumer reads the record's newest
    // generation.
    send_all(&producer, &setup.topic, &events(5, &users)).await;
    let both = [("u3".to_string(), 40.0, 1), ("u4".to_string(), 20.0, 2)];
    wait_for(
        Duration::from_secs(30),
        "the events after the actions",
        || async { (top(&app).await == both).then_some(()) },
    )
    .await;

    redis.cli(&["FLUSHALL"]);
    let (status, body, _) = post(&app.url("/v1/admin/members/u3/hide"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    // New events of everyone; only u4's may show.
    send_all(&producer, &setup.topic, &events(10, &users)).await;
    wait_for(Duration::from_secs(30), "u4 back on the board", || async {
        (!top(&app).await.is_empty()).then_some(())
    })
    .await;
    let want = [("u4".to_string(), 10.0, 1)];
    top_stays(&app, &want, "only u4 shows").await;
    for (member, state) in [("u1", "hidden"), ("u2", "erased"), ("u3", "hidden")] {
        let (_, body) = admin_json(&app.url(&format!("/v1/admin/members/{member}"))).await;
        assert_eq!(body["state"], state, "{member}: {body}");
    }
    println!(
        "verified: after FLUSHALL under a running consumer, a new hide reached it; top {want:?}"
    );
}
