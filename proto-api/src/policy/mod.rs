//! `policy.karmada.io/v1alpha1` PropagationPolicy and ClusterPropagationPolicy: which resource
//! templates a policy selects, where they go ([`placement`]), and how they fail over
//! ([`failover`]). Both kinds share [`PropagationSpec`]. [`cluster_taint_policy`] holds
//! ClusterTaintPolicy, the same group's rules for tainting clusters by their conditions.

pub mod cluster_taint_policy;
pub mod failover;
pub mod placement;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::meta::{impl_object, ObjectMeta};
use crate::selector::LabelSelector;

pub use cluster_taint_policy::{
    ClusterTaintPolicy, ClusterTaintPolicySpec, MatchCondition, MatchConditionOperator, PolicyTaint,
};
pub use failover::{
    ApplicationFailoverBehavior, ClusterFailoverBehavior, DecisionConditions, Failback,
    FailoverBehavior, Fencing, PurgeMode, StatePreservation, StatePreservationRule,
};
pub use placement::{
    ClusterAffinity, ClusterAffinityTerm, ClusterPreferences, DynamicWeightFactor, FieldSelector,
    OverflowClusterAffinity, Placement, ReplicaDivisionPreference, ReplicaSchedulingStrategy,
    ReplicaSchedulingType, SpreadByField, SpreadConstraint, StaticClusterWeight, Toleration,
    TolerationOperator, WorkloadAffinity, WorkloadAffinityTerm, FIELD_SELECTOR_KEYS,
};

/// `apiVersion` of the policy kinds.
pub const POLICY_API_VERSION: &str = "policy.karmada.io/v1alpha1";
/// Scheduler used when a policy names none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Label carrying a PropagationPolicy's permanent id.
pub const PP_PERMANENT_ID_LABEL: &str = "propagationpolicy.karmada.io/permanent-id";
/// Label carrying a ClusterPropagationPolicy's permanent id.
pub const CPP_PERMANENT_ID_LABEL: &str = "clusterpropagationpolicy.karmada.io/permanent-id";
/// Finalizer Karmada puts on PropagationPolicies (Flotilla exports it; admission does not add it).
pub const PP_FINALIZER: &str = "karmada.io/propagation-policy-controller";
/// Finalizer Karmada puts on ClusterPropagationPolicies.
pub const CPP_FINALIZER: &str = "karmada.io/cluster-propagation-policy-controller";
/// Annotation on bindings with the JSON of the placement the scheduler last used.
pub const APPLIED_PLACEMENT_ANNOTATION: &str = "policy.karmada.io/applied-placement";

/// A namespaced policy: propagates templates of its own namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PropagationPolicy {
    /// `policy.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `PropagationPolicy`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// What to propagate, where and how.
    pub spec: PropagationSpec,
}

impl_object!(PropagationPolicy, POLICY_API_VERSION, "PropagationPolicy");

impl PropagationPolicy {
    /// A policy with `apiVersion` and `kind` filled in.
    pub fn new(namespace: &str, name: &str, spec: PropagationSpec) -> Self {
        PropagationPolicy {
            api_version: POLICY_API_VERSION.to_string(),
            kind: "PropagationPolicy".to_string(),
            metadata: ObjectMeta::named(namespace, name),
            spec,
        }
    }
}

/// A cluster-scoped policy: propagates templates of any (non-reserved) namespace and
/// cluster-scoped templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterPropagationPolicy {
    /// `policy.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `ClusterPropagationPolicy`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// What to propagate, where and how.
    pub spec: PropagationSpec,
}

impl_object!(
    ClusterPropagationPolicy,
    POLICY_API_VERSION,
    "ClusterPropagationPolicy"
);

impl ClusterPropagationPolicy {
    /// A policy with `apiVersion` and `kind` filled in.
    pub fn new(name: &str, spec: PropagationSpec) -> Self {
        ClusterPropagationPolicy {
            api_version: POLICY_API_VERSION.to_string(),
            kind: "ClusterPropagationPolicy".to_string(),
            metadata: ObjectMeta::named("", name),
            spec,
        }
    }
}

/// Whether a higher-priority policy may take templates from another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preemption {
    /// Takes templates claimed by lower-priority policies.
    Always,
    /// Never takes claimed templates (default).
    Never,
}

/// What to do when the resource already exists in a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConflictResolution {
    /// Stop propagating (default).
    Abort,
    /// Take the resource over.
    Overwrite,
}

/// When policy changes take effect on templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActivationPreference {
    /// Only on the next change of the template.
    Lazy,
}

/// Source of a workload's scheduling priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PriorityClassSource {
    /// A Kubernetes PriorityClass.
    KubePriorityClass,
}

/// `spec` of both policy kinds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PropagationSpec {
    /// Templates selected (at least one).
    pub resource_selectors: Vec<ResourceSelector>,
    /// Deprecated in favour of `propagateDeps`.
    #[serde(skip_serializing_if = "crate::cluster::is_false")]
    pub association: bool,
    /// Propagate (and fail over) dependencies with the workload. Kept as an option so an
    /// explicit `false` can be told from an absent value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,
    /// Where templates go.
    #[serde(skip_serializing_if = "Placement::is_empty")]
    pub placement: Placement,
    /// Explicit priority (default 0; higher wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Preemption behaviour (default Never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,
    /// OverridePolicies that must exist first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependent_overrides: Vec<String>,
    /// Scheduler (default `default-scheduler`; immutable).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// Failover behaviour; `None` = no application failover and server-wide cluster failover.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,
    /// Conflict handling (default Abort).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,
    /// When changes apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activation_preference: Option<ActivationPreference>,
    /// Suspended dispatching.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    /// Keep member resources when the template is deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    /// Scheduling priority source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_priority: Option<SchedulePriority>,
}

impl PropagationSpec {
    /// True when `failover.application` is set.
    pub fn has_application_failover(&self) -> bool {
        self.failover
            .as_ref()
            .is_some_and(|f| f.application.is_some())
    }
}

/// One resource selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSelector {
    /// apiVersion of the templates (required).
    pub api_version: String,
    /// Kind of the templates (required).
    pub kind: String,
    /// Namespace (PP: defaulted to the policy's).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name; when set the label selector is ignored.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Over template labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// How precisely a selector matched a template; higher is more precise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorMatch {
    /// apiVersion and kind (and namespace) only.
    All,
    /// Label selector matched.
    LabelSelector,
    /// Name matched.
    Name,
}

impl ResourceSelector {
    /// How this selector matches a template, or `None` when it does not: apiVersion and kind
    /// must be equal, the namespace too when set; a name wins over the label selector.
    pub fn match_template(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<SelectorMatch> {
        if self.api_version != api_version || self.kind != kind {
            return None;
        }
        if !self.namespace.is_empty() && self.namespace != namespace {
            return None;
        }
        if !self.name.is_empty() {
            return (self.name == name).then_some(SelectorMatch::Name);
        }
        match &self.label_selector {
            None => Some(SelectorMatch::All),
            Some(sel) => sel.matches(labels).then_some(SelectorMatch::LabelSelector),
        }
    }
}

/// `suspension` of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Suspension {
    /// Suspend dispatching to every cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatching: Option<bool>,
    /// Suspend dispatching to these clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatching_on_clusters: Option<SuspendClusters>,
}

/// Clusters dispatching is suspended on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SuspendClusters {
    /// Names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
}

/// `schedulePriority` of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SchedulePriority {
    /// Where the priority comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_source: Option<PriorityClassSource>,
    /// The PriorityClass name.
    pub priority_class_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_match_precedence() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "nginx".to_string())].into();
        let sel = |name: &str, ls: Option<LabelSelector>| ResourceSelector {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: name.into(),
            label_selector: ls,
        };
        let m = |s: &ResourceSelector, ns: &str, name: &str| {
            s.match_template("apps/v1", "Deployment", ns, name, &labels)
        };
        assert_eq!(m(&sel("", None), "default", "x"), Some(SelectorMatch::All));
        assert_eq!(m(&sel("", None), "other", "x"), None);
        assert_eq!(
            m(&sel("nginx", None), "default", "nginx"),
            Some(SelectorMatch::Name)
        );
        assert_eq!(m(&sel("nginx", None), "default", "x"), None);
        let by_label = sel("", Some(LabelSelector::from_labels([("app", "nginx")])));
        assert_eq!(
            m(&by_label, "default", "x"),
            Some(SelectorMatch::LabelSelector)
        );
        let miss = sel("", Some(LabelSelector::from_labels([("app", "redis")])));
        assert_eq!(m(&miss, "default", "x"), None);
        assert!(SelectorMatch::Name > SelectorMatch::LabelSelector);
        assert!(SelectorMatch::LabelSelector > SelectorMatch::All);
        assert_eq!(
            sel("", None).match_template("apps/v1", "StatefulSet", "default", "x", &labels),
            None
        );
    }

    #[test]
    fn purge_mode_spellings() {
        for (s, immediate, graceful) in [
            ("Immediately", true, false),
            ("Directly", true, false),
            ("Graciously", false, true),
            ("Gracefully", false, true),
            ("Never", false, false),
        ] {
            let m: PurgeMode = serde_json::from_value(serde_json::json!(s)).unwrap();
            assert_eq!(m.is_immediate(), immediate, "{s}");
            assert_eq!(m.is_graceful(), graceful, "{s}");
            assert_eq!(serde_json::to_value(m).unwrap(), serde_json::json!(s));
            assert_eq!(m.to_string(), s);
        }
        assert!(serde_json::from_value::<PurgeMode>(serde_json::json!("Soon")).is_err());
    }

    #[test]
    fn replica_scheduling_type_defaults_to_duplicated() {
        let mut p = Placement::default();
        assert_eq!(
            p.replica_scheduling_type(),
            ReplicaSchedulingType::Duplicated
        );
        p.replica_scheduling = Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Divided),
            ..Default::default()
        });
        assert_eq!(p.replica_scheduling_type(), ReplicaSchedulingType::Divided);
    }
}
