//! The `rankflow` binary: parses the command line, sets up logging and
//! signals, and hands over to the library. Exit codes: 0 success, 1 runtime
//! failure, 2 invalid configuration or rules — including faults found only
//! at start-up that no retry can cure (a property librdkafka rejects, a
//! Redis URL or TLS file that cannot be used, a refused Redis password).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::Parser;
use rankflow::cli::{self, Cli, Command};
use rankflow::clock::{SharedClock, SystemClock};
use rankflow::config::Config;
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

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    let clock: SharedClock = Arc::new(SystemClock);
    match command {
        Command::Check { config } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => return Ok(config_error(e)),
            };
            // The same checks as `run` makes before connecting, plus the
            // producer of `rankflow produce`; no server is contacted.
            let boards = match rankflow::app::preflight(&cfg) {
                Ok(p) => p,
                Err(e) => return Ok(config_error(format!("{}: {e}", config.display()))),
            };
            if let Err(e) = rankflow::produce::check(&cfg.kafka) {
                return Ok(config_error(format!("{}: {e}", config.display())));
            }
            print!("{}", cli::describe(&cfg, &boards, cli::now_ms()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { config } => {
            let cfg = match Config::load(&config) {
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
                Err(e) if e.is_config() => Ok(config_error(format!("{}: {e}", config.display()))),
                Err(e) => Err(e.into()),
            }
        }
        Command::Produce {
            config,
            events,
            rate,
            members,
            receivers,
            games,
            types,
            skew,
            topic,
            seed,
        } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => return Ok(config_error(e)),
            };
            let types = match cli::parse_types(&types) {
                Ok(t) => t,
                Err(e) => return Ok(config_error(e)),
            };
            let Some(topic) = topic.or_else(|| cfg.kafka.topics.first().cloned()) else {
                return Ok(config_error(
                    "no topic: give --topic or configure kafka.topics",
                ));
            };
            let client = match rankflow::source::client::producer_user_properties(&cfg.kafka) {
                Ok(c) => c,
                Err(e) => return Ok(config_error(format!("{}: {e}", config.display()))),
            };
            let options = rankflow::produce::Options {
                brokers: cfg.kafka.brokers.clone(),
                topic,
                events,
                rate,
                members,
                receivers,
                games,
                types,
                skew,
                seed,
                client,
            };
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            tokio::spawn(async move {
                wait_for_signal().await;
                flag.store(true, Ordering::SeqCst);
            });
            let sent = match tokio::task::spawn_blocking(move || {
                rankflow::produce::run(&options, clock, &|| stop.load(Ordering::SeqCst))
            })
            .await?
            {
                Ok(sent) => sent,
                Err(e @ rankflow::produce::ProduceError::Client(_)) => {
                    return Ok(config_error(format!("{}: {e}", config.display())));
                }
                Err(e) => return Err(e.into()),
            };
            println!("produced {sent} events");
            Ok(ExitCode::SUCCESS)
        }
        Command::Top {
            board,
            view,
            config,
            scope,
            period,
            limit,
            watch,
        } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => return Ok(config_error(e)),
            };
            let boards = match cfg.compile_boards() {
                Ok(b) => Arc::new(b),
                Err(e) => return Ok(config_error(format!("{}: {e}", config.display()))),
            };
            let store = match Store::connect(&cfg.redis).await {
                Ok(s) => s,
                Err(e) if e.is_permanent_at_startup() => {
                    return Ok(config_error(format!(
                        "{}: setting `redis.url`: {e}",
                        config.display()
                    )));
                }
                Err(e) => return Err(anyhow::Error::new(e).context("cannot connect to Redis")),
            };
            let reader = Reader {
                boards,
                store,
                clock,
            };
            let q = Query {
                board,
                view,
                scope,
                period,
            };
            cli::top(&reader, &q, limit, watch).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
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
