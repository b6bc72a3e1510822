//! The consumer loop: takes messages from Kafka, decodes them, runs the board
//! rules and collects the updates into a batch; flushes a batch when it is
//! full (`batch.max_events`) or old enough (`batch.max_delay_ms`); stores a
//! partition's offsets only after Redis acknowledged its batch.
//!
//! The loop (`run.rs`) is composed of parts with one job each: the flush
//! queue (`queue.rs`: building, closed and in-flight batches, group commit,
//! ordered acknowledgements), the partition tracker (`partitions.rs`),
//! backpressure (`backpressure.rs`), the intake of one message
//! (`intake.rs`: a message into the [`batch`], which keeps the engine's
//! [`record`] beside the sink's updates, and the events waiting for their
//! rate checks, `rated.rs`, whose flushes decide them in order,
//! `rating.rs`), the shadow boards the live consumers apply beside their
//! own once a backfill reached them (`cover.rs`), the position lookups
//! (`resume.rs`), the batch report (`report.rs`) and the shutdown drain
//! (`drain.rs`); what the loop is given is [`Engine`] (`setup.rs`). It
//! reaches Kafka and Redis only through the narrow interfaces of [`port`],
//! so its logic is unit-tested with fakes and a paused clock (`tests.rs`).
//! This file only declares the modules and re-exports.
//!
//! Batches of a partition must reach Redis in order for the offset fences
//! to hold, so flushes are chained (see [`Flusher`]). When the waiting
//! messages reach [`backlog_limit`], the loop stops taking messages
//! (librdkafka's bounded prefetch then stops the fetcher); if that lasts,
//! the assigned partitions are paused so the loop can keep polling (the
//! consumer stays in its group) while nothing more is fetched. Memory stays
//! bounded during a Redis outage or slowdown. A failed flush is retried
//! with capped exponential backoff until it succeeds or the process shuts
//! down; retries are safe because every script call is fenced.

mod backpressure;
pub mod batch;
pub(crate) mod cover;
mod drain;
mod flush;
mod intake;
mod partitions;
pub(crate) mod port;
mod queue;
mod rated;
mod rating;
pub(crate) mod record;
mod report;
mod resume;
mod run;
mod setup;
#[cfg(test)]
mod tests;

pub(crate) use flush::Flusher;
pub(crate) use setup::{Engine, Role};
