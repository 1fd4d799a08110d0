//! Pure helpers over object JSON: reading and checking `metadata`, storage keys, timestamps,
//! and the comparisons the update rules need. No I/O, no locks.

use super::StoreError;
use chrono::{DateTime, SecondsFormat, Utc};
use flotilla_api::kinds::ResourceType;
use serde_json::{Map, Value};

/// Finalizer that holds an owner until its dependents are gone (foreground deletion).
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Longest accepted name or namespace.
const MAX_NAME_LEN: usize = 253;

/// Alphabet of `generateName` suffixes (Kubernetes': no vowels, no confusable digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Length of a `generateName` suffix.
const SUFFIX_LEN: usize = 5;

pub(crate) fn invalid(field: &str, message: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}

/// A time as Kubernetes writes it: RFC 3339, whole seconds, `Z`.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The object's top-level map, or Invalid.
pub(crate) fn object_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    obj.as_object_mut()
        .ok_or_else(|| invalid("", "an object must be a JSON object"))
}

/// `metadata`, created when missing; Invalid when it is not a map.
pub(crate) fn metadata_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    let map = object_mut(obj)?;
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()
        .ok_or_else(|| invalid("metadata", "must be an object"))
}

/// A string field of `metadata` (absent, null and non-strings read as `None`).
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.name`, `None` when absent or empty.
pub(crate) fn name(obj: &Value) -> Option<&str> {
    meta_str(obj, "name").filter(|s| !s.is_empty())
}

/// `metadata.namespace`, `None` when absent or empty.
pub(crate) fn namespace(obj: &Value) -> Option<&str> {
    meta_str(obj, "namespace").filter(|s| !s.is_empty())
}

/// `metadata.uid`, `None` when absent or empty.
pub(crate) fn uid(obj: &Value) -> Option<&str> {
    meta_str(obj, "uid").filter(|s| !s.is_empty())
}

/// `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some_and(|s| !s.is_empty())
}

/// `metadata.resourceVersion` as a number: `Ok(None)` when absent or empty.
pub(crate) fn resource_version(obj: &Value) -> Result<Option<u64>, StoreError> {
    match meta_str(obj, "resourceVersion") {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            invalid(
                "metadata.resourceVersion",
                format!("{text:?} is not a resourceVersion of this store"),
            )
        }),
    }
}

/// `metadata.finalizers` (non-strings are skipped; [`validate_metadata`] rejects them).
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces `metadata.finalizers` (removes the field when empty).
pub(crate) fn set_finalizers(obj: &mut Value, list: &[String]) -> Result<(), StoreError> {
    let meta = metadata_mut(obj)?;
    if list.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert(
            "finalizers".to_string(),
            Value::Array(list.iter().cloned().map(Value::String).collect()),
        );
    }
    Ok(())
}

/// The uids of `metadata.ownerReferences`.
pub(crate) fn owner_uids(obj: &Value) -> Vec<String> {
    owner_uids_of_metadata(obj.get("metadata"))
}

/// The uids of the owner references of a `metadata` map.
pub(crate) fn owner_uids_of_metadata(meta: Option<&Value>) -> Vec<String> {
    let mut uids: Vec<String> = meta
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid")?.as_str())
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    uids.sort();
    uids.dedup();
    uids
}

/// Removes every owner reference to `owner_uid`; true when one was removed.
pub(crate) fn remove_owner_reference(obj: &mut Value, owner_uid: &str) -> Result<bool, StoreError> {
    let meta = metadata_mut(obj)?;
    let Some(refs) = meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return Ok(false);
    };
    let before = refs.len();
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
    let removed = refs.len() != before;
    if refs.is_empty() {
        meta.remove("ownerReferences");
    }
    Ok(removed)
}

/// Sets or removes one `metadata` field.
pub(crate) fn set_meta(
    obj: &mut Value,
    field: &str,
    value: Option<Value>,
) -> Result<(), StoreError> {
    let meta = metadata_mut(obj)?;
    match value {
        Some(v) => {
            meta.insert(field.to_string(), v);
        }
        None => {
            meta.remove(field);
        }
    }
    Ok(())
}

/// Copies one `metadata` field from `from` (removing it when `from` lacks it).
pub(crate) fn keep_meta(obj: &mut Value, from: &Value, field: &str) -> Result<(), StoreError> {
    let value = from.get("metadata").and_then(|m| m.get(field)).cloned();
    set_meta(obj, field, value)
}

/// `metadata.generation` (0 when absent).
pub(crate) fn generation(obj: &Value) -> i64 {
    obj.get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Copies `status` from `from` (removing it when `from` has none).
pub(crate) fn keep_status(obj: &mut Value, from: &Value) -> Result<(), StoreError> {
    let status = from.get("status").cloned();
    let map = object_mut(obj)?;
    match status {
        Some(s) => {
            map.insert("status".to_string(), s);
        }
        None => {
            map.remove("status");
        }
    }
    Ok(())
}

/// `stored` with the status of `from` (none when `from` has none): a status write. The
/// stored status, about to be replaced, is not copied.
pub(crate) fn with_status_of(stored: &Value, mut from: Value) -> Result<Value, StoreError> {
    let fields = stored
        .as_object()
        .ok_or_else(|| invalid("", "an object must be a JSON object"))?;
    // The usual request: the object as read, with a new status. Then it is the answer as it
    // is, and the stored object need not be copied.
    if same_but_status(fields, object_mut(&mut from)?) {
        return Ok(from);
    }
    let mut status = object_mut(&mut from)?.remove("status");
    let mut new = Map::with_capacity(fields.len() + 1);
    for (k, v) in fields {
        if k == "status" {
            if let Some(s) = status.take() {
                new.insert(k.clone(), s);
            }
        } else {
            new.insert(k.clone(), v.clone());
        }
    }
    if let Some(s) = status {
        // A status the stored object had none of goes last, as `keep_status` puts it.
        new.insert("status".to_string(), s);
    }
    Ok(Value::Object(new))
}

/// True when `request` holds the same fields as `stored` in the same order, outside `status`,
/// and its status (if any) is where the stored object's is (or last, when it had none).
fn same_but_status(stored: &Map<String, Value>, request: &Map<String, Value>) -> bool {
    let stored_fields = stored.iter().filter(|(k, _)| *k != "status");
    let request_fields = request.iter().filter(|(k, _)| *k != "status");
    if !stored_fields.eq(request_fields) {
        return false;
    }
    let position = |m: &Map<String, Value>| m.keys().position(|k| k == "status");
    match (position(stored), position(request)) {
        // The stored status is dropped: the answer is the stored object without it.
        (_, None) => true,
        (Some(a), Some(b)) => a == b,
        (None, Some(b)) => b + 1 == request.len(),
    }
}

/// True when the two objects are equal outside `metadata` and `status` (so `generation` stays).
pub(crate) fn same_outside_metadata_and_status(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let relevant = |k: &&String| k.as_str() != "metadata" && k.as_str() != "status";
    let a_count = a.keys().filter(relevant).count();
    let b_count = b.keys().filter(relevant).count();
    a_count == b_count
        && a.iter()
            .filter(|(k, _)| relevant(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Checks a name or namespace: it becomes part of a storage key and of a URL path.
pub(crate) fn validate_name(field: &str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() {
        return Err(invalid(field, "required"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(invalid(
            field,
            format!("longer than {MAX_NAME_LEN} characters"),
        ));
    }
    if value == "." || value == ".." {
        return Err(invalid(field, format!("may not be {value:?}")));
    }
    if let Some(c) = value
        .chars()
        .find(|c| matches!(c, '/' | '%') || c.is_control())
    {
        return Err(invalid(field, format!("may not contain {c:?}")));
    }
    Ok(())
}

/// Checks the shape of the `metadata` fields the store interprets.
pub(crate) fn validate_metadata(obj: &Value) -> Result<(), StoreError> {
    let Some(meta) = obj.get("metadata") else {
        return Ok(());
    };
    let Some(meta) = meta.as_object() else {
        return Err(invalid("metadata", "must be an object"));
    };
    for field in [
        "name",
        "namespace",
        "generateName",
        "resourceVersion",
        "uid",
    ] {
        if let Some(v) = meta.get(field) {
            if !v.is_string() && !v.is_null() {
                return Err(invalid(&format!("metadata.{field}"), "must be a string"));
            }
        }
    }
    for field in ["labels", "annotations"] {
        if let Some(v) = meta.get(field) {
            match v {
                Value::Null => {}
                Value::Object(map) => {
                    if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                        return Err(invalid(
                            &format!("metadata.{field}.{k}"),
                            "must be a string",
                        ));
                    }
                }
                _ => return Err(invalid(&format!("metadata.{field}"), "must be a map")),
            }
        }
    }
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            if let Some(i) = list
                .iter()
                .position(|f| f.as_str().is_none_or(str::is_empty))
            {
                return Err(invalid(
                    &format!("metadata.finalizers[{i}]"),
                    "must be a non-empty string",
                ));
            }
        }
        Some(_) => return Err(invalid("metadata.finalizers", "must be a list")),
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(refs)) => {
            for (i, r) in refs.iter().enumerate() {
                if !r.is_object() {
                    return Err(invalid(
                        &format!("metadata.ownerReferences[{i}]"),
                        "must be an object",
                    ));
                }
                if r.get("uid")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(invalid(
                        &format!("metadata.ownerReferences[{i}].uid"),
                        "required",
                    ));
                }
            }
        }
        Some(_) => return Err(invalid("metadata.ownerReferences", "must be a list")),
    }
    Ok(())
}

/// The storage key of an object: `namespace/name`, or `name` for cluster-scoped kinds.
pub(crate) fn object_key(
    res: &ResourceType,
    namespace: Option<&str>,
    name: &str,
) -> Result<String, StoreError> {
    validate_name("metadata.name", name)?;
    if !res.namespaced {
        return Ok(name.to_string());
    }
    let Some(ns) = namespace.filter(|n| !n.is_empty()) else {
        return Err(invalid(
            "metadata.namespace",
            format!("required for {}", res.qualified_name()),
        ));
    };
    validate_name("metadata.namespace", ns)?;
    Ok(format!("{ns}/{name}"))
}

/// The key prefix of one namespace's objects (empty: every object).
pub(crate) fn namespace_prefix(res: &ResourceType, namespace: Option<&str>) -> String {
    match namespace.filter(|n| res.namespaced && !n.is_empty()) {
        Some(ns) => format!("{ns}/"),
        None => String::new(),
    }
}

/// A random `generateName` suffix.
pub(crate) fn generated_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..SUFFIX_LEN)
        .map(|_| char::from(SUFFIX_ALPHABET[rng.gen_range(0..SUFFIX_ALPHABET.len())]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    #[test]
    fn with_status_of_takes_only_the_status() {
        let stored = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"old": true}});
        let table = [
            // (request, want)
            (
                json!({"metadata": {"name": "b"}, "spec": {"x": 2}, "status": {"new": true}}),
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"new": true}}),
            ),
            (
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
            ),
        ];
        for (i, (request, want)) in table.into_iter().enumerate() {
            let mut keep = stored.clone();
            keep_status(&mut keep, &request).unwrap();
            let got = with_status_of(&stored, request).unwrap();
            assert_eq!(got, want, "row {i}");
            assert_eq!(got, keep, "row {i}: as keep_status on a copy");
        }
        // The object as read with a new status is the answer as it is; a request whose fields
        // come in another order gets the stored object's order.
        let got = with_status_of(
            &stored,
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"new": true}}),
        )
        .unwrap();
        assert_eq!(
            got.to_string(),
            r#"{"metadata":{"name":"a"},"spec":{"x":1},"status":{"new":true}}"#
        );
        let got = with_status_of(
            &stored,
            json!({"status": {"new": true}, "spec": {"x": 1}, "metadata": {"name": "a"}}),
        )
        .unwrap();
        assert_eq!(
            got.to_string(),
            r#"{"metadata":{"name":"a"},"spec":{"x":1},"status":{"new":true}}"#
        );
        let got = with_status_of(
            &json!({"spec": {}}),
            json!({"status": {"s": 1}, "spec": {}}),
        )
        .unwrap();
        assert_eq!(got.to_string(), r#"{"spec":{},"status":{"s":1}}"#);
        // A stored object without status gets the status last.
        let got = with_status_of(&json!({"spec": {}}), json!({"status": {"s": 1}})).unwrap();
        assert_eq!(got.to_string(), r#"{"spec":{},"status":{"s":1}}"#);
        assert!(with_status_of(&stored, json!([1])).is_err());
    }

    #[test]
    fn timestamps_are_whole_seconds_in_utc() {
        let at = Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap();
        assert_eq!(timestamp(at), "2024-05-01T10:00:00Z");
    }

    #[test]
    fn generation_ignores_metadata_and_status() {
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"r": 1}, "status": {"x": 1}});
        let b = json!({"metadata": {}, "spec": {"r": 1}, "status": {"x": 2}});
        let c = json!({"metadata": {}, "spec": {"r": 2}});
        let d = json!({"metadata": {}, "spec": {"r": 1}, "data": {}});
        assert!(same_outside_metadata_and_status(&a, &b));
        assert!(!same_outside_metadata_and_status(&a, &c));
        assert!(!same_outside_metadata_and_status(&a, &d));
        assert!(!same_outside_metadata_and_status(&d, &a));
    }

    #[test]
    fn names_and_keys() {
        let deploy = flotilla_api::kinds::builtin_by_plural("apps", "deployments").unwrap();
        let cluster = flotilla_api::kinds::well_known::clusters();
        assert_eq!(object_key(&deploy, Some("ns"), "a").unwrap(), "ns/a");
        assert_eq!(object_key(&cluster, Some("ns"), "a").unwrap(), "a");
        assert!(object_key(&deploy, None, "a").is_err());
        assert!(object_key(&deploy, Some("ns"), "a/b").is_err());
        assert!(object_key(&deploy, Some("ns"), "..").is_err());
        assert!(object_key(&deploy, Some("n s\n"), "a").is_err());
        assert_eq!(namespace_prefix(&deploy, Some("ns")), "ns/");
        assert_eq!(namespace_prefix(&cluster, Some("ns")), "");
        let s = generated_suffix();
        assert_eq!(s.len(), SUFFIX_LEN);
        assert!(s.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
    }

    #[test]
    fn metadata_shapes_are_checked() {
        assert!(validate_metadata(&json!({"metadata": {"finalizers": ["a"]}})).is_ok());
        for bad in [
            json!({"metadata": []}),
            json!({"metadata": {"finalizers": "a"}}),
            json!({"metadata": {"finalizers": [""]}}),
            json!({"metadata": {"ownerReferences": [{"name": "x"}]}}),
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": {"name": 3}}),
        ] {
            assert!(
                matches!(validate_metadata(&bad), Err(StoreError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn owner_references_are_read_and_removed() {
        let mut obj = json!({"metadata": {"ownerReferences": [
            {"uid": "b"}, {"uid": "a"}, {"uid": "b"}
        ]}});
        assert_eq!(owner_uids(&obj), ["a", "b"]);
        assert!(remove_owner_reference(&mut obj, "b").unwrap());
        assert_eq!(owner_uids(&obj), ["a"]);
        assert!(remove_owner_reference(&mut obj, "a").unwrap());
        assert!(obj["metadata"].get("ownerReferences").is_none());
        assert!(!remove_owner_reference(&mut obj, "a").unwrap());
    }
}
