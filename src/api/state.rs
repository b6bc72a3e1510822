//! What every handler shares ([`ApiState`]: the boards, the clock, health,
//! metrics, the reader once Redis is connected, the pollers of live views),
//! and getting its reader for a query ([`reader_for`]), which answers 503
//! before Redis is connected, or 400/404 for a query that could never be
//! served.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::PrometheusHandle;

use super::error::ApiError;
use super::stream::StreamHub;
use crate::admin::{Moderator, Tokens};
use crate::board::BoardSet;
use crate::clock::SharedClock;
use crate::health::Health;
use crate::reader::{self, ReadError, Reader};

/// Shared by all handlers.
#[derive(Clone)]
pub struct ApiState {
    /// The configured boards: `/v1/boards` lists them, and every read is checked against them.
    pub boards: Arc<BoardSet>,
    /// Now, for the current period and window of a read and `next_reset` in `/v1/boards`.
    pub clock: SharedClock,
    /// The dependencies' liveness that `/healthz` reports (200 or 503).
    pub health: Arc<Health>,
    /// The Prometheus recorder that `/metrics` renders (docs/metrics.md).
    pub metrics: PrometheusHandle,
    /// Set once Redis is connected; reads answer 503 before that.
    pub reader: Arc<OnceLock<Reader>>,
    /// The pollers of live views and the cap on open streams.
    pub streams: Arc<StreamHub>,
    /// The admin API's tokens; none: the admin routes answer 404.
    pub admin: Arc<Tokens>,
    /// Set once Redis is connected; member actions answer 503 before that.
    pub moderator: Arc<OnceLock<Moderator>>,
}

/// The reader, once Redis is connected. Before that, a query that could
/// never be served is still refused for what it is (400, 404) rather than
/// with a 503 that invites the client to retry it.
pub(super) fn reader_for<'s>(s: &'s ApiState, q: &reader::Query) -> Result<&'s Reader, ApiError> {
    match s.reader.get() {
        Some(r) => Ok(r),
        None => {
            reader::check(&s.boards, s.clock.now_ms(), q)?;
            Err(ReadError::NotReady.into())
        }
    }
}
