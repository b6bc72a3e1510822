//! A read-only Lua script the reader runs by `EVALSHA`: its SHA1 cached
//! once Redis has it, loaded the first time and again when Redis answers
//! `NOSCRIPT` (it restarted, or failed over to a replica that never loaded
//! it). The texts carry no nonce: a read script has no state to lose.

use std::sync::RwLock;

use redis::Value;

use crate::sink::store::{Store, StoreError};

/// One script: its name (for logs), its text and the cached SHA1.
pub(crate) struct ReadScript {
    name: &'static str,
    text: &'static str,
    sha: RwLock<Option<String>>,
}

impl ReadScript {
    pub const fn new(name: &'static str, text: &'static str) -> ReadScript {
        ReadScript {
            name,
            text,
            sha: RwLock::new(None),
        }
    }

    fn cached_sha(&self) -> Option<String> {
        match self.sha.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    async fn load(&self, store: &Store) -> Result<String, StoreError> {
        let sha: String = store
            .query(redis::cmd("SCRIPT").arg("LOAD").arg(self.text))
            .await?;
        if let Ok(mut s) = self.sha.write() {
            *s = Some(sha.clone());
        }
        Ok(sha)
    }

    /// One `EVALSHA` (plus a `SCRIPT LOAD` the first time, or when Redis
    /// forgot the script).
    pub(crate) async fn eval(
        &self,
        store: &Store,
        keys: &[&str],
        args: &[String],
    ) -> Result<Value, StoreError> {
        let call = |sha: &str| {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        let sha = match self.cached_sha() {
            Some(sha) => sha,
            None => self.load(store).await?,
        };
        let first = store.query::<Value>(&call(&sha)).await;
        let answer = if is_noscript(&first) {
            tracing::info!(
                script = self.name,
                "Redis does not have a read script; loading it again."
            );
            let sha = self.load(store).await?;
            store.query::<Value>(&call(&sha)).await
        } else {
            first
        };
        match answer? {
            Value::ServerError(e) => Err(StoreError::Server(format!("{e:?}"))),
            v => Ok(v),
        }
    }
}

fn is_noscript(r: &Result<Value, StoreError>) -> bool {
    match r {
        Err(StoreError::Redis(e)) => e.code() == Some("NOSCRIPT"),
        Ok(Value::ServerError(e)) => e.code() == "NOSCRIPT",
        _ => false,
    }
}
