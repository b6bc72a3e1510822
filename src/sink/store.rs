//! The Redis connection: pipelined execution of script calls, the script
//! cache (NOSCRIPT after a restart or failover is answered by loading the
//! script and sending the pipeline again, which the offset fences make safe),
//! and the classification of Redis errors into retriable and permanent.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Value};

use crate::config::{RedisConfig, RedisUrl};

use super::call::APPLY_LUA;

/// A Redis failure, with what it means for the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot reach Redis: {0}")]
    Redis(#[from] RedisError),
    #[error("Redis answered a command with an error: {0}")]
    Server(String),
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    #[error("invalid Redis configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Bounded label for `rankflow_redis_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Redis(e) if e.is_timeout() => "timeout",
            StoreError::Redis(e) if e.is_io_error() || e.is_connection_dropped() => "io",
            StoreError::Redis(_) => "redis",
            StoreError::Server(m) => server_kind(m),
            StoreError::Protocol(_) => "protocol",
            StoreError::Config(_) => "config",
        }
    }

    /// Whether trying again later can succeed. Writes are retried either
    /// way (losing an event is not an option); this decides how loudly.
    pub fn is_retriable(&self) -> bool {
        match self {
            StoreError::Redis(_) => true,
            StoreError::Server(m) => matches!(
                server_kind(m),
                "loading" | "busy" | "tryagain" | "masterdown" | "clusterdown" | "oom" | "noscript"
            ),
            StoreError::Protocol(_) | StoreError::Config(_) => false,
        }
    }
}

fn server_kind(message: &str) -> &'static str {
    let code = message.split_whitespace().next().unwrap_or("");
    match code {
        "LOADING" => "loading",
        "BUSY" => "busy",
        "TRYAGAIN" => "tryagain",
        "MASTERDOWN" => "masterdown",
        "CLUSTERDOWN" => "clusterdown",
        "OOM" => "oom",
        "NOSCRIPT" => "noscript",
        "WRONGTYPE" => "wrongtype",
        _ => "server",
    }
}

/// A connection to a single Redis node (the cluster variant arrives with
/// the Redis Cluster support), plus the apply script's hash.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    sha: String,
    /// Bumped whenever Redis turns out to have lost state (empty script
    /// cache after a restart or failover), so caches of what was written
    /// can be dropped.
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("sha", &self.sha).finish()
    }
}

impl Store {
    /// Connects (one attempt; the caller decides how to retry).
    pub async fn connect(config: &RedisConfig) -> Result<Store, StoreError> {
        let url = match &config.url {
            RedisUrl::Single(url) => url.clone(),
            RedisUrl::Cluster(urls) if urls.len() == 1 => urls[0].clone(),
            RedisUrl::Cluster(_) => {
                return Err(StoreError::Config(
                    "a list of cluster node URLs needs Redis Cluster support, which this build does not have yet".into(),
                ));
            }
        };
        let client = redis::Client::open(url.as_str())
            .map_err(|e| StoreError::Config(format!("{url}: {e}")))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_millis(config.response_timeout_ms)))
            // Reconnects are the caller's business (with its own backoff and
            // metrics); the manager only tries once per request.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let conn = ConnectionManager::new_with_config(client, manager_config).await?;
        let store = Store {
            conn,
            sha: redis::Script::new(APPLY_LUA).get_hash().to_string(),
            epoch: Default::default(),
        };
        store.load_script().await?;
        Ok(store)
    }

    /// How instances may share a script call on this deployment.
    pub fn grouping(&self) -> super::call::Grouping {
        super::call::Grouping::Any
    }

    /// Records that Redis lost its state (seen by a caller, e.g. a changed
    /// run id after a failover).
    pub fn note_lost_state(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Changes whenever Redis was found to have lost its state.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn sha(&self) -> &str {
        &self.sha
    }

    async fn load_script(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(APPLY_LUA)
            .query_async(&mut conn)
            .await?;
        if sha != self.sha {
            return Err(StoreError::Protocol(format!(
                "SCRIPT LOAD returned {sha}, expected {}",
                self.sha
            )));
        }
        Ok(())
    }

    /// Sends `cmds` as one pipeline and returns every reply. Commands that
    /// fail individually come back as `Value::ServerError`; a NOSCRIPT reply
    /// loads the script and sends the whole pipeline again.
    pub async fn pipeline(&self, cmds: &[redis::Cmd]) -> Result<Vec<Value>, StoreError> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for c in cmds {
            pipe.add_command(c.clone());
        }
        pipe.ignore_errors();
        for attempt in 0..2 {
            let mut conn = self.conn.clone();
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            let noscript = replies
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT"));
            if !noscript {
                return Ok(replies);
            }
            if attempt == 0 {
                tracing::warn!(
                    "Redis lost the apply script (restart or failover); loading it again and resending the batch."
                );
                metrics::counter!(crate::telemetry::REDIS_ERRORS, "kind" => "noscript")
                    .increment(1);
                self.load_script().await?;
            }
        }
        Err(StoreError::Server(
            "NOSCRIPT even after SCRIPT LOAD".to_string(),
        ))
    }

    /// One command, for reads and small writes.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        Ok(cmd.query_async(&mut conn).await?)
    }
}

/// Turns a per-command error reply into a [`StoreError`].
pub fn server_error(value: &Value) -> Option<StoreError> {
    match value {
        Value::ServerError(e) => Some(StoreError::Server(format!(
            "{} {}",
            e.code(),
            e.details().unwrap_or("")
        ))),
        _ => None,
    }
}
