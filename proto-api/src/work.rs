//! `work.karmada.io/v1alpha1` Work: the manifests one member cluster must run for one binding,
//! living in that cluster's execution namespace, and the status the member reports back per
//! manifest. Also [`ResourceHealth`], the health verdict shared with bindings.

use serde::{Deserialize, Serialize};

use crate::meta::{impl_object, Condition, ObjectMeta};

/// `apiVersion` of Work.
pub const WORK_API_VERSION: &str = "work.karmada.io/v1alpha1";
/// Condition type: the manifests were applied to the member.
pub const CONDITION_APPLIED: &str = "Applied";
/// Condition type: the manifests are available on the member.
pub const CONDITION_AVAILABLE: &str = "Available";
/// Finalizer held until the manifests are removed from the member.
pub const EXECUTION_CONTROLLER_FINALIZER: &str = "karmada.io/execution-controller";
/// Annotation of a Work whose binding asks for exactly-once placement
/// (`spec.failover.cluster.fencing.exactlyOnce`): a pull agent that cannot renew its lease
/// for `--fence-after` stops the Work's objects.
pub const PLACEMENT_GUARANTEE_ANNOTATION: &str = "flotilla.io/placement-guarantee";
/// The value of [`PLACEMENT_GUARANTEE_ANNOTATION`] asking for exactly-once placement.
pub const EXACTLY_ONCE: &str = "ExactlyOnce";
/// Annotation of a workload's Work: the replicas the binding assigned to its cluster when the
/// Work was written. The status aggregation compares it with the binding's current placement,
/// so a Work that has not caught up with a new placement never reads as a Healthy copy of it.
pub const ASSIGNED_REPLICAS_ANNOTATION: &str = "flotilla.io/assigned-replicas";

/// Health of a workload on one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResourceHealth {
    /// Healthy (or the kind has no health rule).
    Healthy,
    /// Unhealthy.
    Unhealthy,
    /// Could not be interpreted, or not applied.
    Unknown,
}

/// A Work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Work {
    /// `work.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `Work`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata (namespace `karmada-es-<cluster>`).
    pub metadata: ObjectMeta,
    /// What to apply.
    pub spec: WorkSpec,
    /// What the member reported.
    #[serde(skip_serializing_if = "WorkStatus::is_empty")]
    pub status: WorkStatus,
}

impl_object!(Work, WORK_API_VERSION, "Work");

impl Work {
    /// A Work with `apiVersion` and `kind` filled in.
    pub fn new(namespace: &str, name: &str, spec: WorkSpec) -> Self {
        Work {
            api_version: WORK_API_VERSION.to_string(),
            kind: "Work".to_string(),
            metadata: ObjectMeta::named(namespace, name),
            spec,
            status: WorkStatus::default(),
        }
    }
}

/// `spec` of a Work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkSpec {
    /// The manifests.
    pub workload: WorkloadTemplate,
    /// Stop applying to the member while true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspend_dispatching: Option<bool>,
    /// Keep the member's resources when the Work is deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
}

/// `spec.workload`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadTemplate {
    /// Full Kubernetes objects, kept as raw JSON.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<serde_json::Value>,
}

/// `status` of a Work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkStatus {
    /// `Applied`, `Available`, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Per-manifest status.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifest_statuses: Vec<ManifestStatus>,
}

impl WorkStatus {
    /// True when nothing has been reported.
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty() && self.manifest_statuses.is_empty()
    }
}

/// Status of one manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestStatus {
    /// Which manifest.
    pub identifier: ResourceIdentifier,
    /// The member object's status, raw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    /// The member object's own `metadata.generation` when `status` was read (a Flotilla
    /// field): the server judges health and reflects the status with it, so a status that has
    /// not observed the latest spec (`observedGeneration` behind) never reads as healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Interpreted health.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
}

/// Identifies a manifest in a Work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceIdentifier {
    /// Index in `spec.workload.manifests`.
    pub ordinal: i64,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource.
    pub resource: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}
