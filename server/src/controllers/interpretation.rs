//! What controllers ask of the resource interpreter about a template, as a trait so that each
//! controller is tested with a small fake and the interpreter stays a pure library.

use flotilla_api::binding::ReplicaRequirements;
use serde_json::Value;

/// The interpreter's answers about templates.
pub trait TemplateInterpreter: Send + Sync + 'static {
    /// Replicas and per-replica requirements; `(0, None)` for non-workloads.
    fn replicas(&self, template: &Value) -> (i32, Option<ReplicaRequirements>);
    /// The manifest for a cluster that runs `replicas` of it.
    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Value;
}
