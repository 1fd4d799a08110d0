//! What controllers ask of the resource interpreter about a template, as a trait so that each
//! controller is tested with a small fake and the interpreter stays a pure library.

use flotilla_api::binding::{AggregatedStatusItem, ReplicaRequirements};
use flotilla_api::work::ResourceHealth;
use serde_json::Value;

/// The interpreter's answers about templates.
pub trait TemplateInterpreter: Send + Sync + 'static {
    /// Replicas and per-replica requirements; `(0, None)` for non-workloads.
    fn replicas(&self, template: &Value) -> (i32, Option<ReplicaRequirements>);
    /// The manifest for a cluster that runs `replicas` of it.
    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Value;
    /// The health of a member object (manifest + reported status). Kinds without a health
    /// rule are Healthy; an interpretation error is Unknown.
    fn health(&self, object: &Value) -> ResourceHealth;
    /// Whether the kind of `object` has a health rule (application failover needs one).
    fn has_health_rule(&self, object: &Value) -> bool;
    /// The template's status folded from the members' statuses (`None`: leave it alone).
    fn aggregate_status(&self, template: &Value, items: &[AggregatedStatusItem]) -> Option<Value>;
}
