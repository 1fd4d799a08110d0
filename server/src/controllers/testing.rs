//! Fakes shared by controller tests.

use super::interpretation::TemplateInterpreter;
use flotilla_api::binding::ReplicaRequirements;
use serde_json::{json, Value};

/// An interpreter that reads and writes `spec.replicas`.
pub struct SpecReplicas;

impl TemplateInterpreter for SpecReplicas {
    fn replicas(&self, t: &Value) -> (i32, Option<ReplicaRequirements>) {
        let n = t
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        (i32::try_from(n).unwrap_or(0), None)
    }

    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Value {
        let mut m = manifest.clone();
        if m.pointer("/spec/replicas").is_some() {
            m["spec"]["replicas"] = json!(replicas);
        }
        m
    }
}
