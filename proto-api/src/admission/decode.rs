//! Decoding JSON into typed objects with errors that name the field at fault. JSON `null` in
//! an object means "absent" (as Go's decoder treats it): when the value does not decode as it
//! is, null keys are dropped and it is decoded again (a first attempt as-is keeps the nulls of
//! raw JSON parts such as Work manifests). serde reports where decoding stopped as a column in the JSON text; the text is
//! scanned up to that column to rebuild the path (`spec.placement.spreadConstraints[0]`).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validation::{FieldError, Path};

/// Removes object keys whose value is null, at every depth (array elements are kept).
pub(crate) fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Decodes the object `value` as `T`, treating null fields as absent. Unknown fields are
/// ignored.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    if !value.is_object() {
        return Err(FieldError::invalid(
            &Path::new(""),
            "",
            "the object must be a JSON object",
        ));
    }
    if let Ok(typed) = serde_json::from_value(value.clone()) {
        return Ok(typed);
    }
    let text = strip_nulls(value).to_string();
    serde_json::from_str(&text).map_err(|e| decode_error(&text, &e))
}

enum Frame {
    Object {
        key: Option<String>,
        expect_key: bool,
    },
    Array {
        index: usize,
    },
}

/// The path of the value being read at byte `offset` of the compact JSON `text`.
fn path_at(text: &str, offset: usize) -> Path {
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b':' => {
                if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b'"' => {
                let mut j = i + 1;
                let mut escaped = false;
                while j < bytes.len() {
                    match bytes[j] {
                        _ if escaped => escaped = false,
                        b'\\' => escaped = true,
                        b'"' => break,
                        _ => {}
                    }
                    j += 1;
                }
                if let Some(Frame::Object {
                    key,
                    expect_key: true,
                }) = stack.last_mut()
                {
                    let raw = text.get(i..=j).unwrap_or_default();
                    *key = Some(serde_json::from_str(raw).unwrap_or_default());
                }
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    stack.iter().fold(Path::new(""), |p, f| match f {
        Frame::Object { key: Some(k), .. } => p.child(k),
        Frame::Object { key: None, .. } => p,
        Frame::Array { index } => p.index(*index),
    })
}

/// Text between the first pair of backticks after `from`.
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

fn decode_error(text: &str, err: &serde_json::Error) -> FieldError {
    let path = path_at(text, err.column());
    let full = err.to_string();
    let msg = full
        .rfind(" at line ")
        .map_or(full.as_str(), |i| &full[..i]);
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return FieldError::required(&path.child(field), "Required value");
    }
    if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let (variant, expected) = rest.split_once(", expected").unwrap_or((rest, ""));
        let variant = variant.trim_matches('`');
        return FieldError::not_supported(&path, variant, &backticked(expected));
    }
    FieldError::invalid(&path, "", msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PropagationPolicy;
    use crate::validation::FieldErrorKind;
    use serde_json::json;

    #[test]
    fn path_scanner_table() {
        let text = r#"{"a":{"b":[1,{"c":"x\"y"},3]},"d":2}"#;
        let at = |needle: &str| text.find(needle).unwrap() + needle.len();
        assert_eq!(path_at(text, at(r#""a":"#)).as_str(), "a");
        assert_eq!(path_at(text, at("[1")).as_str(), "a.b[0]");
        assert_eq!(path_at(text, at(r#""c":"#)).as_str(), "a.b[1].c");
        assert_eq!(path_at(text, at(r#"y""#)).as_str(), "a.b[1].c");
        assert_eq!(path_at(text, at("},3")).as_str(), "a.b[2]");
        assert_eq!(path_at(text, at(r#""d":"#)).as_str(), "d");
        assert_eq!(path_at(text, 0).as_str(), "");
    }

    #[test]
    fn decode_errors_name_the_field() {
        let cases = [
            (
                json!({"spec": {"placement": {"spreadConstraints": [{}, {"maxGroups": "two"}]}}}),
                "spec.placement.spreadConstraints[1].maxGroups",
                FieldErrorKind::Invalid,
                "invalid type",
            ),
            (
                json!({"spec": {"failover": {"application": {"purgeMode": "Soon"}}}}),
                "spec.failover.application.purgeMode",
                FieldErrorKind::NotSupported,
                "\"Immediately\", \"Directly\", \"Graciously\", \"Gracefully\", \"Never\"",
            ),
            (
                json!({"spec": {"placement": {"clusterTolerations": [{"operator": "Maybe"}]}}}),
                "spec.placement.clusterTolerations[0].operator",
                FieldErrorKind::NotSupported,
                "Unsupported value: \"Maybe\"",
            ),
            (
                json!({"spec": {"placement": {"clusterAffinity": {"fieldSelector": {
                    "matchExpressions": [{"key": "region", "values": ["a"]}]}}}}}),
                "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].operator",
                FieldErrorKind::Required,
                "Required value",
            ),
            (
                json!({"metadata": {"labels": {"a": 1}}}),
                "metadata.labels.a",
                FieldErrorKind::Invalid,
                "expected a string",
            ),
            (
                json!([]),
                "",
                FieldErrorKind::Invalid,
                "must be a JSON object",
            ),
        ];
        for (value, path, kind, msg) in cases {
            let err = decode::<PropagationPolicy>(&value).expect_err(path);
            assert_eq!(err.path, path, "{err:?}");
            assert_eq!(err.kind, kind, "{err:?}");
            assert!(err.message.contains(msg), "{err:?}");
        }
    }

    #[test]
    fn nulls_mean_absent() {
        let pp: PropagationPolicy = decode(&json!({
            "metadata": {"name": "a", "labels": null, "creationTimestamp": null},
            "spec": {"resourceSelectors": null, "placement": {"clusterTolerations": null},
                     "failover": null}
        }))
        .unwrap();
        assert_eq!(pp.metadata.name, "a");
        assert!(pp.spec.failover.is_none());
    }
}
