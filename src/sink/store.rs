//! The Redis connection: set-up (URL, TLS trust, cluster detection: one
//! seed URL of a cluster node is enough), pipelined execution of script
//! calls, the script cache (NOSCRIPT after a restart or failover is answered
//! by loading the script and sending the pipeline again, which the offset
//! fences make safe), and the classification of Redis errors into retriable
//! and permanent. Passwords in URLs never reach a message: URLs are shown
//! through [`crate::config::redact`].

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ClientTlsConfig, RedisError, TlsCertificates, Value};

use crate::config::{RedisConfig, redact};
use crate::telemetry::RedisErrorKind;

use super::call::{Grouping, MAX_UPDATES_PER_CALL};

/// The apply script.
/// The apply script: the prelude, the state helpers, the moderation moves
/// (`lua/move.lua`, run when its second argument is `move`) and the apply
/// passes.
pub(crate) const APPLY_LUA: &str = concat!(
    include_str!("lua/composite.lua"),
    include_str!("lua/state.lua"),
    include_str!("lua/move.lua"),
    include_str!("lua/apply.lua")
);

/// The script that records partition positions.
pub(crate) const POSITIONS_LUA: &str = include_str!("lua/positions.lua");

/// The script that decides rate checks (`super::rates`).
pub(crate) const RATES_LUA: &str = include_str!("lua/rates.lua");

/// Commands per pipelined round trip. `redis.response_timeout_ms` bounds
/// a whole round trip (the client times the pipeline, not each reply), so a
/// batch goes out in round trips of this many apply calls (each at most
/// `MAX_UPDATES_PER_CALL` updates, 10–20 ms of Redis in the benchmarks)
/// rather than all at once: a 100,000-event batch of a heavy configuration
/// on a slow Redis would otherwise outlast the timeout and be resent whole.
/// Everything is fenced, so a batch cut short between round trips is
/// resent safely. (One round trip more per 32 calls costs a network
/// round trip per several hundred ms of Redis work.)
pub const CALLS_PER_ROUND_TRIP: usize = 32;

/// What one round trip of [`Store::pipeline_led`] carries at most, in
/// updates: [`CALLS_PER_ROUND_TRIP`] full apply calls. Calls smaller than
/// full ones (on a Redis Cluster a call holds one slot's instances, often
/// a handful of updates) share round trips up to the same work, so a batch
/// costs a few round trips per primary rather than one per 32 calls.
pub(crate) const ROUND_TRIP_UPDATES: usize = CALLS_PER_ROUND_TRIP * MAX_UPDATES_PER_CALL;

/// Pipelined round trips sent so far by every store of the process (for
/// the benchmarks: round trips per batch).
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// [`ROUND_TRIPS`].
pub fn round_trips() -> u64 {
    ROUND_TRIPS.load(Ordering::Relaxed)
}

/// How `n` commands, the first `lead` of which must go in the first round
/// trip, are cut into round trips: each takes commands while their work
/// (`work[i]` updates; a command without one counts as a full call) stays
/// within [`ROUND_TRIP_UPDATES`], and at least one.
fn round_trip_ranges(n: usize, lead: usize, work: Option<&[usize]>) -> Vec<Range<usize>> {
    let weight = |i: usize| match work.and_then(|w| w.get(i)) {
        Some(&w) => w.max(1),
        None => MAX_UPDATES_PER_CALL,
    };
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start;
        let mut load = 0;
        while end < n && (end < lead || end == start || load + weight(end) <= ROUND_TRIP_UPDATES) {
            if end >= lead {
                load += weight(end);
            }
            end += 1;
        }
        ranges.push(start..end);
        start = end;
    }
    ranges
}

/// Commands per round trip of [`Store::ordered`]: small writes (a member
/// index entry each, microseconds of Redis), so a batch's registrations
/// take one or two round trips rather than one per few thousand.
const ORDERED_PER_ROUND_TRIP: usize = 50_000;

/// A Redis failure, with what it means for the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The Redis client failed: no connection, an I/O error or timeout,
    /// refused credentials, or an error reply it surfaced itself; the
    /// metric's kind is read from it.
    #[error("cannot reach Redis: {0}")]
    Redis(#[from] RedisError),
    /// One command of a pipeline got an error reply; the text is its code
    /// and details (`BUSY ...`, `OOM ...`), which give the metric's kind.
    #[error("Redis answered a command with an error: {0}")]
    Server(String),
    /// A reply rankflow did not expect (its shape or a value): kind
    /// `protocol`, not retriable.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    /// A setting that can never work (unreadable TLS file, URL the client
    /// refuses); the message names the setting. Permanent.
    #[error("invalid Redis configuration: {0}")]
    Config(String),
    /// Redis restarted or failed over (its script cache was empty): it may
    /// have lost its last writes, so nothing more may be applied until the
    /// consumer has re-read from the positions Redis has.
    #[error("Redis lost its state (restart or failover); the script was loaded again")]
    LostState,
    /// `WAIT` timed out: fewer replicas than `redis.wait_replicas` have the
    /// batch's writes. The batch is retried (fenced, so nothing is counted
    /// twice) and not acknowledged meanwhile.
    #[error("only {got} of the {wanted} required replicas have the writes")]
    NotReplicated {
        /// `redis.wait_replicas`.
        wanted: u32,
        /// Replicas `WAIT` counted (on a cluster, the smallest count of any primary).
        got: i64,
    },
}

impl StoreError {
    /// The failure's kind (label of `rankflow_redis_errors_total`).
    pub(crate) fn kind(&self) -> RedisErrorKind {
        match self {
            StoreError::Redis(e) if e.is_timeout() => RedisErrorKind::Timeout,
            StoreError::Redis(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                RedisErrorKind::Auth
            }
            StoreError::Redis(e) if e.is_io_error() || e.is_connection_dropped() => {
                RedisErrorKind::Io
            }
            StoreError::Redis(e) => match e.code() {
                Some(code) => RedisErrorKind::of_reply(code),
                None => RedisErrorKind::Client,
            },
            StoreError::Server(m) => RedisErrorKind::of_reply(m),
            StoreError::Protocol(_) => RedisErrorKind::Protocol,
            StoreError::Config(_) => RedisErrorKind::Client,
            StoreError::LostState => RedisErrorKind::Noscript,
            StoreError::NotReplicated { .. } => RedisErrorKind::Replication,
        }
    }
}

impl StoreError {
    /// Whether this failure at start-up is a fault of the configuration that
    /// no retry can cure (bad setting, refused credentials or permissions):
    /// rankflow then exits 2 instead of waiting for Redis.
    pub(crate) fn is_permanent_at_startup(&self) -> bool {
        match self {
            StoreError::Config(_) => true,
            StoreError::Redis(e) if e.kind() == redis::ErrorKind::InvalidClientConfig => true,
            _ => self.kind() == RedisErrorKind::Auth,
        }
    }
}

/// The Redis ACL rules rankflow needs, as one `ACL SETUSER` argument list
/// (docs/operations.md quotes it and the security test applies it as written):
/// keys under `<key_prefix>:` only, no channels, and exactly the commands
/// rankflow sends (directly, or from its Lua scripts, which Redis checks
/// against the same rules). `<key_prefix>` is replaced by the setting.
/// `INFO` detects cluster mode and watches the run id; `CLUSTER SLOTS` is
/// how the cluster client learns the slot map; redis-rs's `CLIENT SETINFO`
/// at connect may fail (its reply is ignored), so it is not granted.
pub const ACL_RULES: &str = "resetkeys ~<key_prefix>:* resetchannels -@all +ping +info +cluster|slots +wait +script|load +evalsha +exists +get +set +hget +hmget +hset +hsetnx +hdel +hexists +hkeys +hgetall +hincrby +hscan +persist +unlink +pexpireat +pexpiretime +zadd +zmscore +zrem +zscore +zcard +zcount +zrank +zrevrank +zrange +zrevrange +zrangebylex +zrangebyscore +zremrangebyscore +zremrangebyrank +zunionstore +pexpire +zscan +rename +del +pttl";

/// [`ACL_RULES`] for a key prefix.
pub fn acl_rules(key_prefix: &str) -> String {
    ACL_RULES.replace("<key_prefix>", key_prefix)
}

/// The script versions loaded into Redis for one epoch. Each load appends a
/// fresh nonce to the scripts, so their hashes change: a call prepared with
/// an older version fails with NOSCRIPT on a Redis that was restarted and
/// reloaded meanwhile, instead of landing on state it does not follow from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scripts {
    pub(crate) epoch: u64,
    pub(crate) apply: String,
    pub(crate) positions: String,
    pub(crate) rates: String,
}

/// The connection: one node, or a Redis Cluster (commands routed by key,
/// MOVED/ASK followed, scripts loaded on every primary).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A connection to Redis, single node or cluster, and the scripts loaded
/// into it.
#[derive(Clone)]
pub struct Store {
    conn: Conn,
    /// The current script versions; replaced whenever Redis turns out to
    /// have lost state (empty script cache after a restart or failover, or
    /// a new run id), which also bumps the epoch.
    scripts: std::sync::Arc<std::sync::RwLock<Scripts>>,
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Serializes reloads, so one NOSCRIPT seen by several tasks reloads once.
    reload: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// `redis.wait_replicas`, and how long one `WAIT` may block.
    wait_replicas: u32,
    wait_timeout_ms: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("scripts", &self.scripts())
            .finish()
    }
}

impl Store {
    /// Connects (one attempt; the caller decides how to retry). One URL
    /// may be any node of a cluster: the server says whether it runs in
    /// cluster mode (`INFO cluster`), and then that URL seeds a cluster
    /// client that discovers the rest.
    pub async fn connect(config: &RedisConfig) -> Result<Store, StoreError> {
        let response_timeout = config.response_timeout_ms.duration();
        let tls = tls_certificates(config)?;
        let urls = config.url.urls();
        let conn = match urls.as_slice() {
            [] => {
                return Err(StoreError::Config(
                    "setting `redis.url`: the cluster list is empty".into(),
                ));
            }
            [url] => {
                let single = single(url, tls.as_ref(), response_timeout).await?;
                if cluster_enabled(&single).await? {
                    tracing::info!(
                        url = %redact::url(url),
                        "Redis runs in cluster mode; discovering the cluster from this node."
                    );
                    Conn::Cluster(cluster(&urls, tls, response_timeout).await?)
                } else {
                    Conn::Single(single)
                }
            }
            _ => Conn::Cluster(cluster(&urls, tls, response_timeout).await?),
        };
        let store = Store {
            conn,
            scripts: Default::default(),
            epoch: Default::default(),
            reload: Default::default(),
            wait_replicas: config.wait_replicas,
            // Well inside the response timeout, so the client does not give
            // up on the connection while Redis is still waiting.
            wait_timeout_ms: (config.response_timeout_ms.get() / 2).max(1),
        };
        store.load_scripts(0).await?;
        Ok(store)
    }

    /// Checks what can be checked without connecting: the TLS files can be
    /// read and the client accepts every URL.
    pub(crate) fn check_settings(config: &RedisConfig) -> Result<(), StoreError> {
        let tls = tls_certificates(config)?;
        for url in config.url.urls() {
            client(url, tls.as_ref())?;
        }
        Ok(())
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// How instances may share a script call on this deployment.
    pub(crate) fn grouping(&self) -> Grouping {
        match self.conn {
            Conn::Single(_) => Grouping::Any,
            Conn::Cluster(_) => Grouping::BySlot,
        }
    }

    /// Records that Redis lost its state as seen by a caller working in
    /// epoch `seen` (a NOSCRIPT for that epoch's scripts, or a changed run
    /// id): new script versions are loaded as the next epoch, so calls
    /// prepared for older epochs fail. A loss already recorded is not
    /// recorded again.
    pub(crate) async fn note_lost_state(&self, seen: u64) {
        if self.epoch() > seen {
            return;
        }
        if let Err(e) = self.load_scripts(seen + 1).await {
            // The epoch moves only with a successful reload; until then the
            // old versions keep failing (NOSCRIPT or unreachable), and the
            // next failure tries again.
            tracing::debug!(error = %e, "Could not reload the scripts yet.");
        }
    }

    /// Changes whenever Redis was found to have lost its state.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The current script versions.
    pub fn scripts(&self) -> Scripts {
        match self.scripts.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Loads new versions of the scripts as epoch `epoch` (unless another
    /// task already moved past it).
    async fn load_scripts(&self, epoch: u64) -> Result<(), StoreError> {
        let _one_at_a_time = self.reload.lock().await;
        if self.epoch() >= epoch
            && self.scripts().epoch == epoch
            && !self.scripts().apply.is_empty()
        {
            return Ok(());
        }
        let nonce = format!(
            "\n-- version {epoch}-{}-{}\n",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let mut shas = Vec::new();
        for text in [APPLY_LUA, POSITIONS_LUA, RATES_LUA] {
            // On a cluster, SCRIPT LOAD goes to every primary.
            let sha: String = self
                .query(
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(format!("{text}{nonce}")),
                )
                .await?;
            shas.push(sha);
        }
        let scripts = Scripts {
            epoch,
            rates: shas.pop().unwrap_or_default(),
            positions: shas.pop().unwrap_or_default(),
            apply: shas.pop().unwrap_or_default(),
        };
        if let Ok(mut s) = self.scripts.write() {
            *s = scripts;
        }
        self.epoch
            .fetch_max(epoch, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Sends `cmds` pipelined, [`CALLS_PER_ROUND_TRIP`] at a time, and
    /// returns every reply. Commands that fail individually come back as
    /// `Value::ServerError`. A NOSCRIPT reply loads the script again and
    /// fails with [`StoreError::LostState`] rather than resending: the
    /// caller must first find out what Redis lost (see `sink::positions`).
    /// `epoch` is the epoch of the scripts the commands call.
    pub async fn pipeline(
        &self,
        cmds: &[redis::Cmd],
        epoch: u64,
    ) -> Result<Vec<Value>, StoreError> {
        self.pipeline_led(cmds, 0, None, epoch).await
    }

    /// [`Store::pipeline`] whose first round trip also carries the `lead`
    /// commands in front (small writes that must come before the calls on
    /// the same connection: a batch's member-index registrations); with
    /// `work`, the updates each command carries, round trips are cut by
    /// work rather than by count ([`ROUND_TRIP_UPDATES`]).
    pub(crate) async fn pipeline_led(
        &self,
        cmds: &[redis::Cmd],
        lead: usize,
        work: Option<&[usize]>,
        epoch: u64,
    ) -> Result<Vec<Value>, StoreError> {
        let mut replies = Vec::with_capacity(cmds.len());
        for range in round_trip_ranges(cmds.len(), lead, work) {
            replies.extend(self.round_trip(&cmds[range], epoch).await?);
        }
        Ok(replies)
    }

    /// One pipelined round trip of [`Store::pipeline`].
    async fn round_trip(&self, cmds: &[redis::Cmd], epoch: u64) -> Result<Vec<Value>, StoreError> {
        ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
        let replies: Vec<Value> = match &self.conn {
            Conn::Single(conn) => {
                let mut pipe = redis::pipe();
                for c in cmds {
                    pipe.add_command(c.clone());
                }
                pipe.ignore_errors();
                let mut conn = conn.clone();
                pipe.query_async(&mut conn).await?
            }
            Conn::Cluster(conn) => {
                // A cluster pipeline must stay within one slot, and the calls
                // of a batch span many: they go out at once instead, each
                // routed by its key (calls never mix slots), and the client
                // pipelines what goes to the same node.
                let sent = cmds.iter().map(|c| {
                    let mut conn = conn.clone();
                    async move { c.query_async::<Value>(&mut conn).await }
                });
                let mut replies = Vec::with_capacity(cmds.len());
                let mut noscript = false;
                let mut failure = None;
                for r in futures::future::join_all(sent).await {
                    match r {
                        Ok(v) => replies.push(v),
                        Err(e) if e.code() == Some("NOSCRIPT") => {
                            noscript = true;
                            replies.push(Value::Nil);
                        }
                        Err(e) => {
                            failure.get_or_insert(e);
                            replies.push(Value::Nil);
                        }
                    }
                }
                if noscript {
                    return self.lost(epoch).await;
                }
                if let Some(e) = failure {
                    return Err(e.into());
                }
                replies
            }
        };
        let noscript = replies
            .iter()
            .any(|v| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT"));
        if noscript {
            return self.lost(epoch).await;
        }
        Ok(replies)
    }

    async fn lost(&self, epoch: u64) -> Result<Vec<Value>, StoreError> {
        tracing::warn!(
            "Redis does not have this version of the scripts: it restarted or failed over and may have lost its last writes."
        );
        self.note_lost_state(epoch).await;
        Err(StoreError::LostState)
    }

    /// Returns once `redis.wait_replicas` replicas of every primary have
    /// the writes sent so far (Redis `WAIT`; on a cluster it goes to every
    /// primary and the smallest count decides). Called after a batch was
    /// applied and before it is acknowledged.
    pub(crate) async fn wait_replicated(&self) -> Result<(), StoreError> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        let got: i64 = self
            .query(
                redis::cmd("WAIT")
                    .arg(self.wait_replicas)
                    .arg(self.wait_timeout_ms),
            )
            .await?;
        if got < i64::from(self.wait_replicas) {
            return Err(StoreError::NotReplicated {
                wanted: self.wait_replicas,
                got,
            });
        }
        Ok(())
    }

    /// Groups of commands, each group on one key (one slot), executed in
    /// its order: on one node a single pipeline (in round trips of
    /// [`ORDERED_PER_ROUND_TRIP`] commands); on a cluster one pipeline per
    /// group, the groups concurrently. Returns every reply, in order.
    pub(crate) async fn ordered(
        &self,
        groups: &[Vec<redis::Cmd>],
    ) -> Result<Vec<Value>, StoreError> {
        let pipe_of = |cmds: &[redis::Cmd]| {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c.clone());
            }
            pipe
        };
        match &self.conn {
            Conn::Single(conn) => {
                let all: Vec<redis::Cmd> = groups.iter().flatten().cloned().collect();
                let mut out = Vec::with_capacity(all.len());
                for chunk in all.chunks(ORDERED_PER_ROUND_TRIP) {
                    let replies: Vec<Value> = pipe_of(chunk)
                        .ignore_errors()
                        .query_async(&mut conn.clone())
                        .await?;
                    out.extend(replies);
                }
                Ok(out)
            }
            Conn::Cluster(conn) => {
                let sent = groups.iter().map(|g| {
                    let mut conn = conn.clone();
                    let pipe = pipe_of(g);
                    async move { pipe.query_async::<Vec<Value>>(&mut conn).await }
                });
                let mut out = Vec::new();
                for r in futures::future::join_all(sent).await {
                    out.extend(r?);
                }
                Ok(out)
            }
        }
    }

    /// One command, for reads and small writes.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        Ok(match &self.conn {
            Conn::Single(conn) => cmd.query_async(&mut conn.clone()).await?,
            Conn::Cluster(conn) => cmd.query_async(&mut conn.clone()).await?,
        })
    }
}

/// The CA and client certificate for `rediss://`, read from the files the
/// settings name (`None`: plain connections, or the system trust store).
fn tls_certificates(config: &RedisConfig) -> Result<Option<TlsCertificates>, StoreError> {
    let read = |setting: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            StoreError::Config(format!(
                "setting `{setting}`: cannot read {}: {e}",
                path.display()
            ))
        })
    };
    let root_cert = match &config.tls_ca_file {
        Some(path) => Some(read("redis.tls_ca_file", path)?),
        None => None,
    };
    let client_tls = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("redis.tls_cert_file", cert)?,
            client_key: read("redis.tls_key_file", key)?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// A client for one URL; a refused URL is a permanent configuration fault
/// whose message shows the URL without its password.
fn client(url: &str, tls: Option<&TlsCertificates>) -> Result<redis::Client, StoreError> {
    let opened = match tls {
        Some(certs) => redis::Client::build_with_tls(url, certs.clone()),
        None => redis::Client::open(url),
    };
    opened
        .map_err(|e| StoreError::Config(format!("setting `redis.url`: {}: {e}", redact::url(url))))
}

async fn single(
    url: &str,
    tls: Option<&TlsCertificates>,
    response_timeout: Duration,
) -> Result<ConnectionManager, StoreError> {
    let client = client(url, tls)?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout))
        // Reconnects are the caller's business (with its own backoff and
        // metrics); the manager only tries once per request.
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(1));
    Ok(ConnectionManager::new_with_config(client, manager_config).await?)
}

/// Whether the node behind `conn` runs in cluster mode.
async fn cluster_enabled(conn: &ConnectionManager) -> Result<bool, StoreError> {
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn.clone())
        .await?;
    Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
}

/// A cluster client seeded with `urls` (credentials and TLS mode come from
/// the first; the other nodes are discovered).
async fn cluster(
    urls: &[&str],
    tls: Option<TlsCertificates>,
    response_timeout: Duration,
) -> Result<ClusterConnection, StoreError> {
    let mut builder = ClusterClient::builder(urls.iter().copied())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(response_timeout)
        // MOVED/ASK/TRYAGAIN during resharding and failovers are
        // followed by the client; other failures come back here.
        .retries(6);
    if let Some(certs) = tls {
        builder = builder.certs(certs);
    }
    let client = builder.build().map_err(|e| {
        let shown: Vec<String> = urls.iter().map(|u| redact::url(u)).collect();
        StoreError::Config(format!("setting `redis.url`: {}: {e}", shown.join(", ")))
    })?;
    Ok(client.get_async_connection().await?)
}

/// Turns a per-command error reply into a [`StoreError`].
pub(crate) fn server_error(value: &Value) -> Option<StoreError> {
    match value {
        Value::ServerError(e) => Some(StoreError::Server(format!(
            "{} {}",
            e.code(),
            e.details().unwrap_or("")
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trips by work, against ranges worked out by hand: full calls
    /// go 32 to a trip as before; small ones share trips up to the same
    /// work; lead commands ride in the first; an oversized call goes alone.
    #[test]
    fn round_trips_are_cut_by_work() {
        let full = MAX_UPDATES_PER_CALL;
        assert_eq!(round_trip_ranges(70, 0, None), vec![0..32, 32..64, 64..70]);
        assert_eq!(round_trip_ranges(40, 5, None), vec![0..37, 37..40]);
        assert_eq!(round_trip_ranges(0, 0, None), Vec::<Range<usize>>::new());
        // 1,000 calls of 10 updates each: one trip, not 32.
        let small = vec![10; 1000];
        assert_eq!(round_trip_ranges(1000, 0, Some(&small)), vec![0..1000]);
        // 40 full calls then 100 small ones: 32 full, then 8 full + 100 small.
        let mixed: Vec<usize> = std::iter::repeat_n(full, 40)
            .chain(std::iter::repeat_n(10, 100))
            .collect();
        assert_eq!(
            round_trip_ranges(140, 0, Some(&mixed)),
            vec![0..32, 32..140]
        );
        // A call over the whole budget goes alone; zero-work commands after
        // the lead still count one update each.
        let huge = [ROUND_TRIP_UPDATES * 2, 5, 5];
        assert_eq!(round_trip_ranges(3, 0, Some(&huge)), vec![0..1, 1..3]);
        let lead = [0, 0, full, full];
        assert_eq!(round_trip_ranges(4, 2, Some(&lead)), vec![0..4]);
    }

    /// Commands rankflow sends from Rust (reader, trimmer, positions,
    /// script loading, health probe, WAIT, cluster discovery), and those
    /// only the reader's union script (src/reader/union.lua) calls, and
    /// the scope registries' trim (src/sink/scopes.rs), and the sliced
    /// build of a large union (src/reader/build.rs).
    const FROM_RUST: &[&str] = &[
        "zunionstore",
        "zremrangebyrank",
        "zscan",
        "rename",
        "pexpire",
        "ping",
        "info",
        "cluster|slots",
        "wait",
        "script|load",
        "evalsha",
        "set",
        "hget",
        "hmget",
        "zadd",
        "zrem",
        "zscore",
        "zcard",
        "zrank",
        "zrevrank",
        "zrange",
        "zrevrange",
        "hgetall",
        "hkeys",
        "hsetnx",
        "del",
        "pttl",
    ];

    fn granted() -> Vec<&'static str> {
        ACL_RULES
            .split_whitespace()
            .filter_map(|r| r.strip_prefix('+'))
            .collect()
    }

    #[test]
    fn the_acl_grants_every_command_the_scripts_call() {
        let granted = granted();
        for script in [APPLY_LUA, POSITIONS_LUA] {
            for call in script.split("redis.call(\"").skip(1) {
                let name = call
                    .split('"')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                assert!(granted.contains(&name.as_str()), "{name} is not granted");
            }
        }
    }

    #[test]
    fn the_acl_grants_nothing_rankflow_does_not_send() {
        for cmd in granted() {
            let in_lua = [APPLY_LUA, POSITIONS_LUA].iter().any(|s| {
                s.to_ascii_lowercase()
                    .contains(&format!("redis.call(\"{cmd}\""))
            });
            assert!(
                in_lua || FROM_RUST.contains(&cmd),
                "{cmd} is granted but never sent"
            );
        }
        assert!(ACL_RULES.starts_with("resetkeys ~<key_prefix>:* resetchannels -@all "));
    }
}
