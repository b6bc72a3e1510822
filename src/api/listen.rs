//! The HTTP listener of `rankflow run` (docs/http-api.md, "Connections"):
//! an accept loop of its own that serves the API's router with hyper's
//! HTTP/1 server, because `axum::serve` bounds neither the connections
//! nor the time a client may take to send its request.
//!
//! - At most `[http] max_connections` connections are open: a permit is
//!   taken before each `accept`, so past the cap a new connection waits in
//!   the kernel's listen backlog, unanswered, until one closes.
//! - A client has `[http] header_timeout` to send a complete request head,
//!   from connecting and again from each response (hyper's header read
//!   timeout, which runs whenever a connection waits for a head): a client
//!   that sends nothing or half a head is dropped, and so is an idle
//!   keep-alive connection. The HTTP/1 server is used alone: hyper's
//!   HTTP/1+2 server does not time a client that sends no byte at all.
//! - An `accept` that fails for want of resources (EMFILE: out of file
//!   descriptors) is retried with a backoff up to 1 s, not in a busy loop.
//! - On shutdown the listener stops accepting, asks every connection to
//!   finish (an idle one closes at once, one with a request in flight after
//!   its response; live streams end on their own shutdown signal) and drops
//!   whatever is still open [`DRAIN`] later: a half-open or stalled client
//!   cannot hold up the exit.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::config::HttpConfig;

/// How long connections get to finish after shutdown before they are
/// dropped: a response in flight completes, a stalled client is cut off.
/// Well inside the 10 s the whole process has (the consumer drains beside
/// it, docs/operations.md).
pub(crate) const DRAIN: Duration = Duration::from_secs(3);

/// Longest pause after a failed `accept`.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What the listener bounds (`[http]`, docs/configuration.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Most connections open at once.
    pub(crate) max_connections: usize,
    /// Time to send a request head, from connecting or from the previous
    /// response; also the idle keep-alive timeout.
    pub(crate) header_timeout: Duration,
    /// Time connections get to finish after shutdown.
    pub(crate) drain: Duration,
}

impl Limits {
    /// The limits `http` sets, with the [`DRAIN`] of `rankflow run`.
    pub(crate) fn of(http: &HttpConfig) -> Limits {
        Limits {
            max_connections: http.max_connections.get(),
            header_timeout: Duration::from_millis(
                u64::try_from(http.header_timeout.ms()).unwrap_or(1),
            ),
            drain: DRAIN,
        }
    }
}

/// What every connection task gets: how to speak HTTP/1, what to serve,
/// when to stop, and how long it may take then.
#[derive(Clone)]
struct Serving {
    http: http1::Builder,
    router: Router,
    shutdown: watch::Receiver<bool>,
    drain: Duration,
    /// Dropped by each connection task when it ends: the listener knows
    /// every connection is gone when all clones are.
    open: mpsc::Sender<()>,
}

/// Serves `router` on `listener` within `limits` until `shutdown` turns
/// true (or its sender is dropped); returns once every connection has
/// finished or been dropped.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let (open, mut all_closed) = mpsc::channel(1);
    let serving = Serving {
        http,
        router,
        shutdown: shutdown.clone(),
        drain: limits.drain,
        open,
    };
    let permits = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut backoff = Duration::ZERO;
    loop {
        // The permit first: at the cap, new clients wait in the backlog.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                tokio::spawn(connection(stream, permit, serving.clone()));
            }
            Err(e) if is_per_connection(&e) => {}
            Err(e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF);
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "The HTTP listener cannot accept connections; retrying.");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|s| *s) => break,
                }
            }
        }
    }
    drop(listener);
    drop(serving);
    // Every connection task ends within `drain` of seeing the shutdown;
    // the margin covers tasks that were still being scheduled.
    let finished = tokio::time::timeout(limits.drain + Duration::from_secs(1), all_closed.recv());
    if finished.await.is_err() {
        tracing::warn!("Some HTTP connections did not finish in time; leaving them.");
    }
}

/// An `accept` error that concerns only the connection being accepted
/// (the client gave up before it was accepted): accept the next one.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until the client or hyper closes it (a head not
/// sent in time included), or until shutdown: then it is asked to finish
/// and dropped after `drain`. Holds its permit until it ends.
async fn connection(stream: TcpStream, permit: OwnedSemaphorePermit, serving: Serving) {
    let Serving {
        http,
        router,
        mut shutdown,
        drain,
        open,
    } = serving;
    // Responses are written whole; small ones should not wait for an ACK.
    let _ = stream.set_nodelay(true);
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    let mut conn = std::pin::pin!(conn);
    let stopping = tokio::select! {
        served = conn.as_mut() => {
            if let Err(e) = served {
                tracing::debug!(error = %e, "HTTP connection ended with an error.");
            }
            false
        }
        _ = shutdown.wait_for(|s| *s) => true,
    };
    if stopping {
        conn.as_mut().graceful_shutdown();
        if tokio::time::timeout(drain, conn).await.is_err() {
            tracing::debug!("An HTTP connection was still open at shutdown; dropped.");
        }
    }
    drop(permit);
    drop(open);
}
