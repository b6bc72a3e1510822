//! What a rolling view `last:7d` (docs/http-api.md, issue 12 point 7) costs at read
//! time, against keeping the same answer as a `7d/1d` window at write time.
//!
//! 1. Seven UTC day boards (today and the 6 days before) of
//!    `BENCH_UNION_MEMBERS` members each (default 100,000; 1.5 times as many
//!    distinct members over the week, random scores) are loaded straight
//!    into Redis in the key layout of docs/redis-layout.md (pipelined `ZADD`, and `HSET`
//!    of `:t` for the tie-break board): a loading shortcut, the write path
//!    has its own tests. Then `GET /v1/boards/<b>/last:7d/top?limit=10`
//!    through rankflow's HTTP router (in-process, real Redis):
//!    - uncached: `union_cache` 100 ms and each read waits until the
//!      freshness marker is gone, so every read recomputes the union
//!      (`BENCH_UNION_READS`, default 30): p50/p99, Redis CPU per read
//!      (`INFO cpu`), unions computed, the longest single Redis command
//!      (`SLOWLOG`: how long Redis was blocked), and where the time goes
//!      (`INFO commandstats`, and a `ZUNIONSTORE` of the same keys sent
//!      directly). Built in slices (the default for unions this large),
//!      and as the baseline in one script call (`BENCH_UNION_ONE_CALL_READS`,
//!      default 5), as before slices existed;
//!    - cached: reads within the TTL (`BENCH_UNION_CACHED_READS`, default
//!      1000), once by the process that built the result (no script call)
//!      and once by another replica (one script call that finds the
//!      result fresh);
//!
//!    for a plain board (`ZUNIONSTORE`) and a tie-break board (the union
//!    in Lua). Every answer's top 10 scores are checked against sums
//!    computed here from the generated data.
//! 2. `BENCH_UNION_READERS` (100) concurrent readers of one union for
//!    `BENCH_UNION_HAMMER_S` (6) seconds with `union_cache` 1 s: reads,
//!    unions computed against the TTLs elapsed, p50/p99.
//! 3. The write side: `BENCH_UNION_EVENTS` (200,000) score events through
//!    tansu into a board with `periods = ["day"]` and into the same board
//!    with `windows = ["7d/1d"]` too (same run, same topic): the window's
//!    extra CPU per event, and the union reads per second that cost Redis
//!    as much.
//!
//! Run with `cargo bench --bench unions` (tansu from scripts/setup.sh in
//! `TANSU_BIN`, redis-server on the path).

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{Days, NaiveDate, Utc};
use common::direct::Direct;
use common::*;
use rankflow::clock::SharedClock;
use rankflow::event::EventType;
use rankflow::reader::{Reader, Unions};
use support::{Run, consume, env_u64, redis_usage};

const READ_BOARDS: &str = r#"
timezone = "UTC"
[[board]]
name = "plain"
event = "score"
member = "user_id"
score = "points"
periods = ["day"]
retention = { day = "8d" }

[[board]]
name = "tied"
event = "score"
member = "user_id"
score = "points"
tie_break = "earliest"
periods = ["day"]
retention = { day = "8d" }
"#;

const DAY_ONLY: &str = r#"
[[board]]
name = "daily"
event = "score"
member = "user_id"
score = "points"
periods = ["day"]
retention = { day = "8d" }
"#;

const DAY_AND_WINDOW: &str = r#"
[[board]]
name = "daily_window"
event = "score"
member = "user_id"
score = "points"
periods = ["day"]
retention = { day = "8d" }
windows = ["7d/1d"]
"#;

/// `union_cache` of the uncached phase: short, so that a read after the
/// marker expired recomputes, and long enough that the result (which
/// lives twice this) is still there when the read script reads it.
const UNCACHED_TTL_MS: i64 = 100;

/// Tie key of `earliest` on a descending board: 2^48 − 1 − t.
const MAX_TIE: i64 = (1 << 48) - 1;

/// A small deterministic generator (splitmix64): the data must be the same
/// in every run, and the bench needs nothing more.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One day board's entries: (member index, score, event time ms).
type Day = Vec<(u64, i64, i64)>;

/// The week's data: day `d` (0 = today) holds `members` consecutive
/// members (mod `distinct`) starting at `d * step`, so neighbouring days
/// overlap mostly and the week covers all `distinct` members.
fn generate(today: NaiveDate, members: u64, distinct: u64) -> Vec<(NaiveDate, Day)> {
    let mut rng = Rng(12);
    let step = distinct.saturating_sub(members) / 6;
    (0..7u64)
        .map(|d| {
            let date = today - Days::new(d);
            let start = date
                .and_hms_opt(0, 0, 0)
                .map(|t| t.and_utc().timestamp_millis())
                .unwrap_or(0);
            let day = (0..members)
                .map(|i| {
                    let m = (d * step + i) % distinct;
                    let t = start + rng.below(86_400_000) as i64;
                    (m, 1 + rng.below(1_000) as i64, t)
                })
                .collect();
            (date, day)
        })
        .collect()
}

/// A connection for commands that take seconds on large sets (the
/// client's default response timeout is half a second).
async fn slow_conn(redis: &Redis) -> redis::aio::MultiplexedConnection {
    let mut c = redis.conn().await;
    c.set_response_timeout(Duration::from_secs(120));
    c
}

fn member(m: u64) -> String {
    format!("user-{m:07}")
}

/// Writes the days into `board`'s day keys as the apply script lays them
/// out (docs/redis-layout.md; docs/score-encoding.md for the tie-break board).
async fn load(redis: &Redis, prefix: &str, board: &str, tied: bool, week: &[(NaiveDate, Day)]) {
    let mut c = slow_conn(redis).await;
    for (date, day) in week {
        let key = format!("{prefix}:{{{board}}}:day:{date}");
        for chunk in day.chunks(50_000) {
            let mut pipe = redis::pipe();
            for part in chunk.chunks(1_000) {
                let z = pipe.cmd("ZADD").arg(&key);
                for (m, score, t) in part {
                    let stored = if tied {
                        format!("{:012x}{}", MAX_TIE - t, member(*m))
                    } else {
                        member(*m)
                    };
                    z.arg(*score).arg(stored);
                }
                z.ignore();
                if tied {
                    let h = pipe.cmd("HSET").arg(format!("{key}:t"));
                    for (m, _, t) in part {
                        h.arg(member(*m)).arg(*t);
                    }
                    h.ignore();
                }
            }
            let () = pipe.query_async(&mut c).await.expect("load a day board");
        }
    }
}

/// The 10 best weekly sums, computed from the generated data.
fn reference_top10(week: &[(NaiveDate, Day)]) -> Vec<i64> {
    let mut sums: HashMap<u64, i64> = HashMap::new();
    for (_, day) in week {
        for (m, s, _) in day {
            *sums.entry(*m).or_default() += s;
        }
    }
    let mut v: Vec<i64> = sums.into_values().collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.truncate(10);
    v
}

/// A rankflow HTTP server over `d`'s boards computing unions with `unions`.
async fn serve(d: &Direct, unions: Unions) -> String {
    let clock: SharedClock = Arc::new(d.clock.clone());
    let reader = Reader::new(d.boards.clone(), d.store.clone(), clock, None).with_unions(unions);
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(reader);
    d.serve(slot).await
}

/// One timed read of the top 10; checks the scores.
async fn read_top(client: &reqwest::Client, url: &str, want: &[i64]) -> Duration {
    let started = Instant::now();
    let resp = client.get(url).send().await.expect("GET the union");
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.expect("a JSON body");
    let took = started.elapsed();
    assert!(status.is_success(), "{url}: {status} {body}");
    let got: Vec<i64> = body["entries"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["score"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(got, want, "{url}: top 10 scores against the reference");
    took
}

/// `calls` and `usec` of one command in `INFO commandstats`.
fn cmdstat(redis: &Redis, command: &str) -> (f64, f64) {
    let info = redis.cli(&["INFO", "commandstats"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("calls="), field("usec="))
}

/// The p-th percentile (0..=100) of sorted latencies, in ms.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// Latencies and costs of one phase of reads.
#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    redis_cpu_s: f64,
    zunionstore: f64,
    evalsha: f64,
    /// Unions computed: ZUNIONSTOREs (one script call) plus RENAMEs of
    /// the sliced build's result (two for a tie-break board).
    computations: f64,
    /// The longest single Redis command (or script call) of the phase,
    /// from SLOWLOG (commands of 1 ms or more), ms.
    longest_ms: f64,
    elapsed_s: f64,
}

impl Phase {
    fn reads(&self) -> f64 {
        self.latencies.len() as f64
    }
    fn cpu_us_per_read(&self) -> f64 {
        1e6 * self.redis_cpu_s / self.reads().max(1.0)
    }
    fn row(&self, name: &str) {
        let mut l = self.latencies.clone();
        l.sort_unstable();
        println!(
            "  {name:<44} {:>7.0} {:>10.2} {:>10.2} {:>14.1} {:>12.0} {:>9.0} {:>13.1}",
            self.reads(),
            pct(&l, 50.0),
            pct(&l, 99.0),
            self.cpu_us_per_read(),
            self.computations,
            self.evalsha,
            self.longest_ms
        );
    }
}

/// Counters before a phase, to take the phase's increase.
struct Mark {
    at: Instant,
    cpu: f64,
    zunion: f64,
    evalsha: f64,
    rename: f64,
}

/// Starts a phase: counters, and an empty SLOWLOG that keeps every
/// command of 1 ms or more.
async fn mark(redis: &Redis) -> Mark {
    redis.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "1000"]);
    redis.cli(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    redis.cli(&["SLOWLOG", "RESET"]);
    Mark {
        at: Instant::now(),
        cpu: redis_usage(redis).await.0,
        zunion: cmdstat(redis, "zunionstore").0,
        evalsha: cmdstat(redis, "evalsha").0,
        rename: cmdstat(redis, "rename").0,
    }
}

/// The longest command in SLOWLOG, ms (0 when none took 1 ms).
async fn longest_ms(redis: &Redis) -> f64 {
    let mut c = slow_conn(redis).await;
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("SLOWLOG GET");
    log.iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) => match fields.get(2) {
                Some(redis::Value::Int(us)) => Some(*us as f64 / 1e3),
                _ => None,
            },
            _ => None,
        })
        .fold(0.0, f64::max)
}

async fn finish(redis: &Redis, m: Mark, latencies: Vec<Duration>, tied: bool) -> Phase {
    let zunionstore = cmdstat(redis, "zunionstore").0 - m.zunion;
    let renames = cmdstat(redis, "rename").0 - m.rename;
    Phase {
        elapsed_s: m.at.elapsed().as_secs_f64(),
        redis_cpu_s: redis_usage(redis).await.0 - m.cpu,
        zunionstore,
        evalsha: cmdstat(redis, "evalsha").0 - m.evalsha,
        computations: zunionstore + if tied { renames / 2.0 } else { renames },
        longest_ms: longest_ms(redis).await,
        latencies,
    }
}

/// `reads` reads that each recompute the union: before each, wait until
/// the freshness marker of the last result is gone.
async fn uncached(redis: &Redis, base: &str, keys: &Keys, reads: u64, want: &[i64]) -> Phase {
    let (board, marker) = (keys.board, &keys.marker());
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/boards/{board}/last:7d/top?limit=10");
    let m = mark(redis).await;
    let mut latencies = Vec::new();
    for i in 0..reads {
        stale(redis, marker).await;
        latencies.push(read_top(&client, &url, want).await);
        if i % 10 == 9 {
            eprintln!("    {} uncached reads of {board}", i + 1);
        }
    }
    finish(redis, m, latencies, keys.tied).await
}

/// `reads` reads of a union that is fresh, through `base`.
async fn cached(redis: &Redis, base: &str, board: &str, want: &[i64]) -> Phase {
    let reads = env_u64("BENCH_UNION_CACHED_READS", 1_000);
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/boards/{board}/last:7d/top?limit=10");
    let m = mark(redis).await;
    let mut latencies = Vec::new();
    for _ in 0..reads {
        latencies.push(read_top(&client, &url, want).await);
    }
    finish(redis, m, latencies, false).await
}

/// Where the time of an uncached plain union goes: `ZUNIONSTORE` of the
/// same 7 keys sent directly (no script, no HTTP), timed at the client.
async fn direct_zunionstore(redis: &Redis, sources: &[String]) -> Vec<Duration> {
    let mut c = slow_conn(redis).await;
    let dst = unique("bench-direct-union");
    let mut out = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let n: i64 = redis::cmd("ZUNIONSTORE")
            .arg(&dst)
            .arg(sources.len())
            .arg(sources)
            .query_async(&mut c)
            .await
            .expect("ZUNIONSTORE");
        out.push(started.elapsed());
        assert!(n > 0);
        let _: i64 = redis::cmd("DEL")
            .arg(&dst)
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
    out.sort_unstable();
    out
}

/// Figures of one board's reads.
struct BoardReads {
    board: &'static str,
    /// Uncached reads, large unions built in slices (the default).
    uncached: Phase,
    /// Uncached reads, each union in one script call (before slices).
    uncached_one_call: Phase,
    cached_here: Phase,
    cached_replica: Phase,
    /// Per command over the uncached phase (`INFO commandstats`; calls
    /// inside scripts count): (name, calls, µs per call).
    commands: Vec<(&'static str, f64, f64)>,
}

/// The commands whose time an uncached union spends.
const UNION_COMMANDS: [&str; 9] = [
    "evalsha",
    "zunionstore",
    "zrange",
    "zscan",
    "zcard",
    "zadd",
    "hset",
    "rename",
    "unlink",
];

fn commandstats(redis: &Redis) -> Vec<(f64, f64)> {
    UNION_COMMANDS.iter().map(|c| cmdstat(redis, c)).collect()
}

async fn read_board(redis: &Redis, d: &Direct, keys: &Keys, want: &[i64]) -> BoardReads {
    let board = keys.board;
    eprintln!("  {board}: uncached reads, sliced build (union_cache {UNCACHED_TTL_MS} ms)...");
    let base = serve(d, Unions::new(UNCACHED_TTL_MS)).await;
    let before = commandstats(redis);
    let reads = env_u64("BENCH_UNION_READS", 30);
    let uncached_sliced = uncached(redis, &base, keys, reads, want).await;
    assert_eq!(
        uncached_sliced.zunionstore, 0.0,
        "large unions are built in slices"
    );
    assert_eq!(uncached_sliced.computations, uncached_sliced.reads());
    let commands = UNION_COMMANDS
        .iter()
        .zip(before.iter().zip(commandstats(redis)))
        .map(|(name, (a, b))| (*name, b.0 - a.0, (b.1 - a.1) / (b.0 - a.0).max(1.0)))
        .collect();
    eprintln!("  {board}: uncached reads, one script call (the baseline)...");
    let one_call = Unions::new(UNCACHED_TTL_MS).with_inline_max(u64::MAX);
    let base = serve(d, one_call).await;
    let reads = env_u64("BENCH_UNION_ONE_CALL_READS", 5);
    let mut uncached_one_call = uncached(redis, &base, keys, reads, want).await;
    // Each read of a stale union makes one union script call that computes
    // it (a tie-break board's has no ZUNIONSTORE to count).
    uncached_one_call.computations = uncached_one_call.evalsha;
    assert_eq!(uncached_one_call.computations, uncached_one_call.reads());
    eprintln!("  {board}: cached reads...");
    stale(redis, &keys.marker()).await;
    // A long TTL: every read is within it. The process that built the
    // result reads it without a script call for half the TTL; another
    // replica (its own Unions) calls the script, which finds it fresh.
    let here = serve(d, Unions::new(600_000)).await;
    let client = reqwest::Client::new();
    read_top(
        &client,
        &format!("{here}/v1/boards/{board}/last:7d/top?limit=10"),
        want,
    )
    .await;
    let cached_here = cached(redis, &here, board, want).await;
    let replica = serve(d, Unions::new(600_000)).await;
    let cached_replica = cached(redis, &replica, board, want).await;
    BoardReads {
        board,
        uncached: uncached_sliced,
        uncached_one_call,
        cached_here,
        cached_replica,
        commands,
    }
}

/// The keys of one board's `last:7d` as of today.
struct Keys {
    prefix: String,
    board: &'static str,
    today: NaiveDate,
    tied: bool,
}

impl Keys {
    fn result(&self) -> String {
        format!(
            "{}:{{{}}}:u:last:7d:{}",
            self.prefix, self.board, self.today
        )
    }
    fn marker(&self) -> String {
        format!("{}:fresh", self.result())
    }
    fn sources(&self) -> Vec<String> {
        (0..7)
            .map(|d| {
                let date = self.today - Days::new(d);
                format!("{}:{{{}}}:day:{date}", self.prefix, self.board)
            })
            .collect()
    }
}

/// Waits until the union's freshness marker is gone.
async fn stale(redis: &Redis, marker: &str) {
    wait_for(Duration::from_secs(30), "the union to go stale", || async {
        (redis.cli(&["EXISTS", marker]).trim() == "0").then_some(())
    })
    .await;
}

/// `readers` tasks reading one union for `secs` seconds with
/// `union_cache` 1 s; the union is made stale first.
async fn hammer(redis: &Redis, d: &Direct, keys: &Keys, want: &[i64]) -> Phase {
    let readers = env_u64("BENCH_UNION_READERS", 100);
    let secs = env_u64("BENCH_UNION_HAMMER_S", 6);
    let _ = redis.cli(&["DEL", &keys.marker(), &keys.result()]);
    let base = serve(d, Unions::new(1_000)).await;
    let url = format!("{base}/v1/boards/{}/last:7d/top?limit=10", keys.board);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(readers as usize)
        .build()
        .expect("HTTP client");
    let m = mark(redis).await;
    let until = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let (client, url, want) = (client.clone(), url.clone(), want.to_vec());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < until {
                    latencies.push(read_top(&client, &url, &want).await);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in futures::future::join_all(tasks).await {
        latencies.extend(t.expect("reader task"));
    }
    finish(redis, m, latencies, false).await
}

/// The write side: the day board alone, then with a `7d/1d` window.
async fn writes(events: u64) -> (Run, Run) {
    let broker = Broker::start();
    let redis = Redis::start();
    let topic = unique("bench-unions");
    broker.create_topic(&topic, 8).await;
    eprintln!("producing {events} score events (150000 players, Zipf 1.1) into 8 partitions...");
    let options = rankflow::produce::Options {
        brokers: broker.brokers(),
        topic: topic.clone(),
        events,
        rate: 0,
        members: 150_000,
        receivers: 1_000,
        games: 20,
        types: vec![EventType::Score],
        skew: 1.1,
        key: Default::default(),
        seed: 7,
        client: Vec::new(),
    };
    let sent = support::produce(options).await;
    eprintln!("produced {sent} events");
    let defaults = rankflow::config::BatchConfig::default();
    let batch = (defaults.max_events.get(), defaults.max_delay_ms.get());
    eprintln!("day board only:");
    let day = consume(&broker, &redis, &topic, DAY_ONLY, events, batch).await;
    eprintln!("day board and a 7d/1d window:");
    let window = consume(&broker, &redis, &topic, DAY_AND_WINDOW, events, batch).await;
    (day, window)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let members = env_u64("BENCH_UNION_MEMBERS", 100_000);
    let distinct = env_u64("BENCH_UNION_DISTINCT", members * 3 / 2);
    let events = env_u64("BENCH_UNION_EVENTS", 200_000);
    let now = Utc::now().timestamp_millis();
    let today = chrono::DateTime::from_timestamp_millis(now)
        .map(|t| t.date_naive())
        .expect("now is a date");
    let redis = Redis::start();
    let prefix = unique("rf");
    let d = Direct::new(&redis.url(), &prefix, READ_BOARDS, now).await;
    eprintln!(
        "generating and loading 7 x {members} entries ({distinct} distinct members) per board..."
    );
    let week = generate(today, members, distinct);
    let want = reference_top10(&week);
    let mut reads = Vec::new();
    let mut direct = Vec::new();
    let mut concurrent = None;
    for (board, tied) in [("plain", false), ("tied", true)] {
        let started = Instant::now();
        load(&redis, &prefix, board, tied, &week).await;
        eprintln!(
            "  {board}: loaded in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        let keys = Keys {
            prefix: prefix.clone(),
            board,
            today,
            tied,
        };
        reads.push(read_board(&redis, &d, &keys, &want).await);
        if !tied {
            direct = direct_zunionstore(&redis, &keys.sources()).await;
            eprintln!("  {board}: concurrent readers...");
            concurrent = Some(hammer(&redis, &d, &keys, &want).await);
        }
        // Free the board before the next one: one at a time in memory.
        let mut c = slow_conn(&redis).await;
        let mut all = keys.sources();
        all.extend(keys.sources().iter().map(|k| format!("{k}:t")));
        let _: i64 = redis::cmd("DEL")
            .arg(&all)
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
    drop(d);
    drop(redis);
    let (day, window) = writes(events).await;
    let report = Report {
        members,
        distinct,
        events,
        reads,
        direct,
        concurrent: concurrent.unwrap_or_default(),
        day,
        window,
    };
    report.print();
}

/// Everything measured, printed at the end.
struct Report {
    members: u64,
    distinct: u64,
    events: u64,
    reads: Vec<BoardReads>,
    direct: Vec<Duration>,
    concurrent: Phase,
    day: Run,
    window: Run,
}

impl Report {
    fn print(&self) {
        println!(
            "union benchmark: GET /v1/boards/<b>/last:7d/top?limit=10 over 7 UTC day boards of {} members each ({} distinct over the week)",
            self.members, self.distinct
        );
        println!(
            "  {:<44} {:>7} {:>10} {:>10} {:>14} {:>12} {:>9} {:>13}",
            "reads", "n", "p50 ms", "p99 ms", "Redis µs/read", "unions", "EVALSHA", "longest cmd"
        );
        for b in &self.reads {
            let name = |what: &str| format!("{} board, {what}", b.board);
            b.uncached.row(&name("uncached, built in slices"));
            b.uncached_one_call.row(&name("uncached, one script call"));
            b.cached_here.row(&name("cached (the builder)"));
            b.cached_replica.row(&name("cached (another replica)"));
        }
        self.print_breakdown();
        self.print_concurrent();
        self.print_writes();
    }

    fn print_breakdown(&self) {
        println!(
            "where an uncached union's time goes (INFO commandstats over the uncached reads, calls inside scripts included):"
        );
        for b in &self.reads {
            let parts: Vec<String> = b
                .commands
                .iter()
                .filter(|(_, calls, _)| *calls > 0.0)
                .map(|(name, calls, us)| format!("{name} {calls:.0} x {:.1} ms", us / 1e3))
                .collect();
            println!("  {:<6} {}", b.board, parts.join(", "));
        }
        let l = &self.direct;
        println!(
            "  ZUNIONSTORE of the same 7 keys sent directly (no script, no HTTP), {} times: p50 {:.1} ms, max {:.1} ms",
            l.len(),
            pct(l, 50.0),
            pct(l, 100.0)
        );
    }

    fn print_concurrent(&self) {
        let c = &self.concurrent;
        let ttls = c.elapsed_s / 1.0;
        let mut l = c.latencies.clone();
        l.sort_unstable();
        println!(
            "concurrent readers (plain board, union_cache 1 s): {} reads in {:.1} s ({:.0}/s), {:.0} unions computed for {:.1} TTLs elapsed (ratio {:.2}), p50 {:.2} ms, p99 {:.2} ms, Redis {:.1} µs/read",
            c.reads(),
            c.elapsed_s,
            c.reads() / c.elapsed_s.max(1e-9),
            c.computations,
            ttls,
            c.computations / ttls.max(1e-9),
            pct(&l, 50.0),
            pct(&l, 99.0),
            c.cpu_us_per_read()
        );
        // The readers caught by a computation wait for all of it; they are
        // few among the reads of a fresh result, so p99 may miss them.
        let waited = l.iter().filter(|d| d.as_millis() >= 100).count();
        println!(
            "  {waited} reads ({:.2}%) took 100 ms or more (waited for a computation), p99.9 {:.1} ms, max {:.1} ms",
            100.0 * waited as f64 / c.reads().max(1.0),
            pct(&l, 99.9),
            pct(&l, 100.0)
        );
        // A new union starts when the marker of the last one expires, a TTL
        // after that computation ended: one per TTL + computation time.
        let compute_s = self.reads.first().map_or(0.0, |b| {
            let mut l = b.uncached.latencies.clone();
            l.sort_unstable();
            pct(&l, 50.0) / 1e3
        });
        println!(
            "  one union per TTL + computation ({:.2} s): {:.1} expected in {:.1} s, {:.0} run (ratio {:.2})",
            1.0 + compute_s,
            c.elapsed_s / (1.0 + compute_s),
            c.elapsed_s,
            c.computations,
            c.computations / (c.elapsed_s / (1.0 + compute_s)).max(1e-9)
        );
    }

    fn print_writes(&self) {
        println!(
            "write side: {} score events through tansu, 8 partitions, the same board kept as day periods only or with a 7d/1d window too",
            self.events
        );
        println!(
            "  {:<26} {:>10} {:>15} {:>12} {:>14}",
            "board", "events/s", "rankflow µs/ev", "Redis µs/ev", "Redis cmds/ev"
        );
        for (name, r) in [("day", &self.day), ("day + 7d/1d window", &self.window)] {
            println!(
                "  {name:<26} {:>10.0} {:>15.2} {:>12.2} {:>14.1}",
                r.events_per_s,
                r.rankflow_us(),
                r.redis_us(),
                r.commands_per_event()
            );
        }
        let extra = self.window.redis_us() - self.day.redis_us();
        println!(
            "  the window adds {extra:.2} Redis CPU-µs per event ({:.2}x the day board's) and {:.2} rankflow CPU-µs per event ({:.2}x)",
            self.window.redis_us() / self.day.redis_us().max(1e-9),
            self.window.rankflow_us() - self.day.rankflow_us(),
            self.window.rankflow_us() / self.day.rankflow_us().max(1e-9)
        );
        for b in &self.reads {
            let u = b.uncached.cpu_us_per_read();
            println!(
                "  break-even, {} board: one uncached union read costs {u:.0} Redis CPU-µs = the window's extra on {:.0} events; at 1000 events/s the window's extra pays for {:.1} union computations per hour, at this run's {:.0} events/s for {:.2} per second; with union_cache 1 s a union view is cheaper than the window above {:.0} events/s",
                b.board,
                u / extra.max(1e-9),
                3600.0 * 1000.0 * extra / u.max(1e-9),
                self.day.events_per_s,
                self.day.events_per_s * extra / u.max(1e-9),
                u / extra.max(1e-9)
            );
        }
    }
}
