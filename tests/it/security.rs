//! Least privilege and secrets, against real `redis-server` processes and a
//! real broker: rankflow works against a Redis that requires a password,
//! as an ACL user limited to its key prefix and the commands it needs (the
//! rules the README gives, taken from `sink::store::ACL_RULES`), and over
//! TLS with a CA the test makes. In each case the boards equal an
//! independently computed reference and the read API answers. A password in
//! the Redis URL never appears in the log, `rankflow check`, `/v1/boards`,
//! error bodies or `/healthz` — also with a wrong password and with an
//! unreachable host, whose retry warnings name the (masked) URL.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::reference::*;
use common::*;
use rankflow::clock::{SharedClock, SystemClock};

const BIN: &str = env!("CARGO_BIN_EXE_rankflow");

/// Reads boards through a URL with credentials (the harness's own `Redis`
/// reads as the default user without a password).
struct Authed(String);

impl Zsets for Authed {
    async fn zset(&self, key: &str) -> BTreeMap<String, f64> {
        let Ok(mut c) = redis::Client::open(self.0.as_str()).and_then(|c| c.get_connection())
        else {
            return BTreeMap::new();
        };
        let pairs: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut c)
            .unwrap_or_default();
        pairs.into_iter().collect()
    }

    async fn positions_sum(&self, prefix: &str) -> i64 {
        let Ok(mut c) = redis::Client::open(self.0.as_str()).and_then(|c| c.get_connection())
        else {
            return -1;
        };
        let values: Vec<i64> = redis::cmd("HVALS")
            .arg(format!("{prefix}:positions"))
            .query(&mut c)
            .unwrap_or_default();
        values.iter().sum()
    }
}

/// Every text rankflow shows about itself: the HTTP answers (board list,
/// a page, error bodies, health) and `rankflow check` for the same config.
async fn everything_shown(p: &Process) -> String {
    let mut all = String::new();
    for path in [
        "/v1/boards",
        "/v1/boards/star_coins/all/top?limit=5",
        "/v1/boards/nope/all/top",
        "/v1/boards/star_coins/all/top?limit=x",
        "/v1/boards/star_coins/all/members/nobody",
        "/healthz",
    ] {
        all.push_str(&get_text(&p.url(path)).await.unwrap_or_default());
    }
    all.push_str(&check_output(&p.dir.path().join("rankflow.toml")));
    all
}

fn check_output(config: &Path) -> String {
    let out = Command::new(BIN)
        .args(["check", "-c"])
        .arg(config)
        .output()
        .expect("rankflow check");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn produce_reference(broker: &Broker, setup: &Setup, seed: u64) -> Boards {
    broker.create_topic(&setup.topic, 2).await;
    let (messages, expect) = mixed_events(3_000, seed, 2, now_ms());
    send_all(&broker.producer(), &setup.topic, &messages).await;
    expect
}

async fn assert_api_serves(p: &Process, expect: &Boards) {
    let (status, body) = get_json(&p.url("/v1/boards/star_coins/all/top?limit=3")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], expect["star_coins/all"].len(), "{body}");
    let top = body["entries"][0]["member"].as_str().expect("a top member");
    let best = expect["star_coins/all"]
        .values()
        .fold(f64::MIN, |a, b| a.max(*b));
    assert_eq!(body["entries"][0]["score"].as_f64(), Some(best), "{body}");
    let (status, around) =
        get_json(&p.url(&format!("/v1/boards/star_coins/all/around/{top}?radius=1"))).await;
    assert_eq!(status, 200, "{around}");
}

/// The same setup with another `redis.url` and its own consumer group.
fn with_url(setup: &Setup, redis_url: String) -> Setup {
    Setup {
        brokers: setup.brokers.clone(),
        redis_url,
        topic: setup.topic.clone(),
        group: unique("group"),
        prefix: setup.prefix.clone(),
        timezone: setup.timezone.clone(),
        batch: setup.batch,
        extra: setup.extra.clone(),
        boards: setup.boards.clone(),
        dlq: setup.dlq.clone(),
        quarantine: setup.quarantine.clone(),
        client: setup.client.clone(),
    }
}

fn wait_exit(p: &mut Process, within: Duration) -> (Option<i32>, Duration) {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some(status) = p.child.try_wait().expect("wait") {
            return (status.code(), started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (None, started.elapsed())
}

/// (a) `requirepass`: events exact, API works, and the password shows
/// nowhere — nor does a wrong one, nor one for an unreachable host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_redis_works_and_the_password_never_shows() {
    const PW: &str = "pw-Zq81xLr";
    let broker = Broker::start();
    let redis = Redis::start();
    redis.cli(&["CONFIG", "SET", "requirepass", PW]);
    let url = format!("redis://:{PW}@127.0.0.1:{}", redis.port);
    let mut setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    setup.redis_url = format!("\"{url}\"");
    let expect = produce_reference(&broker, &setup, 51).await;
    let p = Process::start(&setup);
    wait_boards(
        &Authed(url.clone()),
        &setup,
        &expect,
        Duration::from_secs(60),
    )
    .await;
    assert_api_serves(&p, &expect).await;
    let shown = everything_shown(&p).await;
    assert!(shown.contains("redis://:***@127.0.0.1"), "{shown}");
    assert!(!shown.contains(PW), "password shown: {shown}");
    assert!(!p.log().contains(PW), "password logged: {}", p.log());
    println!(
        "verified (a): 3000 events exact with requirepass; password in no answer, check output or log"
    );

    // A wrong password is permanent: exit 2 at once, naming the setting.
    const WRONG: &str = "wrong-Kd02pQ";
    let bad = with_url(
        &setup,
        format!("\"redis://:{WRONG}@127.0.0.1:{}\"", redis.port),
    );
    let mut q = Process::start(&bad);
    let (code, elapsed) = wait_exit(&mut q, Duration::from_secs(10));
    let log = q.log();
    assert_eq!(code, Some(2), "wrong password exits 2: {log}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(log.contains("setting `redis.url`"), "{log}");
    assert!(!log.contains(WRONG), "wrong password logged: {log}");
    assert!(!check_output(&q.dir.path().join("rankflow.toml")).contains(WRONG));
    println!(
        "verified: wrong password exits 2 in {elapsed:?} naming redis.url, password not shown"
    );

    // An unreachable host is retried, and the retry warnings name the URL
    // with the password masked; /healthz says Redis is down without the
    // URL (issue 28: no server addresses for anonymous clients).
    const FAR: &str = "far-Jw33uNe";
    let down = with_url(
        &setup,
        format!("\"redis://:{FAR}@127.0.0.1:{}\"", free_port()),
    );
    let r = Process::start(&down);
    let health = wait_for(Duration::from_secs(20), "a retry warning", || async {
        let log = r.log();
        let retries = log.matches("Redis is not reachable yet").count();
        let health = get_text(&r.url("/healthz")).await.unwrap_or_default();
        (retries >= 2 && health.contains("Redis is not reachable")).then_some(health)
    })
    .await;
    let log = r.log();
    assert!(log.contains("redis://:***@127.0.0.1"), "{log}");
    assert!(!health.contains("redis://"), "{health}");
    let shown = everything_shown(&r).await;
    for text in [&log, &health, &shown] {
        assert!(!text.contains(FAR), "password shown while retrying: {text}");
    }
    println!("verified: retry warnings name redis://:***@..., /healthz no URL, never the password");
}

/// (b) An ACL user with exactly `ACL_RULES`: events exact, API works (and
/// the rules really are narrow: other keys and admin commands are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_limited_to_the_prefix_and_needed_commands_is_enough() {
    const PW: &str = "acl-Vb71mQ";
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .expect("docs/operations.md");
    assert!(
        readme.contains(rankflow::sink::store::ACL_RULES),
        "docs/operations.md gives the ACL rules exactly as rankflow::sink::store::ACL_RULES"
    );
    let broker = Broker::start();
    let redis = Redis::start();
    let mut setup = Setup::new(&broker, &redis, &format!("{MIXED_BOARDS}{WINDOWED}"));
    let rules = rankflow::sink::store::acl_rules(&setup.prefix);
    let mut args = vec!["ACL", "SETUSER", "rankflow", "on", &format!(">{PW}")]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(rules.split_whitespace().map(String::from));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(redis.cli(&argv).trim(), "OK");
    let url = format!("redis://rankflow:{PW}@127.0.0.1:{}", redis.port);
    setup.redis_url = format!("\"{url}\"");
    let expect = produce_reference(&broker, &setup, 52).await;
    let p = Process::start(&setup);
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    assert_api_serves(&p, &expect).await;
    let (status, body) = get_json(&p.url("/v1/boards/recent_gifts/win:1h/top")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["total"].as_u64() > Some(0),
        "window board served: {body}"
    );
    let log = p.log();
    assert!(!log.contains("NOPERM") && !log.contains("ERROR"), "{log}");
    // The user cannot touch other keys or run admin commands.
    let mut c = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("connect as rankflow");
    for cmd in [
        redis::cmd("GET").arg("other:key").clone(),
        redis::cmd("FLUSHALL").clone(),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("CONFIG").arg("GET").arg("*").clone(),
    ] {
        let r: redis::RedisResult<redis::Value> = cmd.query(&mut c);
        let e = r.expect_err("refused");
        assert_eq!(e.code(), Some("NOPERM"), "{e}");
    }
    println!(
        "verified (b): 3000 events exact and a window served as an ACL user with {} rules; other keys and admin commands refused",
        rules.split_whitespace().count()
    );
}

const WINDOWED: &str = r#"
[[board]]
name = "recent_gifts"
event = "gift"
member = "receiver_id"
score = "count"
windows = ["1h/1m"]
"#;

/// Makes a CA, a server certificate for 127.0.0.1 and a client certificate
/// with the `openssl` CLI; returns the directory.
fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=rankflow test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    run(&ca);
    for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        let mut req = vec!["req"];
        req.extend(ec);
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let subj = format!("/CN=rankflow test {name}");
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        run(&req);
        let ext = format!("{name}.ext");
        std::fs::write(
            dir.path().join(&ext),
            format!("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"),
        )
        .expect("ext file");
        let pem = format!("{name}.pem");
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
    dir
}

fn tls_redis(certs: &Path, tls_port: u16, auth_clients: &str) -> Redis {
    let p = |f: &str| certs.join(f).display().to_string();
    Redis::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &p("server.pem"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.pem"),
        "--tls-auth-clients",
        auth_clients,
    ])
}

/// (c) `rediss://` against `redis-server --tls-port` with a CA the test
/// made, trusted through `redis.tls_ca_file`; then a server that requires
/// client certificates, reached with `tls_cert_file`/`tls_key_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_client_certificates() {
    let certs = certificates();
    let ca = certs.path().join("ca.pem").display().to_string();
    let broker = Broker::start();
    let tls_port = free_port();
    let redis = tls_redis(certs.path(), tls_port, "no");
    let mut setup = Setup::new(&broker, &redis, MIXED_BOARDS);
    setup.redis_url = format!("\"rediss://127.0.0.1:{tls_port}\"\ntls_ca_file = \"{ca}\"");
    let expect = produce_reference(&broker, &setup, 53).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let app = InProcess::start(&setup, clock).await;
    // Read back over the plain port: an independent path to the same data.
    wait_boards(&redis, &setup, &expect, Duration::from_secs(60)).await;
    let (status, body) = get_json(&app.url("/v1/boards/star_coins/all/top?limit=3")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], expect["star_coins/all"].len());
    let clients = redis.cli(&["CLIENT", "LIST"]);
    assert!(clients.lines().count() >= 2, "{clients}");
    app.stop().await;
    println!("verified (c): 3000 events exact over rediss:// with a private CA");

    // Mutual TLS: without a client certificate the server refuses; with
    // the configured one `rankflow top` connects and reads.
    let mtls_port = free_port();
    let mtls = tls_redis(certs.path(), mtls_port, "yes");
    let dir = tempfile::tempdir().expect("tempdir");
    let base = format!(
        "[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[redis]\nurl = \"rediss://127.0.0.1:{mtls_port}\"\ntls_ca_file = \"{ca}\"\nresponse_timeout_ms = 2000\n{MIXED_BOARDS}"
    );
    let with_cert = base.replace(
        "response_timeout_ms = 2000",
        &format!(
            "response_timeout_ms = 2000\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
            certs.path().join("client.pem").display(),
            certs.path().join("client.key").display()
        ),
    );
    let top = |text: &str, name: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).expect("config");
        Command::new(BIN)
            .args(["top", "star_coins", "all", "-c"])
            .arg(&file)
            .output()
            .expect("rankflow top")
    };
    let ok = top(&with_cert, "with.toml");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("star_coins all"));
    let refused = top(&base, "without.toml");
    assert!(
        !refused.status.success(),
        "a server requiring client certificates refuses a client without one"
    );
    drop(mtls);
    println!("verified (c): mutual TLS with tls_cert_file/tls_key_file; refused without them");
}

/// The dead-letter producer gets `[kafka.client]` too: a SASL mechanism
/// librdkafka does not know is refused for it, naming the key, with the
/// SASL password masked.
#[test]
fn kafka_security_properties_reach_the_dead_letter_producer() {
    let text = r#"
        [kafka]
        brokers = "127.0.0.1:1"
        topics = ["t"]
        dead_letter_topic = "dlq"
        [kafka.client]
        "security.protocol" = "SASL_PLAINTEXT"
        "sasl.mechanism" = "BOGUS"
        "sasl.password" = "dlq-Pw55"
        [redis]
        url = "redis://127.0.0.1:1"
    "#;
    let cfg = rankflow::config::Config::from_toml(text, Path::new("t.toml"), Vec::new())
        .expect("config parses");
    let e = rankflow::deadletter::DeadLetters::new(&cfg.kafka)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("[kafka.client] \"sasl.mechanism\""), "{e}");
    assert!(e.contains("dead-letter producer"), "{e}");
    assert!(!e.contains("dlq-Pw55"), "{e}");
    assert!(
        !format!("{cfg:?}").contains("dlq-Pw55"),
        "Debug masks secrets"
    );
}
