//! The command line's arguments (clap): the subcommands and their flags,
//! and the parsers of flag values.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::event::EventType;
use crate::reader::RankStyle;

/// The whole command line (docs/cli.md), as `main` parses it and hands it to
/// [`crate::cli::execute`].
#[derive(Debug, Parser)]
#[command(
    name = "rankflow",
    version,
    about = "Kafka events to real-time leaderboards in Redis"
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands of docs/cli.md; each variant's doc line is its help line.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumer with its HTTP listener.
    Run {
        /// The configuration file.
        #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
        config: PathBuf,
    },
    /// Validate the config and rules; print every board with its keys.
    Check {
        /// The configuration file.
        #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
        config: PathBuf,
    },
    /// Send synthetic gift/score/play events to the configured topic.
    Produce(ProduceArgs),
    /// Print a board.
    Top(TopArgs),
    /// Archive the closed periods that are due, or copy one period again.
    Archive(ArchiveArgs),
    /// Show, hide, restore or erase a member (docs/moderation.md); audited
    /// with actor `cli`.
    Member(MemberArgs),
    /// Apply one reviewed quarantined message to the boards, exactly once
    /// (docs/checks.md); audited with actor `cli`.
    Release(ReleaseArgs),
}

/// `rankflow release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The configuration file.
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub(crate) config: PathBuf,
    /// The original message's position, `topic/partition/offset`, as in
    /// its letter's `rankflow-source` header.
    #[arg(long)]
    pub(crate) source: String,
}

/// What `rankflow member` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemberVerb {
    /// Its state and where it is held.
    Show,
    /// Take it off boards, keeping its data aside.
    Hide,
    /// Bring a hidden member back.
    Restore,
    /// Remove every trace of it (a deletion request).
    Erase,
}

/// `rankflow member`.
#[derive(Debug, Args)]
pub struct MemberArgs {
    /// show, hide, restore or erase.
    #[arg(value_enum)]
    pub(crate) action: MemberVerb,
    /// The member id, as the boards hold it.
    pub(crate) member: String,
    /// The configuration file.
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub(crate) config: PathBuf,
    /// Only these boards (comma-separated; default: every board).
    #[arg(long, value_delimiter = ',')]
    pub(crate) boards: Vec<String>,
    /// Why, for the audit trail.
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// `rankflow archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// The configuration file.
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub(crate) config: PathBuf,
    /// Only this board's periods.
    #[arg(long)]
    pub(crate) board: Option<String>,
    /// Copy this period again from Redis (needs `--board`), replacing the
    /// archived copy, e.g. `2026-W47`.
    #[arg(long, requires = "board")]
    pub(crate) period: Option<String>,
    /// With `--period`: only this scope (default: every scope of the
    /// period found in the due set or the archive).
    #[arg(long, requires = "period")]
    pub(crate) scope: Option<String>,
}

/// `rankflow produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The configuration file.
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub(crate) config: PathBuf,
    /// Events to send (0 = until interrupted).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) events: u64,
    /// Events per second (0 = as fast as possible).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) rate: u64,
    /// Distinct senders / players (Zipf-skewed).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) members: u64,
    /// Distinct gift receivers (Zipf-skewed).
    #[arg(long, default_value_t = 100)]
    pub(crate) receivers: u64,
    /// Distinct games (Zipf-skewed).
    #[arg(long, default_value_t = 20)]
    pub(crate) games: u64,
    /// Event types, comma separated.
    #[arg(long, default_value = "gift,score,play", value_delimiter = ',')]
    pub(crate) types: Vec<String>,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    pub(crate) skew: f64,
    /// What each message is keyed by: `user` (the sender or user) or
    /// `event` (its event_id: even partitions).
    #[arg(long, value_enum, default_value_t = crate::produce::Key::User)]
    pub(crate) key: crate::produce::Key,
    /// Topic (default: the first configured topic).
    #[arg(long)]
    pub(crate) topic: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

/// `rankflow top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    pub(crate) board: String,
    /// `hour|day|week|month|year|all|win:<L>`
    pub(crate) view: String,
    /// The configuration file.
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub(crate) config: PathBuf,
    /// A scope; give it several times for their union, or `*` for all.
    #[arg(long)]
    pub(crate) scope: Vec<String>,
    /// Period id, e.g. `2026-W47` (default: the current one).
    #[arg(long)]
    pub(crate) period: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: usize,
    /// Rank style (docs/http-api.md): `ordinal` (1,2,3,4), `competition` (1,1,3)
    /// or `dense` (1,1,2).
    #[arg(long, default_value = "ordinal", value_parser = parse_rank)]
    pub(crate) rank: RankStyle,
    /// Redraw every second until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
}

impl Command {
    /// The configuration file the command reads.
    pub fn config(&self) -> &Path {
        match self {
            Command::Run { config } | Command::Check { config } => config,
            Command::Produce(a) => &a.config,
            Command::Top(a) => &a.config,
            Command::Archive(a) => &a.config,
            Command::Member(a) => &a.config,
            Command::Release(a) => &a.config,
        }
    }
}

/// Event types from their names.
pub(crate) fn parse_types(names: &[String]) -> Result<Vec<EventType>, String> {
    names
        .iter()
        .map(|n| EventType::parse(n.trim()).ok_or_else(|| format!("unknown event type {n:?}")))
        .collect()
}

/// `--rank`: a style by name, or the list of names.
fn parse_rank(raw: &str) -> Result<RankStyle, String> {
    RankStyle::parse(raw).ok_or_else(|| {
        let names: Vec<&str> = RankStyle::ALL.iter().map(|s| s.name()).collect();
        format!("must be one of {}, got {raw:?}", names.join(", "))
    })
}
