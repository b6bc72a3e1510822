//! Liveness of the dependencies, as `/healthz` reports it (docs/http-api.md: 200 when
//! consuming and Redis is reachable, 503 otherwise) and as the start-up and
//! outage paths record it.
//!
//! `/healthz` answers anyone who can reach the port, so its `detail` is a
//! sentence about the state of a dependency, never the error a driver gave
//! nor the address of a server. The paths that record a failure log it
//! with its detail; this records the detail too and logs it once when a
//! dependency that was up goes down.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde::Serialize;

/// Shared health flags; cheap to read from the HTTP handler.
#[derive(Debug, Default)]
pub struct Health {
    consuming: AtomicBool,
    redis_up: AtomicBool,
    kafka_up: AtomicBool,
    assigned: AtomicUsize,
    /// The last failure's detail, for the log; empty before the first.
    redis_detail: Mutex<String>,
    kafka_detail: Mutex<String>,
}

/// The `/healthz` body.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) status: &'static str,
    pub(crate) consuming: bool,
    pub(crate) redis: Dependency,
    pub(crate) kafka: Dependency,
    pub(crate) assigned_partitions: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct Dependency {
    pub(crate) up: bool,
    pub(crate) detail: &'static str,
}

/// What `/healthz` says of Redis while it is down.
const REDIS_DOWN: &str =
    "Redis is not reachable; rankflow keeps retrying (the server's log has the error)";
/// What `/healthz` says of Kafka while it is down.
const KAFKA_DOWN: &str =
    "no Kafka broker is reachable; rankflow keeps retrying (the server's log has the error)";
/// Before the first attempt to reach a dependency has ended.
const NOT_YET: &str = "not connected yet";

fn set(detail: &Mutex<String>, text: &str) {
    if let Ok(mut d) = detail.lock() {
        d.clear();
        d.push_str(text);
    }
}

fn has(detail: &Mutex<String>) -> bool {
    detail.lock().map(|d| !d.is_empty()).unwrap_or(true)
}

impl Health {
    pub(crate) fn set_consuming(&self, on: bool) {
        self.consuming.store(on, Ordering::SeqCst);
    }

    pub(crate) fn redis_ok(&self) {
        self.redis_up.store(true, Ordering::SeqCst);
    }

    /// Redis failed, as `why` says (logged, never shown on `/healthz`).
    pub(crate) fn redis_failed(&self, why: &str) {
        set(&self.redis_detail, why);
        if self.redis_up.swap(false, Ordering::SeqCst) {
            tracing::info!(error = why, "/healthz now reports Redis as not reachable.");
        }
    }

    pub(crate) fn kafka_ok(&self) {
        self.kafka_up.store(true, Ordering::SeqCst);
    }

    /// Kafka failed, as `why` says (logged, never shown on `/healthz`).
    pub(crate) fn kafka_failed(&self, why: &str) {
        set(&self.kafka_detail, why);
        if self.kafka_up.swap(false, Ordering::SeqCst) {
            tracing::info!(error = why, "/healthz now reports Kafka as not reachable.");
        }
    }

    pub(crate) fn set_assigned(&self, n: usize) {
        self.assigned.store(n, Ordering::SeqCst);
    }

    pub(crate) fn report(&self) -> Report {
        let consuming = self.consuming.load(Ordering::SeqCst);
        let redis_up = self.redis_up.load(Ordering::SeqCst);
        let kafka_up = self.kafka_up.load(Ordering::SeqCst);
        let healthy = consuming && redis_up && kafka_up;
        let detail = |up: bool, failed: &Mutex<String>, ok: &'static str, down: &'static str| match (
            up,
            has(failed),
        ) {
            (true, _) => ok,
            (false, true) => down,
            (false, false) => NOT_YET,
        };
        Report {
            status: if healthy { "ok" } else { "unavailable" },
            consuming,
            redis: Dependency {
                up: redis_up,
                detail: detail(redis_up, &self.redis_detail, "reachable", REDIS_DOWN),
            },
            kafka: Dependency {
                up: kafka_up,
                detail: detail(kafka_up, &self.kafka_detail, "connected", KAFKA_DOWN),
            },
            assigned_partitions: self.assigned.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_says_what_is_down_without_the_error() {
        let h = Health::default();
        let r = h.report();
        assert_eq!(
            (r.status, r.redis.detail, r.kafka.detail),
            ("unavailable", NOT_YET, NOT_YET)
        );
        h.redis_failed(
            "cannot connect to redis://:***@10.0.0.7:6379: Connection refused (os error 111)",
        );
        h.kafka_failed("cannot reach 10.0.0.5:9092: BrokerTransportFailure");
        let r = h.report();
        assert_eq!((r.redis.up, r.redis.detail), (false, REDIS_DOWN));
        assert_eq!((r.kafka.up, r.kafka.detail), (false, KAFKA_DOWN));
        let body = serde_json::to_string(&r).unwrap_or_default();
        for hidden in ["10.0.0", "6379", "9092", "refused", "os error", "Broker"] {
            assert!(!body.contains(hidden), "{hidden} in {body}");
        }
        h.redis_ok();
        h.kafka_ok();
        h.set_consuming(true);
        let r = h.report();
        assert_eq!(
            (r.status, r.redis.detail, r.kafka.detail),
            ("ok", "reachable", "connected")
        );
        h.redis_failed("PING failed: broken pipe");
        assert_eq!(h.report().redis.detail, REDIS_DOWN);
    }
}
