//! Placement (`spec.placement`): which clusters may run a workload (affinity, tolerations),
//! how many groups it spreads over, and how replicas are scheduled (duplicated, or divided by
//! static or dynamic weight). Also `corev1.Toleration`, used here and by bindings.

use serde::{Deserialize, Serialize};

use crate::cluster::TaintEffect;
use crate::selector::{LabelSelector, NodeSelectorRequirement};

/// `spec.placement`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Placement {
    /// Which clusters are allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Ordered alternative affinity groups (cannot co-exist with `clusterAffinity`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_affinities: Vec<ClusterAffinityTerm>,
    /// Cluster taints tolerated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// How many groups (clusters, regions, ...) to spread over.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// How replicas are scheduled; `None` means Duplicated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaSchedulingStrategy>,
    /// Inter-workload affinity (alpha; not used for failover).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_affinity: Option<WorkloadAffinity>,
}

impl Placement {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Placement::default()
    }

    /// The effective scheduling type: Duplicated when `replicaScheduling` is absent.
    pub fn replica_scheduling_type(&self) -> ReplicaSchedulingType {
        self.replica_scheduling
            .as_ref()
            .and_then(|r| r.replica_scheduling_type)
            .unwrap_or(ReplicaSchedulingType::Duplicated)
    }
}

/// `clusterAffinity`: all set parts must hold; empty matches every cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAffinity {
    /// Over cluster labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Over `provider`, `region`, `zone`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// Allowed names (empty = any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Excluded names.
    #[serde(rename = "exclude", skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl ClusterAffinity {
    /// True when no part is set.
    pub fn is_empty(&self) -> bool {
        *self == ClusterAffinity::default()
    }
}

/// Karmada's cluster `fieldSelector`: node-selector requirements on `provider`, `region` and
/// `zone`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FieldSelector {
    /// All must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

/// Keys allowed in a cluster field selector.
pub const FIELD_SELECTOR_KEYS: [&str; 3] = ["provider", "region", "zone"];

/// One entry of `clusterAffinities`: a named affinity with optional overflow tiers. The inline
/// affinity fields are spelled out (not flattened) so every known field stays visible to the
/// strict field check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAffinityTerm {
    /// Name of the group (1–32 chars, label-key syntax, unique in the policy).
    pub affinity_name: String,
    /// Inline affinity: label selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Inline affinity: field selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// Inline affinity: allowed names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Inline affinity: excluded names.
    #[serde(rename = "exclude", skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Further tiers used when this group runs out of capacity.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overflow_affinities: Vec<OverflowClusterAffinity>,
}

impl ClusterAffinityTerm {
    /// The inline affinity.
    pub fn affinity(&self) -> ClusterAffinity {
        ClusterAffinity {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            cluster_names: self.cluster_names.clone(),
            exclude: self.exclude.clone(),
        }
    }
}

/// One overflow tier of a [`ClusterAffinityTerm`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OverflowClusterAffinity {
    /// Name of the tier.
    pub affinity_name: String,
    /// Label selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Field selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// Allowed names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Excluded names.
    #[serde(rename = "exclude", skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl OverflowClusterAffinity {
    /// The tier's affinity.
    pub fn affinity(&self) -> ClusterAffinity {
        ClusterAffinity {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            cluster_names: self.cluster_names.clone(),
            exclude: self.exclude.clone(),
        }
    }
}

/// Operator of a toleration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Value must equal the taint's (the default when absent).
    Equal,
    /// Any value.
    Exists,
    /// Numeric comparison: never matches and is rejected in cluster tolerations.
    Lt,
    /// Numeric comparison: never matches and is rejected in cluster tolerations.
    Gt,
}

impl TolerationOperator {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            TolerationOperator::Equal => "Equal",
            TolerationOperator::Exists => "Exists",
            TolerationOperator::Lt => "Lt",
            TolerationOperator::Gt => "Gt",
        }
    }
}

/// `corev1.Toleration`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates every taint.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// Value for `Equal`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect tolerated; absent tolerates every effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// How long a NoExecute taint is tolerated; absent = forever, ≤ 0 = not at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// `key` / `Exists` / `effect`, optionally with seconds.
    pub fn exists(key: &str, effect: Option<TaintEffect>, seconds: Option<i64>) -> Self {
        Toleration {
            key: key.to_string(),
            operator: Some(TolerationOperator::Exists),
            value: String::new(),
            effect,
            toleration_seconds: seconds,
        }
    }
}

/// Field a spread constraint groups clusters by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpreadByField {
    /// Each cluster is a group.
    Cluster,
    /// `spec.region`.
    Region,
    /// `spec.zones`.
    Zone,
    /// `spec.provider`.
    Provider,
}

impl SpreadByField {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            SpreadByField::Cluster => "cluster",
            SpreadByField::Region => "region",
            SpreadByField::Zone => "zone",
            SpreadByField::Provider => "provider",
        }
    }
}

/// One spread constraint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SpreadConstraint {
    /// Group by a cluster field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread_by_field: Option<SpreadByField>,
    /// Group by a cluster label (cannot co-exist with `spreadByField`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spread_by_label: String,
    /// At most this many groups (0 = unset).
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub max_groups: i64,
    /// At least this many groups (defaulted to 1).
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub min_groups: i64,
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

/// Duplicated or Divided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaSchedulingType {
    /// Every selected cluster runs all replicas.
    Duplicated,
    /// Replicas are divided between the selected clusters.
    Divided,
}

/// How Divided replicas are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaDivisionPreference {
    /// As few clusters as capacity allows.
    Aggregated,
    /// By weight.
    Weighted,
}

/// Source of dynamic weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DynamicWeightFactor {
    /// Weight = replicas a cluster can still take.
    AvailableReplicas,
}

/// `replicaScheduling`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaSchedulingStrategy {
    /// Duplicated or Divided (defaulted to Divided when the struct is present).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_scheduling_type: Option<ReplicaSchedulingType>,
    /// For Divided: Aggregated or Weighted (defaulted to Weighted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_division_preference: Option<ReplicaDivisionPreference>,
    /// For Weighted: static or dynamic weights (absent = equal weights).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<ClusterPreferences>,
}

/// `weightPreference`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterPreferences {
    /// Static weights per matching clusters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub static_weight_list: Vec<StaticClusterWeight>,
    /// Dynamic weights; when set the static list is ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_weight: Option<DynamicWeightFactor>,
}

/// One static weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StaticClusterWeight {
    /// Clusters the weight applies to.
    pub target_cluster: ClusterAffinity,
    /// Weight, at least 1.
    pub weight: i64,
}

/// `workloadAffinity` (alpha).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadAffinity {
    /// Co-locate workloads sharing the label value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<WorkloadAffinityTerm>,
    /// Separate workloads sharing the label value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<WorkloadAffinityTerm>,
}

/// One workload affinity term.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadAffinityTerm {
    /// Label key on the resource template that names the group.
    pub group_by_label_key: String,
}
