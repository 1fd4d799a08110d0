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

/// Label on every object Flotilla applies to a member (Karmada's `ManagedByKarmadaLabel`): the
/// mark of ownership. A member runtime never updates or deletes an object without it, unless
/// the Work asks to take it over ([`CONFLICT_RESOLUTION_ANNOTATION`]).
pub const MANAGED_LABEL: &str = "karmada.io/managed";
/// The value of [`MANAGED_LABEL`].
pub const MANAGED_VALUE: &str = "true";
/// Annotation on a member object naming the Work it came from.
pub const WORK_NAME_ANNOTATION: &str = "work.karmada.io/name";
/// Annotation on a member object naming its Work's namespace (the execution namespace).
pub const WORK_NAMESPACE_ANNOTATION: &str = "work.karmada.io/namespace";
/// Annotation on a member object naming its binding.
pub const BINDING_NAME_ANNOTATION: &str = "resourcebinding.karmada.io/name";
/// Annotation on a member object naming its binding's namespace (namespaced bindings only).
pub const BINDING_NAMESPACE_ANNOTATION: &str = "resourcebinding.karmada.io/namespace";
/// Annotation on a member object: the uid of the resource template it was made from.
pub const TEMPLATE_UID_ANNOTATION: &str = "resourcetemplate.karmada.io/uid";
/// Annotation on a manifest: what to do when the member already holds an object of that name
/// that Flotilla did not create: `abort` (the default: leave it, report a conflict) or
/// `overwrite` (take it over). Set on the template by the user, or from the binding's
/// `spec.conflictResolution`; the template's wins, as in Karmada.
pub const CONFLICT_RESOLUTION_ANNOTATION: &str = "work.karmada.io/conflict-resolution";
/// [`CONFLICT_RESOLUTION_ANNOTATION`]: take the object over.
pub const CONFLICT_OVERWRITE: &str = "overwrite";
/// [`CONFLICT_RESOLUTION_ANNOTATION`]: leave a foreign object alone (the default).
pub const CONFLICT_ABORT: &str = "abort";

/// Where a manifest comes from: what [`stamp_member_marks`] writes on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberMarks<'a> {
    /// The Work's name.
    pub work_name: &'a str,
    /// The Work's namespace (the cluster's execution namespace).
    pub work_namespace: &'a str,
    /// The binding's name.
    pub binding_name: &'a str,
    /// The binding's namespace; empty for a ClusterResourceBinding.
    pub binding_namespace: &'a str,
    /// The resource template's uid; empty when unknown.
    pub template_uid: &'a str,
    /// [`CONFLICT_OVERWRITE`] or [`CONFLICT_ABORT`] from the binding, when it says; a value
    /// already on the manifest (the template's own) is kept.
    pub conflict_resolution: Option<&'static str>,
}

/// Writes Karmada's ownership marks on a manifest bound for a member: the managed label and
/// the annotations naming its Work, binding and template, and the conflict resolution. A
/// member runtime reads them to tell its own objects from foreign ones (and to delete only
/// its own). Does nothing to a manifest that is not a JSON object.
pub fn stamp_member_marks(manifest: &mut serde_json::Value, marks: &MemberMarks<'_>) {
    use serde_json::{Map, Value};
    let Some(obj) = manifest.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    object_at(meta, "labels").insert(MANAGED_LABEL.into(), MANAGED_VALUE.into());
    let annotations = object_at(meta, "annotations");
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            annotations.insert(k.into(), v.into());
        }
    };
    put(WORK_NAME_ANNOTATION, marks.work_name);
    put(WORK_NAMESPACE_ANNOTATION, marks.work_namespace);
    put(BINDING_NAME_ANNOTATION, marks.binding_name);
    put(BINDING_NAMESPACE_ANNOTATION, marks.binding_namespace);
    put(TEMPLATE_UID_ANNOTATION, marks.template_uid);
    if let Some(c) = marks.conflict_resolution {
        annotations
            .entry(CONFLICT_RESOLUTION_ANNOTATION.to_string())
            .or_insert_with(|| c.into());
    }
}

/// The object under `key`, made an empty one when absent or not an object.
fn object_at<'m>(
    map: &'m mut serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> &'m mut serde_json::Map<String, serde_json::Value> {
    use serde_json::{Map, Value};
    let v = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("made an object just above"),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn marks(conflict: Option<&'static str>) -> MemberMarks<'static> {
        MemberMarks {
            work_name: "nginx-687f7fb96f",
            work_namespace: "karmada-es-member1",
            binding_name: "nginx-deployment",
            binding_namespace: "default",
            template_uid: "u-1",
            conflict_resolution: conflict,
        }
    }

    #[test]
    fn member_marks_are_stamped_and_the_templates_own_resolution_wins() {
        let cases: [(&str, Value, Option<&'static str>, Value); 5] = [
            (
                "bare manifest",
                json!({"kind": "Deployment", "metadata": {"name": "nginx"}}),
                None,
                json!({"kind": "Deployment", "metadata": {"name": "nginx",
                    "labels": {MANAGED_LABEL: "true"},
                    "annotations": {WORK_NAME_ANNOTATION: "nginx-687f7fb96f",
                        WORK_NAMESPACE_ANNOTATION: "karmada-es-member1",
                        BINDING_NAME_ANNOTATION: "nginx-deployment",
                        BINDING_NAMESPACE_ANNOTATION: "default",
                        TEMPLATE_UID_ANNOTATION: "u-1"}}}),
            ),
            (
                "the binding's resolution is written",
                json!({"metadata": {"name": "n", "labels": {"app": "x"}}}),
                Some(CONFLICT_OVERWRITE),
                json!({"metadata": {"name": "n", "labels": {"app": "x", MANAGED_LABEL: "true"},
                    "annotations": {WORK_NAME_ANNOTATION: "nginx-687f7fb96f",
                        WORK_NAMESPACE_ANNOTATION: "karmada-es-member1",
                        BINDING_NAME_ANNOTATION: "nginx-deployment",
                        BINDING_NAMESPACE_ANNOTATION: "default",
                        TEMPLATE_UID_ANNOTATION: "u-1",
                        CONFLICT_RESOLUTION_ANNOTATION: "overwrite"}}}),
            ),
            (
                "the template's own resolution is kept",
                json!({"metadata": {"name": "n",
                    "annotations": {CONFLICT_RESOLUTION_ANNOTATION: "abort"}}}),
                Some(CONFLICT_OVERWRITE),
                json!({"metadata": {"name": "n", "labels": {MANAGED_LABEL: "true"},
                    "annotations": {CONFLICT_RESOLUTION_ANNOTATION: "abort",
                        WORK_NAME_ANNOTATION: "nginx-687f7fb96f",
                        WORK_NAMESPACE_ANNOTATION: "karmada-es-member1",
                        BINDING_NAME_ANNOTATION: "nginx-deployment",
                        BINDING_NAMESPACE_ANNOTATION: "default",
                        TEMPLATE_UID_ANNOTATION: "u-1"}}}),
            ),
            (
                "malformed labels are replaced",
                json!({"metadata": {"name": "n", "labels": "oops", "annotations": null}}),
                None,
                json!({"metadata": {"name": "n", "labels": {MANAGED_LABEL: "true"},
                    "annotations": {WORK_NAME_ANNOTATION: "nginx-687f7fb96f",
                        WORK_NAMESPACE_ANNOTATION: "karmada-es-member1",
                        BINDING_NAME_ANNOTATION: "nginx-deployment",
                        BINDING_NAMESPACE_ANNOTATION: "default",
                        TEMPLATE_UID_ANNOTATION: "u-1"}}}),
            ),
            ("not an object", json!([1]), None, json!([1])),
        ];
        for (what, mut manifest, conflict, want) in cases {
            stamp_member_marks(&mut manifest, &marks(conflict));
            assert_eq!(manifest, want, "{what}");
        }
    }

    #[test]
    fn empty_marks_are_left_out() {
        let mut m = json!({"metadata": {"name": "n"}});
        stamp_member_marks(
            &mut m,
            &MemberMarks {
                work_name: "w",
                work_namespace: "karmada-es-a",
                binding_name: "crb",
                ..MemberMarks::default()
            },
        );
        assert_eq!(
            m["metadata"]["annotations"],
            json!({WORK_NAME_ANNOTATION: "w", WORK_NAMESPACE_ANNOTATION: "karmada-es-a",
                BINDING_NAME_ANNOTATION: "crb"})
        );
    }
}
