//! Liveness of the dependencies, as `/healthz` reports it (docs/http-api.md: 200 when
//! consuming and Redis is reachable, 503 otherwise) and as the start-up and
//! outage paths record it.

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
    pub(crate) detail: String,
}

fn set(detail: &Mutex<String>, text: &str) {
    if let Ok(mut d) = detail.lock() {
        d.clear();
        d.push_str(text);
    }
}

fn get(detail: &Mutex<String>) -> String {
    detail.lock().map(|d| d.clone()).unwrap_or_default()
}

impl Health {
    pub(crate) fn set_consuming(&self, on: bool) {
        self.consuming.store(on, Ordering::SeqCst);
    }

    pub(crate) fn redis_ok(&self) {
        if !self.redis_up.swap(true, Ordering::SeqCst) {
            set(&self.redis_detail, "reachable");
        }
    }

    pub(crate) fn redis_failed(&self, why: &str) {
        self.redis_up.store(false, Ordering::SeqCst);
        set(&self.redis_detail, why);
    }

    pub(crate) fn kafka_ok(&self) {
        if !self.kafka_up.swap(true, Ordering::SeqCst) {
            set(&self.kafka_detail, "connected");
        }
    }

    pub(crate) fn kafka_failed(&self, why: &str) {
        self.kafka_up.store(false, Ordering::SeqCst);
        set(&self.kafka_detail, why);
    }

    pub(crate) fn set_assigned(&self, n: usize) {
        self.assigned.store(n, Ordering::SeqCst);
    }

    pub(crate) fn report(&self) -> Report {
        let consuming = self.consuming.load(Ordering::SeqCst);
        let redis_up = self.redis_up.load(Ordering::SeqCst);
        let kafka_up = self.kafka_up.load(Ordering::SeqCst);
        let healthy = consuming && redis_up && kafka_up;
        let detail = |up: bool, d: &Mutex<String>| {
            let text = get(d);
            if text.is_empty() {
                if up {
                    "ok".to_string()
                } else {
                    "not connected yet".to_string()
                }
            } else {
                text
            }
        };
        Report {
            status: if healthy { "ok" } else { "unavailable" },
            consuming,
            redis: Dependency {
                up: redis_up,
                detail: detail(redis_up, &self.redis_detail),
            },
            kafka: Dependency {
                up: kafka_up,
                detail: detail(kafka_up, &self.kafka_detail),
            },
            assigned_partitions: self.assigned.load(Ordering::SeqCst),
        }
    }
}
