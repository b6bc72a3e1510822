//! Configuration faults that no retry can cure, against the real binary:
//! `rankflow run` exits 2 within two seconds naming the setting (no server
//! is running, so anything that waited for one would time out), and
//! `rankflow check` reports the same fault without any server. Also: a
//! valid config passes `check` with no server up, secrets are masked in its
//! output. (One seed URL of a Redis Cluster is tested in `tests/it/cluster.rs`.)

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_rankflow");

/// A valid config with nothing listening at the given addresses;
/// `kafka_extra` lands in [kafka], `client` in [kafka.client], `redis` in
/// [redis].
fn config(kafka_extra: &str, client: &str, redis: &str) -> String {
    format!(
        r#"
[kafka]
brokers = "127.0.0.1:{kafka}"
topics = ["events"]
{kafka_extra}
[kafka.client]
{client}
[redis]
{redis}
[http]
listen = "127.0.0.1:0"
[[board]]
name = "b"
event = "gift"
member = "receiver_id"
score = "count"
periods = ["day"]
"#,
        kafka = free_port(),
    )
}

fn plain_redis() -> String {
    format!("url = \"redis://127.0.0.1:{}\"", free_port())
}

/// Runs `rankflow <args> -c <file>` with a 20 s watchdog; returns the output
/// and how long it took.
fn rankflow(dir: &Path, text: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let file = dir.join(format!("{}.toml", unique("c")));
    std::fs::write(&file, text).expect("write config");
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("-c")
        .arg(&file)
        .env("RANKFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("rankflow starts");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    (child.wait_with_output().expect("output"), elapsed)
}

/// `run` and `check` (and `produce` when asked) both exit 2 quickly, and
/// stderr names `setting` (and every `also` string).
fn assert_permanent(name: &str, text: &str, commands: &[&str], setting: &str, also: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    for command in commands {
        let args: Vec<&str> = match *command {
            "produce" => vec!["produce", "--events", "1"],
            c => vec![c],
        };
        let (out, elapsed) = rankflow(dir.path(), text, &args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{name}: `rankflow {command}` exits 2; stderr:\n{stderr}"
        );
        assert!(
            elapsed < Duration::from_secs(2),
            "{name}: `rankflow {command}` took {elapsed:?}"
        );
        assert!(
            stderr.contains(setting),
            "{name}: `rankflow {command}` names {setting}; stderr:\n{stderr}"
        );
        for a in also {
            assert!(stderr.contains(a), "{name}: {a:?} in:\n{stderr}");
        }
        println!("{name}: `rankflow {command}` exit 2 in {elapsed:?}, names {setting}");
    }
}

#[test]
fn an_unsupported_or_unparsable_redis_url_exits_2_naming_redis_url() {
    assert_permanent(
        "http scheme",
        &config("", "", "url = \"http://127.0.0.1:6379\""),
        &["run", "check"],
        "setting `redis.url`",
        &["unsupported scheme \"http\""],
    );
    assert_permanent(
        "no scheme",
        &config("", "", "url = \"127.0.0.1:6379\""),
        &["run", "check"],
        "setting `redis.url`",
        &["not a URL"],
    );
    assert_permanent(
        "bad database",
        &config("", "", "url = \"redis://127.0.0.1:6379/zero\""),
        &["run", "check"],
        "setting `redis.url`",
        &["cannot be parsed"],
    );
    assert_permanent(
        "empty cluster list",
        &config("", "", "url = []"),
        &["run", "check"],
        "setting `redis.url`",
        &["empty"],
    );
    assert_permanent(
        "one bad node of a cluster",
        &config(
            "",
            "",
            "url = [\"redis://127.0.0.1:1\", \"tcp://127.0.0.1:2\"]",
        ),
        &["run", "check"],
        "setting `redis.url[1]`",
        &[],
    );
}

#[test]
fn an_environment_override_is_checked_like_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [&["run"][..], &["check"][..]] {
        let (out, elapsed) = rankflow(
            dir.path(),
            &config("", "", &plain_redis()),
            args,
            &[("RANKFLOW_REDIS_URL", "ftp://127.0.0.1:1")],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert!(stderr.contains("setting `redis.url`"), "{stderr}");
    }
}

#[test]
fn a_property_librdkafka_rejects_exits_2_naming_the_key() {
    assert_permanent(
        "bad value",
        &config("", "\"session.timeout.ms\" = \"soon\"", &plain_redis()),
        &["run", "check"],
        "[kafka.client] \"session.timeout.ms\"",
        &["consumer"],
    );
    assert_permanent(
        "unknown property",
        &config("", "\"no.such.property\" = \"1\"", &plain_redis()),
        &["run", "check", "produce"],
        "[kafka.client] \"no.such.property\"",
        &[],
    );
    assert_permanent(
        "managed property",
        &config("", "\"group.id\" = \"mine\"", &plain_redis()),
        &["run", "check", "produce"],
        "\"group.id\"",
        &["manages itself"],
    );
}

/// SASL properties reach every client: a mechanism librdkafka does not know
/// is refused for the consumer (`run`), for the producer of
/// `rankflow produce`, and by `check` — and the SASL password never shows.
#[test]
fn sasl_properties_pass_through_to_every_client() {
    let client = "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"BOGUS\"\n\"sasl.username\" = \"rf\"\n\"sasl.password\" = \"kafka-s3cret\"";
    let text = config("", client, &plain_redis());
    assert_permanent(
        "bogus SASL mechanism (consumer)",
        &text,
        &["run", "check"],
        "[kafka.client] \"sasl.mechanism\"",
        &["for the consumer", "BOGUS"],
    );
    assert_permanent(
        "bogus SASL mechanism (produce)",
        &text,
        &["produce"],
        "[kafka.client] \"sasl.mechanism\"",
        &["rankflow produce", "BOGUS"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        &["run"][..],
        &["check"][..],
        &["produce", "--events", "1"][..],
    ] {
        let (out, _) = rankflow(dir.path(), &text, args, &[]);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("kafka-s3cret"), "{args:?}: {all}");
    }
}

/// The brief's example: `SASL_SSL` with a mechanism librdkafka does not
/// know, refused by key for `run` (consumer and dead-letter producer are
/// both built from it), `check` and `produce`. And the same protocol with a
/// real mechanism passes `check`: this build has TLS and SCRAM.
#[test]
fn sasl_ssl_is_built_in_and_checked() {
    let bogus = "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"BOGUS\"\n\"sasl.password\" = \"kafka-s3cret\"";
    assert_permanent(
        "SASL_SSL, bogus mechanism",
        &config("dead_letter_topic = \"dlq\"", bogus, &plain_redis()),
        &["run", "check", "produce"],
        "[kafka.client] \"sasl.mechanism\"",
        &["BOGUS"],
    );
    let scram = "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"rf\"\n\"sasl.password\" = \"kafka-s3cret\"";
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, _) = rankflow(
        dir.path(),
        &config("dead_letter_topic = \"dlq\"", scram, &plain_redis()),
        &["check"],
        &[],
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!all.contains("kafka-s3cret"), "{all}");
    assert!(!all.contains("ERROR"), "check creates quiet clients: {all}");
    assert_permanent(
        "missing Kafka CA file",
        &config(
            "",
            "\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"/nonexistent/kafka-ca.pem\"",
            &plain_redis(),
        ),
        &["run", "check", "produce"],
        "[kafka.client] \"ssl.ca.location\"",
        &[],
    );
}

/// A combination only a producer refuses: `acks=1` against the dead-letter
/// producer's idempotence. The consumer ignores `acks`, so this proves the
/// property reaches the dead-letter producer.
#[test]
fn the_dead_letter_producer_gets_the_client_properties() {
    assert_permanent(
        "acks=1 with idempotence",
        &config(
            "dead_letter_topic = \"dlq\"",
            "\"acks\" = \"1\"",
            &plain_redis(),
        ),
        &["run", "check"],
        "[kafka.client] \"acks\"",
        &["dead-letter producer"],
    );
}

#[test]
fn cross_field_and_typed_values_exit_2_naming_the_setting() {
    assert_permanent(
        "dead-letter topic consumed",
        &config("dead_letter_topic = \"events\"", "", &plain_redis()),
        &["run", "check"],
        "setting `kafka.dead_letter_topic`",
        &[],
    );
    assert_permanent(
        "zero timeout",
        &config(
            "",
            "",
            &format!("{}\nresponse_timeout_ms = 0", plain_redis()),
        ),
        &["run", "check"],
        "response_timeout_ms",
        &["at least 1"],
    );
    assert_permanent(
        "CA file missing",
        &config(
            "",
            "",
            "url = \"rediss://127.0.0.1:1\"\ntls_ca_file = \"/nonexistent/ca.pem\"",
        ),
        &["run", "check"],
        "setting `redis.tls_ca_file`",
        &["/nonexistent/ca.pem"],
    );
}

#[test]
fn check_passes_a_valid_config_without_servers_and_masks_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = config(
        "dead_letter_topic = \"dlq\"",
        "\"sasl.username\" = \"rf\"\n\"sasl.password\" = \"kafka-s3cret\"\n\"client.id\" = \"me\"",
        &format!("url = \"redis://:redis-s3cret@127.0.0.1:{}\"", free_port()),
    );
    let (out, elapsed) = rankflow(dir.path(), &text, &["check"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert!(stdout.contains("config OK"), "{stdout}");
    assert!(stdout.contains("sasl.password = ***"), "{stdout}");
    assert!(stdout.contains("client.id = me"), "{stdout}");
    assert!(stdout.contains("redis://:***@127.0.0.1:"), "{stdout}");
    for secret in ["kafka-s3cret", "redis-s3cret"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stdout}{stderr}"
        );
    }
    println!("check: exit 0 in {elapsed:?} with no server; secrets masked");
}

/// A shadow board (`shadow_of`, `backfill_from`): `check` says what it
/// replaces and what its backfill will replay, and `check` and `run`
/// locate a mistake in it.
#[test]
fn shadow_boards_are_described_and_their_mistakes_located() {
    let shadow = |views: &str| {
        format!(
            "{}\n[[board]]\nname = \"b2\"\nevent = \"gift\"\nmember = \"receiver_id\"\nscore = \"count * 2\"\n{views}\nshadow_of = \"b\"\nbackfill_from = \"2026-11-01T00:00:00Z\"\n",
            config("", "", &plain_redis())
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, _) = rankflow(
        dir.path(),
        &shadow("periods = [\"day\", \"all\"]"),
        &["check"],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        "  shadow of  b (a candidate replacement: promoting it serves its views day, all as `b`'s)",
        "  backfill   the retained messages of topics [\"events\"] with event times from 2026-11-01T00:00:00Z (",
    ] {
        assert!(stdout.contains(line), "{line:?} in:\n{stdout}");
    }
    assert_permanent(
        "a shadow without a view of its board",
        &shadow("periods = [\"all\"]"),
        &["run", "check"],
        "board `b2` (#2), field `periods`",
        &["lacks the view `day` of `b`"],
    );
    println!(
        "verified: check describes the shadow and locates its mistake (exit 2 from run and check)"
    );
}
