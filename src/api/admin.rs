//! The admin API's door (docs/admin.md): every `/v1/admin/...` request
//! needs `Authorization: Bearer <token>` with a token of `[admin] tokens`.
//! Without configured tokens the admin routes do not exist (404, like any
//! unknown route); without a token, or with one that is not configured,
//! the answer is a JSON 401 with `WWW-Authenticate`. The token's name
//! becomes the request's [`Actor`], the name logs give.
//! The token itself is never logged nor echoed.

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::error::ApiError;
use super::state::ApiState;
use crate::admin::{
    ActionRequest, MemberAction, MemberError, MemberReport, Moderator, PromoteError, Promotion,
};

/// Longest `reason` an action takes (it goes to the log and the audit
/// topic).
const MAX_REASON_CHARS: usize = 1000;

/// Who made an admin request: the name of its token.
#[derive(Debug, Clone)]
pub(crate) struct Actor(pub(crate) String);

/// The `/v1/admin` routes behind the token check.
pub(super) fn routes(state: ApiState) -> Router<ApiState> {
    Router::new()
        .route("/v1/admin/members/{member}", get(show_member))
        .route("/v1/admin/members/{member}/{action}", post(act_on_member))
        .route("/v1/admin/boards/{board}/promote", post(promote))
        .route("/v1/admin", any(no_action))
        .route("/v1/admin/{*rest}", any(no_action))
        .route_layer(middleware::from_fn_with_state(state, authenticate))
}

/// Lets a request with a configured token through, with its [`Actor`].
async fn authenticate(State(s): State<ApiState>, mut req: Request, next: Next) -> Response {
    if !s.admin.enabled() {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "no route: the admin API is off (no [admin] tokens are configured)",
        )
        .into_response();
    }
    let Some(presented) = bearer(req.headers()) else {
        return unauthorized(
            "this admin endpoint needs the header Authorization: Bearer <token>",
            "Bearer realm=\"rankflow admin\"",
        );
    };
    let Some(name) = s.admin.name_of(presented) else {
        tracing::warn!(
            path = %req.uri().path(),
            "An admin request with a token that is not configured was refused."
        );
        return unauthorized(
            "the bearer token is not one of the configured admin tokens",
            "Bearer realm=\"rankflow admin\", error=\"invalid_token\"",
        );
    };
    req.extensions_mut().insert(Actor(name.to_string()));
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in
/// any case, as RFC 9110 has it).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(says: &str, challenge: &'static str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, says).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// An authenticated request for an action rankflow does not have.
async fn no_action(
    axum::Extension(actor): axum::Extension<Actor>,
    method: Method,
    uri: Uri,
) -> ApiError {
    tracing::info!(actor = %actor.0, method = %method, path = %uri.path(), "An admin request named no action.");
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no admin action at {method} {}", uri.path()),
    )
}

/// The body of a promotion.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromoteBody {
    shadow: String,
}

/// `POST /v1/admin/boards/{board}/promote` (docs/rebuilds.md).
async fn promote(
    State(s): State<ApiState>,
    axum::Extension(actor): axum::Extension<Actor>,
    Path(board): Path<String>,
    body: Bytes,
) -> Result<Json<Promotion>, ApiError> {
    let body: PromoteBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body must be JSON {{\"shadow\": \"<shadow board, or the board itself to roll back>\"}}: {e}"),
        )
    })?;
    let done = moderator(&s)?.promote(&board, &body.shadow, &actor.0).await;
    done.map(Json).map_err(|e| match e {
        PromoteError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
        PromoteError::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
        PromoteError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
        e => {
            tracing::warn!(board = %board, error = %e, "A promotion failed; answering 503 (repeating it finishes it).");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the promotion did not complete ({e}); repeat the request to finish it"),
            )
        }
    })
}

/// The body of a member action: all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    boards: Option<Vec<String>>,
    reason: Option<String>,
}

fn moderator(s: &ApiState) -> Result<&Moderator, ApiError> {
    s.moderator.get().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not connected to Redis yet; try again shortly",
        )
    })
}

impl From<MemberError> for ApiError {
    fn from(e: MemberError) -> ApiError {
        match e {
            MemberError::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
            MemberError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
            MemberError::Store(ref store) => {
                tracing::warn!(error = %store, "A member action failed in Redis; answering 503 (repeating it finishes it).");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Redis did not complete the action; repeat the request to finish it",
                )
            }
            MemberError::Recover(ref recover) => {
                tracing::warn!(error = %recover, "The moderation record is missing and could not be rebuilt; answering 503.");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the moderation record is missing from Redis and could not be rebuilt from the audit topic; nothing was done",
                )
            }
            MemberError::Archive(ref archive) => {
                tracing::warn!(error = %archive, "A member action failed in the archive; answering 503 (repeating it finishes it).");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the archive (PostgreSQL) did not complete the action; repeat the request to finish it",
                )
            }
            MemberError::Audit(ref audit) => {
                tracing::warn!(error = %audit, "A member action took effect but its audit message was not published; answering 503.");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the action took effect but could not be announced on the audit topic; repeat the request",
                )
            }
        }
    }
}

/// `GET /v1/admin/members/{member}`: its state and where it is held.
async fn show_member(
    State(s): State<ApiState>,
    Path(member): Path<String>,
) -> Result<Json<MemberReport>, ApiError> {
    Ok(Json(moderator(&s)?.show(&member).await?))
}

/// `POST /v1/admin/members/{member}/{hide|restore|erase}`.
async fn act_on_member(
    State(s): State<ApiState>,
    axum::Extension(actor): axum::Extension<Actor>,
    Path((member, action)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<MemberReport>, ApiError> {
    let action = match action.as_str() {
        "hide" => MemberAction::Hide,
        "restore" => MemberAction::Restore,
        "erase" => MemberAction::Erase,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no member action {other:?} (hide, restore or erase)"),
            ));
        }
    };
    let body: ActionBody = if body.iter().all(u8::is_ascii_whitespace) {
        ActionBody::default()
    } else {
        serde_json::from_slice::<Option<ActionBody>>(&body)
            .map(Option::unwrap_or_default)
            .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("the body must be JSON {{\"boards\": [...], \"reason\": \"...\"}}, both optional: {e}"),
            )
        })?
    };
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("\"reason\" has at most {MAX_REASON_CHARS} characters"),
        ));
    }
    let req = ActionRequest {
        member,
        boards: body.boards,
        reason: body.reason,
    };
    Ok(Json(moderator(&s)?.act(action, &req, &actor.0).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case_and_nothing_else_is() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(v).expect("header"),
            );
            h
        };
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
