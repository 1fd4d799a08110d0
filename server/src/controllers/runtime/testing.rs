//! Fakes shared by controller tests.

use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::interpreter::{InterpretError, ObjectRef};
use flotilla_api::binding::{AggregatedStatusItem, ReplicaRequirements};
use flotilla_api::work::ResourceHealth;
use serde_json::{json, Value};

/// An interpreter that reads and writes `spec.replicas`, calls an object healthy when
/// `status.readyReplicas >= spec.replicas`, and sums `readyReplicas` into the template.
pub struct SpecReplicas;

impl TemplateInterpreter for SpecReplicas {
    fn replicas(&self, t: &Value) -> Result<(i32, Option<ReplicaRequirements>), InterpretError> {
        let n = t
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        Ok((i32::try_from(n).unwrap_or(0), None))
    }

    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Result<Value, InterpretError> {
        let mut m = manifest.clone();
        if m.pointer("/spec/replicas").is_some() {
            m["spec"]["replicas"] = json!(replicas);
        }
        Ok(m)
    }

    fn reflect_status(&self, o: &Value) -> Option<Value> {
        o.get("status").filter(|s| !s.is_null()).cloned()
    }

    fn health(&self, o: &Value) -> ResourceHealth {
        let want = o
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        match o.pointer("/status/readyReplicas").and_then(Value::as_i64) {
            Some(r) if r >= want => ResourceHealth::Healthy,
            Some(_) => ResourceHealth::Unhealthy,
            None => ResourceHealth::Unknown,
        }
    }

    fn has_health_rule(&self, _: &Value) -> bool {
        true
    }

    fn aggregate_status(&self, _: &Value, items: &[AggregatedStatusItem]) -> Option<Value> {
        let ready: i64 = items
            .iter()
            .filter_map(|i| i.status.as_ref()?.get("readyReplicas")?.as_i64())
            .sum();
        Some(json!({"readyReplicas": ready}))
    }

    fn dependencies(&self, _: &Value) -> Result<Vec<ObjectRef>, InterpretError> {
        Ok(Vec::new())
    }
}
