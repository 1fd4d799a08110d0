//! Request-level protections that sit in front of every handler: a declared `Content-Length`
//! over the body limit is answered 413 before any of the body is read, a body that does not
//! arrive within the body read timeout ends its request with 408, every error answer,
//! whoever made it (routing, an extractor, a handler), leaves as a Kubernetes `Status`, and
//! [`within_deadline`] ends a request that outlives the request timeout with 504.

use crate::api::error::{ApiError, ApiResult};
use axum::body::{Body, BodyDataStream};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The limits this middleware enforces.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Time a request body has to arrive, from the first read of it.
    pub body_read_timeout: Duration,
}

/// A request body that did not arrive in time.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("the request body did not arrive within {}s", timeout.as_secs_f64())]
pub struct BodyStalled {
    /// The body read timeout.
    pub timeout: Duration,
}

/// What the declared length of a request says about it.
#[derive(Debug, PartialEq, Eq)]
pub enum Declared {
    /// No body, or one within the limit (or of unknown length).
    Acceptable,
    /// A declared length over the limit.
    TooLarge(u64),
    /// A `Content-Length` that is not a number.
    Malformed,
}

/// Judges a request's `Content-Length` against the limit.
pub fn declared_length(headers: &HeaderMap, limit: usize) -> Declared {
    let Some(value) = headers.get(header::CONTENT_LENGTH) else {
        return Declared::Acceptable;
    };
    match value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        Some(n) if n > u64::try_from(limit).unwrap_or(u64::MAX) => Declared::TooLarge(n),
        Some(_) => Declared::Acceptable,
        None => Declared::Malformed,
    }
}

fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

/// Middleware: 413 at once for a declared body over the limit, and a read deadline on the
/// body of every other request that has one.
pub async fn guard_body(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    match declared_length(req.headers(), limits.max_body_bytes) {
        Declared::TooLarge(n) => {
            tracing::debug!(
                declared_bytes = n,
                limit_bytes = limits.max_body_bytes,
                "refusing a request body before reading it"
            );
            return ApiError::TooLarge(format!(
                "the request body is larger than the limit of {} bytes (Content-Length: {n})",
                limits.max_body_bytes
            ))
            .into_response();
        }
        Declared::Malformed => {
            return ApiError::BadRequest("the Content-Length header is not a number".into())
                .into_response()
        }
        Declared::Acceptable => {}
    }
    if !has_body(req.headers()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let body = Body::from_stream(Deadline {
        inner: body.into_data_stream(),
        timeout: limits.body_read_timeout,
        sleep: None,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// A body stream that fails with [`BodyStalled`] once its deadline passes.
struct Deadline {
    inner: BodyDataStream,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for Deadline {
    type Item = Result<Bytes, axum::BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(item) = Pin::new(&mut self.inner).poll_next(cx) {
            return Poll::Ready(item.map(|r| r.map_err(Into::into)));
        }
        let timeout = self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled { timeout })))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs a request's `work` under the request timeout: past `timeout` the work is dropped and
/// the answer is a 504 `Status`. Every non-watch resource request runs under it, stored kinds
/// and computed ones alike (`resources::serve`). Work is dropped only where it awaits, so a
/// CPU-bound step runs on a blocking thread (the failover dry-run, explain's scheduler run,
/// large bodies' decoding): the deadline then fires on time and the worker stays free.
pub async fn within_deadline<T>(
    timeout: Duration,
    work: impl Future<Output = ApiResult<T>>,
) -> ApiResult<T> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(ApiError::Timeout(format!(
            "the request did not finish within {}s",
            timeout.as_secs_f64()
        ))),
    }
}

/// Middleware: an error answer without a JSON or YAML body (axum's 405 for a wrong method,
/// its plain-text 400 for a path or query it cannot decode, a handler's plain text) becomes
/// a `Status` with the same code; its text, if any, is the message.
pub async fn status_bodies(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_encoded(response.headers()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let mut answer =
        ApiError::with_code(status, message_for(status, &method, &path, &text)).into_response();
    for name in [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE] {
        if let Some(v) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, v.clone());
        }
    }
    answer
}

fn is_encoded(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.split(';').next().unwrap_or("").trim();
            ct == "application/json" || ct == "application/yaml"
        })
}

/// The message of a `Status` made from a bare error answer.
pub fn message_for(status: StatusCode, method: &Method, path: &str, text: &str) -> String {
    if status == StatusCode::METHOD_NOT_ALLOWED {
        return format!(
            "the server does not allow this method on the requested resource ({method} {path})"
        );
    }
    if text.is_empty() {
        let reason = status.canonical_reason().unwrap_or("error");
        return format!("{reason} ({method} {path})");
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn judges_declared_lengths() {
        let table = [
            (None, Declared::Acceptable),
            (Some("10"), Declared::Acceptable),
            (Some("100"), Declared::Acceptable),
            (Some("101"), Declared::TooLarge(101)),
            (Some("99999999999999999999"), Declared::Malformed),
            (Some("ten"), Declared::Malformed),
        ];
        for (value, want) in table {
            let mut h = HeaderMap::new();
            if let Some(v) = value {
                h.insert(header::CONTENT_LENGTH, HeaderValue::from_static(v));
            }
            assert_eq!(declared_length(&h, 100), want, "{value:?}");
        }
    }

    #[test]
    fn words_messages_of_bare_answers() {
        let table = [
            (
                StatusCode::METHOD_NOT_ALLOWED,
                "",
                "the server does not allow this method on the requested resource (POST /healthz)",
            ),
            (StatusCode::BAD_REQUEST, "", "Bad Request (POST /healthz)"),
            (
                StatusCode::BAD_REQUEST,
                "Invalid URL: bad UTF-8",
                "Invalid URL: bad UTF-8",
            ),
        ];
        for (status, text, want) in table {
            assert_eq!(message_for(status, &Method::POST, "/healthz", text), want);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_after_the_timeout() {
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let body = Body::from_stream(Deadline {
            inner: Body::from_stream(stream).into_data_stream(),
            timeout: Duration::from_secs(5),
            sleep: None,
        });
        let err = axum::body::to_bytes(body, 1024).await.unwrap_err();
        assert!(flotilla_support::error_chain(&err).contains("did not arrive within 5s"));
    }
}
