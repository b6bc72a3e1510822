//! The error answer of every route ([`ApiError`]): a status a client can act
//! on and a JSON body, `{"error": "..."}` plus `"parameter"` when one query
//! parameter is at fault (docs/http-api.md); how each [`ReadError`] maps to a
//! status; and `Retry-After` on a 503.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::reader::{BadParam, ReadError};

/// An error answer: its status and a JSON body.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    status: StatusCode,
    pub(super) body: ErrorBody,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct ErrorBody {
    pub(super) error: String,
    /// The query parameter at fault, as the client spelled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    parameter: Option<String>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, error: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: error.into(),
                parameter: None,
            },
        }
    }
}

impl From<BadParam> for ApiError {
    fn from(e: BadParam) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            body: ErrorBody {
                error: e.message,
                parameter: Some(e.param),
            },
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> ApiError {
        let status = match e {
            ReadError::BadRequest(bad) => return bad.into(),
            ReadError::UnknownBoard(_)
            | ReadError::UnknownView { .. }
            | ReadError::MemberNotFound { .. }
            | ReadError::NoEvents { .. } => StatusCode::NOT_FOUND,
            ReadError::NotReady => StatusCode::SERVICE_UNAVAILABLE,
            ReadError::Store(ref store) => {
                tracing::warn!(error = %store, "A board read failed in Redis; answering 503.");
                StatusCode::SERVICE_UNAVAILABLE
            }
            ReadError::Archive(ref archive) if archive.is_retriable() => {
                tracing::warn!(error = %archive, "A read of an archived period failed; answering 503.");
                StatusCode::SERVICE_UNAVAILABLE
            }
            ReadError::Archive(ref archive) => {
                tracing::error!(error = %archive, "The archive refused a read; answering 500.");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        // A 503 here is temporary (Redis not reached yet, or an outage of
        // Redis or the archive):
        // tell well-behaved clients when to come back rather than hammer.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
