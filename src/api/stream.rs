//! Live views (docs/http-api.md): Server-Sent Events streams of a top-N list and
//! of one member, served from the shared pollers of [`hub`]: one per board
//! view (board, view, period and scopes, and the member followed), whatever
//! page and rank style each stream asks for.
//!
//! - `GET /v1/boards/{board}/{view}/top/stream?limit=&offset=&scope=&period=&rank=`
//!   sends the JSON the `top` endpoint answers for the same query, at
//!   connect and whenever it changes (at most every 250 ms).
//! - `GET /v1/boards/{board}/{view}/members/{member}/stream?scope=&period=&rank=`
//!   sends the member's entry (the `members/{member}` JSON, plus
//!   `"period"`, `"overtaken_by"` and `"overtook"`, see [`views`])
//!   whenever its rank or score changes; an `absent` event when it leaves
//!   the board.
//!
//! The query parameters go through the same parsing as `top` and
//! `members/{member}`, and the first read of the view happens before the
//! answer starts, so every 400, 404 and 503 of those endpoints is the same
//! JSON error here, never an event. Each event carries an increasing `id:`;
//! a `:` comment every 15 s keeps proxies from closing a quiet stream. A
//! client reconnecting with `Last-Event-ID` gets the current state at once,
//! like any new client (a state is always complete, so nothing needs
//! replaying). An archived period cannot change: it is sent once, then the
//! stream stays open with heartbeats only, because a browser's
//! `EventSource` reconnects whenever a stream ends and would re-read it in
//! a loop. Every stream ends when rankflow shuts down.

mod hub;
mod views;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use tokio::sync::watch;

pub use hub::StreamHub;

use super::error::ApiError;
use super::extract::{QueryPairs, Segments};
use super::params::{Params, Route, query};
use super::state::{ApiState, reader_for};
use crate::reader::{self, ScopeUnion};
use hub::{Permit, Poll, Snapshot, State as ViewState};
use views::{Follow, MemberView, Page, TopView};

/// The heartbeat comment's interval.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// `GET .../top/stream`.
pub(super) async fn top_stream(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let mut p = Params::parse(&pairs, Route::Top)?;
    let page = Page {
        offset: p.offset.take().unwrap_or(0),
        limit: p.limit.take().unwrap_or(10),
        rank: p.rank.take().unwrap_or_default(),
        scopes: None,
    };
    let q = query(board, view, p);
    let reader = reader_for(&s, &q)?.clone();
    let page = Page {
        scopes: q.scope_union.as_ref().map(ScopeUnion::shown),
        ..page
    };
    let key = format!("top {}", view_key(&q));
    let make = || TopView { reader, query: q };
    open(&s, key, page, make, &headers).await
}

/// `GET .../members/{member}/stream`.
pub(super) async fn member_stream(
    State(s): State<ApiState>,
    Segments((board, view, member)): Segments<(String, String, String)>,
    QueryPairs(pairs): QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let mut p = Params::parse(&pairs, Route::Member)?;
    let follow = Follow {
        rank: p.rank.take().unwrap_or_default(),
    };
    let q = query(board, view, p);
    let reader = reader_for(&s, &q)?.clone();
    let key = format!("member {} {member:?}", view_key(&q));
    let make = || MemberView {
        reader,
        query: q,
        member,
    };
    open(&s, key, follow, make, &headers).await
}

/// What tells one view from another: the query, with a union's scopes in
/// one order, since `scope=a&scope=b` and `scope=b&scope=a` read the same.
/// Debug of the query names every field it has, including any added
/// later, so two streams share a poller only if they read the same.
fn view_key(q: &reader::Query) -> String {
    let mut q = q.clone();
    if let Some(ScopeUnion::Listed(scopes)) = &mut q.scope_union {
        scopes.sort_unstable();
    }
    format!("{q:?}")
}

/// Takes a place among the open streams, joins (or starts) the view's
/// poller with its lens and waits for its first state: a stream of events,
/// or the error of the first read.
async fn open<P: Poll>(
    s: &ApiState,
    key: String,
    lens: P::Lens,
    make: impl FnOnce() -> P,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let permit = s.streams.permit().ok_or_else(|| {
        tracing::warn!(
            max_streams = s.streams.max_streams(),
            "Refused a stream: the cap on open streams is reached."
        );
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many open streams (at most {}, [http] max_streams); try again later",
                s.streams.max_streams()
            ),
        )
    })?;
    if let Some(last) = headers.get("last-event-id") {
        tracing::debug!(last_event_id = ?last, key = %key, "A client resumed a stream; it gets the current state.");
    }
    let mut rx = s.streams.subscribe(key, lens, make).ok_or_else(|| {
        tracing::warn!(
            max_pollers = s.streams.max_pollers(),
            "Refused a stream: the cap on distinct live views is reached."
        );
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many distinct live views are followed (at most {}, [http] max_pollers); try again later",
                s.streams.max_pollers()
            ),
        )
    })?;
    let first = first_state(&mut rx).await?;
    let events = events(first, rx, permit, s.streams.shutdown());
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response();
    // Proxies such as nginx buffer responses unless told not to, which
    // would hold events back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// The first state of a lens: its first snapshot, or the error of its
/// first read.
async fn first_state(rx: &mut watch::Receiver<ViewState>) -> Result<Arc<Snapshot>, ApiError> {
    let first = match rx.wait_for(|v| !matches!(v, ViewState::Pending)).await {
        Ok(state) => state.clone(),
        // The poller stopped before its first read: shutting down.
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting down",
            ));
        }
    };
    match first {
        ViewState::Ready(snapshot) => Ok(snapshot),
        ViewState::Failed(e) => Err(e),
        ViewState::Pending => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the view is not read yet",
        )),
    }
}

/// What a stream holds between events; dropping it (the client left, or
/// the stream ended) frees its place and its subscription.
struct Tail {
    rx: watch::Receiver<ViewState>,
    shutdown: watch::Receiver<bool>,
    last_id: u64,
    _permit: Permit,
}

/// `first` at once, then every newer state until the poller or the server
/// stops.
fn events(
    first: Arc<Snapshot>,
    rx: watch::Receiver<ViewState>,
    permit: Permit,
    shutdown: watch::Receiver<bool>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let tail = Tail {
        rx,
        shutdown,
        last_id: first.id,
        _permit: permit,
    };
    let head = futures::stream::iter([Ok(event(&first))]);
    let rest = futures::stream::unfold(tail, |mut t| async move {
        loop {
            let changed = tokio::select! {
                changed = t.rx.changed() => changed.is_ok(),
                // A closed signal means the owner is gone: end as well.
                _ = t.shutdown.wait_for(|s| *s) => false,
            };
            if !changed {
                return None;
            }
            let newer = match &*t.rx.borrow_and_update() {
                ViewState::Ready(s) if s.id > t.last_id => Some(s.clone()),
                _ => None,
            };
            if let Some(s) = newer {
                t.last_id = s.id;
                return Some((Ok(event(&s)), t));
            }
        }
    });
    head.chain(rest)
}

fn event(s: &Snapshot) -> Event {
    let e = Event::default().id(s.id.to_string()).data(&s.data);
    match s.event {
        Some(name) => e.event(name),
        None => e,
    }
}
