//! Resource paths, segment by segment: the raw path is split on `/` first and each segment is
//! percent-decoded on its own, so `%2F` stays inside one segment and can never turn an object
//! path into a collection path. An empty segment, a segment that is not UTF-8, and a name or
//! namespace that no object could have are refused here, before any route is chosen.

use crate::api::error::ApiError;
use percent_encoding::percent_decode_str;

/// The decoded segments of the path after a prefix (`/api/` or `/apis/`).
///
/// `raw` is the undecoded rest of the path. One trailing `/` is allowed only where nothing
/// follows a discovery path (`/apis/`, `/api/v1/`); any other empty segment is a 404, since
/// dropping it would address a different resource (`configmaps//` is not `configmaps`).
pub fn segments(raw: &str, full_path: &str) -> Result<Vec<String>, ApiError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    let mut parts: Vec<&str> = raw.split('/').collect();
    if parts.last() == Some(&"") {
        parts.pop();
    }
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        if part.is_empty() {
            return Err(ApiError::no_route(full_path));
        }
        let decoded = percent_decode_str(part).decode_utf8().map_err(|_| {
            ApiError::BadRequest(format!(
                "the path segment {part:?} is not valid UTF-8 once percent-decoded"
            ))
        })?;
        out.push(decoded.into_owned());
    }
    Ok(out)
}

/// Whether a trailing `/` was given after a path that addresses a resource (a collection,
/// an object or a subresource): such a path is refused (404).
pub fn has_trailing_slash(raw: &str) -> bool {
    raw.ends_with('/')
}

/// Checks an object name taken from the path, as Kubernetes' `IsValidPathSegmentName`: not
/// empty, not `.` or `..`, and no `/` or `%` in it (they would read as other paths).
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let bad = if name.is_empty() {
        Some("may not be empty")
    } else if name == "." || name == ".." {
        Some("may not be '.' or '..'")
    } else if name.contains('/') {
        Some("may not contain '/'")
    } else if name.contains('%') {
        Some("may not contain '%'")
    } else if name.chars().any(char::is_control) {
        Some("may not contain control characters")
    } else {
        None
    };
    match bad {
        Some(why) => Err(ApiError::BadRequest(format!(
            "metadata.name: Invalid value: {name:?}: {why}"
        ))),
        None => Ok(()),
    }
}

/// Checks a namespace taken from the path: a DNS-1123 label, as every namespace name is.
pub fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    match flotilla_api::names::dns1123_label(namespace).first() {
        Some(why) => Err(ApiError::BadRequest(format!(
            "metadata.namespace: Invalid value: {namespace:?}: {why}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_decode_one_by_one() {
        let table: [(&str, Option<&[&str]>); 9] = [
            ("", Some(&[])),
            ("v1", Some(&["v1"])),
            ("v1/", Some(&["v1"])),
            (
                "v1/namespaces/default/configmaps/a",
                Some(&["v1", "namespaces", "default", "configmaps", "a"]),
            ),
            // `%2F` stays one segment: it is a name, never an extra separator.
            (
                "v1/namespaces/default/configmaps/%2F",
                Some(&["v1", "namespaces", "default", "configmaps", "/"]),
            ),
            (
                "v1/namespaces/default/configmaps/a%20b",
                Some(&["v1", "namespaces", "default", "configmaps", "a b"]),
            ),
            ("v1/namespaces/default/configmaps//", None),
            ("v1//configmaps", None),
            ("v1/namespaces/default/configmaps/%FF", None),
        ];
        for (raw, want) in table {
            let got = segments(raw, raw).ok();
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{raw:?}");
        }
    }

    #[test]
    fn names_and_namespaces_that_no_object_has_are_refused() {
        for good in ["a", "nginx-1", "a.b", "system:admin", "A_b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "/", "a/b", "a%b", "a\u{0}"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_namespace("default").is_ok());
        for bad in ["", "/", "Default", "a.b", "-a"] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
        }
    }
}
