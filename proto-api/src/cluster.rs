//! `cluster.karmada.io/v1alpha1` Cluster: a member cluster, how to reach it (push or pull), its
//! placement attributes (provider, region, zones, labels), its taints, and the status the
//! health and status controllers report. Also the well-known taint keys and the API-enablement
//! question the scheduler asks of a cluster.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::meta::{impl_object, is_condition_true, Condition, ObjectMeta, Time};
use crate::quantity::ResourceList;

/// `apiVersion` of Cluster.
pub const CLUSTER_API_VERSION: &str = "cluster.karmada.io/v1alpha1";

/// Taint key set while a cluster's `Ready` condition is `False`.
pub const TAINT_CLUSTER_NOT_READY: &str = "cluster.karmada.io/not-ready";
/// Taint key set while a cluster's `Ready` condition is `Unknown`.
pub const TAINT_CLUSTER_UNREACHABLE: &str = "cluster.karmada.io/unreachable";
/// Taint key a user sets to cordon a cluster (never set by controllers).
pub const TAINT_CLUSTER_UNSCHEDULABLE: &str = "cluster.karmada.io/unschedulable";

/// Condition type: the cluster is healthy and reachable.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: `status.apiEnablements` lists every API the member serves.
pub const CONDITION_COMPLETE_API_ENABLEMENTS: &str = "CompleteAPIEnablements";

/// Prefix of the per-cluster execution namespace (`karmada-es-<cluster>`).
pub const EXECUTION_NAMESPACE_PREFIX: &str = "karmada-es-";
/// Namespace of pull clusters' leases.
pub const CLUSTER_LEASE_NAMESPACE: &str = "karmada-cluster";
/// Finalizer that keeps a deleted Cluster until its bindings left it and its Works are gone
/// (Karmada's cluster controller's name for it).
pub const CLUSTER_CONTROLLER_FINALIZER: &str = "karmada.io/cluster-controller";

/// The execution namespace that holds a cluster's Works.
pub fn execution_namespace(cluster: &str) -> String {
    format!("{EXECUTION_NAMESPACE_PREFIX}{cluster}")
}

/// The cluster a namespace executes for, if it is an execution namespace.
pub fn cluster_of_execution_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(EXECUTION_NAMESPACE_PREFIX)
        .filter(|c| !c.is_empty())
}

/// A member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cluster {
    /// `cluster.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `Cluster`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata; labels are what cluster label selectors match.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: ClusterSpec,
    /// Observed state.
    #[serde(skip_serializing_if = "ClusterStatus::is_empty")]
    pub status: ClusterStatus,
}

impl_object!(Cluster, CLUSTER_API_VERSION, "Cluster");

impl Cluster {
    /// A cluster with `apiVersion` and `kind` filled in.
    pub fn new(name: &str, spec: ClusterSpec) -> Self {
        Cluster {
            api_version: CLUSTER_API_VERSION.to_string(),
            kind: "Cluster".to_string(),
            metadata: ObjectMeta::named("", name),
            spec,
            status: ClusterStatus::default(),
        }
    }

    /// Whether the cluster serves `kind` in `group_version` (e.g. `apps/v1`, `Deployment`):
    /// listed ⇒ Enabled; else Disabled when `CompleteAPIEnablements` is True; else Unknown.
    pub fn api_enablement(&self, group_version: &str, kind: &str) -> ApiEnablementStatus {
        let listed = self.status.api_enablements.iter().any(|e| {
            e.group_version == group_version && e.resources.iter().any(|r| r.kind == kind)
        });
        if listed {
            ApiEnablementStatus::Enabled
        } else if is_condition_true(&self.status.conditions, CONDITION_COMPLETE_API_ENABLEMENTS) {
            ApiEnablementStatus::Disabled
        } else {
            ApiEnablementStatus::Unknown
        }
    }

    /// The status of the `Ready` condition, if any.
    pub fn ready_condition(&self) -> Option<&Condition> {
        crate::meta::find_condition(&self.status.conditions, CONDITION_READY)
    }

    /// True when `Ready` is True.
    pub fn is_ready(&self) -> bool {
        is_condition_true(&self.status.conditions, CONDITION_READY)
    }
}

/// Answer of [`Cluster::api_enablement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiEnablementStatus {
    /// The API is listed in `status.apiEnablements`.
    Enabled,
    /// Not listed, and the list is complete.
    Disabled,
    /// Not listed, and the list may be incomplete.
    Unknown,
}

/// How the control plane reaches a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncMode {
    /// The control plane talks to the member's API endpoint.
    Push,
    /// An agent in the member pulls its works.
    Pull,
}

/// Cluster spec (`ClusterSpec`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterSpec {
    /// Unique id of the member (e.g. its kube-system namespace uid).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Push or Pull (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_mode: Option<SyncMode>,
    /// Member API endpoint (host, host:port, IP, IP:port or URL).
    #[serde(rename = "apiEndpoint", skip_serializing_if = "String::is_empty")]
    pub api_endpoint: String,
    /// Secret with the member's token and CA bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalSecretReference>,
    /// Secret with the impersonator's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonator_secret_ref: Option<LocalSecretReference>,
    /// Skip TLS verification of the member endpoint.
    #[serde(
        rename = "insecureSkipTLSVerification",
        skip_serializing_if = "is_false"
    )]
    pub insecure_skip_tls_verification: bool,
    /// Proxy used to reach the member.
    #[serde(rename = "proxyURL", skip_serializing_if = "String::is_empty")]
    pub proxy_url: String,
    /// Headers sent to the proxy.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_header: BTreeMap<String, String>,
    /// Cloud provider name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// Region.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Deprecated single zone; defaulting moves it into `zones`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub zone: String,
    /// Zones.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Taints: NoSchedule keeps new work away, NoExecute evicts work that does not tolerate it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Resource-model grades, kept as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_models: Vec<serde_json::Value>,
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Reference to a secret by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalSecretReference {
    /// Namespace of the secret.
    pub namespace: String,
    /// Name of the secret.
    pub name: String,
}

/// Effect of a taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New work is not scheduled unless tolerated.
    NoSchedule,
    /// The scheduler avoids the cluster if it can (ignored by Flotilla's filters).
    PreferNoSchedule,
    /// Work that does not tolerate it is evicted.
    NoExecute,
}

impl TaintEffect {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cluster taint (`corev1.Taint`). Taints are identified by key and effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
    /// When the taint was added (set for NoExecute taints by defaulting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl Taint {
    /// A taint without value or time.
    pub fn new(key: &str, effect: TaintEffect) -> Self {
        Taint {
            key: key.to_string(),
            value: String::new(),
            effect,
            time_added: None,
        }
    }

    /// True when `other` has the same key and effect (`corev1.Taint.MatchTaint`).
    pub fn same_identity(&self, other: &Taint) -> bool {
        self.key == other.key && self.effect == other.effect
    }
}

impl fmt::Display for Taint {
    /// `{key=value:Effect}` as Kubernetes prints taints in scheduler messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}={}:{}}}", self.key, self.value, self.effect)
    }
}

/// Observed state of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterStatus {
    /// Member Kubernetes version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kubernetes_version: String,
    /// APIs the member serves, sorted by group version then resource name.
    #[serde(rename = "apiEnablements", skip_serializing_if = "Vec::is_empty")]
    pub api_enablements: Vec<ApiEnablement>,
    /// `Ready`, `CompleteAPIEnablements`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Node counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_summary: Option<NodeSummary>,
    /// Resource totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_summary: Option<ResourceSummary>,
    /// Remedy actions in force.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remedy_actions: Vec<String>,
}

impl ClusterStatus {
    /// True when nothing has been reported.
    pub fn is_empty(&self) -> bool {
        *self == ClusterStatus::default()
    }
}

/// One group version's resources.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiEnablement {
    /// e.g. `apps/v1`.
    pub group_version: String,
    /// Resources of that group version.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApiResource>,
}

/// One served resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiResource {
    /// Plural resource name.
    pub name: String,
    /// Kind.
    pub kind: String,
}

/// Node counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSummary {
    /// All nodes.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub total_num: i32,
    /// Ready nodes.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub ready_num: i32,
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// Resource totals of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSummary {
    /// Σ node allocatable.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: ResourceList,
    /// Σ requests of pods not yet placed on a node (plus their count as `pods`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocating: ResourceList,
    /// Σ requests of placed, unfinished pods (plus their count as `pods`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: ResourceList,
    /// Node counts per resource-model grade.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocatable_modelings: Vec<AllocatableModeling>,
}

/// How many nodes fall in one resource-model grade.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllocatableModeling {
    /// Grade index.
    pub grade: u32,
    /// Number of nodes.
    pub count: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::ConditionStatus;

    #[test]
    fn wire_names_match_karmada() {
        let json = serde_json::json!({
            "apiVersion": "cluster.karmada.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "member1"},
            "spec": {
                "syncMode": "Push",
                "apiEndpoint": "https://10.0.0.1:6443",
                "secretRef": {"namespace": "karmada-cluster", "name": "member1"},
                "insecureSkipTLSVerification": true,
                "proxyURL": "http://proxy:3128",
                "zones": ["a"],
                "taints": [{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute",
                            "timeAdded": "2024-05-01T10:00:00Z"}]
            },
            "status": {
                "kubernetesVersion": "v1.29.0",
                "apiEnablements": [{"groupVersion": "apps/v1",
                                    "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                "nodeSummary": {"totalNum": 3, "readyNum": 3},
                "resourceSummary": {"allocatable": {"cpu": "12", "pods": "330"},
                                    "allocatableModelings": [{"grade": 0, "count": 2}]}
            }
        });
        let c: Cluster = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(c.spec.sync_mode, Some(SyncMode::Push));
        assert!(c.spec.insecure_skip_tls_verification);
        assert_eq!(c.spec.taints[0].effect, TaintEffect::NoExecute);
        assert_eq!(serde_json::to_value(&c).unwrap(), json);
    }

    #[test]
    fn api_enablement_rules() {
        let mut c = Cluster::new("m", ClusterSpec::default());
        c.status.api_enablements = vec![ApiEnablement {
            group_version: "apps/v1".into(),
            resources: vec![ApiResource {
                name: "deployments".into(),
                kind: "Deployment".into(),
            }],
        }];
        assert_eq!(
            c.api_enablement("apps/v1", "Deployment"),
            ApiEnablementStatus::Enabled
        );
        assert_eq!(
            c.api_enablement("apps/v1", "StatefulSet"),
            ApiEnablementStatus::Unknown
        );
        c.status.conditions.push(Condition::new(
            CONDITION_COMPLETE_API_ENABLEMENTS,
            ConditionStatus::True,
            "Complete",
            "",
        ));
        assert_eq!(
            c.api_enablement("apps/v1", "StatefulSet"),
            ApiEnablementStatus::Disabled
        );
        assert_eq!(
            c.api_enablement("apps/v1", "Deployment"),
            ApiEnablementStatus::Enabled
        );
    }

    #[test]
    fn execution_namespaces() {
        assert_eq!(execution_namespace("member1"), "karmada-es-member1");
        assert_eq!(
            cluster_of_execution_namespace("karmada-es-member1"),
            Some("member1")
        );
        assert_eq!(cluster_of_execution_namespace("karmada-es-"), None);
        assert_eq!(cluster_of_execution_namespace("default"), None);
        let t = Taint::new(TAINT_CLUSTER_NOT_READY, TaintEffect::NoSchedule);
        assert_eq!(t.to_string(), "{cluster.karmada.io/not-ready=:NoSchedule}");
    }
}
