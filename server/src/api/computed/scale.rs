//! The `scale` subresource of the replicated workload kinds (apps/v1 Deployment, StatefulSet,
//! ReplicaSet): an `autoscaling/v1` `Scale` view of `spec.replicas`, so `kubectl scale` and
//! autoscalers work on templates. Reading it and changing it are pure functions here; [`serve`]
//! does the I/O through the same update path as a PUT of the object
//! ([`crate::api::write::update::write_update`]), so admission, preconditions and dry runs are the same.

use super::Call;
use crate::api::access::authz::{self, Write};
use crate::api::error::{ApiError, ApiResult, Cause};
use crate::api::wire::body::{self, negotiate, respond};
use crate::api::wire::target::{place, rt_with_kind, Target};
use crate::api::write::patch::{apply_patch, PatchError, PatchType};
use crate::api::write::update::write_update;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use flotilla_api::json_pointer::JsonPointer;
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
        "replicas": obj.lookup("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
    });
    if let Some(selector) = obj.lookup("/spec/selector").and_then(selector_string) {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": obj.lookup("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
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
    match scale.lookup("/spec/replicas") {
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
        .lookup("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        Some(rv) if !rv.is_empty() => out["metadata"]["resourceVersion"] = json!(rv),
        _ => {}
    }
    out
}

/// GET, PUT and PATCH of `<workload>/scale`: the object's `spec.replicas` seen and written as
/// an `autoscaling/v1` `Scale`, through the same update path as the object itself.
pub async fn serve(call: Call<'_>) -> ApiResult<Response> {
    let (state, who, body) = (call.state, call.who, call.body);
    let (method, target, params, headers) =
        (&call.method, &call.target, &call.params, &call.headers);
    let encoding = negotiate(headers)?;
    let name = target.name.as_deref().unwrap_or_default();
    let object = Target {
        subresource: None,
        ..target.clone()
    };
    // What the request asks for: nothing (GET), a whole Scale (PUT) or a patch of it.
    let request = match *method {
        Method::GET => None,
        Method::PUT => {
            let bytes = body::read(body, state.limits.max_body_bytes).await?;
            Some((
                None,
                body::parse_off_thread(bytes, body::BodyFormat::Json).await?,
            ))
        }
        Method::PATCH => {
            let ct = body::content_type(headers);
            let kind = PatchType::from_content_type(&ct).ok_or_else(|| {
                ApiError::UnsupportedMediaType(format!("the patch type {ct:?} is not supported"))
            })?;
            let format = if kind == PatchType::Apply {
                body::BodyFormat::Yaml
            } else {
                body::BodyFormat::Json
            };
            let bytes = body::read(body, state.limits.max_body_bytes).await?;
            Some((Some(kind), body::parse_off_thread(bytes, format).await?))
        }
        ref m => {
            return Err(ApiError::MethodNotAllowed(format!(
                "the scale subresource allows GET, PUT and PATCH, not {m}"
            )))
        }
    };
    let pinned = request.as_ref().is_some_and(|(_, doc)| {
        doc.lookup("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
    });
    let mut attempts = 0;
    loop {
        attempts += 1;
        let live = state
            .store
            .get(&object.rt, object.namespace.as_deref(), name)
            .await
            .map_err(|e| object.store_err(e))?;
        let current = scale_of(&live);
        let Some((kind, doc)) = &request else {
            return Ok(respond(StatusCode::OK, &current, encoding));
        };
        let wanted = match kind {
            None => doc.clone(),
            Some(kind) => {
                let mut patched = current.clone();
                apply_patch(&mut patched, doc, *kind, state.limits.max_body_bytes).map_err(
                    |e| match e {
                        PatchError::Malformed(m) | PatchError::Failed(m) => ApiError::BadRequest(m),
                        PatchError::TooLarge(_) => ApiError::TooLarge(e.to_string()),
                    },
                )?;
                patched
            }
        };
        let replicas = desired_replicas(&wanted)
            .map_err(|cause| ApiError::invalid("Scale", "autoscaling", name, vec![cause]))?;
        let updated = apply_scale(&live, &wanted, replicas);
        let rt = rt_with_kind(&object, &updated);
        let write = Write::Update {
            old: &live,
            new: &updated,
        };
        authz::check_write(who, place(target), write)?;
        match write_update(state, &object, &rt, params, updated, &live).await {
            Err(ApiError::Conflict { .. }) if !pinned && attempts < 8 => continue,
            Err(e) => return Err(e),
            Ok(written) => return Ok(respond(StatusCode::OK, &scale_of(&written), encoding)),
        }
    }
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
