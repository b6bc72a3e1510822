//! The command line (docs/cli.md): `run`, `check`, `produce`, `top`, `archive`.
//! Argument definitions and the commands' printed output (`check`, `top`,
//! the `archive` summary); `run`, `produce` and `archive` hand over to
//! [`crate::app`], [`crate::produce`] and [`crate::archive::runner`].

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::board::BoardSet;
use crate::board::duration::Span;
use crate::board::keys;
use crate::board::model::{Board, ViewSpec};
use crate::board::period::{PeriodKind, period_of};
use crate::clock::Clock;
use crate::config::Config;
use crate::event::EventType;
use crate::reader::{List, Query, RankStyle, Reader};

#[derive(Debug, Parser)]
#[command(
    name = "rankflow",
    version,
    about = "Kafka events to real-time leaderboards in Redis"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumer with its HTTP listener.
    Run {
        #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
        config: PathBuf,
    },
    /// Validate the config and rules; print every board with its keys.
    Check {
        #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
        config: PathBuf,
    },
    /// Send synthetic gift/score/play events to the configured topic.
    Produce(ProduceArgs),
    /// Print a board.
    Top(TopArgs),
    /// Archive the closed periods that are due, or copy one period again.
    Archive(ArchiveArgs),
}

/// `rankflow archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub config: PathBuf,
    /// Only this board's periods.
    #[arg(long)]
    pub board: Option<String>,
    /// Copy this period again from Redis (needs `--board`), replacing the
    /// archived copy, e.g. `2026-W47`.
    #[arg(long, requires = "board")]
    pub period: Option<String>,
    /// With `--period`: only this scope (default: every scope of the
    /// period found in the due set or the archive).
    #[arg(long, requires = "period")]
    pub scope: Option<String>,
}

/// `rankflow produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub config: PathBuf,
    /// Events to send (0 = until interrupted).
    #[arg(long, default_value_t = 10_000)]
    pub events: u64,
    /// Events per second (0 = as fast as possible).
    #[arg(long, default_value_t = 1_000)]
    pub rate: u64,
    /// Distinct senders / players (Zipf-skewed).
    #[arg(long, default_value_t = 10_000)]
    pub members: u64,
    /// Distinct gift receivers (Zipf-skewed).
    #[arg(long, default_value_t = 100)]
    pub receivers: u64,
    /// Distinct games (Zipf-skewed).
    #[arg(long, default_value_t = 20)]
    pub games: u64,
    /// Event types, comma separated.
    #[arg(long, default_value = "gift,score,play", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    pub skew: f64,
    /// Topic (default: the first configured topic).
    #[arg(long)]
    pub topic: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `rankflow top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    pub board: String,
    /// `hour|day|week|month|year|all|win:<L>`
    pub view: String,
    #[arg(short, long, env = "RANKFLOW_CONFIG", default_value = "rankflow.toml")]
    pub config: PathBuf,
    /// A scope; give it several times for their union, or `*` for all.
    #[arg(long)]
    pub scope: Vec<String>,
    /// Period id, e.g. `2026-W47` (default: the current one).
    #[arg(long)]
    pub period: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Rank style (docs/http-api.md): `ordinal` (1,2,3,4), `competition` (1,1,3)
    /// or `dense` (1,1,2).
    #[arg(long, default_value = "ordinal", value_parser = parse_rank)]
    pub rank: RankStyle,
    /// Redraw every second until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// The text `rankflow check` prints for a valid config.
pub fn describe(config: &Config, boards: &BoardSet, now: i64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "config OK: {} board(s); topics {:?}; key prefix {:?}; batch {} events / {} ms",
        boards.boards.len(),
        config.kafka.topics,
        boards.key_prefix,
        config.batch.max_events,
        config.batch.max_delay_ms.get()
    );
    // Secrets are masked: this output ends up in tickets and CI logs.
    let _ = writeln!(out, "redis {}", config.redis.url.redacted());
    let _ = writeln!(out, "kafka {}", config.kafka.brokers);
    let _ = writeln!(
        out,
        "http {}; union views cached {}; at most {} open streams",
        config.http.listen,
        Span::Fixed {
            ms: config.http.union_cache.ms()
        },
        config.http.max_streams
    );
    for (k, v) in config.kafka.client_redacted() {
        let _ = writeln!(out, "  {k} = {v}");
    }
    if let Some(url) = config.archive.url_redacted() {
        let a = &config.archive;
        let _ = writeln!(
            out,
            "archive {url}; closes periods {} after their end; closed topic {}",
            Span::Fixed { ms: a.grace.ms() },
            a.closed_topic.as_deref().unwrap_or("(none)")
        );
    }
    for note in config.notes() {
        let _ = writeln!(out, "note: {note}");
    }
    for b in &boards.boards {
        describe_board(&mut out, boards, b, now);
    }
    out
}

/// What `check` says about reading a scoped board's scopes as one.
fn scope_unions_line(b: &Board) -> String {
    let Some(offer) = rankflow_offer(b) else {
        return "scopes cannot be read as one union (see `scope_slot` in docs/configuration.md)"
            .to_string();
    };
    let all = match offer.registry {
        0 => "scope=* off (scope_registry = 0)".to_string(),
        n => format!("scope=* lists up to {n} scopes per view"),
    };
    let slot = if b.board_slot {
        "every scope in the board's cluster slot: unions work on a Redis Cluster"
    } else {
        "each scope in its own cluster slot: unions on a single Redis only (scope_slot = \"board\" for a cluster)"
    };
    format!(
        "scope=a&scope=b (up to {}); {all}; {slot}",
        offer.max_listed
    )
}

fn rankflow_offer(b: &Board) -> Option<crate::reader::union::ScopeUnionOffer> {
    crate::reader::union::scope_offer(b)
}

fn describe_board(out: &mut String, boards: &BoardSet, b: &Board, now: i64) {
    let tag = b.tag(b.scope.is_some().then_some("<scope>"));
    let _ = writeln!(out, "\nboard {} (event {})", b.name, b.event.name());
    if let Some(f) = &b.filter {
        let _ = writeln!(out, "  filter     {}", f.source());
    }
    let _ = writeln!(out, "  member     {}", b.member.source());
    match &b.composite {
        None => {
            let _ = writeln!(out, "  score      {}", b.score.source());
        }
        Some(c) => {
            for (f, compiled) in c.layout.fields.iter().zip(&c.fields) {
                let filter = compiled
                    .filter
                    .as_ref()
                    .map(|p| format!(" if {}", p.source()))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  field      {} = {}{filter} ({:?}, {:?})",
                    f.name,
                    compiled.score.source(),
                    f.aggregate,
                    f.order
                );
            }
        }
    }
    if let Some(s) = &b.scope {
        let _ = writeln!(out, "  scope      {}", s.source());
        let _ = writeln!(out, "  unions     {}", scope_unions_line(b));
    }
    // A composite board's aggregate and order are per field (above).
    let rule = match &b.composite {
        None => format!("aggregate {:?}, order {:?}, ", b.aggregate, b.order),
        Some(_) => String::new(),
    };
    let _ = writeln!(
        out,
        "  ranking    {rule}tie_break {:?}, timezone {}",
        b.tie,
        b.tz.name()
    );
    let _ = writeln!(out, "  range      {}", b.range_description());
    let _ = writeln!(
        out,
        "  keys       {}",
        keys::view_key(&boards.key_prefix, &tag, "<view>")
    );
    for v in &b.views {
        describe_view(out, &boards.key_prefix, &tag, b, v, now);
    }
    warn_undeclared(out, b);
}

/// Warns about each attribute a rule reads that its event schema does not
/// declare: events without it fail that rule.
fn warn_undeclared(out: &mut String, b: &Board) {
    let mut programs = vec![
        ("filter".to_string(), b.filter.as_ref()),
        ("member".to_string(), Some(&b.member)),
        ("scope".to_string(), b.scope.as_ref()),
    ];
    match &b.composite {
        None => programs.push(("score".to_string(), Some(&b.score))),
        Some(c) => {
            for (f, compiled) in c.layout.fields.iter().zip(&c.fields) {
                programs.push((format!("field {}", f.name), Some(&compiled.score)));
                programs.push((format!("field {} filter", f.name), compiled.filter.as_ref()));
            }
        }
    }
    for (field, program) in programs {
        let Some(p) = program else { continue };
        for f in p.fields() {
            if !b.event.declared_fields().contains(&f.as_str()) {
                let _ = writeln!(
                    out,
                    "  warning: {field} reads `{f}`, which the {} schema does not declare; events without it fail this rule",
                    b.event.name()
                );
            }
        }
    }
}

/// One line per view: its current key and how long its keys are kept.
fn describe_view(out: &mut String, prefix: &str, tag: &str, b: &Board, v: &ViewSpec, now: i64) {
    match v {
        ViewSpec::Period {
            kind,
            retention,
            close_after,
        } => {
            let current = period_of(*kind, now, b.tz);
            let keep = match (retention, close_after) {
                (Some(r), Some(grace)) => format!(
                    "archived: closes {} after the period ends, kept in Redis until archived, then {r} after the end",
                    Span::Fixed { ms: *grace }
                ),
                (Some(r), None) => format!("kept {r} after the period ends"),
                (None, _) => "kept forever".to_string(),
            };
            let key = keys::view_key(prefix, tag, &current.view());
            let helpers = helpers_of(b, &key, false, close_after.is_some());
            let _ = if *kind == PeriodKind::All {
                writeln!(out, "    {:<8} {key}  ({keep}{helpers})", kind.name())
            } else {
                writeln!(out, "    {:<8} {key}  (now; {keep}{helpers})", kind.name())
            };
        }
        ViewSpec::Window(w) => {
            let key = keys::view_key(prefix, tag, &w.view());
            let helpers = helpers_of(b, &key, true, false);
            let _ = writeln!(
                out,
                "    {:<8} {key}  (window {}{helpers})",
                w.view(),
                w.text
            );
        }
    }
}

/// "; helpers K:t, ..." for a view's line: what the apply script keeps
/// beside it, bucket hashes and the dense-rank index included.
fn helpers_of(b: &Board, key: &str, window: bool, archived: bool) -> String {
    let mut all = crate::sink::encode::helper_keys(b, key, window, archived);
    if window {
        all.push(format!("{key}:b:<bucket end>"));
    }
    if b.dense_ranks {
        all.push(keys::dense_key(key));
    }
    if all.is_empty() {
        return String::new();
    }
    let suffixes: Vec<&str> = all
        .iter()
        .map(|k| k.strip_prefix(key).unwrap_or(k))
        .collect();
    format!("; helpers K{}", suffixes.join(", K"))
}

/// Event types from their names.
pub fn parse_types(names: &[String]) -> Result<Vec<EventType>, String> {
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

/// Renders a board page as a table.
pub fn render(list: &List) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}{}{}  ({} members, {})",
        list.board,
        list.view,
        list.period
            .as_deref()
            .map(|p| format!(" {p}"))
            .unwrap_or_default(),
        match (&list.scope, &list.scopes) {
            (Some(s), _) => format!(" scope={s}"),
            (None, Some(all)) => format!(" scopes={}", all.join(",")),
            (None, None) => String::new(),
        },
        list.total,
        list.source.name()
    );
    // A composite board prints its fields, a missing one as "-" (its
    // score would be an infinity that only encodes "ranks last").
    let names: Option<Vec<&str>> = list
        .entries
        .iter()
        .find_map(|e| e.fields.as_ref())
        .map(|f| f.0.iter().map(|(n, _)| n.as_str()).collect());
    let _ = write!(out, "{:>5}  {:<32}", "rank", "member");
    match &names {
        Some(names) => names.iter().for_each(|n| {
            let _ = write!(out, " {n:>20}");
        }),
        None => {
            let _ = write!(out, " {:>20}", "score");
        }
    }
    out.push('\n');
    for e in &list.entries {
        let _ = write!(out, "{:>5}  {:<32}", e.rank, e.member);
        match &e.fields {
            Some(fields) => fields.0.iter().for_each(|(_, v)| {
                let v = v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_string());
                let _ = write!(out, " {v:>20}");
            }),
            None if e.score.fract() == 0.0 => {
                let _ = write!(out, " {:>20}", e.score as i64);
            }
            None => {
                let _ = write!(out, " {:>20}", e.score);
            }
        }
        out.push('\n');
    }
    out
}

/// `rankflow top`: one page, or a redraw every second with `--watch`.
pub async fn top(
    reader: &Reader,
    q: &Query,
    limit: usize,
    rank: RankStyle,
    watch: bool,
) -> Result<(), crate::reader::ReadError> {
    loop {
        let list = reader.top_ranked(q, 0, limit, rank).await?;
        if watch {
            // Clear the screen and home the cursor, so the board redraws in place.
            print!("\x1b[2J\x1b[H");
            let now = chrono::DateTime::from_timestamp_millis(reader.clock.now_ms())
                .map(|t| t.format("%H:%M:%S").to_string())
                .unwrap_or_default();
            println!("rankflow top — {now} (Ctrl-C to stop)\n");
        }
        print!("{}", render(&list));
        if !watch {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Current time for `check`.
pub fn now_ms() -> i64 {
    crate::clock::SystemClock.now_ms()
}

/// The lines `rankflow archive` prints: one per period, then the total;
/// and whether every period went well.
pub fn render_archive(reports: &[crate::archive::runner::Report]) -> (String, bool) {
    use crate::archive::runner::Outcome;
    let mut out = String::new();
    let (mut archived, mut rows, mut other, mut failed) = (0u64, 0u64, 0u64, 0u64);
    for r in reports {
        let _ = match &r.outcome {
            Outcome::Archived { members, took } => {
                archived += 1;
                rows += members;
                writeln!(
                    out,
                    "archived {}: {members} members in {:.2} s",
                    r.period,
                    took.as_secs_f64()
                )
            }
            Outcome::AlreadyArchived => {
                other += 1;
                writeln!(out, "finished {}: already archived", r.period)
            }
            Outcome::Empty => {
                other += 1;
                writeln!(out, "closed {}: no events, nothing to archive", r.period)
            }
            Outcome::Busy => {
                other += 1;
                writeln!(out, "skipped {}: another archiver holds it", r.period)
            }
            Outcome::Failed(e) => {
                failed += 1;
                writeln!(out, "failed {}: {e}", r.period)
            }
        };
    }
    let _ = writeln!(
        out,
        "total: {} period(s): {archived} archived ({rows} members), {other} without a copy now, {failed} failed",
        reports.len()
    );
    (out, failed == 0)
}
