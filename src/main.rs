//! The `rankflow` binary: parses the command line, sets up logging and
//! signals, and hands over to the library. Exit codes: 0 success, 1 runtime
//! failure, 2 invalid configuration or rules — including faults found only
//! at start-up that no retry can cure (a property librdkafka rejects, a
//! Redis URL or TLS file that cannot be used, a refused Redis password).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::Parser;
use rankflow::archive::read::ArchiveReader;

use rankflow::cli::{self, ArchiveArgs, Cli, Command, ProduceArgs, TopArgs};
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::config::Config;
use rankflow::produce::ProduceError;
use rankflow::reader::{Query, Reader};
use rankflow::sink::store::Store;
use tokio::sync::watch;

fn main() -> ExitCode {
    rankflow::telemetry::init_logging();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    };
    // Do not wait for blocking work still running (e.g. a Kafka call to an
    // unreachable broker): everything that matters is done.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

fn config_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}

/// A permanent fault: exit 2 with the file name in front of the message.
fn fault(config: &Path, e: impl std::fmt::Display) -> ExitCode {
    config_error(format!("{}: {e}", config.display()))
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    let clock: SharedClock = Arc::new(SystemClock);
    match command {
        Command::Check { config } => Ok(check(&config)),
        Command::Run { config } => run(&config, clock).await,
        Command::Produce(args) => produce(args, clock).await,
        Command::Top(args) => top(args, clock).await,
        Command::Archive(args) => archive(args, clock).await,
    }
}

/// The same checks as `run` makes before connecting, plus the producer of
/// `rankflow produce`; no server is contacted.
fn check(config: &Path) -> ExitCode {
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return config_error(e),
    };
    let boards = match rankflow::app::preflight(&cfg) {
        Ok(b) => b,
        Err(e) => return fault(config, e),
    };
    if let Err(e) = rankflow::produce::check(&cfg.kafka) {
        return fault(config, e);
    }
    print!("{}", cli::describe(&cfg, &boards, cli::now_ms()));
    ExitCode::SUCCESS
}

async fn run(config: &Path, clock: SharedClock) -> anyhow::Result<ExitCode> {
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return Ok(config_error(e)),
    };
    let listener = tokio::net::TcpListener::bind(cfg.http.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.http.listen))?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("Shutdown requested; draining the batch in hand.");
        let _ = tx.send(true);
    });
    match rankflow::app::run(cfg, listener, clock, rx).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.is_config() => Ok(fault(config, e)),
        Err(e) => Err(e.into()),
    }
}

async fn produce(args: ProduceArgs, clock: SharedClock) -> anyhow::Result<ExitCode> {
    let config = &args.config;
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return Ok(config_error(e)),
    };
    let types = match cli::parse_types(&args.types) {
        Ok(t) => t,
        Err(e) => return Ok(config_error(e)),
    };
    let Some(topic) = args.topic.or_else(|| cfg.kafka.topics.first().cloned()) else {
        return Ok(config_error(
            "no topic: give --topic or configure kafka.topics",
        ));
    };
    // [kafka.client] (TLS, SASL...) applies to this producer too.
    let client = match rankflow::source::client::producer_user_properties(&cfg.kafka) {
        Ok(c) => c,
        Err(e) => return Ok(fault(config, e)),
    };
    let options = rankflow::produce::Options {
        brokers: cfg.kafka.brokers.clone(),
        topic,
        events: args.events,
        rate: args.rate,
        members: args.members,
        receivers: args.receivers,
        games: args.games,
        types,
        skew: args.skew,
        seed: args.seed,
        client,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        flag.store(true, Ordering::SeqCst);
    });
    let produced = tokio::task::spawn_blocking(move || {
        rankflow::produce::run(&options, clock, &|| stop.load(Ordering::SeqCst))
    })
    .await?;
    match produced {
        Ok(sent) => {
            println!("produced {sent} events");
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ ProduceError::Client(_)) => Ok(fault(config, e)),
        Err(e) => Err(e.into()),
    }
}

async fn top(args: TopArgs, clock: SharedClock) -> anyhow::Result<ExitCode> {
    let config = &args.config;
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return Ok(config_error(e)),
    };
    let boards = match cfg.compile_boards() {
        Ok(b) => Arc::new(b),
        Err(e) => return Ok(fault(config, e)),
    };
    let store = match Store::connect(&cfg.redis).await {
        Ok(s) => s,
        Err(e) if e.is_permanent_at_startup() => {
            return Ok(fault(config, rankflow::app::AppError::redis(e)));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("cannot connect to Redis")),
    };
    let archive = match cfg.archive.url.as_deref().map(ArchiveReader::new) {
        Some(Err(e)) => return Ok(fault(config, e)),
        found => found.and_then(Result::ok),
    };
    let reader = Reader::new(boards, store, clock, archive)
        .with_unions(rankflow::reader::Unions::new(cfg.http.union_cache.ms()));
    let given: Vec<&str> = args.scope.iter().map(String::as_str).collect();
    let (scope, scope_union) = match rankflow::reader::ScopeUnion::choose(&given) {
        Ok(choice) => choice,
        Err(e) => return Ok(config_error(format!("--scope: {e}"))),
    };
    let q = Query {
        board: args.board,
        view: args.view,
        scope,
        scope_union,
        period: args.period,
    };
    cli::top(&reader, &q, args.limit, args.rank, args.watch).await?;
    Ok(ExitCode::SUCCESS)
}

/// `rankflow archive`: one pass over what is due (or one period copied
/// again), a line per period and a total; exit 1 if any period failed.
async fn archive(args: ArchiveArgs, clock: SharedClock) -> anyhow::Result<ExitCode> {
    let config = &args.config;
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return Ok(config_error(e)),
    };
    if !cfg.archive.enabled() {
        return Ok(fault(
            config,
            "[archive] url is not set: there is no archive",
        ));
    }
    let mut archiver = match rankflow::app::archiver(&cfg, clock).await {
        Ok(a) => a,
        Err(e) if e.is_config() => return Ok(fault(config, e)),
        Err(e) => return Err(e.into()),
    };
    if let Err(e) = archiver.connect().await {
        // Periods are still closed and measured; the copies then fail.
        eprintln!("error: {e}");
    }
    // clap requires --board with --period.
    let reports = match (&args.board, &args.period) {
        (Some(board), Some(period)) => archiver.recopy(board, period, args.scope.as_deref()).await,
        (board, _) => archiver.pass(board.as_deref()).await,
    };
    let reports = match reports {
        Ok(r) => r,
        Err(e) if e.is_retriable() => return Err(e.into()),
        Err(e) => return Ok(fault(config, e)),
    };
    let (text, ok) = cli::render_archive(&reports);
    print!("{text}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// SIGTERM or SIGINT.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
