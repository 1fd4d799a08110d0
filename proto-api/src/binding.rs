//! `work.karmada.io/v1alpha2` ResourceBinding and ClusterResourceBinding: one resource template
//! bound to its policy's placement, the scheduler's result (`spec.clusters`), the graceful
//! eviction tasks of clusters it is leaving, and the status aggregated from its Works. Also the
//! pure spec helpers controllers share, such as [`ResourceBindingSpec::graceful_evict_cluster`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::meta::{impl_object, Condition, ObjectMeta, Time};
use crate::policy::{ConflictResolution, FailoverBehavior, Placement, PurgeMode, Toleration};
use crate::quantity::ResourceList;
use crate::work::ResourceHealth;

/// `apiVersion` of the binding kinds.
pub const BINDING_API_VERSION: &str = "work.karmada.io/v1alpha2";
/// Label carrying a ResourceBinding's permanent id.
pub const RB_PERMANENT_ID_LABEL: &str = "resourcebinding.karmada.io/permanent-id";
/// Label carrying a ClusterResourceBinding's permanent id.
pub const CRB_PERMANENT_ID_LABEL: &str = "clusterresourcebinding.karmada.io/permanent-id";

/// Condition type: the scheduler placed the binding.
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// Condition type: every target cluster applied the resource.
pub const CONDITION_FULLY_APPLIED: &str = "FullyApplied";
/// `Scheduled` reason: success.
pub const REASON_SUCCESS: &str = "Success";
/// `Scheduled` reason: no cluster passed the filters.
pub const REASON_NO_CLUSTER_FIT: &str = "NoClusterFit";
/// `Scheduled` reason: not enough capacity.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// `Scheduled` reason: internal error.
pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";
/// `FullyApplied` reason when true.
pub const REASON_FULLY_APPLIED_SUCCESS: &str = "FullyAppliedSuccess";

/// Eviction reason: the cluster has a NoExecute taint the binding does not tolerate.
pub const EVICTION_REASON_TAINT_UNTOLERATED: &str = "TaintUntolerated";
/// Eviction reason: the application stayed unhealthy.
pub const EVICTION_REASON_APPLICATION_FAILURE: &str = "ApplicationFailure";
/// Eviction reason (Flotilla): the workload moves back to a cluster it was failed over from
/// (`spec.failover.cluster.failback`); the task keeps the temporary copy until the returning
/// one is Healthy.
pub const EVICTION_REASON_FAILBACK: &str = "Failback";
/// Eviction producer (Flotilla): the failback controller.
pub const EVICTION_PRODUCER_FAILBACK: &str = "Failback";
/// Eviction producer: the taint manager.
pub const EVICTION_PRODUCER_TAINT_MANAGER: &str = "TaintManager";
/// Eviction producer: application failover of ResourceBindings.
pub const EVICTION_PRODUCER_RB_APPLICATION_FAILOVER: &str =
    "resource-binding-application-failover-controller";
/// Eviction producer: application failover of ClusterResourceBindings.
pub const EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER: &str =
    "cluster-resource-binding-application-failover-controller";

/// A namespaced binding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceBinding {
    /// `work.karmada.io/v1alpha2`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `ResourceBinding`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: ResourceBindingSpec,
    /// Observed state.
    #[serde(skip_serializing_if = "ResourceBindingStatus::is_empty")]
    pub status: ResourceBindingStatus,
}

impl_object!(ResourceBinding, BINDING_API_VERSION, "ResourceBinding");

impl ResourceBinding {
    /// A binding with `apiVersion` and `kind` filled in.
    pub fn new(namespace: &str, name: &str, spec: ResourceBindingSpec) -> Self {
        ResourceBinding {
            api_version: BINDING_API_VERSION.to_string(),
            kind: "ResourceBinding".to_string(),
            metadata: ObjectMeta::named(namespace, name),
            spec,
            status: ResourceBindingStatus::default(),
        }
    }
}

/// A cluster-scoped binding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterResourceBinding {
    /// `work.karmada.io/v1alpha2`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `ClusterResourceBinding`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: ResourceBindingSpec,
    /// Observed state.
    #[serde(skip_serializing_if = "ResourceBindingStatus::is_empty")]
    pub status: ResourceBindingStatus,
}

impl_object!(
    ClusterResourceBinding,
    BINDING_API_VERSION,
    "ClusterResourceBinding"
);

impl ClusterResourceBinding {
    /// A binding with `apiVersion` and `kind` filled in.
    pub fn new(name: &str, spec: ResourceBindingSpec) -> Self {
        ClusterResourceBinding {
            api_version: BINDING_API_VERSION.to_string(),
            kind: "ClusterResourceBinding".to_string(),
            metadata: ObjectMeta::named("", name),
            spec,
            status: ResourceBindingStatus::default(),
        }
    }
}

/// `spec` of both binding kinds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceBindingSpec {
    /// The resource template.
    pub resource: ObjectReference,
    /// Dependencies follow the workload.
    #[serde(skip_serializing_if = "crate::cluster::is_false")]
    pub propagate_deps: bool,
    /// What each replica needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
    /// Replicas of the template (0 for non-workloads).
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Multi-template components, kept as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<serde_json::Value>,
    /// The scheduling result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<TargetCluster>,
    /// Copy of the policy's placement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Clusters being left, with how their old copy is purged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub graceful_eviction_tasks: Vec<GracefulEvictionTask>,
    /// Bindings that depend on this resource and where they run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub required_by: Vec<BindingSnapshot>,
    /// Scheduler responsible.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// Copy of the policy's failover behaviour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,
    /// Copy of the policy's conflict resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,
    /// A manual reschedule request; acts when later than `status.lastScheduledTime`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reschedule_triggered_at: Option<Time>,
    /// Suspended dispatching or scheduling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspension: Option<BindingSuspension>,
    /// Keep member resources when the template is deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    /// Resolved scheduling priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_priority: Option<BindingSchedulePriority>,
    /// Workload affinity groups (alpha), kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_affinity_groups: Option<serde_json::Value>,
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// Reference to the resource template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference {
    /// apiVersion (required).
    pub api_version: String,
    /// Kind (required).
    pub kind: String,
    /// Namespace (empty for cluster-scoped templates).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name (required).
    pub name: String,
    /// uid of the template.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// resourceVersion of the template.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// Requirements of each replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaRequirements {
    /// Node constraints of each replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<NodeClaim>,
    /// Resources each replica requests.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_request: ResourceList,
    /// Namespace of the workload.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// PriorityClass of the workload.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub priority_class_name: String,
}

/// Node constraints of each replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeClaim {
    /// Required node affinity (`corev1.NodeSelector`), kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard_node_affinity: Option<serde_json::Value>,
    /// Node selector.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// One target cluster of the scheduling result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TargetCluster {
    /// Cluster name.
    pub name: String,
    /// Replicas assigned.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Per-component replicas, kept as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<serde_json::Value>,
}

impl TargetCluster {
    /// A target with a replica count.
    pub fn new(name: &str, replicas: i32) -> Self {
        TargetCluster {
            name: name.to_string(),
            replicas,
            components: Vec::new(),
        }
    }
}

/// A cluster being left and how its copy is purged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GracefulEvictionTask {
    /// The evicted cluster (required).
    pub from_cluster: String,
    /// How the old copy goes (absent behaves as Graciously).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// Replicas the cluster had (absent if 0 or not a workload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// CamelCase reason (required).
    pub reason: String,
    /// Human-readable message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Controller that evicted (required).
    pub producer: String,
    /// Per-task timeout, overriding the server-wide graceful eviction timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// True keeps the old copy until a human sets false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppress_deletion: Option<bool>,
    /// Labels to inject on the new cluster's manifest.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved_label_state: BTreeMap<String, String>,
    /// `spec.clusters` before the failover.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters_before_failover: Vec<String>,
    /// Set by the graceful eviction controller when it first sees the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
}

impl GracefulEvictionTask {
    /// The effective purge mode (absent = Graciously).
    pub fn effective_purge_mode(&self) -> PurgeMode {
        self.purge_mode.unwrap_or(PurgeMode::Graciously)
    }
}

/// A dependent binding and its clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BindingSnapshot {
    /// Namespace (empty for ClusterResourceBindings).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its scheduling result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<TargetCluster>,
}

/// `suspension` of a binding: the policy's plus `scheduling`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BindingSuspension {
    /// Suspend dispatching to every cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatching: Option<bool>,
    /// Suspend dispatching to these clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatching_on_clusters: Option<crate::policy::SuspendClusters>,
    /// Suspend scheduling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<bool>,
}

/// Resolved priority of a binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BindingSchedulePriority {
    /// Priority value.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
}

/// `status` of both binding kinds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceBindingStatus {
    /// The generation the scheduler last acted on.
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub scheduler_observed_generation: i64,
    /// The `clusterAffinities` term in use.
    #[serde(
        rename = "schedulerObservingAffinityName",
        skip_serializing_if = "String::is_empty"
    )]
    pub scheduler_observed_affinity_name: String,
    /// When the scheduler last succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_scheduled_time: Option<Time>,
    /// `Scheduled`, `FullyApplied`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Per-cluster status, sorted by cluster name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aggregated_status: Vec<AggregatedStatusItem>,
    /// The last failovers of this binding, oldest first, at most
    /// [`crate::history::FAILOVER_HISTORY_LIMIT`] (Karmada's alpha `failoverHistory`, with
    /// Flotilla's extra fields; see [`crate::history`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failover_history: Vec<crate::history::FailoverHistoryItem>,
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

impl ResourceBindingStatus {
    /// True when nothing has been reported.
    pub fn is_empty(&self) -> bool {
        *self == ResourceBindingStatus::default()
    }
}

/// Status of the resource on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AggregatedStatusItem {
    /// Cluster name (required).
    pub cluster_name: String,
    /// The member object's status, raw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    /// Applied on the member.
    #[serde(skip_serializing_if = "crate::cluster::is_false")]
    pub applied: bool,
    /// Why applying failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub applied_message: String,
    /// Interpreted health.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
}

/// What goes into an eviction task besides the cluster (Karmada's `TaskOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvictionOptions {
    /// Purge mode of the task.
    pub purge_mode: Option<PurgeMode>,
    /// Controller evicting.
    pub producer: String,
    /// CamelCase reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Per-task timeout.
    pub grace_period_seconds: Option<i32>,
    /// Keep the old copy until a human says otherwise.
    pub suppress_deletion: Option<bool>,
    /// Labels for the new cluster's manifest.
    pub preserved_label_state: BTreeMap<String, String>,
    /// `spec.clusters` before the failover.
    pub clusters_before_failover: Vec<String>,
}

/// What [`ResourceBindingSpec::graceful_evict_cluster`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictOutcome {
    /// The cluster was not in `spec.clusters`: nothing changed.
    NotScheduled,
    /// The cluster was removed; a task for it already existed, so none was added.
    RemovedWithExistingTask,
    /// The cluster was removed and a task appended.
    Evicted,
}

impl ResourceBindingSpec {
    /// True when `spec.clusters` names the cluster.
    pub fn targets(&self, cluster: &str) -> bool {
        self.clusters.iter().any(|c| c.name == cluster)
    }

    /// True when an eviction task exists for the cluster.
    pub fn is_evicting(&self, cluster: &str) -> bool {
        self.graceful_eviction_tasks
            .iter()
            .any(|t| t.from_cluster == cluster)
    }

    /// The replicas a workload binding assigns to `cluster` now (`None` for a binding that
    /// is no workload, or a cluster outside `spec.clusters`).
    pub fn workload_replicas_on(&self, cluster: &str) -> Option<i32> {
        if self.replicas <= 0 {
            return None;
        }
        self.clusters
            .iter()
            .find(|c| c.name == cluster)
            .map(|c| c.replicas)
    }

    /// Σ replicas in `spec.clusters`.
    pub fn assigned_replicas(&self) -> i64 {
        self.clusters.iter().map(|c| i64::from(c.replicas)).sum()
    }

    /// Karmada's `GracefulEvictCluster`: removes the cluster from `spec.clusters` and, unless a
    /// task for it exists, appends a task carrying `opts` and the replicas the cluster had
    /// (only when > 0). The task has no `creationTimestamp`: the graceful eviction controller
    /// stamps it. A cluster not in `spec.clusters` is left alone.
    pub fn graceful_evict_cluster(&mut self, name: &str, opts: EvictionOptions) -> EvictOutcome {
        let Some(i) = self.clusters.iter().position(|c| c.name == name) else {
            return EvictOutcome::NotScheduled;
        };
        let evicted = self.clusters.remove(i);
        if self.is_evicting(name) {
            return EvictOutcome::RemovedWithExistingTask;
        }
        self.graceful_eviction_tasks.push(GracefulEvictionTask {
            from_cluster: evicted.name,
            purge_mode: opts.purge_mode,
            replicas: (evicted.replicas > 0).then_some(evicted.replicas),
            reason: opts.reason,
            message: opts.message,
            producer: opts.producer,
            grace_period_seconds: opts.grace_period_seconds,
            suppress_deletion: opts.suppress_deletion,
            preserved_label_state: opts.preserved_label_state,
            clusters_before_failover: opts.clusters_before_failover,
            creation_timestamp: None,
        });
        EvictOutcome::Evicted
    }

    /// Clusters whose Works must exist: `spec.clusters`, the clusters of `requiredBy`, and the
    /// `fromCluster` of every eviction task whose purge mode is not immediate.
    pub fn existing_clusters(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.clusters.iter().map(|c| c.name.clone()).collect();
        for r in &self.required_by {
            out.extend(r.clusters.iter().map(|c| c.name.clone()));
        }
        for t in &self.graceful_eviction_tasks {
            if !t.effective_purge_mode().is_immediate() {
                out.insert(t.from_cluster.clone());
            }
        }
        out
    }

    /// `fromCluster` of every eviction task whose purge mode is immediate.
    pub fn clusters_with_immediate_purge(&self) -> BTreeSet<String> {
        self.graceful_eviction_tasks
            .iter()
            .filter(|t| t.effective_purge_mode().is_immediate())
            .map(|t| t.from_cluster.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_with(clusters: &[(&str, i32)]) -> ResourceBindingSpec {
        ResourceBindingSpec {
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster::new(n, *r))
                .collect(),
            ..Default::default()
        }
    }

    fn opts(mode: PurgeMode) -> EvictionOptions {
        EvictionOptions {
            purge_mode: Some(mode),
            producer: EVICTION_PRODUCER_TAINT_MANAGER.into(),
            reason: EVICTION_REASON_TAINT_UNTOLERATED.into(),
            ..Default::default()
        }
    }

    #[test]
    fn graceful_evict_cluster_table() {
        // Evicting a scheduled cluster removes it and records its replicas.
        let mut s = spec_with(&[("m1", 1), ("m2", 2)]);
        assert_eq!(
            s.graceful_evict_cluster("m1", opts(PurgeMode::Graciously)),
            EvictOutcome::Evicted
        );
        assert_eq!(s.clusters, vec![TargetCluster::new("m2", 2)]);
        let t = &s.graceful_eviction_tasks[0];
        assert_eq!(
            (t.from_cluster.as_str(), t.replicas, t.purge_mode),
            ("m1", Some(1), Some(PurgeMode::Graciously))
        );
        assert_eq!(t.reason, "TaintUntolerated");
        assert_eq!(t.creation_timestamp, None);

        // Zero replicas are not recorded.
        let mut s = spec_with(&[("m1", 0)]);
        s.graceful_evict_cluster("m1", opts(PurgeMode::Never));
        assert_eq!(s.graceful_eviction_tasks[0].replicas, None);

        // Not scheduled: nothing changes, no task.
        let mut s = spec_with(&[("m2", 2)]);
        assert_eq!(
            s.graceful_evict_cluster("m1", opts(PurgeMode::Graciously)),
            EvictOutcome::NotScheduled
        );
        assert!(s.graceful_eviction_tasks.is_empty());

        // A task already exists: cluster removed, no second task.
        let mut s = spec_with(&[("m1", 1), ("m2", 2)]);
        s.graceful_evict_cluster("m1", opts(PurgeMode::Graciously));
        s.clusters.push(TargetCluster::new("m1", 3));
        assert_eq!(
            s.graceful_evict_cluster("m1", opts(PurgeMode::Directly)),
            EvictOutcome::RemovedWithExistingTask
        );
        assert_eq!(s.graceful_eviction_tasks.len(), 1);
        assert!(!s.targets("m1"));
    }

    #[test]
    fn existing_clusters_protect_non_immediate_tasks() {
        let mut s = spec_with(&[("m1", 1), ("m2", 1), ("m3", 1), ("m4", 1)]);
        s.graceful_evict_cluster("m1", opts(PurgeMode::Immediately));
        s.graceful_evict_cluster("m2", opts(PurgeMode::Directly));
        s.graceful_evict_cluster("m3", opts(PurgeMode::Gracefully));
        s.required_by.push(BindingSnapshot {
            namespace: "default".into(),
            name: "dep".into(),
            clusters: vec![TargetCluster::new("m5", 0)],
        });
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(s.existing_clusters(), names(&["m3", "m4", "m5"]));
        assert_eq!(s.clusters_with_immediate_purge(), names(&["m1", "m2"]));
        assert_eq!(s.assigned_replicas(), 1);
    }

    #[test]
    fn status_wire_names() {
        let json = serde_json::json!({
            "schedulerObservedGeneration": 2,
            "schedulerObservingAffinityName": "primary",
            "lastScheduledTime": "2024-05-01T10:00:00Z",
            "aggregatedStatus": [{"clusterName": "m1", "status": {"readyReplicas": 2},
                                  "applied": true, "health": "Healthy"}]
        });
        let s: ResourceBindingStatus = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(s.scheduler_observed_affinity_name, "primary");
        assert_eq!(s.aggregated_status[0].health, Some(ResourceHealth::Healthy));
        assert_eq!(serde_json::to_value(&s).unwrap(), json);
    }
}
