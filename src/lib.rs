//! rankflow turns event streams in Kafka into real-time leaderboards in Redis.
//!
//! Data flows one way through these modules, and no two of them import
//! each other (`tests/it/layout.rs` checks):
//!
//! - [`source`] — the Kafka consumer-group member: client properties,
//!   rebalance and statistics callbacks.
//! - [`event`] — decoding and validating a message against `schemas/`.
//! - [`expr`] — the CEL-subset expression compiler the rules are written in
//!   (a leaf: it knows JSON values, not boards or events).
//! - [`rules`] — the board rules (`filter`, `member`, `score`, `scope`),
//!   compiled once by [`expr`] and evaluated per event.
//! - [`board`] — what a board is: its definition as written, views (periods,
//!   windows) and their time math, Redis key names, score encoding,
//!   resolving an event to its views, and the domain enums.
//! - [`sink`] — batches, their pre-aggregation, the Lua apply script and the
//!   Redis connection.
//! - [`deadletter`] — messages that are not valid events, and their topic.
//! - [`engine`] — the loop that ties the above together: flush queue,
//!   partition tracker, backpressure, retries and offset commits, reaching
//!   Kafka and Redis through narrow traits.
//! - [`reader`], [`api`], [`cli`] — reading boards back: HTTP and the CLI.
//! - [`archive`] — history: closed periods copied to PostgreSQL.
//! - [`moderation`] — who is hidden or erased, as the write path routes
//!   members (a leaf over [`board`]).
//! - [`admin`] — what the admin API acts with: its tokens, and the member
//!   actions (hide, restore, erase).
//! - [`telemetry`] — reason and error codes, and the internal events that
//!   log and count together (the only module that writes metrics).
//! - [`app`] — wiring and lifecycle of `rankflow run`; [`config`] — the
//!   settings; [`produce`] — the synthetic producer; [`health`], [`clock`].
//!
//! The design notes users of the Redis data need are in `docs/`.

#![warn(missing_docs)]

pub mod admin;
pub mod api;
pub mod app;
pub mod archive;
pub mod backfill;
pub mod board;
pub mod checks;
pub mod cli;
pub mod clock;
pub mod config;
pub mod deadletter;
pub mod engine;
pub mod event;
pub mod expr;
pub mod health;
pub mod moderation;
pub mod produce;
pub mod reader;
pub mod release;
pub mod rules;
pub mod sink;
pub mod source;
pub mod telemetry;

/// mimalloc for every binary that links rankflow (the service, the
/// benchmarks and the tests run the same allocator). The consumer allocates
/// per event (decoded JSON, member strings, encoded arguments) on several
/// threads; glibc's malloc spent about a sixth of the consumer's CPU time,
/// and with mimalloc the 1M-event pipeline benchmark runs ~10% faster
/// (3.31–3.52 s against 3.72–3.83 s, three alternating runs each).
/// Built with `no_thp`: mimalloc no longer asks for transparent huge pages,
/// whose first touch made the kernel zero 2 MiB at a time as a batch's
/// vectors grew (`clear_page_erms`, ~30% of the plain benchmark's consumer
/// samples); 3.58–3.87 → 3.38–3.44 CPU-µs per event (BENCHMARKS.md, issue 14).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
