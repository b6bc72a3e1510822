//! The error answer of every route ([`ApiError`]): a status a client can act
//! on and a JSON body, `{"error": "..."}` plus `"parameter"` when one query
//! parameter is at fault (docs/http-api.md); how each [`ReadError`] maps to a
//! status; and `Retry-After` on a 503.
//!
//! The body is for an anonymous client: it says what is wrong in a
//! sentence. A failure of Redis or the archive is described, not quoted:
//! the driver's text and the server's address go to the log only.
//! [`json_errors`] gives an error the framework answered in plain text (a
//! body over the limit, an extractor's rejection) the same JSON shape.

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::params::MAX_BODY_BYTES;
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
        let (status, says) = match e {
            ReadError::BadRequest(bad) => return bad.into(),
            ReadError::UnknownBoard(_)
            | ReadError::UnknownView { .. }
            | ReadError::MemberNotFound { .. }
            | ReadError::NoEvents { .. } => (StatusCode::NOT_FOUND, e.to_string()),
            ReadError::NotReady => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            ReadError::Store(ref store) => {
                tracing::warn!(error = %store, "A board read failed in Redis; answering 503.");
                (StatusCode::SERVICE_UNAVAILABLE, REDIS_FAILED.to_string())
            }
            ReadError::Archive(ref archive) if archive.is_retriable() => {
                tracing::warn!(error = %archive, "A read of an archived period failed; answering 503.");
                (StatusCode::SERVICE_UNAVAILABLE, ARCHIVE_FAILED.to_string())
            }
            ReadError::Archive(ref archive) => {
                tracing::error!(error = %archive, "The archive refused a read; answering 500.");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ARCHIVE_REFUSED.to_string(),
                )
            }
        };
        ApiError::new(status, says)
    }
}

/// The 503 of a read Redis failed (the log has Redis's error).
const REDIS_FAILED: &str = "Redis did not answer this read; try again shortly";
/// The 503 of a read of an archived period PostgreSQL failed.
const ARCHIVE_FAILED: &str =
    "the archive did not answer this read of a past period; try again shortly";
/// The 500 of a read the archive refused: retrying will not help.
const ARCHIVE_REFUSED: &str =
    "the archive refused this read of a past period; the server's log says why";

/// The sentence for an error the framework answered itself, from its
/// status and its plain-text message.
pub(super) fn framework_error(status: StatusCode, text: &str) -> String {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "the request body is larger than {} KiB; send at most {MAX_BODY_BYTES} bytes",
            MAX_BODY_BYTES / 1024
        ),
        _ if text.trim().is_empty() => status
            .canonical_reason()
            .unwrap_or("the request cannot be served")
            .to_string(),
        _ => text.trim().to_string(),
    }
}

/// Gives a 4xx or 5xx response that is not JSON (the framework's plain-text
/// rejections) the API's JSON error shape, keeping its status and headers;
/// every other response passes unchanged.
pub(super) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // The framework's messages are one line; more is not a message.
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let error = ErrorBody {
        error: framework_error(status, &String::from_utf8_lossy(&text)),
        parameter: None,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::to_vec(&error).unwrap_or_default();
    Response::from_parts(parts, Body::from(body))
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn text_of(response: Response) -> (StatusCode, String, String) {
        let status = response.status();
        let ctype = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, ctype, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_plain_text_error_of_the_framework_becomes_json() {
        let plain = (
            StatusCode::PAYLOAD_TOO_LARGE,
            [("x-kept", "yes")],
            "Failed to buffer the request body: length limit exceeded",
        )
            .into_response();
        let mapped = json_errors(plain).await;
        assert_eq!(mapped.headers()["x-kept"], "yes");
        let (status, ctype, body) = text_of(mapped).await;
        assert_eq!(
            (status, ctype.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "application/json")
        );
        assert_eq!(
            body,
            r#"{"error":"the request body is larger than 64 KiB; send at most 65536 bytes"}"#
        );
        let plain = (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body",
        )
            .into_response();
        let (_, ctype, body) = text_of(json_errors(plain).await).await;
        assert_eq!(ctype, "application/json");
        assert_eq!(body, r#"{"error":"Failed to deserialize the JSON body"}"#);
        let empty = StatusCode::METHOD_NOT_ALLOWED.into_response();
        let (_, _, body) = text_of(json_errors(empty).await).await;
        assert_eq!(body, r#"{"error":"Method Not Allowed"}"#);
    }

    #[tokio::test]
    async fn other_answers_pass_unchanged() {
        let ok = (StatusCode::OK, "# metrics").into_response();
        let (status, ctype, body) = text_of(json_errors(ok).await).await;
        assert_eq!(
            (status, ctype.as_str(), body.as_str()),
            (StatusCode::OK, "text/plain; charset=utf-8", "# metrics")
        );
        let api = ApiError::new(StatusCode::NOT_FOUND, "no board named \"x\"").into_response();
        let (status, _, body) = text_of(json_errors(api).await).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::NOT_FOUND, r#"{"error":"no board named \"x\""}"#)
        );
    }

    #[test]
    fn a_failed_read_is_described_not_quoted() {
        let e = ApiError::from(ReadError::Store(crate::sink::store::StoreError::Config(
            "redis://10.0.0.7:6379: Connection refused (os error 111)".into(),
        )));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.body.error, REDIS_FAILED);
    }
}
