//! The HTTP listener (docs/http-api.md): board reads under `/v1`, `/healthz` and
//! `/metrics`, all on one port. Handlers translate; the reading itself is in
//! [`crate::reader`], the query parameters are checked in [`params`].
//!
//! This file holds the routes and their handlers; what they share is in leaf
//! modules that import nothing from it: [`ApiState`] and the reader it holds
//! in [`state`], [`ApiError`] in [`error`], the JSON-erroring extractors in
//! [`extract`].
//!
//! Every read of ranks takes `rank=ordinal|competition|dense` (docs/http-api.md),
//! and `.../members?ids=a,b,c` (or `POST .../members` with a JSON list of
//! ids) reads a list of members at once (a friends board).
//!
//! Reads of a past period come from Redis or, once its keys are gone, from
//! the archive (docs/history.md); every list and member answer says which in
//! `"source"`, and `/v1/boards/{board}/{view}/periods` lists a view's
//! periods from both.
//!
//! Live views (docs/http-api.md): `.../top/stream` and
//! `.../members/{member}/stream` are Server-Sent Events, in [`stream`];
//! the web page at `/` that shows them is in [`web`].
//!
//! Every error is JSON, `{"error": "..."}` (plus `"parameter"` when one query
//! parameter is at fault), with a status a client can act on (docs/http-api.md):
//! 400 for a bad parameter, 404 for an unknown route, board, view or member
//! and for a past period that never had events, 405 for a method a route
//! does not take, 503 (with `Retry-After`) while Redis or the archive is not
//! reachable, 500 when the archive refuses a read (an operator must look).
//! axum's own extractor rejections are plain text, so the query string, the
//! path and a body go through [`QueryPairs`], [`Segments`] and [`JsonBody`]
//! ([`extract`]), and any other plain-text error of the framework gets the
//! JSON shape on its way out ([`error::json_errors`]). A body is at most
//! [`MAX_BODY_BYTES`] (64 KiB; a 413 beyond).
//!
//! Errors from Redis or the archive say what is wrong in a sentence, never
//! the driver's text or a server's address: those go to the log.
//!
//! `/v1/admin/...` needs a bearer token of `[admin] tokens` ([`admin`];
//! docs/admin.md).
//!
//! `rankflow run` serves the router with [`listen::serve`]: its own accept
//! loop, with a cap on connections, a time limit on request heads (and on
//! idle keep-alive connections), and a shutdown that does not wait for
//! stalled clients.

mod admin;
mod error;
mod extract;
pub(crate) mod listen;
mod params;
mod state;
mod stream;
mod web;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::board::model::ViewSpec;
use crate::board::period::{PeriodKind, next_reset, period_of};
use crate::reader::{self, BadParam};
use extract::{JsonBody, QueryPairs, Segments};
use params::{MAX_BODY_BYTES, Params, Route, query};
use state::reader_for;

pub(crate) use error::ApiError;
pub use state::ApiState;
pub use stream::StreamHub;

/// The whole HTTP API (docs/http-api.md) as one axum router over `state`: `rankflow run`
/// serves it on `http.listen`, and the tests serve it against their own Redis.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route("/v1/boards", get(list_boards))
        .route("/v1/boards/{board}/{view}/top", get(top))
        .route(
            "/v1/boards/{board}/{view}/top/stream",
            get(stream::top_stream),
        )
        .route(
            "/v1/boards/{board}/{view}/members/{member}/stream",
            get(stream::member_stream),
        )
        .route(
            "/v1/boards/{board}/{view}/members",
            get(members_get).post(members_post),
        )
        .route("/v1/boards/{board}/{view}/members/{member}", get(member))
        .route("/v1/boards/{board}/{view}/around/{member}", get(around))
        .route("/v1/boards/{board}/{view}/periods", get(periods))
        .route("/v1/boards/{board}/{view}/diff", get(diff))
        .merge(web::routes())
        .merge(admin::routes(state.clone()))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(error::json_errors))
}

async fn healthz(State(s): State<ApiState>) -> Response {
    let report = s.health.report();
    let code = if report.status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(report)).into_response()
}

async fn metrics_text(State(s): State<ApiState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

#[derive(Debug, Serialize)]
struct ViewInfo {
    view: String,
    /// Current period id (periods other than `all`).
    period: Option<String>,
    /// Key of the current period or window.
    key: String,
    /// When the current period ends: UTC and board-local, RFC 3339.
    next_reset: Option<String>,
    next_reset_local: Option<String>,
    /// For windows: `L/B`.
    window: Option<String>,
}

#[derive(Debug, Serialize)]
struct BoardInfo {
    name: String,
    event: &'static str,
    scoped: bool,
    aggregate: String,
    tie_break: String,
    order: String,
    /// A composite board's fields in rank order (docs/score-encoding.md); `aggregate`
    /// and `order` are then its first field's.
    #[serde(skip_serializing_if = "Option::is_none")]
    order_by: Option<Vec<FieldInfo>>,
    timezone: String,
    key_pattern: String,
    views: Vec<ViewInfo>,
    /// Rolling views computed at read time (docs/http-api.md), e.g.
    /// `{"view": "last:<N>d", "max_n": 35}`.
    unions: Vec<reader::UnionOffer>,
    /// Scoped boards: reading several scopes as one (docs/http-api.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    scope_unions: Option<reader::union::ScopeUnionOffer>,
    /// A shadow board: the board it is a candidate replacement of
    /// (docs/rebuilds.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow_of: Option<String>,
    /// A shadow board's backfill, `{"state", "lag"}`; `null` while Redis
    /// cannot tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    backfill: Option<Option<crate::backfill::progress::Progress>>,
    /// A board a shadow was promoted in place of: that shadow and since
    /// when; `key_pattern` and the views' keys are then the shadow's.
    #[serde(skip_serializing_if = "Option::is_none")]
    served_by: Option<ServedBy>,
}

#[derive(Debug, Serialize)]
struct ServedBy {
    board: String,
    since: String,
}

#[derive(Debug, Serialize)]
struct FieldInfo {
    field: String,
    aggregate: String,
    order: String,
}

fn lower<T: std::fmt::Debug>(v: T) -> String {
    format!("{v:?}").to_lowercase()
}

async fn list_boards(State(s): State<ApiState>) -> Json<serde_json::Value> {
    let serving = match s.reader.get() {
        Some(r) => r.serving_map().await.unwrap_or_default(),
        None => Default::default(),
    };
    let mut boards = describe_boards(&s, &serving);
    for info in boards.iter_mut().filter(|b| b.shadow_of.is_some()) {
        let progress = match s.reader.get() {
            Some(r) => r.backfill(&info.name).await.ok(),
            None => None,
        };
        info.backfill = Some(progress);
    }
    Json(serde_json::json!({ "boards": boards }))
}

/// What `/v1/boards` says of each board, but a shadow's backfill: a
/// promoted board with the keys of the shadow that serves it.
fn describe_boards(s: &ApiState, serving: &crate::board::serving::ServingMap) -> Vec<BoardInfo> {
    let now = s.clock.now_ms();
    let prefix = &s.boards.key_prefix;
    s.boards
        .boards
        .iter()
        .map(|b| {
            let served = serving.get(&b.name);
            let data = served.and_then(|sv| s.boards.get(&sv.board)).unwrap_or(b);
            let tag = data.tag(b.scope.is_some().then_some("<scope>"));
            let views = b
                .views
                .iter()
                .map(|v| match v {
                    ViewSpec::Period { kind, .. } => {
                        let p = period_of(*kind, now, b.tz);
                        let reset = next_reset(*kind, now, b.tz)
                            .and_then(DateTime::<Utc>::from_timestamp_millis);
                        ViewInfo {
                            view: kind.name().to_string(),
                            period: (*kind != PeriodKind::All).then(|| p.id.clone()),
                            key: crate::board::keys::view_key(prefix, &tag, &p.view()),
                            next_reset: reset.map(|r| r.to_rfc3339()),
                            next_reset_local: reset.map(|r| r.with_timezone(&b.tz).to_rfc3339()),
                            window: None,
                        }
                    }
                    ViewSpec::Window(w) => ViewInfo {
                        view: w.view(),
                        period: None,
                        key: crate::board::keys::view_key(prefix, &tag, &w.view()),
                        next_reset: None,
                        next_reset_local: None,
                        window: Some(w.text.clone()),
                    },
                })
                .collect();
            BoardInfo {
                name: b.name.clone(),
                event: b.event.name(),
                scoped: b.scope.is_some(),
                aggregate: lower(b.aggregate),
                tie_break: lower(b.tie),
                order: lower(b.order),
                order_by: b.composite.as_ref().map(|c| {
                    c.layout
                        .fields
                        .iter()
                        .map(|f| FieldInfo {
                            field: f.name.clone(),
                            aggregate: lower(f.aggregate),
                            order: lower(f.order),
                        })
                        .collect()
                }),
                timezone: b.tz.name().to_string(),
                key_pattern: crate::board::keys::view_key(prefix, &tag, "<view>"),
                views,
                unions: reader::union::offered(b),
                scope_unions: reader::union::scope_offer(b),
                shadow_of: b.shadow.as_ref().map(|sh| sh.of.clone()),
                backfill: None,
                served_by: served.map(|sv| ServedBy {
                    board: sv.board.clone(),
                    since: crate::admin::audit::rfc3339(sv.since),
                }),
            }
        })
        .collect()
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route for {method} {}; the routes are /v1/boards, \
             /v1/boards/{{board}}/{{view}}/top, .../top/stream, \
             .../members/{{member}}, .../members/{{member}}/stream, \
             .../members?ids=..., \
             .../around/{{member}}, .../periods, .../diff, /healthz, /metrics \
             and the web page at /",
            uri.path()
        ),
    )
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} takes {}, not {method}",
            uri.path(),
            // Only a members list may be sent as a body.
            if uri.path().ends_with("/members") {
                "GET or POST"
            } else {
                "GET"
            }
        ),
    )
}

async fn top(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::List>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Top)?;
    let (offset, limit) = (p.offset.take().unwrap_or(0), p.limit.take().unwrap_or(10));
    let rank = p.rank.take().unwrap_or_default();
    let q = query(board, view, p);
    let list = reader_for(&s, &q)?
        .top_ranked(&q, offset, limit, rank)
        .await?;
    Ok(Json(list))
}

/// `GET /v1/boards/{shadow}/{view}/diff` (docs/rebuilds.md).
async fn diff(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::DiffList>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Diff)?;
    let (offset, limit) = (p.offset.take().unwrap_or(0), p.limit.take().unwrap_or(100));
    let rank = p.rank.take().unwrap_or_default();
    let q = query(board, view, p);
    let list = reader_for(&s, &q)?.diff(&q, offset, limit, rank).await?;
    Ok(Json(list))
}

async fn member(
    State(s): State<ApiState>,
    Segments((board, view, member)): Segments<(String, String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::MemberEntry>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Member)?;
    let rank = p.rank.take().unwrap_or_default();
    let q = query(board, view, p);
    let entry = reader_for(&s, &q)?.member_ranked(&q, &member, rank).await?;
    Ok(Json(entry))
}

/// `GET .../members?ids=a,b,c`.
async fn members_get(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::MemberList>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Members)?;
    let ids = p.ids.take().ok_or_else(|| {
        BadParam::new(
            "ids",
            "give ids=<member>,<member>,... (or POST a JSON list)",
        )
    })?;
    members_of(&s, board, view, p, &ids).await
}

/// `POST .../members` with a JSON list of ids as the body.
async fn members_post(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
    JsonBody(body): JsonBody,
) -> Result<Json<reader::MemberList>, ApiError> {
    let p = Params::parse(&pairs, Route::MembersPost)?;
    let ids = params::body_ids(&body)?;
    members_of(&s, board, view, p, &ids).await
}

async fn members_of(
    s: &ApiState,
    board: String,
    view: String,
    mut p: Params,
    ids: &[String],
) -> Result<Json<reader::MemberList>, ApiError> {
    let rank = p.rank.take().unwrap_or_default();
    let q = query(board, view, p);
    Ok(Json(reader_for(s, &q)?.members(&q, ids, rank).await?))
}

async fn around(
    State(s): State<ApiState>,
    Segments((board, view, member)): Segments<(String, String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::List>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Around)?;
    let radius = p.radius.take().unwrap_or(5);
    let rank = p.rank.take().unwrap_or_default();
    let q = query(board, view, p);
    let list = reader_for(&s, &q)?
        .around_ranked(&q, &member, radius, rank)
        .await?;
    Ok(Json(list))
}

async fn periods(
    State(s): State<ApiState>,
    Segments((board, view)): Segments<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<reader::PeriodList>, ApiError> {
    let mut p = Params::parse(&pairs, Route::Periods)?;
    let (offset, limit) = (p.offset.take().unwrap_or(0), p.limit.take().unwrap_or(100));
    let q = query(board, view, p);
    reader::periodic_view(&s.boards, &q)?;
    Ok(Json(reader_for(&s, &q)?.periods(&q, offset, limit).await?))
}
