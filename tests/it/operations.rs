//! Operating rankflow: a fleet of consumer processes sharing a group (each
//! reporting its own partitions' lag), the Prometheus series the shipped
//! dashboard and alert rules query (the archive's too, produced by a real
//! archive across a PostgreSQL outage), start-up while Kafka and Redis are
//! unreachable, and the docker-compose stack and Dockerfile checked against
//! the code (they cannot run here: `docker-compose config` validates them).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::reference::*;
use common::*;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

// ---------------------------------------------------------------- fleet

/// The `partition` labels of this topic's `rankflow_consumer_lag` series,
/// with their values.
fn lag_series(metrics: &str, topic: &str) -> BTreeMap<i32, f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("rankflow_consumer_lag{"))
        .filter(|l| l.contains(&format!("topic=\"{topic}\"")))
        .filter_map(|l| {
            let p = l.split("partition=\"").nth(1)?.split('"').next()?;
            let v = l.rsplit(' ').next()?;
            Some((p.parse().ok()?, v.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_consumers_share_twelve_partitions_and_each_reports_its_own_lag() {
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    setup.batch = (1000, 20);
    broker.create_topic(&setup.topic, 12).await;
    let fleet = [
        Process::start(&setup),
        Process::start(&setup),
        Process::start(&setup),
    ];
    let spread = wait_for(
        Duration::from_secs(90),
        "12 partitions spread over 3 healthy consumers",
        || async {
            let mut counts = Vec::new();
            for p in &fleet {
                let (status, body) = get_json_or_null(&p.url("/healthz")).await;
                if status != 200 {
                    return None;
                }
                counts.push(body["assigned_partitions"].as_u64()?);
            }
            (counts.iter().sum::<u64>() == 12 && counts.iter().all(|c| *c > 0)).then_some(counts)
        },
    )
    .await;
    println!("verified: assigned partitions per consumer {spread:?}");

    let total = 60_000;
    let (messages, expect) = mixed_events(total, 51, 12, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    wait_boards(&redis, &setup, &expect, Duration::from_secs(180)).await;

    // Each instance reports lag only for its own partitions; together they
    // cover all twelve, and every lag is 0 once the stream is drained.
    // (A partition that moved away stops being reported within 30 s.)
    let sets = wait_for(
        Duration::from_secs(90),
        "disjoint lag series covering 12 partitions, all 0",
        || async {
            let mut sets = Vec::new();
            for p in &fleet {
                let text = get_text(&p.url("/metrics")).await?;
                sets.push(lag_series(&text, &setup.topic));
            }
            let mut seen = BTreeSet::new();
            for s in &sets {
                for (partition, lag) in s {
                    if !seen.insert(*partition) || *lag != 0.0 {
                        return None;
                    }
                }
            }
            (seen.len() == 12 && sets.iter().all(|s| !s.is_empty())).then_some(sets)
        },
    )
    .await;
    let owned: Vec<Vec<i32>> = sets.iter().map(|s| s.keys().copied().collect()).collect();
    println!("verified: {total} events exact; lag series per consumer {owned:?}, all 0");
}

/// `rankflow produce` keys each message by its sender or user, or with
/// `--key event` by its `event_id` (docs/cli.md): read back from the topic,
/// each key against the payload's own fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_keys_messages_by_user_or_by_event_id() {
    let broker = Broker::start();
    let brokers = broker.brokers();
    let board = "[[board]]\nname = \"b\"\nevent = \"gift\"\nmember = \"sender_id\"\nscore = \"count\"\nperiods = [\"all\"]\n";
    let cli = CliConfig::new(board, "redis://127.0.0.1:1", "p");
    for key in ["user", "event"] {
        let topic = unique("produced");
        broker.create_topic(&topic, 4).await;
        cli.stdout(
            &format!("produce --events 300 --rate 0 --topic {topic} --key {key}"),
            &[("RANKFLOW_KAFKA_BROKERS", &brokers)],
        );
        let read = letters::read_letters(
            &broker,
            &topic,
            Duration::from_secs(60),
            Duration::from_secs(1),
            |l| l.len() >= 300,
        )
        .await;
        assert_eq!(read.len(), 300, "{key}");
        let mut distinct = BTreeSet::new();
        for l in &read {
            let v: Value = serde_json::from_slice(&l.payload).expect("JSON");
            let expected = match key {
                "event" => &v["event_id"],
                _ => v
                    .get("sender_id")
                    .or_else(|| v.get("user_id"))
                    .expect("a user"),
            };
            assert_eq!(
                String::from_utf8_lossy(&l.key),
                expected.as_str().expect("a string")
            );
            distinct.insert(l.key.clone());
        }
        // Zipf-drawn users repeat; event ids never do.
        match key {
            "event" => assert_eq!(distinct.len(), 300),
            _ => assert!(distinct.len() < 200, "{} distinct users", distinct.len()),
        }
    }
}

async fn get_json_or_null(url: &str) -> (u16, Value) {
    match reqwest::get(url).await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

// ---------------------------------------------------------------- dashboards

/// Every `rankflow_*` name in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("rankflow_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Label names an expression groups by or selects on.
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for keyword in ["by (", "by(", "without ("] {
        for part in expr.split(keyword).skip(1) {
            let inside = part.split(')').next().unwrap_or("");
            labels.extend(inside.split(',').map(|l| l.trim().to_string()));
        }
    }
    for part in expr.split('{').skip(1) {
        let inside = part.split('}').next().unwrap_or("");
        for matcher in inside.split(',') {
            if let Some(name) = matcher.split(['=', '!']).next() {
                labels.insert(name.trim().to_string());
            }
        }
    }
    labels.retain(|l| !l.is_empty() && !l.starts_with('$'));
    labels
}

/// Every `expr` string anywhere in the dashboard JSON.
fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// The label names of every series of `name` in a Prometheus text page.
fn served_labels(metrics: &str, name: &str) -> Option<BTreeSet<String>> {
    let mut found = false;
    let mut labels = BTreeSet::new();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if let Some(inner) = rest.strip_prefix('{') {
            found = true;
            let inner = inner.split('}').next().unwrap_or("");
            labels.extend(
                inner
                    .split("\",")
                    .filter_map(|kv| kv.split('=').next())
                    .map(|k| k.trim().to_string()),
            );
        } else if rest.starts_with(' ') {
            found = true;
        }
    }
    found.then_some(labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_alerts_query_is_served() {
    let dashboard: Value = serde_json::from_str(&read("dashboards/rankflow.json")).expect("JSON");
    let alerts = yaml_to_json(&read("dashboards/alerts.yml"));
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    let dashboard_queries = exprs.len();
    dashboard_exprs(&alerts, &mut exprs);
    let alert_queries = exprs.len() - dashboard_queries;
    assert!(alert_queries >= 3, "alert rules: {alert_queries}");
    let all: String = exprs.join("\n");
    for needed in [
        "rankflow_events_total",
        "rankflow_consumer_lag",
        "rankflow_batch_flush_seconds_bucket",
        "rankflow_event_lag_seconds_bucket",
        "rankflow_redis_errors_total",
        "rankflow_dlq_total",
        "rankflow_rebalances_total",
        "rankflow_window_evictions_total",
        "rankflow_archive_periods_total",
        "rankflow_archive_rows_total",
        "rankflow_archive_pending",
        "rankflow_archive_oldest_pending_seconds",
        "rankflow_archive_errors_total",
        "rankflow_archive_copy_seconds_bucket",
        "rankflow_quarantined_total",
        "rankflow_backfill_lag",
    ] {
        assert!(
            metric_names(&all).contains(needed),
            "the dashboard does not chart {needed}"
        );
    }
    for q in ["histogram_quantile(0.5", "histogram_quantile(0.99"] {
        assert!(all.contains(q), "the dashboard has no {q}, …) panel");
        assert!(
            exprs.iter().any(|e| e.starts_with(q)
                && metric_names(e).contains("rankflow_archive_copy_seconds_bucket")),
            "the dashboard has no {q}, …) of the archive copy duration"
        );
    }
    let backlog = alert_rule(&alerts, "RankflowArchiveBacklog");
    assert_eq!(
        backlog["expr"].as_str().map(str::trim),
        Some("max(rankflow_archive_oldest_pending_seconds) > 1800")
    );
    assert_eq!(backlog["for"], "5m");
    let errors = alert_rule(&alerts, "RankflowArchiveErrors");
    assert!(
        metric_names(errors["expr"].as_str().unwrap_or(""))
            .contains("rankflow_archive_errors_total"),
        "{errors}"
    );
    let uids: BTreeSet<&str> = all_datasource_uids(&dashboard);
    assert_eq!(
        uids,
        BTreeSet::from(["prometheus"]),
        "panels must use the provisioned datasource"
    );
    assert!(read("dashboards/provisioning/datasources.yml").contains("uid: prometheus"));

    // A running rankflow that has applied events, sent one to the DLQ and
    // evicted window buckets serves every one of those series.
    let broker = Broker::start();
    let redis = Redis::start();
    let mut pg = postgres::Postgres::start();
    // A check that no event fails: its series is served from start-up; a
    // shadow board, whose backfill reports its lag.
    let boards = format!(
        "{MIXED_BOARDS}\n[[board]]\nname = \"recent\"\nevent = \"gift\"\nmember = \"sender_id\"\nscore = \"count\"\nwindows = [\"1m/10s\"]\n{HOURLY_ARCHIVED}\n[[board]]\nname = \"points_v2\"\nshadow_of = \"points\"\nevent = \"score\"\nmember = \"user_id\"\nscore = \"points * 2\"\nperiods = [\"week\"]\n[[check]]\nname = \"count_cap\"\nevent = \"gift\"\nrule = \"count < 1000000\"\n"
    );
    let mut setup = Setup::new(&broker, &redis, &boards);
    setup.quarantine = Some(unique("quarantine"));
    // A grace longer than the events' 2-hour spread: every hour they touch
    // is still open, so the sink registers it as due.
    setup.extra = format!(
        "[archive]\nurl = \"{}\"\ngrace = \"3h\"\ninterval_ms = 200\n",
        pg.url()
    );
    setup.dlq = Some(unique("dlq"));
    broker.create_topic(&setup.topic, 2).await;
    broker
        .create_topic(setup.dlq.as_deref().expect("dlq"), 1)
        .await;
    let (mut messages, _) = mixed_events(2_000, 61, 2, now_ms());
    messages.push((0, b"not json".to_vec()));
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let app = Process::start(&setup);
    let text = wait_for(
        Duration::from_secs(60),
        "events applied and lag reported",
        || async {
            let text = get_text(&app.url("/metrics")).await?;
            let applied = metric_sum(&text, "rankflow_events_total", &[("outcome", "applied")]);
            let lag_reported = !lag_series(&text, &setup.topic).is_empty();
            (applied >= 2_000.0
                && lag_reported
                && text.contains("rankflow_dlq_total{reason=\"invalid_json\"} 1"))
            .then_some(text)
        },
    )
    .await;
    let (_app, archived) =
        archive_periods_across_an_outage(app, &redis, &mut setup, &mut pg, text.clone()).await;
    // The series of the first process (lag, DLQ, evictions) and of the
    // restarted one (the archive's) together: what Prometheus would hold.
    let text = format!("{text}\n{archived}");
    let mut checked = 0;
    for expr in &exprs {
        let names = metric_names(expr);
        let mut labels_served = BTreeSet::from(["le".to_string(), "job".into(), "instance".into()]);
        for name in &names {
            let labels = served_labels(&text, name)
                .unwrap_or_else(|| panic!("`{name}` (queried by `{expr}`) is not served"));
            labels_served.extend(labels);
            checked += 1;
        }
        if !names.is_empty() {
            for label in label_names(expr) {
                assert!(
                    labels_served.contains(&label),
                    "`{expr}` uses label `{label}`, which {names:?} do not carry"
                );
            }
        }
    }
    println!(
        "verified: {dashboard_queries} dashboard and {alert_queries} alert queries ({checked} metric references) are served with their labels"
    );
}

/// An hourly board archived to PostgreSQL (the series of the History row).
const HOURLY_ARCHIVED: &str = r#"
[[board]]
name = "hist"
event = "gift"
member = "receiver_id"
score = "count"
periods = ["hour"]
archive = ["hour"]
"#;

fn alert_rule<'a>(alerts: &'a Value, name: &str) -> &'a Value {
    alerts["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["rules"].as_array())
        .flatten()
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("alerts.yml has no rule {name}"))
}

/// Stops PostgreSQL, then restarts rankflow with a 1-second grace, as an
/// operator who shortens it would: the hours of the `hist` board before the
/// current one close, the archiver fails on them (errors counted, periods
/// pending), and once PostgreSQL is back it copies them; afterwards every
/// archive series carries a sample. (Forging a due score no longer works:
/// the archiver checks each period against the configured grace.) Returns
/// the restarted process and the metrics page it served last.
async fn archive_periods_across_an_outage(
    app: Process,
    redis: &Redis,
    setup: &mut Setup,
    pg: &mut postgres::Postgres,
    text: String,
) -> (Process, String) {
    let due = format!("{}:archive:due", setup.prefix);
    wait_for(
        Duration::from_secs(30),
        "an hour of board hist registered as due",
        || async {
            redis
                .cli(&["ZRANGE", &due, "0", "-1"])
                .lines()
                .any(|m| m.starts_with("{hist}:hour:"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        metric_sum(&text, "rankflow_archive_periods_total", &[]),
        0.0,
        "nothing is archived before a period closes"
    );
    pg.stop();
    drop(app);
    setup.extra = setup.extra.replace("grace = \"3h\"", "grace = \"1s\"");
    let app = Process::start(setup);
    println!("injected: PostgreSQL stopped; rankflow restarted with a 1s grace");
    wait_for(
        Duration::from_secs(30),
        "an archive error counted and the closed hours pending",
        || async {
            let text = get_text(&app.url("/metrics")).await?;
            (metric_sum(&text, "rankflow_archive_errors_total", &[]) >= 1.0
                && metric_sum(&text, "rankflow_archive_pending", &[]) >= 1.0
                && metric_sum(&text, "rankflow_archive_oldest_pending_seconds", &[]) > 0.0)
                .then_some(())
        },
    )
    .await;
    pg.start_server();
    let text = wait_for(
        Duration::from_secs(60),
        "the closed hours archived once PostgreSQL is back",
        || async {
            let text = get_text(&app.url("/metrics")).await?;
            let board = [("board", "hist")];
            (metric_sum(&text, "rankflow_archive_periods_total", &board) >= 1.0
                && metric_sum(&text, "rankflow_archive_rows_total", &board) >= 1.0
                && metric_sum(&text, "rankflow_archive_copy_seconds_count", &[]) >= 1.0
                && metric_sum(&text, "rankflow_archive_pending", &[]) == 0.0)
                .then_some(text)
        },
    )
    .await;
    println!(
        "verified: PostgreSQL down → {} archive errors and the closed hours pending; back up → {} periods archived ({} rows)",
        metric_sum(&text, "rankflow_archive_errors_total", &[]),
        metric_sum(
            &text,
            "rankflow_archive_periods_total",
            &[("board", "hist")]
        ),
        metric_sum(&text, "rankflow_archive_rows_total", &[("board", "hist")])
    );
    (app, text)
}

fn all_datasource_uids(v: &Value) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(ds)) = m.get("datasource")
                && let Some(Value::String(uid)) = ds.get("uid")
                && !uid.starts_with("${")
                && uid != "-- Grafana --"
            {
                out.insert(uid.as_str());
            }
            for v in m.values() {
                out.extend(all_datasource_uids(v));
            }
        }
        Value::Array(a) => a.iter().for_each(|v| out.extend(all_datasource_uids(v))),
        _ => {}
    }
    out
}

// ---------------------------------------------------------------- start-up

fn warn_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

fn attempts(lines: &[&str], text: &str) -> Vec<u32> {
    lines
        .iter()
        .filter(|l| l.contains(text))
        .filter_map(|l| l.split("attempt=").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_without_kafka_and_redis_it_names_both_retries_and_recovers() {
    let mut broker = Broker::start();
    let mut redis = Redis::start();
    broker.kill();
    redis.kill9();
    let setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    let app = Process::start(&setup);
    println!("injected: rankflow started with its broker and Redis both down");

    const REDIS_LINE: &str = "Redis is not reachable yet; retrying.";
    const KAFKA_LINE: &str = "Kafka is not reachable yet; retrying.";
    let body = wait_for(
        Duration::from_secs(60),
        "3 retries of each, logged",
        || async {
            let log = app.log();
            let lines = warn_lines(&log);
            let (status, body) = get_json_or_null(&app.url("/healthz")).await;
            (status == 503
                && attempts(&lines, REDIS_LINE).len() >= 3
                && attempts(&lines, KAFKA_LINE).len() >= 3)
                .then_some(body)
        },
    )
    .await;
    assert_eq!(body["redis"]["up"], false, "{body}");
    assert_eq!(body["kafka"]["up"], false, "{body}");
    let redis_detail = body["redis"]["detail"].as_str().unwrap_or("");
    let kafka_detail = body["kafka"]["detail"].as_str().unwrap_or("");
    // A sentence each for anyone who asks; the addresses and the errors
    // are for the log (below), not for /healthz.
    assert!(redis_detail.starts_with("Redis is not reachable"), "{body}");
    assert!(
        kafka_detail.starts_with("no Kafka broker is reachable"),
        "{body}"
    );
    assert!(!body.to_string().contains(&setup.brokers), "{body}");

    // One line per retry, numbered: no other warnings repeat beside them.
    let log = app.log();
    let lines = warn_lines(&log);
    for text in [REDIS_LINE, KAFKA_LINE] {
        let seen = attempts(&lines, text);
        let expected: Vec<u32> = (1..=seen.len() as u32).collect();
        assert_eq!(
            seen, expected,
            "{text} lines carry attempts 1, 2, …:\n{log}"
        );
    }
    let others: Vec<&&str> = lines
        .iter()
        .filter(|l| !l.contains(REDIS_LINE) && !l.contains(KAFKA_LINE))
        .filter(|l| !l.contains("No kafka.dead_letter_topic"))
        .collect();
    assert!(others.is_empty(), "unexpected warnings: {others:#?}");
    println!(
        "verified: /healthz 503 naming both ({redis_detail:?}; {kafka_detail:?}); {} Redis and {} Kafka retry lines, one per attempt",
        attempts(&lines, REDIS_LINE).len(),
        attempts(&lines, KAFKA_LINE).len()
    );

    broker.restart();
    broker.create_topic(&setup.topic, 2).await;
    let body = wait_for(
        Duration::from_secs(60),
        "Kafka seen up, Redis still down",
        || async {
            let (status, body) = get_json_or_null(&app.url("/healthz")).await;
            (status == 503 && body["kafka"]["up"] == true && body["redis"]["up"] == false)
                .then_some(body)
        },
    )
    .await;
    println!("injected: broker started; /healthz now names only Redis: {body}");

    redis.restart();
    wait_for(Duration::from_secs(60), "/healthz 200", || async {
        (status_of(&app.url("/healthz")).await == 200).then_some(())
    })
    .await;
    let (messages, expect) = mixed_events(1_000, 62, 2, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    println!("verified: after both came up, /healthz 200 and 1000 events applied exactly");

    // Kafka lost while running: the consumer's own callbacks take over.
    let before = warn_lines(&app.log()).len();
    broker.kill();
    let body = wait_for(
        Duration::from_secs(60),
        "/healthz 503 naming Kafka",
        || async {
            let (status, body) = get_json_or_null(&app.url("/healthz")).await;
            (status == 503 && body["kafka"]["up"] == false).then_some(body)
        },
    )
    .await;
    println!("injected: broker killed while consuming; /healthz: {body}");
    // librdkafka reports each failed connection of each link, several a
    // second; the log gets one line at the start and one per 10 s after.
    let watched = Duration::from_secs(25);
    tokio::time::sleep(watched).await;
    let log = app.log();
    let lines = warn_lines(&log)[before..].to_vec();
    let start = lines
        .iter()
        .filter(|l| l.contains("Kafka is not reachable; librdkafka keeps retrying."))
        .count();
    let still = lines
        .iter()
        .filter(|l| l.contains("Kafka is still not reachable; retrying."))
        .count();
    assert_eq!(
        start,
        1,
        "one line when the outage starts:\n{}",
        lines.join("\n")
    );
    assert!(
        (1..=3).contains(&still),
        "one line per 10 s:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.len() <= start + still + 4,
        "{} warning lines in {watched:?}:\n{}",
        lines.len(),
        lines.join("\n")
    );
    broker.restart();
    wait_for(
        Duration::from_secs(60),
        "/healthz 200 after the broker is back",
        || async { (status_of(&app.url("/healthz")).await == 200).then_some(()) },
    )
    .await;
    assert!(app.log().contains("Kafka is reachable again."));
    println!(
        "verified: {} warning lines in {watched:?} of Kafka outage (1 at the start, {still} repeats); /healthz 200 and \"Kafka is reachable again.\" after restart",
        lines.len()
    );
}

// ---------------------------------------------------------------- deployment

/// YAML (from a file or a command's output) as JSON, via Python's PyYAML.
fn yaml_to_json(yaml: &str) -> Value {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/setup.sh --tests installs PyYAML)");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write YAML");
    let out = child.wait_with_output().expect("python3 finishes");
    assert!(
        out.status.success(),
        "YAML does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from python3")
}

fn env_of(service: &Value) -> BTreeMap<String, String> {
    service["environment"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn command_text(service: &Value) -> String {
    match &service["command"] {
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

#[test]
fn compose_stack_and_dockerfile_agree_with_the_code() {
    let out = Command::new("docker-compose")
        .args(["-f", "docker-compose.yml", "config"])
        .current_dir(repo())
        .output()
        .expect("docker-compose runs (scripts/setup.sh --tests installs it)");
    assert!(
        out.status.success(),
        "docker-compose config rejects the file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compose = yaml_to_json(&String::from_utf8_lossy(&out.stdout));
    let services = compose["services"].as_object().expect("services");
    let names: BTreeSet<&str> = services.keys().map(String::as_str).collect();
    for s in [
        "kafka",
        "kafka-init",
        "redis",
        "rankflow-1",
        "rankflow-2",
        "producer",
        "prometheus",
        "grafana",
        "postgres",
    ] {
        assert!(names.contains(s), "service {s} missing: {names:?}");
    }

    // PostgreSQL for the archive: the official image, its data on a named
    // volume, health-checked (the consumers wait for it).
    let pg = &services["postgres"];
    assert!(
        pg["image"].as_str().unwrap_or("").starts_with("postgres:"),
        "{pg}"
    );
    let pg_env = env_of(pg);
    let pg_health = pg["healthcheck"]["test"].to_string();
    assert!(pg_health.contains("pg_isready"), "{pg_health}");
    let pg_volume = pg["volumes"][0].to_string();
    assert!(
        pg_volume.contains("/var/lib/postgresql/data")
            && compose["volumes"]
                .as_object()
                .is_some_and(|v| v.keys().any(|k| pg_volume.contains(k.as_str()))),
        "PostgreSQL keeps its data on a named volume: {pg_volume}"
    );

    // Kafka: the official image in KRaft mode (no ZooKeeper).
    let kafka = &services["kafka"];
    assert!(
        kafka["image"]
            .as_str()
            .unwrap_or("")
            .starts_with("apache/kafka:")
    );
    let kenv = env_of(kafka);
    assert!(
        kenv["KAFKA_PROCESS_ROLES"].contains("controller"),
        "{kenv:?}"
    );
    assert!(!kenv.keys().any(|k| k.contains("ZOOKEEPER")));

    // The topics kafka-init creates are the ones the example config reads
    // and the dead-letter topic the consumers are given.
    let example: toml::Table = read("rankflow.toml").parse().expect("rankflow.toml");
    let topics = example["kafka"]["topics"].as_array().expect("topics");
    let init = command_text(&services["kafka-init"]);
    for t in topics {
        let t = t.as_str().expect("topic");
        assert!(
            init.contains(&format!("--topic {t} ")),
            "kafka-init does not create {t}"
        );
    }
    assert_eq!(
        services["kafka-init"]["depends_on"]["kafka"]["condition"],
        "service_healthy"
    );

    // The consumers: built from this repo's Dockerfile, every RANKFLOW_*
    // variable a real setting (`rankflow check` rejects unknown ones), the
    // HTTP port the one published, health-checked and scraped.
    let prometheus = yaml_to_json(&read("dashboards/prometheus.yml"));
    let job = prometheus["scrape_configs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["job_name"] == "rankflow"))
        .expect("a rankflow scrape job");
    assert_eq!(job["metrics_path"], "/metrics");
    let targets: BTreeSet<String> = job["static_configs"][0]["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t.as_str().map(String::from))
        .collect();
    let mut expected_targets = BTreeSet::new();
    for name in ["rankflow-1", "rankflow-2", "producer"] {
        let service = &services[name];
        let context = service["build"]["context"].as_str().expect("build context");
        assert_eq!(
            Path::new(context).canonicalize().expect("context"),
            repo().canonicalize().expect("repo"),
            "{name} builds from the repo"
        );
        let env = env_of(service);
        let mut check = Command::new(env!("CARGO_BIN_EXE_rankflow"));
        check
            .args(["check", "-c"])
            .arg(repo().join("rankflow.toml"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("RANKFLOW_")) {
            check.env_remove(k);
        }
        check.envs(&env);
        let out = check.output().expect("rankflow check");
        assert!(
            out.status.success(),
            "{name}'s environment {env:?} is rejected: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(command_text(service).contains("/etc/rankflow/rankflow.toml"));
        if name == "producer" {
            assert!(command_text(service).starts_with("produce"));
            continue;
        }
        let dlq = &env["RANKFLOW_KAFKA_DEAD_LETTER_TOPIC"];
        assert!(
            init.contains(&format!("--topic {dlq} ")),
            "kafka-init does not create {dlq}"
        );
        let closed = &env["RANKFLOW_ARCHIVE_CLOSED_TOPIC"];
        assert!(
            init.contains(&format!("--topic {closed} ")),
            "kafka-init does not create {closed}"
        );
        let listen = &env["RANKFLOW_HTTP_LISTEN"];
        let port = listen.rsplit(':').next().expect("port");
        let published = service["ports"][0]["target"].to_string();
        assert_eq!(
            published.trim_matches('"'),
            port,
            "{name} publishes its HTTP port"
        );
        let health = service["healthcheck"]["test"].to_string();
        assert!(health.contains(&format!("127.0.0.1/{port}")) && health.contains("/healthz"));
        // The archive URL names the compose PostgreSQL with its user,
        // password and database.
        let archive_url = &env["RANKFLOW_ARCHIVE_URL"];
        let expected_url = format!(
            "postgres://{user}:{password}@postgres:5432/{db}",
            user = pg_env["POSTGRES_USER"],
            password = pg_env["POSTGRES_PASSWORD"],
            db = pg_env["POSTGRES_DB"]
        );
        assert_eq!(archive_url, &expected_url, "{name}'s archive URL");
        for dep in ["kafka-init", "redis", "postgres"] {
            let cond = service["depends_on"][dep]["condition"]
                .as_str()
                .unwrap_or("");
            assert!(
                matches!(cond, "service_healthy" | "service_completed_successfully"),
                "{name} waits for {dep}: {cond:?}"
            );
        }
        expected_targets.insert(format!("{name}:{port}"));
    }
    assert_eq!(
        targets, expected_targets,
        "Prometheus scrapes both consumers"
    );

    // Prometheus and Grafana get the files of this repo, at the paths the
    // provisioning files name.
    let mounts = |service: &str| -> Vec<(String, String)> {
        services[service]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            // Compose v1 prints `source:target[:mode]`, v2 a mapping.
            .map(|v| match v.as_str() {
                Some(short) => {
                    let mut parts = short.split(':');
                    let source = parts.next().unwrap_or("").to_string();
                    (source, parts.next().unwrap_or("").to_string())
                }
                None => (
                    v["source"].as_str().unwrap_or("").to_string(),
                    v["target"].as_str().unwrap_or("").to_string(),
                ),
            })
            .collect()
    };
    for (source, _) in mounts("prometheus").iter().chain(mounts("grafana").iter()) {
        assert!(Path::new(source).is_file(), "mounted file {source} exists");
    }
    let grafana = mounts("grafana");
    let dash_dir = yaml_to_json(&read("dashboards/provisioning/dashboards.yml"))["providers"][0]
        ["options"]["path"]
        .as_str()
        .expect("dashboard path")
        .to_string();
    assert!(
        grafana
            .iter()
            .any(|(s, t)| s.ends_with("dashboards/rankflow.json") && t.starts_with(&dash_dir)),
        "Grafana gets rankflow.json under {dash_dir}: {grafana:?}"
    );
    assert!(
        grafana
            .iter()
            .any(|(_, t)| t.starts_with("/etc/grafana/provisioning/datasources/"))
    );
    assert!(
        grafana
            .iter()
            .any(|(_, t)| t.starts_with("/etc/grafana/provisioning/dashboards/"))
    );
    let prom_rules = yaml_to_json(&read("dashboards/prometheus.yml"))["rule_files"].to_string();
    assert!(prom_rules.contains("alerts.yml"));
    assert!(
        mounts("prometheus")
            .iter()
            .any(|(s, t)| s.ends_with("dashboards/alerts.yml") && t == "/etc/prometheus/alerts.yml")
    );

    // The Dockerfile: multi-stage, a slim runtime stage, not root.
    let dockerfile = read("Dockerfile");
    let stages: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    assert!(
        stages.last().is_some_and(|s| s.contains("slim")),
        "{stages:?}"
    );
    let runtime = dockerfile.rsplit("\nFROM ").next().expect("runtime stage");
    assert!(
        runtime.contains("COPY --from="),
        "the runtime stage copies the built binary"
    );
    let user = runtime
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime stage sets USER");
    let uid = user.split(':').next().unwrap_or("");
    assert!(uid != "0" && uid != "root", "runs as non-root, not {user}");
    assert!(runtime.contains("EXPOSE 9898"));
    println!(
        "verified: docker-compose config valid, {} services; env of 3 rankflow services accepted by `rankflow check`, both consumers archive to the postgres service; scrape targets {targets:?}; Dockerfile {} stages, USER {user}",
        names.len(),
        stages.len()
    );
}

// ---------------------------------------------------------------- rules change

/// Adding a board and replaying the retained events backfills it; the
/// boards that already had those events skip them at their fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_added_later_is_backfilled_by_a_replay_without_double_counting() {
    use std::sync::Arc;
    let broker = Broker::start();
    let redis = Redis::start();
    // The first three boards of MIXED_BOARDS, then all five.
    let parts: Vec<&str> = MIXED_BOARDS.split("[[board]]").skip(1).collect();
    let first: String = parts[..3].iter().map(|b| format!("[[board]]{b}")).collect();
    let mut setup = Setup::new(&broker, &redis, &first);
    broker.create_topic(&setup.topic, 4).await;
    let base = now_ms();
    let (messages, expect_first) = mixed_events(6_000, 71, 4, base);
    let (all_messages, expect_all) = mixed_events(9_000, 71, 4, base);
    assert_eq!(
        messages[..],
        all_messages[..6_000],
        "same seed, same first events"
    );
    let old_boards = |expect: &Boards| -> Boards {
        expect
            .iter()
            .filter(|(k, _)| {
                ["star_coins", "fans", "flowers"]
                    .iter()
                    .any(|b| k.starts_with(b))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    send_all(&broker.producer(), &setup.topic, &messages).await;
    let clock: rankflow::clock::SharedClock = Arc::new(rankflow::clock::SystemClock);
    let app = InProcess::start(&setup, clock.clone()).await;
    wait_boards(
        &redis,
        &setup,
        &old_boards(&expect_first),
        Duration::from_secs(60),
    )
    .await;
    app.stop().await;
    println!("phase 1: 6000 events applied to 3 boards");

    // The documented procedure: new boards in the config, a new consumer
    // group (starts at the earliest retained offset), the recorded
    // positions deleted.
    setup.boards = MIXED_BOARDS.to_string();
    setup.group = unique("group");
    redis.cli(&["DEL", &format!("{}:positions", setup.prefix)]);
    let app = InProcess::start(&setup, clock).await;
    // Every board, old and new, holds the 6000 events exactly once.
    wait_boards(&redis, &setup, &expect_first, Duration::from_secs(60)).await;
    let text = get_text(&app.url("/metrics")).await.unwrap_or_default();
    let skipped = metric_sum(&text, "rankflow_duplicate_batches_total", &[]);
    assert!(
        skipped > 0.0,
        "the old boards skipped the replay at their fences"
    );
    send_all(&broker.producer(), &setup.topic, &all_messages[6_000..]).await;
    wait_boards(&redis, &setup, &expect_all, Duration::from_secs(60)).await;
    app.stop().await;
    println!(
        "verified: 2 boards added and backfilled from 6000 replayed events; the 3 old boards skipped them ({skipped} fenced ranges) and stayed exact; 3000 more events exact on all 5"
    );
}
