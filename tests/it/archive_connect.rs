//! How rankflow connects to the archive's PostgreSQL, against real private
//! servers: every `sslmode` of `[archive] url` (a server with a certificate
//! made here, and one without TLS), a copy and a read over verified TLS,
//! the `rankflow` binary refusing bad TLS settings and masking passwords of
//! either URL form, and migrations that wait for a lock held by another
//! session, say so, and then succeed or fail clearly.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::postgres::Postgres;
use common::{CliConfig, Redis, free_port, unique, wait_for};
use futures::stream;
use rankflow::archive::ArchiveError;
use rankflow::archive::connect::{SslMode, Target};
use rankflow::archive::copy::{Archive, Copied, Copy, PeriodKey, Standing};
use rankflow::archive::read::ArchiveReader;
use rankflow::archive::schema::{self, LockWait};

/// A CA, a server certificate it signed for `127.0.0.1` only (so
/// `localhost` is the wrong name), and an unrelated CA, made with the
/// `openssl` CLI.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl runs (scripts/setup.sh --tests installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for ca in ["ca", "other-ca"] {
            let (key, pem, subj) = (
                format!("{ca}.key"),
                format!("{ca}.pem"),
                format!("/CN=rankflow test {ca}"),
            );
            let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &pem, "-subj", &subj]);
            args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
            args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
            run(&args);
        }
        let mut req = vec!["req", "-nodes", "-subj", "/CN=127.0.0.1"];
        req.extend(ec);
        req.extend(["-keyout", "server.key", "-out", "server.csr"]);
        run(&req);
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("ext file");
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ]);
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A server offering TLS with this server certificate.
    fn server(&self) -> Postgres {
        Postgres::start_tls(&self.path("server.pem"), &self.path("server.key"))
    }
}

/// Connects as the archiver does and asks the server whether this very
/// connection is encrypted; `Err` with the connection's error otherwise.
async fn connect_tls(url: &str, ca: Option<&Path>) -> Result<bool, String> {
    let target = Target::new(url, ca).map_err(|e| e.to_string())?;
    let mut a = Archive::connect_to(&target)
        .await
        .map_err(|e| e.to_string())?;
    let row = a
        .client()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// What a case expects: a connection with or without TLS, or an error
/// whose message holds every one of these words (lower case).
#[derive(Debug)]
enum Expect {
    Tls(bool),
    Fails(&'static [&'static str]),
}

async fn check_cases(cases: &[(String, Option<&Path>, Expect)]) {
    for (url, ca, expect) in cases {
        let got = connect_tls(url, *ca).await;
        match (expect, &got) {
            (Expect::Tls(want), Ok(tls)) => assert_eq!(tls, want, "{url} (CA {ca:?})"),
            (Expect::Fails(words), Err(e)) => {
                let lower = e.to_lowercase();
                for w in *words {
                    assert!(lower.contains(w), "{url} (CA {ca:?}): {w:?} in {e}");
                }
            }
            _ => panic!("{url} (CA {ca:?}): expected {expect:?}, got {got:?}"),
        }
        println!("{url} (CA {ca:?}): {got:?}");
    }
}

/// Against a server with TLS on: `disable` stays plain, `prefer` (the
/// default) and `require` encrypt even with a certificate nobody trusts,
/// `verify-ca` and `verify-full` need the CA that signed it (from
/// `ca_file` or `sslrootcert`, in either URL form), and `verify-full` the
/// right host name. A CA file makes `require` check the chain, as in libpq.
#[tokio::test]
async fn every_sslmode_against_a_server_offering_tls() {
    let certs = Certs::make();
    let pg = certs.server();
    let url = |mode: &str| format!("postgres://postgres@127.0.0.1:{}/postgres{mode}", pg.port);
    let kv = |rest: &str| {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres {rest}",
            pg.port
        )
    };
    let (ca, other) = (certs.path("ca.pem"), certs.path("other-ca.pem"));
    let (ca, other) = (Some(ca.as_path()), Some(other.as_path()));
    let wrong_host = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let untrusted: &[&str] = &["tls", "certificate verify failed"];
    let cases = [
        (url("?sslmode=disable"), None, Expect::Tls(false)),
        (kv("sslmode=disable"), None, Expect::Tls(false)),
        (url(""), None, Expect::Tls(true)),
        (kv("sslmode=prefer"), None, Expect::Tls(true)),
        (url("?sslmode=require"), None, Expect::Tls(true)),
        (kv("sslmode=require"), None, Expect::Tls(true)),
        (url("?sslmode=verify-ca"), ca, Expect::Tls(true)),
        (url("?sslmode=verify-full"), ca, Expect::Tls(true)),
        (
            kv(&format!(
                "sslmode=verify-full sslrootcert='{}'",
                certs.path("ca.pem").display()
            )),
            None,
            Expect::Tls(true),
        ),
        (
            url(&format!(
                "?sslmode=verify-full&sslrootcert={}",
                certs.path("ca.pem").display()
            )),
            other,
            Expect::Tls(true),
        ),
        (url("?sslmode=verify-full"), other, Expect::Fails(untrusted)),
        (kv("sslmode=verify-ca"), other, Expect::Fails(untrusted)),
        (url("?sslmode=verify-full"), None, Expect::Fails(untrusted)),
        (url("?sslmode=require"), other, Expect::Fails(untrusted)),
        (
            format!("{wrong_host} sslmode=verify-full"),
            ca,
            Expect::Fails(&["certificate verify failed", "hostname mismatch"]),
        ),
        (
            format!("{wrong_host} sslmode=verify-ca"),
            ca,
            Expect::Tls(true),
        ),
    ];
    check_cases(&cases).await;
}

/// Against a server without TLS: `prefer` falls back to a plain
/// connection, `require` and the verify modes refuse to connect.
#[tokio::test]
async fn prefer_falls_back_to_plain_and_require_refuses_a_server_without_tls() {
    let certs = Certs::make();
    let pg = Postgres::start();
    let url = |mode: &str| format!("postgres://postgres@127.0.0.1:{}/postgres{mode}", pg.port);
    let ca = certs.path("ca.pem");
    let refused: &[&str] = &["server does not support tls"];
    let cases = [
        (url(""), None, Expect::Tls(false)),
        (
            url("?sslmode=prefer"),
            Some(ca.as_path()),
            Expect::Tls(false),
        ),
        (url("?sslmode=require"), None, Expect::Fails(refused)),
        (
            url("?sslmode=verify-full"),
            Some(ca.as_path()),
            Expect::Fails(refused),
        ),
    ];
    check_cases(&cases).await;
}

fn key() -> PeriodKey {
    PeriodKey {
        board: "plain".into(),
        scope: String::new(),
        view: "week".into(),
        period: "2026-W47".into(),
    }
}

/// A copy and a read of the archive over `verify-full`: the rows come back,
/// and the server counts every session but the test's own plain one as
/// encrypted.
#[tokio::test]
async fn an_archive_copy_and_an_archived_read_go_over_verified_tls() {
    let certs = Certs::make();
    let pg = certs.server();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=verify-full",
        pg.port
    );
    let target = Target::new(&url, Some(&certs.path("ca.pem"))).expect("target");
    assert_eq!(target.ssl_mode(), SslMode::VerifyFull);
    let mut writer = Archive::connect_to(&target).await.expect("connect");
    schema::migrate(writer.client()).await.expect("migrate");
    let standings: Vec<Standing> = [("ann", 30.0), ("bob", 20.0), ("cy", 10.0)]
        .into_iter()
        .map(|(m, s)| Standing {
            member: m.into(),
            score: s,
        })
        .collect();
    let key = key();
    let what = Copy {
        key: &key,
        start_ms: 1_763_337_600_000,
        end_ms: 1_763_942_400_000,
        replace: false,
    };
    let chunks = stream::iter(vec![Ok::<_, ArchiveError>(standings)]);
    let copied = writer.copy(what, chunks).await.expect("copy");
    assert_eq!(copied, Copied::Done { members: 3 });
    assert!(writer.uses_tls().await.expect("pg_stat_ssl"));

    let reader = ArchiveReader::with_target(target.clone());
    let rows = reader
        .page(&key, 1, 10)
        .await
        .expect("read")
        .expect("archived");
    let members: Vec<&str> = rows.rows.iter().map(|r| r.member.as_str()).collect();
    assert_eq!(members, ["ann", "bob", "cy"]);

    let mut admin = Archive::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        pg.port
    ))
    .await
    .expect("admin");
    let row = admin
        .client()
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl), string_agg(a.application_name, ',' ORDER BY a.application_name)
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
              WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("sessions");
    let (sessions, encrypted, names): (i64, i64, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((sessions, encrypted), (2, 2), "{names}");
    assert_eq!(names, "rankflow-archiver,rankflow-reads");
    println!(
        "verified: copy and read over verify-full; {encrypted}/{sessions} sessions encrypted ({names})"
    );
}

const BOARDS: &str = r#"
[[board]]
name = "plain"
event = "gift"
member = "sender_id"
score = "count"
periods = ["week"]
archive = ["week"]
retention = { week = "8w" }
"#;

/// `rankflow <args> -c <file>` with nothing listening for Kafka or Redis,
/// stopped after 20 s at the latest.
fn rankflow(dir: &Path, archive: &str, args: &[&str]) -> (Output, Duration) {
    let file = dir.join(format!("{}.toml", unique("c")));
    let text = format!(
        "[kafka]\nbrokers = \"127.0.0.1:{}\"\ntopics = [\"t\"]\n[redis]\nurl = \"redis://127.0.0.1:{}\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\n[archive]\n{archive}\n{BOARDS}",
        free_port(),
        free_port()
    );
    std::fs::write(&file, text).expect("config");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(args)
        .arg("-c")
        .arg(&file)
        .env("RANKFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rankflow starts");
    while child.try_wait().expect("wait").is_none() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let elapsed = started.elapsed();
    (child.wait_with_output().expect("output"), elapsed)
}

/// A bad `sslmode` and an unreadable CA file are configuration faults:
/// `check` and `run` exit 2 at once naming the setting, and the message
/// shows no password.
#[test]
fn bad_tls_settings_exit_2_naming_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "url = \"postgres://rf:pg-s3cret@127.0.0.1:1/rf?sslmode=verify_full\"",
            "archive.url",
            "sslmode `verify_full`",
        ),
        (
            "url = \"host=127.0.0.1 password='pg s3cret' sslmode=allow\"",
            "archive.url",
            "sslmode `allow`",
        ),
        (
            "url = \"host=127.0.0.1 password='pg s3cret' sslmode=verify-full\"\nca_file = \"/nonexistent/ca.pem\"",
            "archive.ca_file",
            "/nonexistent/ca.pem",
        ),
        (
            "url = \"host=127.0.0.1 sslmode=verify-full sslrootcert=/nonexistent/ca.pem\"",
            "archive.url",
            "/nonexistent/ca.pem",
        ),
    ];
    for (archive, setting, says) in cases {
        for command in ["check", "run"] {
            let (out, took) = rankflow(dir.path(), archive, &[command]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let all = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
            assert_eq!(out.status.code(), Some(2), "{command} {archive}: {all}");
            assert!(took < Duration::from_secs(5), "{command} waited {took:?}");
            assert!(stderr.contains(setting), "{command} {archive}: {stderr}");
            assert!(stderr.contains(says), "{command} {archive}: {stderr}");
            assert!(!all.contains("s3cret"), "{command} {archive}: {all}");
        }
    }
}

/// `rankflow check` prints the archive URL of either form with its
/// password masked, quoted or not, in a parameter or the user information.
#[test]
fn check_masks_the_password_of_every_url_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (url, shown) in [
        (
            "postgres://rf:pg-s3cret@127.0.0.1:1/rf?sslmode=require",
            "postgres://rf:***@127.0.0.1:1/rf?sslmode=require",
        ),
        (
            "postgres://rf@127.0.0.1:1/rf?password=pg-s3cret&sslmode=require",
            "postgres://rf@127.0.0.1:1/rf?password=***&sslmode=require",
        ),
        (
            "host=127.0.0.1 port=1 user=rf password=pg-s3cret sslmode=require",
            "host=127.0.0.1 port=1 user=rf password=*** sslmode=require",
        ),
        (
            "host=127.0.0.1 port=1 user=rf password='pg s3cret' sslmode=require",
            "host=127.0.0.1 port=1 user=rf password=*** sslmode=require",
        ),
    ] {
        let (out, _) = rankflow(dir.path(), &format!("url = \"{url}\""), &["check"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{url}: {stdout}{stderr}");
        assert!(
            stdout.contains(&format!("archive {shown};")),
            "{url}: {stdout}"
        );
        assert!(
            stdout.contains("  sslmode require: TLS always; certificate not checked\n"),
            "{url}: {stdout}"
        );
        assert!(
            !format!("{stdout}{stderr}").contains("s3cret"),
            "{stdout}{stderr}"
        );
    }
}

/// `rankflow archive` (the archiver's own connection, with `[archive]
/// ca_file`) connects with `verify-full`, logs that the connection is
/// encrypted, and logs its keyword/value URL without the password.
#[test]
fn the_archiver_connects_with_the_ca_file_and_logs_no_password() {
    let certs = Certs::make();
    let pg = certs.server();
    let redis = Redis::start();
    let archive = format!(
        "[archive]\nurl = \"host=127.0.0.1 port={} user=postgres dbname=postgres password='pg s3cret' sslmode=verify-full\"\nca_file = \"{}\"\n",
        pg.port,
        certs.path("ca.pem").display()
    );
    let cli = CliConfig::new(&format!("{archive}{BOARDS}"), &redis.url(), &unique("tls"));
    let out = cli.run("archive", &[("RANKFLOW_LOG", "info")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    let connected = stderr
        .lines()
        .find(|l| l.contains("Connected to the archive database"))
        .unwrap_or_else(|| panic!("no connection line: {stderr}"));
    assert!(connected.contains("tls=true"), "{connected}");
    assert!(connected.contains("verify-full"), "{connected}");
    assert!(connected.contains("password=***"), "{connected}");
    assert!(
        !format!("{stdout}{stderr}").contains("s3cret"),
        "{stdout}{stderr}"
    );
    println!("verified: {connected}");
}

/// Log lines written while a future runs on this thread's executor.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
    /// Captures `tracing` output of this thread until the guard drops.
    fn capture(&self) -> Capture {
        // Made first, so that two dispatchers exist when ours is set.
        let silent = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || logs.clone())
            .finish();
        Capture {
            _guard: tracing::subscriber::set_default(subscriber),
            _silent: silent,
        }
    }
}

/// A thread's log capture, and a silent dispatcher kept alive beside it.
/// With one dispatcher alive, tracing-core lets the first thread that
/// reaches a log statement decide alone whether anyone listens to it: a
/// test without a subscriber running the same code (the other migration
/// test) would mark the statement unheard for every thread, and this
/// test's capture would stay empty. With two, every live subscriber is
/// asked.
struct Capture {
    _guard: tracing::subscriber::DefaultGuard,
    _silent: tracing::Dispatch,
}

/// A migrated archive taken back to version 3: migrations 4 and 5 are pending and
/// must alter `rankflow_archive`, which needs its exclusive lock.
async fn archive_at_version_3(pg: &Postgres) -> Archive {
    let mut a = Archive::connect(&pg.url()).await.expect("connect");
    schema::migrate(a.client()).await.expect("migrate");
    a.client()
        .batch_execute(
            "DROP INDEX rankflow_archive_hidden, rankflow_archive_by_member;
             ALTER TABLE rankflow_archive DROP COLUMN hidden, DROP COLUMN hides_group;
             ALTER TABLE rankflow_archive DROP COLUMN fields;
             ALTER TABLE rankflow_archived_periods DROP COLUMN fields;
             DELETE FROM rankflow_schema_version WHERE version IN (4, 5)",
        )
        .await
        .expect("back to version 3");
    a
}

async fn version(a: &mut Archive) -> i32 {
    a.client()
        .query_one("SELECT max(version) FROM rankflow_schema_version", &[])
        .await
        .expect("version")
        .get(0)
}

/// A session that reads `rankflow_archive` in an open transaction, as a
/// long report does: it holds a lock the migration's `ALTER` waits for.
async fn report_holding_a_lock(pg: &Postgres) -> (Archive, i32) {
    let mut holder = Archive::connect(&format!("{}?application_name=long-report", pg.url()))
        .await
        .expect("holder");
    holder
        .client()
        .batch_execute("BEGIN; SELECT count(*) FROM rankflow_archive")
        .await
        .expect("hold");
    let pid: i32 = holder
        .client()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    (holder, pid)
}

/// A migration that meets a lock held by a long report waits only
/// `lock_timeout` at a time, logs in a sentence that it waited (naming the
/// report's session), leaves the queue behind it free between attempts,
/// and migrates once the report ends.
#[tokio::test]
async fn a_migration_waiting_for_a_lock_says_so_and_succeeds_once_it_is_released() {
    let pg = Postgres::start();
    let mut migrating = archive_at_version_3(&pg).await;
    let mut watcher = Archive::connect(&pg.url()).await.expect("watcher");
    let (mut holder, pid) = report_holding_a_lock(&pg).await;
    let logs = Logs::default();
    let _guard = logs.capture();
    let wait = LockWait {
        timeout: Duration::from_millis(200),
        attempts: 100,
        pause: Duration::from_millis(100),
    };
    let migration = schema::migrate_waiting(migrating.client(), wait);
    let release = async {
        let line = wait_for(Duration::from_secs(15), "a log line about the wait", || {
            let text = logs.text();
            async move {
                text.lines()
                    .filter(|l| l.contains("waited for a lock held by other sessions"))
                    .nth(1)
                    .map(str::to_string)
            }
        })
        .await;
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(&format!("pid {pid}")), "{line}");
        assert!(line.contains("long-report"), "{line}");
        assert!(line.contains("rankflow_archive"), "{line}");
        // Between attempts nothing queues: a plain read goes through.
        let started = Instant::now();
        watcher
            .client()
            .query_one("SELECT count(*) FROM rankflow_archive", &[])
            .await
            .expect("a read beside the waiting migration");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(version(&mut watcher).await, 3, "nothing migrated yet");
        holder
            .client()
            .batch_execute("COMMIT")
            .await
            .expect("commit");
        line
    };
    let (migrated, line) = tokio::join!(migration, release);
    assert_eq!(migrated.expect("migrated after the release"), 3);
    assert_eq!(version(&mut watcher).await, schema::latest());
    let text = logs.text();
    assert!(text.contains("got its locks"), "{text}");
    // The timeout was the transaction's alone.
    let lock_timeout: String = migrating
        .client()
        .query_one("SHOW lock_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(lock_timeout, "0");
    println!("verified: {line}");
}

/// A migration whose lock stays held fails after its attempts with a
/// retriable error that names the session holding it, and leaves the
/// schema as it was.
#[tokio::test]
async fn a_migration_that_never_gets_its_lock_fails_clearly() {
    let pg = Postgres::start();
    let mut migrating = archive_at_version_3(&pg).await;
    let (_holder, pid) = report_holding_a_lock(&pg).await;
    let wait = LockWait {
        timeout: Duration::from_millis(100),
        attempts: 3,
        pause: Duration::from_millis(10),
    };
    let started = Instant::now();
    let err = schema::migrate_waiting(migrating.client(), wait)
        .await
        .expect_err("the lock is never released");
    let took = started.elapsed();
    let text = err.to_string();
    assert!(matches!(err, ArchiveError::MigrationLocked(_)), "{err:?}");
    assert!(err.is_retriable(), "{text}");
    assert!(
        text.starts_with("migrating the archive schema: 3 attempts"),
        "{text}"
    );
    assert!(text.contains("lock_timeout"), "{text}");
    assert!(text.contains(&format!("pid {pid}")), "{text}");
    assert!(text.contains("long-report"), "{text}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(version(&mut migrating).await, 3);
    println!("verified in {took:?}: {text}");
}
