//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch (the
//! parts kubectl sends: lists merged by their merge key, `$patch`, `$setElementOrder`,
//! `$retainKeys`, `$deleteFromPrimitiveList`) and server-side apply (see [`apply`]).

use flotilla_api::json_pointer::JsonPointer;
use serde_json::{Map, Value};

/// The kinds of patch Flotilla accepts, by Content-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
}

impl PatchType {
    /// The patch type of a Content-Type header value.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The patch body is not of its type's shape.
    #[error("the patch is malformed: {0}")]
    Malformed(String),
    /// A JSON patch operation failed (e.g. a `test` or a missing path).
    #[error("the patch could not be applied: {0}")]
    Failed(String),
    /// The patched object would be larger than the limit of an object.
    #[error("the patched object is larger than the limit of {0} bytes")]
    TooLarge(usize),
}

/// Applies `patch` (already parsed) of type `kind` to `target`, refusing a result larger than
/// `max_bytes` of JSON. A JSON patch is checked as it goes, so `copy` operations cannot
/// build an object many times the limit before the check (a 1 KB patch that copies an object
/// into itself twenty times would otherwise need a million times its size in memory).
/// `target` is left half-patched on error: patch a copy.
pub fn apply_patch(
    target: &mut Value,
    patch: &Value,
    kind: PatchType,
    max_bytes: usize,
) -> Result<(), PatchError> {
    match kind {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(PatchError::Malformed(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            json_patch::merge(target, patch);
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| PatchError::Malformed(e.to_string()))?;
            json_patch_bounded(target, &ops, max_bytes)?;
        }
        PatchType::Strategic => {
            let Value::Object(p) = patch else {
                return Err(PatchError::Malformed(
                    "a strategic merge patch must be a JSON object".into(),
                ));
            };
            strategic_merge(target, p, "");
        }
        PatchType::Apply => apply(target, patch),
    }
    if json_size(target) > max_bytes {
        return Err(PatchError::TooLarge(max_bytes));
    }
    Ok(())
}

/// How many times a JSON patch may measure the whole object again before it is refused.
const MAX_REMEASURES: usize = 8;

/// RFC 6902, one operation at a time, with a running upper bound of the object's size. The
/// caller patches a copy and drops it on error, so no undo is needed (the json-patch crate's
/// own undo panics on some moves and copies to the root).
fn json_patch_bounded(
    target: &mut Value,
    ops: &json_patch::Patch,
    max_bytes: usize,
) -> Result<(), PatchError> {
    use json_patch::PatchOperation as Op;
    let mut size = json_size(target);
    let mut remeasures = 0;
    for (i, op) in ops.0.iter().enumerate() {
        let grows = match op {
            Op::Add(a) => json_size(&a.value),
            Op::Replace(r) => json_size(&r.value),
            Op::Copy(c) => target.lookup(c.from.as_str()).map(json_size).unwrap_or(0),
            Op::Remove(_) | Op::Move(_) | Op::Test(_) => 0,
        };
        if size.saturating_add(grows) > max_bytes {
            // The running bound only grows; measure once more before refusing.
            remeasures += 1;
            size = json_size(target);
            if remeasures > MAX_REMEASURES || size.saturating_add(grows) > max_bytes {
                return Err(PatchError::TooLarge(max_bytes));
            }
        }
        json_patch::patch_unsafe(target, std::slice::from_ref(op))
            .map_err(|e| PatchError::Failed(format!("operation {i}: {}", e.kind)))?;
        size = size.saturating_add(grows);
    }
    Ok(())
}

/// The length of a value's JSON encoding, counted without building it.
pub fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Server-side apply, simplified: the applied configuration is merged into the live object
/// (maps recursively, lists and scalars replaced). Field ownership is not tracked, so no
/// apply conflicts are reported; fields left out of the configuration are kept.
pub fn apply(target: &mut Value, config: &Value) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, v) in c {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => apply(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, c) => *t = c.clone(),
    }
}

/// Merge keys of the list fields kubectl patches strategically, by field name. A list field
/// not named here is replaced as a whole, as Kubernetes does for lists without a merge key.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "ownerReferences"
        | "resourceClaims" => {
            if field == "ownerReferences" {
                "uid"
            } else {
                "name"
            }
        }
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars that merge as sets (`$deleteFromPrimitiveList` applies to them).
fn is_set_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

fn strategic_merge(target: &mut Value, patch: &Map<String, Value>, _path: &str) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return;
    }
    if patch.get("$patch").and_then(Value::as_str) == Some("delete") {
        *target = Value::Object(Map::new());
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(remove)) = (t.get_mut(field), value) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        match value {
            Value::Null => {
                t.remove(key);
            }
            Value::Object(p) => {
                let entry = t.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(entry, p, key);
            }
            Value::Array(items) => {
                let order = patch.get(&format!("$setElementOrder/{key}"));
                let merged = merge_list(t.get(key), items, key, order);
                t.insert(key.clone(), merged);
            }
            other => {
                t.insert(key.clone(), other.clone());
            }
        }
    }
}

fn merge_list(live: Option<&Value>, items: &[Value], field: &str, order: Option<&Value>) -> Value {
    let live_items = live.and_then(Value::as_array).cloned().unwrap_or_default();
    if is_set_list(field) {
        let mut out = live_items;
        for item in items {
            if !out.contains(item) {
                out.push(item.clone());
            }
        }
        return Value::Array(out);
    }
    let replace = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let mk = match merge_key(field) {
        Some(mk) if !replace => mk,
        // No merge key, or `$patch: replace`: the list is replaced, dropping any
        // directive-only entries.
        _ => {
            return Value::Array(
                items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .cloned()
                    .collect(),
            )
        }
    };
    let mut out = live_items;
    for item in items {
        let Some(key_value) = item.get(mk) else {
            out.push(item.clone());
            continue;
        };
        let position = out.iter().position(|o| o.get(mk) == Some(key_value));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                out.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let Value::Object(p) = item {
                    strategic_merge(&mut out[i], p, field);
                }
            }
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                if let Value::Object(p) = item {
                    strategic_merge(&mut fresh, p, field);
                }
                out.push(fresh);
            }
        }
    }
    if let Some(Value::Array(order)) = order {
        let rank = |v: &Value| {
            v.get(mk)
                .and_then(|k| order.iter().position(|o| o.get(mk) == Some(k)))
                .unwrap_or(usize::MAX)
        };
        out.sort_by_key(rank);
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    const LIMIT: usize = 3 * 1024 * 1024;

    use super::*;
    use serde_json::json;

    #[test]
    fn patch_types_by_content_type() {
        let table = [
            ("application/merge-patch+json", Some(PatchType::Merge)),
            ("application/json-patch+json", Some(PatchType::Json)),
            (
                "application/strategic-merge-patch+json; charset=utf-8",
                Some(PatchType::Strategic),
            ),
            ("application/apply-patch+yaml", Some(PatchType::Apply)),
            ("application/json", None),
        ];
        for (ct, want) in table {
            assert_eq!(PatchType::from_content_type(ct), want, "{ct}");
        }
    }

    #[test]
    fn merge_patch_sets_and_removes() {
        let mut obj = json!({"spec": {"replicas": 2, "paused": true}});
        apply_patch(
            &mut obj,
            &json!({"spec": {"replicas": 3, "paused": null}}),
            PatchType::Merge,
            LIMIT,
        )
        .unwrap();
        assert_eq!(obj, json!({"spec": {"replicas": 3}}));
        assert!(apply_patch(&mut obj, &json!([1]), PatchType::Merge, LIMIT).is_err());
    }

    #[test]
    fn json_patch_ops_and_failures() {
        let mut obj = json!({"spec": {"replicas": 2}});
        apply_patch(
            &mut obj,
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]),
            PatchType::Json,
            LIMIT,
        )
        .unwrap();
        assert_eq!(obj["spec"]["replicas"], 5);
        let err = apply_patch(
            &mut obj,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 1}]),
            PatchType::Json,
            LIMIT,
        );
        assert!(matches!(err, Err(PatchError::Failed(_))));
        let err = apply_patch(&mut obj, &json!({"op": "x"}), PatchType::Json, LIMIT);
        assert!(matches!(err, Err(PatchError::Malformed(_))));
    }

    #[test]
    fn strategic_merge_by_name_with_directives() {
        let mut obj = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
        ]}}}, "metadata": {"finalizers": ["x"]}});
        let patch = json!({
            "metadata": {"finalizers": ["y"]},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
                "containers": [
                    {"name": "a", "image": "a:2"},
                    {"name": "b", "$patch": "delete"},
                    {"name": "c", "image": "c:1"}
                ]
            }}}
        });
        apply_patch(&mut obj, &patch, PatchType::Strategic, LIMIT).unwrap();
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c", "image": "c:1"}, {"name": "a", "image": "a:2"}])
        );
        assert_eq!(obj["metadata"]["finalizers"], json!(["x", "y"]));
    }

    #[test]
    fn strategic_merge_replaces_lists_without_merge_key_and_honours_retain_keys() {
        let mut obj = json!({"spec": {"args": ["a", "b"], "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"args": ["c"], "strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        apply_patch(&mut obj, &patch, PatchType::Strategic, LIMIT).unwrap();
        assert_eq!(
            obj,
            json!({"spec": {"args": ["c"], "strategy": {"type": "Recreate"}}})
        );
    }

    #[test]
    fn server_side_apply_merges_maps_and_replaces_lists() {
        let mut obj =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2], "keep": true}});
        apply_patch(
            &mut obj,
            &json!({"metadata": {"labels": {"b": "2"}}, "spec": {"list": [3]}}),
            PatchType::Apply,
            LIMIT,
        )
        .unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [3], "keep": true}})
        );
    }

    #[test]
    fn json_patch_moves_and_copies_to_the_root_do_not_panic() {
        let live =
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1}});
        let cases = [
            json!([{"op": "move", "from": "/metadata", "path": ""}]),
            json!([{"op": "copy", "from": "/metadata", "path": ""}]),
            json!([{"op": "move", "from": "/metadata/labels", "path": "/spec"}, {"op": "test", "path": "/x", "value": 1}]),
            json!([{"op": "copy", "from": "", "path": "/metadata/self"}, {"op": "remove", "path": "/nope"}]),
            json!([{"op": "move", "from": "", "path": "/metadata/x"}]),
            json!([{"op": "remove", "path": ""}]),
            json!([{"op": "add", "path": "/spec/replicas/-", "value": 1}]),
        ];
        for patch in cases {
            let mut obj = live.clone();
            // Any outcome but a panic.
            let _ = apply_patch(&mut obj, &patch, PatchType::Json, LIMIT);
        }
    }

    #[test]
    fn copies_that_grow_the_object_past_the_limit_are_refused() {
        let live = json!({"metadata": {"name": "a"}, "data": {"v": "x".repeat(1000)}});
        let ops: Vec<Value> = (0..20)
            .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/again{i}")}))
            .collect();
        let mut obj = live.clone();
        let err = apply_patch(&mut obj, &Value::Array(ops), PatchType::Json, 64 * 1024);
        assert!(matches!(err, Err(PatchError::TooLarge(_))), "{err:?}");
        // Every patch type is bounded by the result's size.
        for (kind, patch) in [
            (PatchType::Merge, json!({"data": {"w": "y".repeat(70_000)}})),
            (
                PatchType::Strategic,
                json!({"data": {"w": "y".repeat(70_000)}}),
            ),
            (PatchType::Apply, json!({"data": {"w": "y".repeat(70_000)}})),
        ] {
            let mut obj = live.clone();
            let err = apply_patch(&mut obj, &patch, kind, 64 * 1024);
            assert!(matches!(err, Err(PatchError::TooLarge(_))), "{kind:?}");
        }
        assert_eq!(json_size(&json!({"a": [1, "b"]})), r#"{"a":[1,"b"]}"#.len());
    }
}
