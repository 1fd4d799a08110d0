//! The kinds Flotilla knows by name: their group, version, plural, short names, scope and
//! whether they have a `status` subresource. The store keys objects by [`ResourceType`]; the API
//! serves discovery from [`builtin_resources`] plus the CustomResourceDefinitions users create.

use serde::{Deserialize, Serialize};

/// Identity and shape of one stored kind. Storage is version-independent: objects are keyed
/// by `group` + `plural`, and each object keeps the `apiVersion` it was written with.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    /// Preferred (storage) version, e.g. `v1alpha2`.
    pub version: String,
    /// Lower-case plural used in URLs, e.g. `resourcebindings`.
    pub plural: String,
    /// Lower-case singular, e.g. `resourcebinding`.
    pub singular: String,
    /// CamelCase kind, e.g. `ResourceBinding`.
    pub kind: String,
    /// Short names accepted by kubectl, e.g. `rb`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// True when objects live in a namespace.
    pub namespaced: bool,
    /// True when `status` is a subresource: updates of the main resource keep the stored
    /// status and `update_status` changes nothing but the status.
    pub status_subresource: bool,
}

impl ResourceType {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` for core), the name Kubernetes uses in messages.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Name of the storage area for this kind; stable across versions.
    pub fn storage_name(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{group}/{}", self.plural)
    }
}

#[allow(clippy::too_many_arguments)]
fn rt(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    namespaced: bool,
    status: bool,
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        plural: plural.to_string(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.to_string(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
        status_subresource: status,
    }
}

/// Group of Karmada's cluster kind.
pub const CLUSTER_GROUP: &str = "cluster.karmada.io";
/// Group of Karmada's policy kinds.
pub const POLICY_GROUP: &str = "policy.karmada.io";
/// Group of Karmada's work and binding kinds.
pub const WORK_GROUP: &str = "work.karmada.io";
/// Group of Karmada's interpreter customizations.
pub const CONFIG_GROUP: &str = "config.karmada.io";
/// Group of Flotilla's own kinds.
pub const FLOTILLA_GROUP: &str = "flotilla.io";

/// Every kind Flotilla serves without a CustomResourceDefinition: Flotilla's own (Karmada's)
/// kinds and the well-known Kubernetes kinds users propagate.
pub fn builtin_resources() -> Vec<ResourceType> {
    builtin_table().to_vec()
}

/// The built-in table, built once: the controllers look kinds up on every reconcile.
fn builtin_table() -> &'static [ResourceType] {
    static TABLE: std::sync::LazyLock<Vec<ResourceType>> = std::sync::LazyLock::new(build_table);
    &TABLE
}

fn build_table() -> Vec<ResourceType> {
    vec![
        // Karmada kinds.
        rt(
            CLUSTER_GROUP,
            "v1alpha1",
            "Cluster",
            "clusters",
            &[],
            false,
            true,
        ),
        rt(
            POLICY_GROUP,
            "v1alpha1",
            "PropagationPolicy",
            "propagationpolicies",
            &["pp"],
            true,
            false,
        ),
        rt(
            POLICY_GROUP,
            "v1alpha1",
            "ClusterPropagationPolicy",
            "clusterpropagationpolicies",
            &["cpp"],
            false,
            false,
        ),
        rt(
            POLICY_GROUP,
            "v1alpha1",
            "ClusterTaintPolicy",
            "clustertaintpolicies",
            &[],
            false,
            false,
        ),
        rt(
            WORK_GROUP,
            "v1alpha2",
            "ResourceBinding",
            "resourcebindings",
            &["rb"],
            true,
            true,
        ),
        rt(
            WORK_GROUP,
            "v1alpha2",
            "ClusterResourceBinding",
            "clusterresourcebindings",
            &["crb"],
            false,
            true,
        ),
        rt(
            WORK_GROUP,
            "v1alpha1",
            "Work",
            "works",
            &["work"],
            true,
            true,
        ),
        rt(
            CONFIG_GROUP,
            "v1alpha1",
            "ResourceInterpreterCustomization",
            "resourceinterpretercustomizations",
            &["ric"],
            false,
            false,
        ),
        // Flotilla's own, none of them stored: the server's API computes each (its table of
        // computed kinds, server/src/api/computed/mod.rs, says how).
        // The eviction brake's state per region, computed on read.
        rt(
            FLOTILLA_GROUP,
            "v1alpha1",
            "EvictionBrake",
            "evictionbrakes",
            &[],
            false,
            false,
        ),
        // The fleet's recent failovers, computed on read from the bindings'
        // `status.failoverHistory`.
        rt(
            FLOTILLA_GROUP,
            "v1alpha1",
            "Failover",
            "failovers",
            &[],
            false,
            false,
        ),
        // The failover dry-run, create only.
        rt(
            crate::simulation::FLOTILLA_GROUP,
            crate::simulation::FLOTILLA_VERSION,
            crate::simulation::FAILOVER_SIMULATION_KIND,
            crate::simulation::FAILOVER_SIMULATIONS,
            &[],
            false,
            false,
        ),
        // core/v1
        rt("", "v1", "Namespace", "namespaces", &["ns"], false, true),
        rt("", "v1", "Event", "events", &["ev"], true, false),
        // Nodes, so that the server can play a member cluster's API (the kube runtime reads
        // their allocatable resources and Ready condition); nothing of Flotilla writes them.
        rt("", "v1", "Node", "nodes", &["no"], false, true),
        rt("", "v1", "ConfigMap", "configmaps", &["cm"], true, false),
        rt("", "v1", "Secret", "secrets", &[], true, false),
        rt(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            true,
            false,
        ),
        rt("", "v1", "Service", "services", &["svc"], true, true),
        rt("", "v1", "Pod", "pods", &["po"], true, true),
        rt(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            &["pvc"],
            true,
            true,
        ),
        rt(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            &["pv"],
            false,
            true,
        ),
        // apps/v1
        rt(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            &["deploy"],
            true,
            true,
        ),
        rt(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            &["sts"],
            true,
            true,
        ),
        rt("apps", "v1", "DaemonSet", "daemonsets", &["ds"], true, true),
        rt(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            &["rs"],
            true,
            true,
        ),
        // batch/v1
        rt("batch", "v1", "Job", "jobs", &[], true, true),
        rt("batch", "v1", "CronJob", "cronjobs", &["cj"], true, true),
        // networking.k8s.io/v1
        rt(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            &["ing"],
            true,
            true,
        ),
        rt(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            &["netpol"],
            true,
            false,
        ),
        // policy/v1
        rt(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            &["pdb"],
            true,
            true,
        ),
        // autoscaling/v2
        rt(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            &["hpa"],
            true,
            true,
        ),
        // rbac.authorization.k8s.io/v1
        rt(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            &[],
            true,
            false,
        ),
        rt(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            &[],
            true,
            false,
        ),
        rt(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            &[],
            false,
            false,
        ),
        rt(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            &[],
            false,
            false,
        ),
        // coordination.k8s.io/v1 (cluster leases of pull members)
        rt(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            true,
            false,
        ),
        // events.k8s.io/v1: the core/v1 Events above, seen in the newer form (the server's
        // API converts; nothing is stored under this group).
        rt(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            &["ev"],
            true,
            false,
        ),
        // apiextensions.k8s.io/v1
        rt(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            false,
            true,
        ),
    ]
}

/// Looks up a built-in kind by group and plural.
pub fn builtin_by_plural(group: &str, plural: &str) -> Option<ResourceType> {
    builtin_table()
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .cloned()
}

/// Looks up a built-in kind by group and kind.
pub fn builtin_by_kind(group: &str, kind: &str) -> Option<ResourceType> {
    builtin_table()
        .iter()
        .find(|r| r.group == group && r.kind == kind)
        .cloned()
}

/// Well-known resource types used throughout the server.
pub mod well_known {
    use super::{builtin_by_plural, ResourceType, CLUSTER_GROUP, POLICY_GROUP, WORK_GROUP};

    fn get(group: &str, plural: &str) -> ResourceType {
        // The table above is static; a missing entry is a programming error caught by tests.
        builtin_by_plural(group, plural).unwrap_or_else(|| panic!("builtin kind {group}/{plural}"))
    }
    /// `cluster.karmada.io/v1alpha1` Cluster.
    pub fn clusters() -> ResourceType {
        get(CLUSTER_GROUP, "clusters")
    }
    /// `policy.karmada.io/v1alpha1` PropagationPolicy.
    pub fn propagation_policies() -> ResourceType {
        get(POLICY_GROUP, "propagationpolicies")
    }
    /// `policy.karmada.io/v1alpha1` ClusterPropagationPolicy.
    pub fn cluster_propagation_policies() -> ResourceType {
        get(POLICY_GROUP, "clusterpropagationpolicies")
    }
    /// `policy.karmada.io/v1alpha1` ClusterTaintPolicy.
    pub fn cluster_taint_policies() -> ResourceType {
        get(POLICY_GROUP, "clustertaintpolicies")
    }
    /// `work.karmada.io/v1alpha2` ResourceBinding.
    pub fn resource_bindings() -> ResourceType {
        get(WORK_GROUP, "resourcebindings")
    }
    /// `work.karmada.io/v1alpha2` ClusterResourceBinding.
    pub fn cluster_resource_bindings() -> ResourceType {
        get(WORK_GROUP, "clusterresourcebindings")
    }
    /// Both binding kinds, each with its Kind: ResourceBinding, then ClusterResourceBinding.
    pub fn binding_kinds() -> [(ResourceType, &'static str); 2] {
        [
            (resource_bindings(), "ResourceBinding"),
            (cluster_resource_bindings(), "ClusterResourceBinding"),
        ]
    }
    /// `work.karmada.io/v1alpha1` Work.
    pub fn works() -> ResourceType {
        get(WORK_GROUP, "works")
    }
    /// `v1` Event.
    pub fn events() -> ResourceType {
        get("", "events")
    }
    /// `v1` ConfigMap.
    pub fn config_maps() -> ResourceType {
        get("", "configmaps")
    }
    /// `v1` Secret (push members' credentials).
    pub fn secrets() -> ResourceType {
        get("", "secrets")
    }
    /// `events.k8s.io/v1` Event (served from the stored `v1` Events).
    pub fn events_v1() -> ResourceType {
        get("events.k8s.io", "events")
    }
    /// `v1` Node.
    pub fn nodes() -> ResourceType {
        get("", "nodes")
    }
    /// `coordination.k8s.io/v1` Lease.
    pub fn leases() -> ResourceType {
        get("coordination.k8s.io", "leases")
    }
    /// `flotilla.io/v1alpha1` FailoverSimulation (create only, never stored).
    pub fn failover_simulations() -> ResourceType {
        get(
            crate::simulation::FLOTILLA_GROUP,
            crate::simulation::FAILOVER_SIMULATIONS,
        )
    }
    /// `apiextensions.k8s.io/v1` CustomResourceDefinition.
    pub fn custom_resource_definitions() -> ResourceType {
        get("apiextensions.k8s.io", "customresourcedefinitions")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_unique_and_well_known_kinds_resolve() {
        let all = builtin_resources();
        let mut seen = std::collections::HashSet::new();
        for r in &all {
            assert!(
                seen.insert(r.storage_name()),
                "duplicate {}",
                r.storage_name()
            );
            assert_eq!(r.singular, r.kind.to_ascii_lowercase());
        }
        assert_eq!(well_known::resource_bindings().short_names, vec!["rb"]);
        assert_eq!(
            well_known::works().api_version(),
            "work.karmada.io/v1alpha1"
        );
        assert_eq!(well_known::events().storage_name(), "core/events");
        well_known::clusters();
        well_known::propagation_policies();
        well_known::cluster_propagation_policies();
        assert!(!well_known::cluster_taint_policies().namespaced);
        well_known::cluster_resource_bindings();
        well_known::leases();
        well_known::custom_resource_definitions();
        assert_eq!(well_known::events_v1().api_version(), "events.k8s.io/v1");
        let nodes = well_known::nodes();
        assert!(!nodes.namespaced && nodes.status_subresource);
        assert_eq!(nodes.short_names, ["no"]);
    }
}
