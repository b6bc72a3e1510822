//! The Redis side of the pipeline. [`writer::Writer`] owns a flush: a
//! batch's [`updates::Updates`] are encoded ([`encode`]) into calls of the
//! apply script ([`call`]), sent pipelined through the [`store`], and the
//! script's replies ([`reply`]) become a [`report::FlushReport`]. Around
//! it: the caches of what was written recently ([`caches`]: key
//! [`expiry`], [`due`] periods of the archive, [`scopes`] registries, the [`members`] index of moderation), the
//! pre-aggregation rules ([`aggregate`]), the partition [`positions`]
//! recorded in Redis, the decisions of rate checks ([`rates`]), and window trimming ([`trim`] on demand, the
//! background [`trimmer`]).
//!
//! This file only declares the modules: none of them reaches back into it.

pub(crate) mod aggregate;
pub(crate) mod caches;
pub(crate) mod call;
pub(crate) mod due;
pub(crate) mod encode;
pub(crate) mod expiry;
pub mod members;
pub mod moves;
pub(crate) mod positions;
pub mod rates;
pub mod reply;
pub mod report;
pub(crate) mod scopes;
pub mod store;
pub mod trim;
pub(crate) mod trimmer;
pub(crate) mod updates;
pub mod writer;
