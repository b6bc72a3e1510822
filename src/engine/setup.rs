//! What the consumer loop is given: [`Engine`], built by the application
//! wiring (`app`), with by default the librdkafka consumer and the Redis
//! [`Flusher`] behind the loop's narrow interfaces ([`super::port`]).
//! `run.rs` runs it.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::board::BoardSet;
use crate::checks::CheckSet;
use crate::clock::SharedClock;
use crate::config::BatchConfig;
use crate::event::Decoder;
use crate::health::Health;
use crate::source::{KafkaConsumer, RebalanceEvent};

use super::flush::Flusher;
use super::port::{Sink, Source};

/// What the loop needs, built by the application wiring (`app`): by default
/// the librdkafka consumer and the Redis [`Flusher`].
pub(crate) struct Engine<Src: Source = KafkaConsumer, Snk: Sink = Flusher> {
    pub(crate) boards: Arc<BoardSet>,
    /// The `[[check]]` entries (docs/checks.md).
    pub(crate) checks: Arc<CheckSet>,
    pub(crate) decoder: Arc<Decoder>,
    pub(crate) consumer: Arc<Src>,
    pub(crate) rebalances: UnboundedReceiver<RebalanceEvent>,
    pub(crate) clock: SharedClock,
    pub(crate) health: Arc<Health>,
    pub(crate) batch: BatchConfig,
    /// Longest payload copied into a dead letter.
    pub(crate) max_event_bytes: usize,
    /// Woken when a flush reports window evictions left over.
    pub(crate) trim_wanted: Arc<Notify>,
    /// Applies batches (and writes dead letters and positions).
    pub(crate) flusher: Snk,
    /// What the loop's batches are to the fleet.
    pub(crate) role: Role,
}

/// Whose events a loop counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The consumer group of `kafka.group_id`: it counts every event's
    /// outcome, dead letters and lags.
    Live,
    /// A shadow board's backfill (docs/rebuilds.md): it reads the same
    /// messages again for one board, so it counts only what it wrote
    /// there; the live consumers count the events.
    Backfill,
}
