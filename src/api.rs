//! The HTTP listener (SPEC §5): board reads under `/v1`, `/healthz` and
//! `/metrics`, all on one port. Handlers translate; the reading itself is in
//! [`crate::reader`].

use std::sync::{Arc, OnceLock};

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};

use crate::board::BoardSet;
use crate::board::model::ViewSpec;
use crate::board::period::{PeriodKind, next_reset, period_of};
use crate::clock::SharedClock;
use crate::health::Health;
use crate::reader::{self, ReadError, Reader};

/// Shared by all handlers.
#[derive(Clone)]
pub struct ApiState {
    pub boards: Arc<BoardSet>,
    pub clock: SharedClock,
    pub health: Arc<Health>,
    pub metrics: PrometheusHandle,
    /// Set once Redis is connected; reads answer 503 before that.
    pub reader: Arc<OnceLock<Reader>>,
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route("/v1/boards", get(list_boards))
        .route("/v1/boards/{board}/{view}/top", get(top))
        .route("/v1/boards/{board}/{view}/members/{member}", get(member))
        .route("/v1/boards/{board}/{view}/around/{member}", get(around))
        .with_state(state)
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
    timezone: String,
    key_pattern: String,
    views: Vec<ViewInfo>,
}

fn lower<T: std::fmt::Debug>(v: T) -> String {
    format!("{v:?}").to_lowercase()
}

async fn list_boards(State(s): State<ApiState>) -> Json<serde_json::Value> {
    let now = s.clock.now_ms();
    let prefix = &s.boards.key_prefix;
    let boards: Vec<BoardInfo> = s
        .boards
        .boards
        .iter()
        .map(|b| {
            let tag = if b.scope.is_some() {
                format!("{}:<scope>", b.name)
            } else {
                b.name.clone()
            };
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
                timezone: b.tz.name().to_string(),
                key_pattern: format!("{prefix}:{{{tag}}}:<view>"),
                views,
            }
        })
        .collect();
    Json(serde_json::json!({ "boards": boards }))
}

#[derive(Debug, Deserialize)]
struct ReadParams {
    scope: Option<String>,
    period: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    radius: Option<usize>,
}

fn query(board: String, view: String, p: &ReadParams) -> reader::Query {
    reader::Query {
        board,
        view,
        scope: p.scope.clone(),
        period: p.period.clone(),
    }
}

/// Errors as JSON with the status a client can act on.
struct ApiError(ReadError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match &self.0 {
            ReadError::UnknownBoard(_)
            | ReadError::UnknownView { .. }
            | ReadError::MemberNotFound { .. } => StatusCode::NOT_FOUND,
            ReadError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ReadError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (
            code,
            Json(serde_json::json!({ "error": self.0.to_string() })),
        )
            .into_response()
    }
}

fn reader_of(s: &ApiState) -> Result<&Reader, ApiError> {
    s.reader.get().ok_or_else(|| {
        ApiError(ReadError::Store(crate::sink::store::StoreError::Config(
            "not connected to Redis yet".into(),
        )))
    })
}

async fn top(
    State(s): State<ApiState>,
    Path((board, view)): Path<(String, String)>,
    Query(p): Query<ReadParams>,
) -> Result<Json<reader::List>, ApiError> {
    let r = reader_of(&s)?;
    let list = r
        .top(
            &query(board, view, &p),
            p.offset.unwrap_or(0),
            p.limit.unwrap_or(10),
        )
        .await
        .map_err(ApiError)?;
    Ok(Json(list))
}

async fn member(
    State(s): State<ApiState>,
    Path((board, view, member)): Path<(String, String, String)>,
    Query(p): Query<ReadParams>,
) -> Result<Json<reader::Entry>, ApiError> {
    let r = reader_of(&s)?;
    let e = r
        .member(&query(board, view, &p), &member)
        .await
        .map_err(ApiError)?;
    Ok(Json(e))
}

async fn around(
    State(s): State<ApiState>,
    Path((board, view, member)): Path<(String, String, String)>,
    Query(p): Query<ReadParams>,
) -> Result<Json<reader::List>, ApiError> {
    let r = reader_of(&s)?;
    let list = r
        .around(&query(board, view, &p), &member, p.radius.unwrap_or(5))
        .await
        .map_err(ApiError)?;
    Ok(Json(list))
}
