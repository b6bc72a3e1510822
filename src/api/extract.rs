//! The request's query string and path segments ([`QueryPairs`],
//! [`Segments`]): axum's own extractors answer a malformed one in plain text,
//! these answer it with a JSON 400 ([`ApiError`]) like every other error.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

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
