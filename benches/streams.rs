//! Live views under load (issue 13 point 6): one `rankflow run` (the
//! release binary, a child process, so its memory is read apart from the
//! clients') with tansu and redis-server, and `BENCH_STREAM_CLIENTS`
//! (default 2,000) concurrent Server-Sent Events clients on
//! `/v1/boards/{b}/all/top/stream?limit=10`, spread over 4 boards and then
//! all on one. Against baselines measured in the same run it prints:
//!
//! 1. Redis commands per second over a quiet window (`INFO commandstats`
//!    delta, every command but the bench's own `INFO`), with one client per
//!    view against all the clients on the same views;
//! 2. rankflow's resident memory (`VmRSS`) before the clients connect and
//!    with them connected, and the difference per client;
//! 3. the delay from a change to its push: the bench itself applies the
//!    change with `ZINCRBY` on the boards' sorted sets (the keys rankflow
//!    wrote them to from Kafka events, checked) and takes the instant the
//!    write returned; every client timestamps the chunk holding the first
//!    event that contains it. p50/p99/max over all (client, change) pairs;
//! 4. `rankflow_streams_open` and the increase of
//!    `rankflow_stream_events_total` over the changes: one push per change
//!    and view, not per client.
//!
//! Knobs: `BENCH_STREAM_CLIENTS` (2000), `BENCH_STREAM_CHANGES` (50),
//! `BENCH_STREAM_WINDOW_S` (5). Needs one file descriptor per client on
//! both sides: the bench raises its soft limit to the hard one (through
//! `sh -c ulimit`, re-executing itself) and starts rankflow the same way.
//!
//! Run with `scripts/bench.sh` (or `cargo bench --bench streams`).

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

/// Boards streamed in the spread case: the same event into 4 boards.
const VIEWS: usize = 4;
/// The member every change moves; far ahead, so it is in every top 10.
const PROBE: &str = "probe";
const PROBE_BASE: i64 = 1_000_000_000;
/// Other members on each board.
const MEMBERS: usize = 200;
/// Marks the re-executed bench, so it raises its limit only once.
/// Not `RANKFLOW_*`: rankflow refuses environment settings it does not know.
const RAISED: &str = "BENCH_STREAMS_NOFILE_RAISED";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn boards() -> String {
    (0..VIEWS)
        .map(|i| {
            format!(
                "[[board]]\nname = \"live{i}\"\nevent = \"score\"\nmember = \"user_id\"\nscore = \"points\"\nperiods = [\"all\"]\n\n"
            )
        })
        .collect()
}

// ---------------------------------------------------------------- limits

/// The soft limit on open files of this process.
fn nofile_soft() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Re-runs this bench under `ulimit -n <hard>` when the soft limit is too
/// low for `need` descriptors (no crate for `setrlimit` needed).
fn ensure_nofile(need: u64) {
    let soft = nofile_soft();
    if soft >= need {
        return;
    }
    assert!(
        std::env::var_os(RAISED).is_none(),
        "{need} open files needed, the hard limit allows {soft}: raise it (ulimit -Hn)"
    );
    eprintln!("open-file limit {soft} < {need}: re-running under ulimit -n $(ulimit -Hn)");
    let exe = std::env::current_exe().expect("own path");
    let status = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n \"$(ulimit -Hn)\" && exec \"$0\" \"$@\"")
        .arg(exe)
        .args(std::env::args().skip(1))
        .env(RAISED, "1")
        .status()
        .expect("sh runs");
    std::process::exit(status.code().unwrap_or(1));
}

/// `rankflow run` as a child whose open-file limit is raised to the hard
/// limit; `exec` keeps the pid, so `/proc/<pid>` is rankflow's.
fn start_rankflow(setup: &Setup, max_streams: u64) -> Process {
    let dir = tempfile::tempdir().expect("tempdir");
    let http_port = free_port();
    let text = setup.toml().replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{http_port}\"\nmax_streams = {max_streams}"),
    );
    let config = dir.path().join("rankflow.toml");
    std::fs::write(&config, text).expect("write config");
    let log = std::fs::File::create(dir.path().join("rankflow.log")).expect("log");
    let child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n \"$(ulimit -Hn)\" && exec \"$0\" run -c \"$1\"")
        .arg(env!("CARGO_BIN_EXE_rankflow"))
        .arg(&config)
        .env("RANKFLOW_LOG", "info")
        .env_remove(RAISED)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("rankflow starts");
    Process {
        child,
        http_port,
        dir,
    }
}

// ---------------------------------------------------------------- the rig

struct Rig {
    _broker: Broker,
    redis: Redis,
    setup: Setup,
    process: Process,
    conn: redis::aio::MultiplexedConnection,
    http: reqwest::Client,
    max_streams: u64,
}

impl Rig {
    /// Servers up, every board filled through Kafka and readable.
    async fn start(max_streams: u64) -> Rig {
        let broker = Broker::start();
        let redis = Redis::start();
        let setup = Setup::new(&broker, &redis, &boards());
        broker.create_topic(&setup.topic, 1).await;
        let process = start_rankflow(&setup, max_streams);
        let mut messages: Vec<(i32, Vec<u8>)> = (0..MEMBERS)
            .map(|i| score_event(i, &format!("u{i:03}"), 1000 + i as i64 * 7))
            .collect();
        messages.push(score_event(MEMBERS, PROBE, PROBE_BASE));
        send_all(&broker.producer(), &setup.topic, &messages).await;
        let conn = redis.conn().await;
        let mut rig = Rig {
            _broker: broker,
            redis,
            setup,
            process,
            conn,
            http: reqwest::Client::new(),
            max_streams,
        };
        rig.wait_filled().await;
        rig
    }

    /// A fresh rankflow on the same servers and keys: memory freed after
    /// earlier clients stays with the allocator, so a process that had 2,000
    /// clients would grow less for the next 2,000 and flatter the figure.
    async fn restart(&mut self) {
        self.process.sigterm();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.process.child.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "rankflow did not stop");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.process = start_rankflow(&self.setup, self.max_streams);
        self.wait_filled().await;
    }

    fn key(&self, view: usize) -> String {
        self.setup.key(&format!("live{view}"), "all")
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    fn stream_url(&self, view: usize) -> String {
        self.url(&format!("/v1/boards/live{view}/all/top/stream?limit=10"))
    }

    /// Until each board's sorted set (at the key layout the ZINCRBYs use)
    /// holds every member and `top` answers with the probe first.
    async fn wait_filled(&mut self) {
        for view in 0..VIEWS {
            let key = self.key(view);
            let deadline = Instant::now() + Duration::from_secs(90);
            while self.redis.zset(&key).await.len() != MEMBERS + 1 {
                if let Ok(Some(status)) = self.process.child.try_wait() {
                    panic!("rankflow exited ({status}); log:\n{}", self.process.log());
                }
                assert!(
                    Instant::now() < deadline,
                    "{key} not filled after 90 s; rankflow log:\n{}",
                    self.process.log()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let url = self.url(&format!("/v1/boards/live{view}/all/top?limit=10"));
            wait_for(Duration::from_secs(30), "top answers", || async {
                let text = get_text(&url).await?;
                let v: Value = serde_json::from_str(&text).ok()?;
                (v["entries"][0]["member"] == json!(PROBE)).then_some(())
            })
            .await;
        }
    }

    /// One change on every board, atomically: the probe gains 1. Returns
    /// its new score and the instant the write returned.
    async fn change(&mut self) -> (f64, Instant) {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for view in 0..VIEWS {
            pipe.zincr(self.key(view), PROBE, 1);
        }
        let scores: Vec<f64> = pipe.query_async(&mut self.conn).await.expect("ZINCRBY");
        (scores[0], Instant::now())
    }

    /// `calls=` per command from `INFO commandstats`.
    async fn commandstats(&mut self) -> BTreeMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await
            .expect("INFO");
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let n = rest.split(',').next()?.parse().ok()?;
                Some((name.to_string(), n))
            })
            .collect()
    }

    async fn metrics(&self) -> (f64, f64) {
        let text = get_text(&self.url("/metrics")).await.unwrap_or_default();
        (
            metric_sum(&text, "rankflow_streams_open", &[]),
            metric_sum(&text, "rankflow_stream_events_total", &[("kind", "top")]),
        )
    }
}

fn score_event(n: usize, user: &str, points: i64) -> (i32, Vec<u8>) {
    let e = json!({"type": "score", "event_id": format!("seed{n}"),
                   "ts": common::reference::now_ms(), "user_id": user,
                   "game_id": "g1", "points": points});
    (0, serde_json::to_vec(&e).expect("JSON"))
}

// ---------------------------------------------------------------- clients

/// What one client saw: the probe's score in each event, with the instant
/// the chunk carrying it arrived.
type Seen = Vec<(f64, Instant)>;

struct Clients {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Seen>>,
}

/// The probe's score in an event's JSON.
fn probe_score(data: &str) -> Option<f64> {
    let v: Value = serde_json::from_str(data).ok()?;
    v["entries"]
        .as_array()?
        .iter()
        .find(|e| e["member"] == json!(PROBE))?["score"]
        .as_f64()
}

/// The `data:` of each complete SSE block in `buf`, which keeps any
/// incomplete rest. Comments (heartbeats) have no data and are skipped.
fn take_events(buf: &mut Vec<u8>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let block = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 2);
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

/// One client: opens the stream (holding a connect slot until its first
/// event), then records events until told to stop.
async fn client(
    http: reqwest::Client,
    url: String,
    slots: Arc<Semaphore>,
    ready: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) -> Seen {
    let slot = slots.acquire_owned().await.expect("semaphore open");
    let mut resp = match http.get(&url).send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => panic!("stream refused: {} {url}", r.status()),
        Err(e) => panic!("stream request failed: {e} {url}"),
    };
    let (mut seen, mut buf, mut slot) = (Seen::new(), Vec::new(), Some(slot));
    loop {
        let chunk = tokio::select! {
            c = resp.chunk() => c,
            _ = stop.wait_for(|s| *s) => return seen,
        };
        let at = Instant::now();
        match chunk {
            Ok(Some(bytes)) => buf.extend_from_slice(&bytes),
            _ => panic!("a stream ended early: {url}"),
        }
        for data in take_events(&mut buf) {
            let score = probe_score(&data).expect("every event holds the probe");
            seen.push((score, at));
            if slot.take().is_some() {
                ready.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

impl Clients {
    /// `n` clients, client `i` on view `i % views`; returns once all have
    /// their first event (at most 100 connecting at a time).
    async fn open(rig: &Rig, n: usize, views: usize) -> Clients {
        let (stop, rx) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(100));
        let ready = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks = (0..n)
            .map(|i| {
                let url = rig.stream_url(i % views);
                let (h, s, r, x) = (rig.http.clone(), slots.clone(), ready.clone(), rx.clone());
                tokio::spawn(client(h, url, s, r, x))
            })
            .collect();
        let clients = Clients { stop, tasks };
        wait_for(Duration::from_secs(180), "all clients connected", || {
            let done = ready.load(Ordering::SeqCst) == n;
            let failed = clients.tasks.iter().any(|t| t.is_finished());
            assert!(!failed, "a client task ended while connecting");
            async move { done.then_some(()) }
        })
        .await;
        eprintln!(
            "  {n} clients on {views} view(s) connected in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        clients
    }

    async fn close(self) -> Vec<Seen> {
        let _ = self.stop.send(true);
        let mut all = Vec::with_capacity(self.tasks.len());
        for t in self.tasks {
            all.push(t.await.expect("client task"));
        }
        all
    }
}

// ---------------------------------------------------------------- phases

/// The figures of one phase.
struct Phase {
    name: String,
    clients: usize,
    views: usize,
    cmds_per_s: f64,
    /// Commands per second by name, the largest first.
    by_command: Vec<(String, f64)>,
    rss_before_kib: u64,
    rss_kib: u64,
    streams_open: f64,
    pushes: f64,
    changes: usize,
    /// Change-to-push delays in ms over all (client, change) pairs, sorted.
    delays_ms: Vec<f64>,
}

impl Phase {
    fn pct(&self, p: f64) -> f64 {
        if self.delays_ms.is_empty() {
            return f64::NAN;
        }
        let i = ((p / 100.0) * self.delays_ms.len() as f64).ceil() as usize;
        self.delays_ms[i.clamp(1, self.delays_ms.len()) - 1]
    }

    fn per_client_kib(&self) -> f64 {
        (self.rss_kib as f64 - self.rss_before_kib as f64) / self.clients as f64
    }
}

/// Commands per second over `window` of quiet (no changes), excluding the
/// bench's own `INFO`.
async fn command_rate(rig: &mut Rig, window: Duration) -> (f64, Vec<(String, f64)>) {
    let before = rig.commandstats().await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = rig.commandstats().await;
    let secs = started.elapsed().as_secs_f64();
    let mut by: Vec<(String, f64)> = after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, n)| {
            let d = n - before.get(name).copied().unwrap_or(0);
            (name.clone(), d as f64 / secs)
        })
        .filter(|(_, r)| *r > 0.0)
        .collect();
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    (by.iter().map(|(_, r)| r).sum(), by)
}

/// `changes` changes 300–500 ms apart (more than a tick, so each is its own
/// push; not a multiple of it, so they land anywhere in a tick).
async fn make_changes(rig: &mut Rig, changes: usize) -> Vec<(f64, Instant)> {
    let mut made = Vec::with_capacity(changes);
    for i in 0..changes {
        // A fixed spread, not a random one: the same phases every run.
        let pause = 300 + (i as u64 * 73) % 200;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        made.push(rig.change().await);
    }
    // The last change's push, for the slowest client.
    tokio::time::sleep(Duration::from_secs(2)).await;
    made
}

/// For each change, when each client first saw a score at least its own
/// (a client that skipped a state got the change with the newer one).
fn delays(made: &[(f64, Instant)], seen: &[Seen]) -> Vec<f64> {
    let mut out = Vec::with_capacity(made.len() * seen.len());
    for events in seen {
        for (score, t0) in made {
            let got = events.iter().find(|(s, _)| s >= score);
            let (_, at) = got.expect("a client never received a change");
            // Signed: a push read between the apply and our reply is early.
            let ms = if at >= t0 {
                at.duration_since(*t0).as_secs_f64() * 1e3
            } else {
                -(t0.duration_since(*at).as_secs_f64() * 1e3)
            };
            out.push(ms);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

/// Ends a phase: waits until rankflow has noticed every client left (the
/// stream of a gone client ends at its next write, so one more change).
async fn drain(rig: &mut Rig) {
    rig.change().await;
    wait_for(
        Duration::from_secs(30),
        "streams_open back to 0",
        || async { (rig.metrics().await.0 == 0.0).then_some(()) },
    )
    .await;
}

async fn phase(
    rig: &mut Rig,
    clients: usize,
    views: usize,
    changes: usize,
    window: Duration,
) -> Phase {
    let name = format!("{clients} client(s) on {views} view(s)");
    eprintln!("phase: {name}");
    let rss_before_kib = rig.process.rss_kib();
    let open = Clients::open(rig, clients, views).await;
    // Let the connect burst settle before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cmds_per_s, by_command) = command_rate(rig, window).await;
    let rss_kib = rig.process.rss_kib();
    let (streams_open, pushes0) = rig.metrics().await;
    let made = make_changes(rig, changes).await;
    let pushes = rig.metrics().await.1 - pushes0;
    let seen = open.close().await;
    let delays_ms = delays(&made, &seen);
    drain(rig).await;
    let p = Phase {
        name,
        clients,
        views,
        cmds_per_s,
        by_command,
        rss_before_kib,
        rss_kib,
        streams_open,
        pushes,
        changes,
        delays_ms,
    };
    eprintln!(
        "  {:.1} Redis cmds/s, RSS {} -> {} KiB, open {}, pushes {}, delay p50 {:.1} ms p99 {:.1} ms",
        p.cmds_per_s,
        p.rss_before_kib,
        p.rss_kib,
        p.streams_open,
        p.pushes,
        p.pct(50.0),
        p.pct(99.0)
    );
    p
}

// ---------------------------------------------------------------- report

fn top_commands(p: &Phase) -> String {
    p.by_command
        .iter()
        .take(4)
        .map(|(n, r)| format!("{n} {r:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn report(idle: (f64, u64), phases: &[Phase], window: Duration) {
    println!(
        "live-view benchmark: top streams (limit 10) of plain boards, 1 rankflow run (release), Redis commands over {}s of quiet",
        window.as_secs()
    );
    println!(
        "  idle (0 clients): {:.1} Redis cmds/s, rankflow RSS {} KiB",
        idle.0, idle.1
    );
    println!(
        "  {:<28} {:>9} {:>10} {:>10} {:>11} {:>7} {:>7} {:>9} {:>9} {:>9}",
        "",
        "cmds/s",
        "RSS0 KiB",
        "RSS KiB",
        "KiB/client",
        "open",
        "pushes",
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    for p in phases {
        println!(
            "  {:<28} {:>9.1} {:>10} {:>10} {:>11} {:>7} {:>7} {:>9.1} {:>9.1} {:>9.1}",
            p.name,
            p.cmds_per_s,
            p.rss_before_kib,
            p.rss_kib,
            // A few clients' memory is below the RSS noise of a page.
            if p.clients >= 100 {
                format!("{:.1}", p.per_client_kib())
            } else {
                "-".to_string()
            },
            p.streams_open,
            p.pushes,
            p.pct(50.0),
            p.pct(99.0),
            p.pct(100.0)
        );
        println!(
            "  {:<28} by command: {}; {} changes x {} view(s) x {} clients = {} delays",
            "",
            top_commands(p),
            p.changes,
            p.views,
            p.clients / p.views,
            p.delays_ms.len()
        );
    }
    for pair in phases.chunks(2) {
        if let [one, many] = pair {
            println!(
                "  {} view(s): Redis cmds/s {} clients / {} : {:.2}x; pushes per change and view {:.2} / {:.2}; RSS per client {:.1} KiB; p99 {:.1} / {:.1} ms",
                many.views,
                many.clients,
                one.clients,
                many.cmds_per_s / one.cmds_per_s.max(1e-9),
                many.pushes / (many.changes * many.views) as f64,
                one.pushes / (one.changes * one.views) as f64,
                many.per_client_kib(),
                many.pct(99.0),
                one.pct(99.0)
            );
        }
    }
    println!(
        "  (RSS0: rankflow with 0 clients just before; a fresh rankflow for each view count. Delays include the 250 ms tick: a change waits 0-250 ms for the next read)"
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clients = env_u64("BENCH_STREAM_CLIENTS", 2000) as usize;
    let changes = env_u64("BENCH_STREAM_CHANGES", 50) as usize;
    let window = Duration::from_secs(env_u64("BENCH_STREAM_WINDOW_S", 5));
    ensure_nofile(clients as u64 + 512);
    let mut rig = Rig::start(clients as u64 + 100).await;
    let idle_rss = rig.process.rss_kib();
    let (idle_cmds, _) = command_rate(&mut rig, window).await;
    let mut phases = Vec::new();
    for views in [VIEWS, 1] {
        if views != VIEWS {
            rig.restart().await;
        }
        phases.push(phase(&mut rig, views, views, changes, window).await);
        phases.push(phase(&mut rig, clients, views, changes, window).await);
    }
    report((idle_cmds, idle_rss), &phases, window);
}
