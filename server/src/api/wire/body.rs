//! Request bodies in and response bodies out: size limit (413), read deadline (408), nesting
//! limit (400, see [`super::nesting`]), JSON or YAML by Content-Type (415 otherwise), JSON or
//! YAML by Accept (406 when neither is acceptable).

use crate::api::error::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Media type of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    /// JSON (also the JSON-based patch types).
    Json,
    /// YAML (also `application/apply-patch+yaml`, whose JSON form is valid YAML).
    Yaml,
}

/// The Content-Type of a request, without parameters.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Reads a whole body, refusing more than `limit` bytes (413) and a body that stalls past the
/// server's body read timeout (408, see [`crate::api::http::limits`]).
pub async fn read(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| read_error(&e, limit))
}

fn read_error(err: &axum::Error, limit: usize) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return ApiError::TooLarge(format!(
                "the request body is larger than the limit of {limit} bytes"
            ));
        }
        if let Some(stalled) = e.downcast_ref::<crate::api::http::limits::BodyStalled>() {
            return ApiError::RequestTimeout(stalled.to_string());
        }
        source = e.source();
    }
    ApiError::BadRequest(format!(
        "the request body could not be read: {}",
        flotilla_support::error_chain(err)
    ))
}

/// Parses a body of the given format into a JSON object. Bodies nested deeper than
/// [`super::nesting::MAX_DEPTH`] are refused before decoding, in time linear in their size.
pub fn parse(bytes: &[u8], format: BodyFormat) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest("the request body is empty".into()));
    }
    super::nesting::check(bytes, super::nesting::MAX_DEPTH)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let value: Value = match format {
        BodyFormat::Json => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?,
        BodyFormat::Yaml => serde_yaml_ng::from_slice(bytes)
            .map_err(|e| ApiError::BadRequest(format!("the body is not valid YAML: {e}")))?,
    };
    Ok(value)
}

/// Bodies at least this large are decoded on a blocking thread by [`parse_off_thread`].
pub const OFF_THREAD_BYTES: usize = 64 * 1024;

/// [`parse`] for async handlers: a large body is decoded on a blocking thread, so the
/// request deadline around the handler can fire and other requests keep their worker while
/// it decodes (a 3 MiB YAML body takes a good fraction of a second).
pub async fn parse_off_thread(bytes: bytes::Bytes, format: BodyFormat) -> Result<Value, ApiError> {
    if bytes.len() < OFF_THREAD_BYTES {
        return parse(&bytes, format);
    }
    tokio::task::spawn_blocking(move || parse(&bytes, format))
        .await
        .map_err(|e| ApiError::Internal(Box::new(e)))?
}

/// Reads and parses an object body (JSON or YAML, by Content-Type) of at most `limit` bytes.
pub async fn read_object(headers: &HeaderMap, body: Body, limit: usize) -> Result<Value, ApiError> {
    let format = object_format(&content_type(headers))?;
    let bytes = read(body, limit).await?;
    let value = parse_off_thread(bytes, format).await?;
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the request body must be a JSON or YAML object".into(),
        ));
    }
    Ok(value)
}

/// The body format for a create/update Content-Type (empty means JSON).
pub fn object_format(ct: &str) -> Result<BodyFormat, ApiError> {
    match ct {
        "" | "application/json" => Ok(BodyFormat::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(BodyFormat::Yaml),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml (got {other:?})"
        ))),
    }
}

/// How to encode an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json`
    Json,
    /// `application/yaml`
    Yaml,
}

/// Picks the answer encoding from an Accept header.
pub fn negotiate(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if accept.trim().is_empty() {
        return Ok(Encoding::Json);
    }
    for part in accept.split(',') {
        let media = part.split(';').next().unwrap_or("").trim();
        match media {
            "application/json" | "*/*" | "application/*" | "application/json-seq" => {
                return Ok(Encoding::Json)
            }
            "application/yaml" => return Ok(Encoding::Yaml),
            _ => {}
        }
    }
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
    )))
}

/// An answer with a status code, encoded as negotiated.
pub fn respond(status: StatusCode, value: &Value, encoding: Encoding) -> Response {
    match encoding {
        Encoding::Json => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response(),
        Encoding::Yaml => match serde_yaml_ng::to_string(value) {
            Ok(text) => {
                (status, [(header::CONTENT_TYPE, "application/yaml")], text).into_response()
            }
            Err(e) => ApiError::Internal(Box::new(e)).into_response(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn negotiates_json_yaml_or_406() {
        let table = [
            ("", Some(Encoding::Json)),
            (
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                Some(Encoding::Json),
            ),
            ("application/yaml", Some(Encoding::Yaml)),
            ("*/*", Some(Encoding::Json)),
            ("application/vnd.kubernetes.protobuf", None),
        ];
        for (accept, want) in table {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            assert_eq!(negotiate(&h).ok(), want, "{accept}");
        }
    }

    #[tokio::test]
    async fn parses_large_bodies_off_the_async_thread() {
        let big = format!("a: \"{}\"\n", "x".repeat(OFF_THREAD_BYTES));
        let v = parse_off_thread(big.into(), BodyFormat::Yaml)
            .await
            .unwrap();
        assert_eq!(v["a"].as_str().map(str::len), Some(OFF_THREAD_BYTES));
        let deep = format!(
            "{}{}",
            "[".repeat(OFF_THREAD_BYTES),
            "]".repeat(OFF_THREAD_BYTES)
        );
        assert!(matches!(
            parse_off_thread(deep.into(), BodyFormat::Json).await,
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            parse_off_thread("{}".into(), BodyFormat::Json).await,
            Ok(Value::Object(_))
        ));
    }

    #[test]
    fn parses_json_and_yaml_and_rejects_garbage() {
        assert_eq!(parse(b"{\"a\":1}", BodyFormat::Json).unwrap()["a"], 1);
        assert_eq!(parse(b"a: 1\n", BodyFormat::Yaml).unwrap()["a"], 1);
        assert!(matches!(
            parse(b"{", BodyFormat::Json),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            parse(b"  ", BodyFormat::Json),
            Err(ApiError::BadRequest(_))
        ));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for format in [BodyFormat::Json, BodyFormat::Yaml] {
            match parse(deep.as_bytes(), format) {
                Err(ApiError::BadRequest(m)) => {
                    assert!(m.contains("nested deeper than 128"), "{m}")
                }
                other => panic!("{format:?}: {other:?}"),
            }
        }
        assert!(matches!(
            object_format("text/plain"),
            Err(ApiError::UnsupportedMediaType(_))
        ));
    }
}
