//! The request's query string, path segments and body ([`QueryPairs`],
//! [`Segments`], [`JsonBody`]): axum's own extractors answer a malformed one
//! in plain text, these answer it with a JSON error ([`ApiError`]) like
//! every other error: 400 for a bad query or path, 413 for a body over the
//! limit, 415 for a body that says it is not JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use super::error::{ApiError, framework_error};

/// The query string as decoded `name=value` pairs, in order; a malformed one
/// is a JSON 400 rather than axum's plain-text rejection.
pub(super) struct QueryPairs(pub(super) Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map(|Query(pairs)| QueryPairs(pairs))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("malformed query string: {}", e.body_text()),
                )
            })
    }
}

/// Path segments (board, view, member); one that does not decode (bad
/// percent-encoding, not UTF-8) is a JSON 400.
pub(super) struct Segments<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Segments(t))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("malformed path: {}", e.body_text()),
                )
            })
    }
}

/// A request body meant to be JSON, at most the router's body limit
/// (`DefaultBodyLimit`). A body with a `Content-Type` other than JSON is a
/// 415, one over the limit a 413, both JSON errors. No `Content-Type` is
/// taken as JSON (a bare `curl -d` sends a form type, which is refused).
pub(super) struct JsonBody(pub(super) Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if let Some(given) = not_json(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("the body must be JSON (Content-Type: application/json), not {given:?}"),
            ));
        }
        Bytes::from_request(req, state)
            .await
            .map(JsonBody)
            .map_err(|e| ApiError::new(e.status(), framework_error(e.status(), &e.body_text())))
    }
}

/// The `Content-Type` a request gives when it is not JSON
/// (`application/json`, with parameters, or `application/<x>+json`).
fn not_json(headers: &HeaderMap) -> Option<String> {
    let given = headers.get(header::CONTENT_TYPE)?;
    let text = given.to_str().unwrap_or("").to_ascii_lowercase();
    let essence = text.split(';').next().unwrap_or("").trim();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    (!json).then(|| String::from_utf8_lossy(given.as_bytes()).into_owned())
}
