//! rankflow's integration tests, in one test binary: each module is what
//! was a binary of its own (`cargo test --test it chaos::` runs one), and
//! `common` holds what they share (servers on free ports, reference
//! models, the harness that applies events without Kafka). One binary
//! builds and links once instead of once per file, and keeps the test
//! threads busy across files (see BENCHMARKS.md, "Test suite layout").

mod common;

mod admin_api;
mod api_errors;
mod apply_model;
mod archive_connect;
mod archive_copy;
mod archive_reads;
mod archiver;
mod board_model;
mod browser;
mod calendar;
mod chaos;
mod checks;
mod closing;
mod cluster;
mod composite;
mod composite_archive;
mod composite_surface;
mod composite_windows;
mod config;
mod counts;
mod deadletter;
mod decode_equivalence;
mod docs;
mod exact_sums;
mod fanout;
mod grace_change;
mod history;
mod history_docs;
mod history_outage;
mod http;
mod layout;
mod listener;
mod moderation;
mod moderation_api;
mod moderation_archive;
mod operations;
mod overtaken;
mod pipeline;
mod rank_styles;
mod read_only;
mod repeated_kill;
mod scope_unions;
mod security;
mod shadows;
mod streams;
mod unions;
mod windows;
