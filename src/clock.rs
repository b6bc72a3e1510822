//! The wall clock, injectable. Windows slide, periods expire and late events
//! are judged by "now"; tests move a [`ManualClock`] instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds since the Unix epoch (UTC).
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now_ms`; its clones share it, so a test keeps
    /// one to move the clock the consumer and the API read.
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(now_ms)))
    }

    /// Moves the clock to `now_ms`, backwards too.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock `ms` milliseconds on (back, if negative).
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Shared handle to whichever clock the process runs with.
pub type SharedClock = Arc<dyn Clock>;
