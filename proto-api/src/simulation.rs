//! `FailoverSimulation` (`flotilla.io/v1alpha1`, cluster-scoped, create only): the failover
//! dry-run. A client creates one naming clusters as failed (and, optionally, applications as
//! unhealthy); the server answers the same object with a computed `status` — the evictions, the
//! new placements and the bindings that could not be placed — and stores nothing, as
//! Kubernetes' TokenReview and SubjectAccessReview do. The types and their validation live
//! here; the server's `simulation` computes the status.

use crate::binding::TargetCluster;
use crate::meta::{ObjectMeta, Time};
use crate::validation::{FieldError, Path, ValidationErrors};
use serde::{Deserialize, Serialize};

/// The group of Flotilla's own kinds.
pub use crate::kinds::FLOTILLA_GROUP;
/// Their version.
pub const FLOTILLA_VERSION: &str = "v1alpha1";
/// The kind.
pub const FAILOVER_SIMULATION_KIND: &str = "FailoverSimulation";
/// Its plural, as served.
pub const FAILOVER_SIMULATIONS: &str = "failoversimulations";

/// The request and its answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailoverSimulation {
    /// `flotilla.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `FailoverSimulation`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// A name is optional (nothing is stored); kubectl sends one.
    pub metadata: ObjectMeta,
    /// What to simulate.
    pub spec: FailoverSimulationSpec,
    /// The answer (ignored in a request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<FailoverSimulationStatus>,
}

/// What to simulate. Unknown fields are refused (a misspelt `afterSeconds` must not silently
/// ask another question).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FailoverSimulationSpec {
    /// Member clusters taken as failed (unreachable) at the moment of the request.
    pub failed_clusters: Vec<String>,
    /// Workloads taken as Unhealthy on one cluster from the moment of the request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_applications: Vec<UnhealthyApplication>,
    /// Look this many seconds after the failure: evictions due later are reported as
    /// `pending`, not applied. Absent: look until nothing more would happen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_seconds: Option<i64>,
}

/// A workload taken as Unhealthy on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct UnhealthyApplication {
    /// `ResourceBinding` (default) or `ClusterResourceBinding`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Namespace of a ResourceBinding.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the binding.
    pub name: String,
    /// The cluster where it is Unhealthy.
    pub cluster: String,
}

/// `ResourceBinding`.
pub const RESOURCE_BINDING: &str = "ResourceBinding";
/// `ClusterResourceBinding`.
pub const CLUSTER_RESOURCE_BINDING: &str = "ClusterResourceBinding";

impl UnhealthyApplication {
    /// The binding kind, `ResourceBinding` when unset.
    pub fn binding_kind(&self) -> &str {
        if self.kind.is_empty() {
            RESOURCE_BINDING
        } else {
            &self.kind
        }
    }
}

/// Checks a request on its own (that named clusters and bindings exist is the server's check).
pub fn validate_spec(spec: &FailoverSimulationSpec) -> Result<(), ValidationErrors> {
    let mut errs = Vec::new();
    let root = Path::new("spec");
    let failed = root.child("failedClusters");
    if spec.failed_clusters.is_empty() && spec.unhealthy_applications.is_empty() {
        errs.push(FieldError::required(
            &failed,
            "name at least one failed cluster or unhealthy application",
        ));
    }
    for (i, c) in spec.failed_clusters.iter().enumerate() {
        if c.is_empty() {
            errs.push(FieldError::required(&failed.index(i), "a cluster name"));
        } else if spec.failed_clusters[..i].contains(c) {
            errs.push(FieldError::duplicate(&failed.index(i), c));
        }
    }
    let apps = root.child("unhealthyApplications");
    for (i, a) in spec.unhealthy_applications.iter().enumerate() {
        let p = apps.index(i);
        match a.binding_kind() {
            RESOURCE_BINDING => {
                if a.namespace.is_empty() {
                    errs.push(FieldError::required(
                        &p.child("namespace"),
                        "a ResourceBinding's namespace",
                    ));
                }
            }
            CLUSTER_RESOURCE_BINDING => {
                if !a.namespace.is_empty() {
                    errs.push(FieldError::forbidden(
                        &p.child("namespace"),
                        "a ClusterResourceBinding has no namespace",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &p.child("kind"),
                other,
                &[RESOURCE_BINDING, CLUSTER_RESOURCE_BINDING],
            )),
        }
        if a.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), "the binding's name"));
        }
        if a.cluster.is_empty() {
            errs.push(FieldError::required(
                &p.child("cluster"),
                "the cluster where the workload is Unhealthy",
            ));
        }
    }
    if let Some(s) = spec.after_seconds {
        if s < 0 {
            errs.push(FieldError::invalid(
                &root.child("afterSeconds"),
                s,
                "must be 0 or more",
            ));
        }
    }
    ValidationErrors::into_result(errs)
}

/// The answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailoverSimulationStatus {
    /// The instant taken as the failure (the request's time, to the second); every
    /// `afterSeconds` counts from it.
    pub failed_at: Option<Time>,
    /// When the failed clusters would be seen as failed and tainted, from the server's flags.
    pub timeline: SimulationTimeline,
    /// Every binding the failure changes (evicted, moved, held or left unplaced), by kind,
    /// namespace and name. Bindings it does not change are only counted in `summary`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<SimulatedBinding>,
    /// Bindings the scheduler could not place after the evictions; each keeps the clusters
    /// (and so the Works) it has.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unplaceable: Vec<UnplaceableBinding>,
    /// Counts.
    pub summary: SimulationSummary,
    /// What the partition brake would do: its regions' states after the failure and what it
    /// delays or stops (each eviction says its own delay, each held one why).
    pub brake: BrakeForecast,
}

/// The cluster side of the timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimulationTimeline {
    /// Per failed cluster, in request order.
    pub clusters: Vec<ClusterTimeline>,
}

/// When one failed cluster's condition and taints change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterTimeline {
    /// The cluster.
    pub cluster: String,
    /// `Unknown` (pull members: the lease stops) or `False` (push members: probes fail).
    pub ready: String,
    /// Seconds after the failure at which Ready changes and the NoSchedule taint comes.
    pub not_ready_after_seconds: i64,
    /// Seconds after the failure at which the NoExecute taint comes (absent: automatic
    /// NoExecute taints are off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_execute_after_seconds: Option<i64>,
    /// The cluster's taints once both have come.
    pub taints: Vec<String>,
}

/// One binding the failure changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimulatedBinding {
    /// `ResourceBinding` or `ClusterResourceBinding`.
    pub kind: String,
    /// Namespace (ResourceBindings).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.clusters` now.
    pub clusters_before: Vec<TargetCluster>,
    /// `spec.clusters` as the scheduler would write it after the evictions.
    pub clusters_after: Vec<TargetCluster>,
    /// Evictions, in the order they would happen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evictions: Vec<SimulatedEviction>,
    /// Evictions due after `spec.afterSeconds` (only with it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingEviction>,
    /// Evictions held back: by application failover (move limit, back-off, no other cluster)
    /// or stopped by the partition brake.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldEviction>,
    /// The scheduler's last answer: `Success`, `NoClusterFit`, `Unschedulable` or
    /// `SchedulerError` (absent: the scheduler would not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<ScheduledResult>,
}

/// One eviction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimulatedEviction {
    /// The cluster the binding leaves.
    pub cluster: String,
    /// `TaintManager` or the application failover controller.
    pub producer: String,
    /// `TaintUntolerated` or `ApplicationFailure`.
    pub reason: String,
    /// The task's message.
    pub message: String,
    /// The purge mode of the task (absent: graceful eviction is off, no task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<String>,
    /// Replicas the binding had there.
    pub replicas: i32,
    /// Seconds after the failure at which it happens (the brake's delay included).
    pub after_seconds: i64,
    /// What becomes of the copy on that cluster.
    pub old_copy: OldCopy,
    /// How long the partition brake made it wait (absent: it did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brake: Option<EvictionDelay>,
}

/// What becomes of the evicted copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OldCopy {
    /// `KeptUntilHealthy` (graceful task: until the new placement is Healthy or the grace
    /// period ends), `KeptUntilSuppressionLifted` (Never), `DeletedFirst` (Immediately /
    /// Directly: before the new copy is created) or `Deleted` (no task: graceful eviction off).
    pub fate: String,
    /// The grace period of a `KeptUntilHealthy` task, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
}

/// An eviction due after the horizon of the request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PendingEviction {
    /// The cluster.
    pub cluster: String,
    /// Who would evict.
    pub producer: String,
    /// Seconds after the failure at which it would happen (the brake's delay included).
    pub after_seconds: i64,
    /// How long the partition brake makes it wait (absent: it does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brake: Option<EvictionDelay>,
}

/// An eviction held back: it does not happen, the binding keeps the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeldEviction {
    /// The cluster.
    pub cluster: String,
    /// Application failover's `MaxMoves`, `Backoff` or `NoTarget`, or the partition brake's
    /// `FullDisruption` (the fleet looks cut off) or `RateZero` (the region's rate is 0).
    pub reason: String,
    /// The controller that would evict (`TaintManager`, the application failover controller).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub producer: String,
    /// The cluster's region, when the brake holds the eviction.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Why, when the brake holds it (the Event `EvictionHeld` the binding would get).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The scheduler's answer for a binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScheduledResult {
    /// The `Scheduled` condition's reason.
    pub result: String,
    /// Its message.
    pub message: String,
}

/// A binding left without a new placement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UnplaceableBinding {
    /// Kind of the binding.
    pub kind: String,
    /// Namespace (ResourceBindings).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `NoClusterFit`, `Unschedulable` or `SchedulerError`.
    pub reason: String,
    /// The scheduler's message.
    pub message: String,
    /// The clusters it keeps (their Works stay).
    pub keeps: Vec<String>,
}

/// Counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimulationSummary {
    /// Bindings looked at.
    pub bindings: usize,
    /// Bindings the failure changes (listed in `bindings`).
    pub affected: usize,
    /// Evictions.
    pub evictions: usize,
    /// Evictions due after the horizon.
    pub pending: usize,
    /// Bindings that could not be placed.
    pub unplaceable: usize,
    /// Evictions (and pending ones) the partition brake delays.
    pub delayed: usize,
    /// Evictions held back (the partition brake's stops and application failover's holds).
    pub held: usize,
}

/// The partition brake's part of the answer: what the server's brake (`evictionbrakes`) would
/// do with the evictions of this failure, computed by the brake's own rule and buckets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrakeForecast {
    /// Whether the server paces evictions per region (`--enable-eviction-rate-limit`); without
    /// pacing only the stops (startup grace, a fleet that looks cut off, a rate of 0) hold
    /// evictions back.
    pub pacing: bool,
    /// When the server's startup grace (`--eviction-startup-grace-period`) ends, when that is
    /// after the failure: evictions due before wait until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_grace_until: Option<Time>,
    /// What the brake does to this failure, in a sentence.
    pub message: String,
    /// Every region of the fleet (`(none)` for clusters without `spec.region`), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<RegionForecast>,
}

/// One region as the brake would see it once the failure is seen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegionForecast {
    /// The region.
    pub region: String,
    /// `Normal`, `PartialDisruption`, `FullDisruption` or `StartupGrace`: the last of
    /// `states`.
    pub state: String,
    /// How fast the region lets failed clusters out (once out, all of a cluster's bindings
    /// may go): `0.1 clusters/s`, `unlimited` or `stopped`.
    pub rate: String,
    /// The rate when failed clusters are paced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters_per_second: Option<f64>,
    /// The `--resource-eviction-rate` ceiling on the evictions of failed clusters, when the
    /// server sets one: `0.5 evictions/s`, `unlimited` or `stopped`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_eviction_rate: Option<String>,
    /// Clusters of the region.
    pub clusters: usize,
    /// Of which not Ready once the failure is seen.
    pub not_ready_clusters: usize,
    /// Why the region is in its state.
    pub message: String,
    /// The region's states from the failure on, each from `afterSeconds`.
    pub states: Vec<RegionStateChange>,
    /// Evictions from the region's clusters.
    pub evictions: usize,
    /// Of which the brake delays (startup grace, pacing).
    pub delayed_evictions: usize,
    /// Evictions the brake stops (they do not happen; the bindings keep those clusters).
    pub held_evictions: usize,
}

/// A region's state from some instant on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegionStateChange {
    /// Seconds after the failure.
    pub after_seconds: i64,
    /// The state.
    pub state: String,
    /// Its rate: `0.1 clusters/s`, `unlimited` or `stopped`.
    pub rate: String,
}

/// What the brake did to one eviction that happens (or is pending): it waited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EvictionDelay {
    /// The evicted cluster's region.
    pub region: String,
    /// Why it waited, in order: `StartupGrace`, `RateLimited` (its cluster waited for its
    /// turn: a paced region lets one failed cluster out per `1/rate`), `ResourceRateLimited`
    /// (the `--resource-eviction-rate` ceiling), or a stop that ended (`FullDisruption`,
    /// `RateZero`).
    pub reasons: Vec<String>,
    /// Seconds after the failure at which the controller wanted to evict.
    pub due_after_seconds: i64,
    /// How much later it happens (`afterSeconds - dueAfterSeconds`).
    pub delay_seconds: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(spec: &FailoverSimulationSpec) -> Vec<String> {
        validate_spec(spec)
            .err()
            .map(|e| e.errors().iter().map(|e| e.path.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let app = |kind: &str, ns: &str, name: &str, cluster: &str| UnhealthyApplication {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            cluster: cluster.into(),
        };
        let cases: Vec<(FailoverSimulationSpec, Vec<&str>)> = vec![
            (
                FailoverSimulationSpec {
                    failed_clusters: vec!["m1".into()],
                    ..Default::default()
                },
                vec![],
            ),
            (
                FailoverSimulationSpec::default(),
                vec!["spec.failedClusters"],
            ),
            (
                FailoverSimulationSpec {
                    failed_clusters: vec!["m1".into(), "".into(), "m1".into()],
                    after_seconds: Some(-1),
                    ..Default::default()
                },
                vec![
                    "spec.failedClusters[1]",
                    "spec.failedClusters[2]",
                    "spec.afterSeconds",
                ],
            ),
            (
                FailoverSimulationSpec {
                    unhealthy_applications: vec![
                        app("", "default", "web", "m1"),
                        app("ClusterResourceBinding", "", "web", "m1"),
                        app("", "", "web", "m1"),
                        app("ClusterResourceBinding", "x", "", ""),
                        app("Deployment", "default", "web", "m1"),
                    ],
                    ..Default::default()
                },
                vec![
                    "spec.unhealthyApplications[2].namespace",
                    "spec.unhealthyApplications[3].namespace",
                    "spec.unhealthyApplications[3].name",
                    "spec.unhealthyApplications[3].cluster",
                    "spec.unhealthyApplications[4].kind",
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(paths(&spec), want, "{spec:?}");
        }
    }

    #[test]
    fn a_request_reads_as_kubectl_sends_it() {
        let sim: FailoverSimulation = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
            "metadata": {"name": "member1-down"},
            "spec": {"failedClusters": ["member1"], "afterSeconds": 60,
                     "unhealthyApplications": [{"namespace": "default", "name": "web-deployment", "cluster": "member2"}]}
        }))
        .unwrap();
        assert_eq!(sim.spec.failed_clusters, ["member1"]);
        assert_eq!(sim.spec.after_seconds, Some(60));
        assert_eq!(
            sim.spec.unhealthy_applications[0].binding_kind(),
            RESOURCE_BINDING
        );
        let typo = serde_json::from_value::<FailoverSimulation>(serde_json::json!({
            "spec": {"failedClusters": ["member1"], "afterSecond": 60}}));
        assert!(
            typo.is_err_and(|e| e.to_string().contains("afterSecond")),
            "a misspelt field is refused"
        );
        let status = serde_json::to_value(FailoverSimulationStatus::default()).unwrap();
        assert_eq!(
            status["brake"],
            serde_json::json!({"pacing": false, "message": ""})
        );
    }
}
