//! The `rankflow` binary: parses the command line, sets up logging, turns
//! SIGTERM and SIGINT into a shutdown signal and hands over to
//! [`rankflow::cli::execute`], which loads the configuration and runs the
//! command. Exit codes (docs/cli.md): 0 success, 1 runtime failure, 2
//! invalid configuration, rules or arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rankflow::cli::Cli;
use rankflow::clock::SystemClock;
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
    let (stop, shutdown) = watch::channel(false);
    let done = runtime.block_on(async move {
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop.send(true);
        });
        rankflow::cli::execute(cli.command, Arc::new(SystemClock), shutdown).await
    });
    // Do not wait for blocking work still running (e.g. a Kafka call to an
    // unreachable broker): everything that matters is done.
    runtime.shutdown_timeout(Duration::from_millis(500));
    match done {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
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
