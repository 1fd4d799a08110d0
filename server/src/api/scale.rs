//! The `scale` subresource of the replicated workload kinds (apps/v1 Deployment, StatefulSet,
//! ReplicaSet): an `autoscaling/v1` `Scale` view of `spec.replicas`, so `kubectl scale` and
//! autoscalers work on templates. Reading it and changing it are pure functions here; the
//! resource handler does the I/O through the same update path as a PUT of the object, so
//! admission, preconditions and dry runs are the same.

use super::error::Cause;
use flotilla_api::kinds::ResourceType;
use serde_json::{json, Value};

/// Plurals of the `apps` group that have a `scale` subresource.
const SCALABLE: &[&str] = &["deployments", "statefulsets", "replicasets"];

/// Whether the kind serves `<plural>/scale`.
pub fn supports_scale(rt: &ResourceType) -> bool {
    rt.group == "apps" && SCALABLE.contains(&rt.plural.as_str())
}

/// The `Scale` of a workload object: spec.replicas (1 when unset, the Kubernetes default),
/// status.replicas and the label selector as a string.
pub fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut metadata = serde_json::Map::new();
    for key in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(key) {
            metadata.insert(key.to_string(), v.clone());
        }
    }
    let mut status = json!({
        "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
    });
    if let Some(selector) = obj.pointer("/spec/selector").and_then(selector_string) {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": status,
    })
}

/// `matchLabels` and `matchExpressions` as a label selector string (`a=b,c in (d,e)`).
fn selector_string(selector: &Value) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    if let Some(exprs) = selector.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            parts.push(match e["operator"].as_str().unwrap_or_default() {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            });
        }
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// The desired replicas a written `Scale` asks for: `spec.replicas`, a non-negative
/// integer; otherwise the cause naming the field.
pub fn desired_replicas(scale: &Value) -> Result<i64, Cause> {
    let invalid = |message: String| Cause {
        reason: "FieldValueInvalid".into(),
        message,
        field: "spec.replicas".into(),
    };
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Err(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.replicas".into(),
        }),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Ok(n),
            Some(n) => Err(invalid(format!(
                "Invalid value: {n}: must be greater than or equal to 0"
            ))),
            None => Err(invalid(format!("Invalid value: {v}: must be an integer"))),
        },
    }
}

/// The object with the replicas of `scale`, carrying the `Scale`'s resourceVersion as the
/// write's precondition when it has one.
pub fn apply_scale(live: &Value, scale: &Value, replicas: i64) -> Value {
    let mut out = live.clone();
    out["spec"]["replicas"] = json!(replicas);
    match scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        Some(rv) if !rv.is_empty() => out["metadata"]["resourceVersion"] = json!(rv),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::kinds::well_known;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                     {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 2}})
    }

    #[test]
    fn a_scale_shows_replicas_selector_and_identity() {
        assert_eq!(
            scale_of(&deployment()),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=web,tier in (fe,be),!canary"}})
        );
        let bare = json!({"metadata": {"name": "x"}, "spec": {}});
        assert_eq!(
            scale_of(&bare)["spec"]["replicas"],
            1,
            "Kubernetes' default"
        );
        assert!(scale_of(&bare)["status"].get("selector").is_none());
    }

    #[test]
    fn desired_replicas_are_checked() {
        let cases = [
            (json!({"spec": {"replicas": 5}}), Ok(5)),
            (json!({"spec": {"replicas": 0}}), Ok(0)),
            (json!({"spec": {}}), Err("FieldValueRequired")),
            (json!({"spec": {"replicas": -1}}), Err("FieldValueInvalid")),
            (json!({"spec": {"replicas": "3"}}), Err("FieldValueInvalid")),
            (json!({"spec": {"replicas": 1.5}}), Err("FieldValueInvalid")),
        ];
        for (scale, want) in cases {
            let got = desired_replicas(&scale);
            match (&got, want) {
                (Ok(n), Ok(w)) => assert_eq!(*n, w, "{scale}"),
                (Err(c), Err(reason)) => {
                    assert_eq!(c.reason, reason, "{scale}");
                    assert_eq!(c.field, "spec.replicas");
                }
                _ => panic!("{scale}: {got:?}"),
            }
        }
    }

    #[test]
    fn applying_sets_replicas_and_the_precondition() {
        let live = deployment();
        let out = apply_scale(&live, &json!({"spec": {"replicas": 9}}), 9);
        assert_eq!(out["spec"]["replicas"], 9);
        assert_eq!(out["metadata"]["resourceVersion"], "7");
        assert_eq!(out["spec"]["selector"], live["spec"]["selector"]);
        let pinned = apply_scale(
            &live,
            &json!({"metadata": {"resourceVersion": "4"}, "spec": {"replicas": 9}}),
            9,
        );
        assert_eq!(pinned["metadata"]["resourceVersion"], "4");
    }

    #[test]
    fn only_replicated_apps_kinds_scale() {
        assert!(!supports_scale(&well_known::clusters()));
        assert!(!supports_scale(&well_known::works()));
    }
}
