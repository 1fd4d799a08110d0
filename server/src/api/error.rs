//! The API's one error type. Every internal error is mapped here, once, to an HTTP status and
//! a Kubernetes `Status` body naming what is at fault; 5xx answers are logged here with their
//! full error chain.

use crate::store::StoreError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flotilla_support::error_chain;
use serde_json::{json, Value};

/// One field-level cause of a 422.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// Kubernetes cause reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// JSON path of the field, e.g. `spec.placement.spreadConstraints[0].maxGroups`.
    pub field: String,
}

/// An API failure.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request cannot be understood.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no or invalid credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403: the caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such object or path.
    #[error("{message}")]
    NotFound {
        message: String,
        name: Option<String>,
        group: String,
        kind: String,
    },
    /// 405: the verb is not supported on this path.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 406: cannot answer in an accepted media type.
    #[error("{0}")]
    NotAcceptable(String),
    /// 409: already exists.
    #[error("{message}")]
    AlreadyExists {
        message: String,
        name: String,
        group: String,
        kind: String,
    },
    /// 409: conflicting write.
    #[error("{message}")]
    Conflict {
        message: String,
        name: String,
        group: String,
        kind: String,
    },
    /// 410: watch too old.
    #[error("{0}")]
    Gone(String),
    /// 413: body too large.
    #[error("{0}")]
    TooLarge(String),
    /// 415: unsupported media type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: the object is invalid.
    #[error("{message}")]
    Invalid {
        message: String,
        name: String,
        group: String,
        kind: String,
        causes: Vec<Cause>,
    },
    /// 408: the client did not send its request in time.
    #[error("{0}")]
    RequestTimeout(String),
    /// 504: the request took too long.
    #[error("{0}")]
    Timeout(String),
    /// Any other status, for answers made outside the handlers (routing, extractors, the
    /// HTTP layer) that reach the Status middleware with no Status body.
    #[error("{message}")]
    Other { code: StatusCode, message: String },
    /// 503: not ready yet or shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// 500: a failure of the server itself.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Other { code, .. } => *code,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The Kubernetes `reason` of this error.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Gone(_) => "Expired",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::RequestTimeout(_) | ApiError::Timeout(_) => "Timeout",
            ApiError::Other { code, .. } => reason_of(*code),
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::Internal(_) => "InternalError",
        }
    }

    /// An error answer with this code, its message saying what went wrong.
    pub fn with_code(code: StatusCode, message: impl Into<String>) -> Self {
        ApiError::Other {
            code,
            message: message.into(),
        }
    }

    /// A 404 for a missing path or kind.
    pub fn no_route(path: &str) -> Self {
        ApiError::NotFound {
            message: format!("the server could not find the requested resource ({path})"),
            name: None,
            group: String::new(),
            kind: String::new(),
        }
    }

    /// A 422 built from field causes.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let detail = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        ApiError::Invalid {
            message: format!("{kind} \"{name}\" is invalid: {detail}"),
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
        }
    }

    /// The `Status` object Kubernetes clients expect.
    pub fn to_status(&self) -> Value {
        let message = match self {
            ApiError::Internal(_) => "an internal error occurred; see the server log".to_string(),
            other => other.to_string(),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": self.reason(),
            "code": self.status().as_u16(),
        });
        if self.reason().is_empty() {
            if let Some(map) = status.as_object_mut() {
                map.remove("reason");
            }
        }
        let details = match self {
            ApiError::NotFound {
                name, group, kind, ..
            } if !kind.is_empty() => Some(json!({"name": name, "group": group, "kind": kind})),
            ApiError::AlreadyExists {
                name, group, kind, ..
            }
            | ApiError::Conflict {
                name, group, kind, ..
            } => Some(json!({"name": name, "group": group, "kind": kind})),
            ApiError::Invalid {
                name,
                group,
                kind,
                causes,
                ..
            } => Some(json!({
                "name": name,
                "group": group,
                "kind": kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.reason, "message": c.message, "field": c.field,
                })).collect::<Vec<_>>(),
            })),
            _ => None,
        };
        if let Some(d) = details {
            status["details"] = d;
        }
        status
    }

    /// Maps a store error for an object of `kind` in `group`.
    pub fn from_store(err: StoreError, group: &str, kind: &str) -> Self {
        match err {
            StoreError::NotFound { resource, name } => ApiError::NotFound {
                message: format!("{resource} \"{name}\" not found"),
                name: Some(name),
                group: group.to_string(),
                kind: kind.to_string(),
            },
            StoreError::AlreadyExists { resource, name } => ApiError::AlreadyExists {
                message: format!("{resource} \"{name}\" already exists"),
                name,
                group: group.to_string(),
                kind: kind.to_string(),
            },
            e @ StoreError::Conflict { .. } => {
                let name = match &e {
                    StoreError::Conflict { name, .. } => name.clone(),
                    _ => String::new(),
                };
                ApiError::Conflict {
                    message: e.to_string(),
                    name,
                    group: group.to_string(),
                    kind: kind.to_string(),
                }
            }
            e @ StoreError::Expired { .. } => ApiError::Gone(e.to_string()),
            StoreError::Invalid { field, message } => ApiError::invalid(
                kind,
                group,
                "",
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message,
                    field,
                }],
            ),
            e @ StoreError::Fenced { .. } => ApiError::Unavailable(e.to_string()),
            StoreError::Engine(e)
                if matches!(
                    e.downcast_ref::<crate::store::EngineError>(),
                    Some(crate::store::EngineError::Etcd { .. })
                ) =>
            {
                // etcd down or without quorum: nothing was acknowledged; try again later.
                ApiError::Unavailable(format!(
                    "the store is unavailable: {}",
                    flotilla_support::error_chain(e.as_ref())
                ))
            }
            e @ (StoreError::Schema(_) | StoreError::Engine(_)) => ApiError::Internal(Box::new(e)),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ApiError::from_store(err, "", "")
    }
}

/// The Kubernetes `reason` for a status code (empty when Kubernetes has none).
pub fn reason_of(code: StatusCode) -> &'static str {
    match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        408 | 504 => "Timeout",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = status.as_u16(), error = %error_chain(&self), "request failed");
        }
        let body = self.to_status();
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// The answer to a request whose handler panicked: a 500 `Status`. The panic itself is logged
/// by the process's panic hook (once), not here.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic without a message".into());
    let err = ApiError::Internal(format!("a request handler panicked: {detail}").into());
    (
        err.status(),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        err.to_status().to_string(),
    )
        .into_response()
}

/// Result of API handlers.
pub type ApiResult<T> = Result<T, ApiError>;
