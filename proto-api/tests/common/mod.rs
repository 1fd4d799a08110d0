//! Helpers shared by the integration tests: base objects, JSON merge patches, and admission
//! shortcuts.

#![allow(dead_code)]

use chrono::{DateTime, Utc};
use flotilla_api::{admit, DefaultingConfig, FieldError, ValidationErrors};
use serde_json::{json, Value};

/// A fixed "now".
pub fn now() -> DateTime<Utc> {
    flotilla_api::Time::parse("2024-05-01T10:00:00Z")
        .unwrap()
        .as_datetime()
}

/// RFC 7386 merge patch: objects merge, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// `base` with `patch` applied.
pub fn patched(base: &Value, patch: &Value) -> Value {
    let mut v = base.clone();
    merge_patch(&mut v, patch);
    v
}

/// A minimal valid PropagationPolicy (as the server sees it: uid assigned).
pub fn pp() -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "nginx-propagation", "namespace": "default", "uid": "uid-pp"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}]
        }
    })
}

/// A minimal valid ClusterPropagationPolicy.
pub fn cpp() -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "ClusterPropagationPolicy",
        "metadata": {"name": "all-deployments", "uid": "uid-cpp"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]
        }
    })
}

/// A minimal valid push Cluster.
pub fn cluster() -> Value {
    json!({
        "apiVersion": "cluster.karmada.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "member1", "uid": "uid-c"},
        "spec": {"syncMode": "Push", "apiEndpoint": "https://10.0.0.1:6443"}
    })
}

/// A minimal valid ResourceBinding.
pub fn rb() -> Value {
    json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": "nginx-deployment", "namespace": "default", "uid": "uid-rb"},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default",
                         "name": "nginx"},
            "replicas": 3,
            "clusters": [{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 2}]
        }
    })
}

/// A minimal valid Work.
pub fn work() -> Value {
    json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {"name": "nginx-687f7fb96f", "namespace": "karmada-es-member1"},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "nginx", "namespace": "default"}}
        ]}}
    })
}

/// A minimal valid Event.
pub fn event() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "nginx.17a", "namespace": "default"},
        "involvedObject": {"kind": "ResourceBinding", "name": "nginx-deployment"},
        "reason": "ScheduleBindingSucceed",
        "type": "Normal"
    })
}

/// The API group of an object's apiVersion.
pub fn group_of(obj: &Value) -> String {
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    av.rsplit_once('/').map_or("", |(g, _)| g).to_string()
}

/// Admits `obj` as a create (or an update of `old`) with `cfg`, returning the stored form.
pub fn admit_with(
    obj: &Value,
    old: Option<&Value>,
    cfg: &DefaultingConfig,
) -> Result<Value, ValidationErrors> {
    let mut v = obj.clone();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    admit(&group_of(obj), &kind, &mut v, old, cfg, now())?;
    Ok(v)
}

/// Admits `obj` as a create with the default config.
pub fn admit_create(obj: &Value) -> Result<Value, ValidationErrors> {
    admit_with(obj, None, &DefaultingConfig::default())
}

/// The errors of admitting `obj` (panics if it is accepted).
pub fn rejected(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    match admit_with(obj, old, &DefaultingConfig::default()) {
        Ok(v) => panic!("accepted: {v:#}"),
        Err(e) => e.0,
    }
}
