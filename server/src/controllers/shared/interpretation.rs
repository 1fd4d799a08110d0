//! What controllers ask of the resource interpreter about a template, as a trait so that each
//! controller is tested with a small fake and the interpreter stays a pure library.

use crate::interpreter::{InterpretError, ObjectRef};
use flotilla_api::binding::{AggregatedStatusItem, ReplicaRequirements};
use flotilla_api::work::ResourceHealth;
use serde_json::Value;

/// The interpreter's answers about templates.
pub trait TemplateInterpreter: Send + Sync + 'static {
    /// Replicas and per-replica requirements; `(0, None)` for non-workloads. An error is
    /// reported (a rule failed), not read as zero replicas: that would scale the members down.
    fn replicas(
        &self,
        template: &Value,
    ) -> Result<(i32, Option<ReplicaRequirements>), InterpretError>;
    /// The manifest for a cluster that runs `replicas` of it. An error is reported (a rule
    /// failed), never answered with the unrevised manifest: that would run the template's full
    /// replica count on every cluster.
    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Result<Value, InterpretError>;
    /// The health of a member object (manifest + reported status). Kinds without a health
    /// rule are Healthy; an interpretation error is Unknown.
    fn health(&self, object: &Value) -> ResourceHealth;
    /// What of a member object's status the binding reports (`aggregatedStatus[].status`):
    /// the kind's reflection rule; its whole status when it has none or the rule fails.
    fn reflect_status(&self, object: &Value) -> Option<Value>;
    /// Whether the kind of `object` has a health rule (application failover needs one).
    fn has_health_rule(&self, object: &Value) -> bool;
    /// The template's status folded from the members' statuses (`None`: leave it alone).
    fn aggregate_status(&self, template: &Value, items: &[AggregatedStatusItem]) -> Option<Value>;
    /// The objects the template depends on (`propagateDeps`); empty for kinds without a rule.
    /// An error is reported (a rule failed), not treated as "no dependencies": dropping every
    /// dependency because a rule broke would remove them from the members.
    fn dependencies(&self, template: &Value) -> Result<Vec<ObjectRef>, InterpretError>;
}

/// The server's interpreter answers for the controllers; a rule that fails is logged and
/// treated as "no answer" (the template is left as it is), except for replicas, replica
/// revision and dependencies, whose errors the caller reports.
impl TemplateInterpreter for crate::interpreter::Interpreter {
    fn replicas(
        &self,
        template: &Value,
    ) -> Result<(i32, Option<ReplicaRequirements>), InterpretError> {
        Ok(crate::interpreter::Interpreter::replicas(self, template)?.unwrap_or((0, None)))
    }

    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Result<Value, InterpretError> {
        crate::interpreter::Interpreter::revise_replicas(self, manifest, replicas)
    }

    fn health(&self, object: &Value) -> ResourceHealth {
        crate::interpreter::Interpreter::health(self, object).into()
    }

    fn reflect_status(&self, object: &Value) -> Option<Value> {
        crate::interpreter::Interpreter::reflect_status(self, object).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reflecting a member object's status failed");
            crate::interpreter::native::reflect::whole_status(object)
        })
    }

    fn has_health_rule(&self, object: &Value) -> bool {
        crate::interpreter::Gvk::of(object)
            .is_some_and(|g| crate::interpreter::Interpreter::has_health_rule(self, &g))
    }

    fn aggregate_status(&self, template: &Value, items: &[AggregatedStatusItem]) -> Option<Value> {
        crate::interpreter::Interpreter::aggregate_status(self, template, items).unwrap_or_else(
            |e| {
                tracing::warn!(error = %e, "aggregating a template's status failed");
                None
            },
        )
    }

    fn dependencies(&self, template: &Value) -> Result<Vec<ObjectRef>, InterpretError> {
        crate::interpreter::Interpreter::dependencies(self, template)
    }
}
