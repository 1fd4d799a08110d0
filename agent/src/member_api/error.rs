//! The one error type of the member HTTP surface, answered as a Kubernetes `Status` body with
//! the matching code; server-side failures are logged once here with their error chain.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use flotilla_member::RuntimeError;

/// Why a member API request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed request.
    #[error("{0}")]
    BadRequest(String),
    /// No such member or object.
    #[error("{0}")]
    NotFound(String),
    /// The agent is shutting down.
    #[error("the member is shutting down")]
    ShuttingDown,
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl ApiError {
    fn code_and_reason(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) | ApiError::Runtime(RuntimeError::Invalid(_)) => {
                (StatusCode::BAD_REQUEST, "BadRequest")
            }
            ApiError::NotFound(_) | ApiError::Runtime(RuntimeError::NotFound(_)) => {
                (StatusCode::NOT_FOUND, "NotFound")
            }
            ApiError::Runtime(RuntimeError::Unsupported(_)) => {
                (StatusCode::NOT_IMPLEMENTED, "NotImplemented")
            }
            ApiError::Runtime(RuntimeError::Conflict(_)) => (StatusCode::CONFLICT, "Conflict"),
            ApiError::Runtime(RuntimeError::Api { .. }) => (StatusCode::BAD_GATEWAY, "BadGateway"),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
            ApiError::Runtime(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, reason) = self.code_and_reason();
        if code.is_server_error() && code != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(error = %flotilla_support::error_chain(&self), "member API request failed");
        }
        let body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": flotilla_support::error_chain(&self),
            "reason": reason,
            "code": code.as_u16(),
        });
        (code, Json(body)).into_response()
    }
}
