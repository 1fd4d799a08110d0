//! When a binding is scheduled (docs/semantics.md §8.1, `doScheduleBinding`): the first of
//! these that holds decides —
//! 1. the placement changed against the applied-placement annotation;
//! 2. the replicas changed (Duplicated: a cluster's replicas differ from `spec.replicas`;
//!    Divided: their sum differs — which is how an eviction that removed a cluster shows);
//! 3. `rescheduleTriggeredAt` is later than `status.lastScheduledTime`;
//! 4. the binding is not a workload, or is Duplicated: always scheduled;
//! 5. a target cluster is being deleted, or is gone.
//!
//! Otherwise nothing is scheduled (the controller then only sets
//! `status.schedulerObservedGeneration` to `metadata.generation`). A Divided binding therefore
//! does not move because a target cluster became NotReady or tainted; it moves when eviction
//! takes the cluster out of `spec.clusters`, or when the cluster is deleted.

use std::fmt;

use flotilla_api::binding::{ResourceBindingSpec, ResourceBindingStatus};
use flotilla_api::policy::{ClusterAffinityTerm, Placement, ReplicaSchedulingType};

use super::reschedule_required;
use super::snapshot::ClusterSnapshot;

/// Why a binding is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleReason {
    /// The placement differs from the last applied one (or none was applied).
    PlacementChanged,
    /// `spec.replicas` differs from the scheduled replicas.
    ReplicasChanged,
    /// A manual reschedule was requested.
    RescheduleTriggered,
    /// Non-workloads and Duplicated bindings are always scheduled.
    AlwaysScheduled,
    /// A cluster in `spec.clusters` is being deleted.
    TargetClusterDeleting,
}

impl fmt::Display for ScheduleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleReason::PlacementChanged => "placement changed",
            ScheduleReason::ReplicasChanged => "replicas scaled up or down",
            ScheduleReason::RescheduleTriggered => "reschedule explicitly triggered",
            ScheduleReason::AlwaysScheduled => "not a workload, or Duplicated",
            ScheduleReason::TargetClusterDeleting => "a target cluster is being deleted",
        })
    }
}

fn term<'a>(terms: &'a [ClusterAffinityTerm], name: &str) -> Option<&'a ClusterAffinityTerm> {
    terms.iter().find(|t| t.affinity_name == name)
}

/// Karmada's `placementChanged`: no annotation ⇒ changed; an annotation that is not a
/// placement ⇒ not changed; equal ⇒ not changed; a change of clusterAffinity,
/// clusterTolerations, spreadConstraints or replicaScheduling ⇒ changed; otherwise only a
/// change of the observed `clusterAffinities` term counts (and no observed term counts as a
/// change).
pub fn placement_changed(
    placement: &Placement,
    applied: Option<&str>,
    observed_affinity: &str,
) -> bool {
    let Some(text) = applied.filter(|t| !t.is_empty()) else {
        return true;
    };
    let Ok(applied) = serde_json::from_str::<Placement>(text) else {
        return false;
    };
    if *placement == applied {
        return false;
    }
    if placement.cluster_affinity != applied.cluster_affinity
        || placement.cluster_tolerations != applied.cluster_tolerations
        || placement.spread_constraints != applied.spread_constraints
        || placement.replica_scheduling != applied.replica_scheduling
    {
        return true;
    }
    if observed_affinity.is_empty() {
        return true;
    }
    match (
        term(&placement.cluster_affinities, observed_affinity),
        term(&applied.cluster_affinities, observed_affinity),
    ) {
        (Some(now), Some(then)) => now != then,
        _ => true,
    }
}

/// Karmada's `IsBindingReplicasChanged`.
pub fn replicas_changed(spec: &ResourceBindingSpec, placement: &Placement) -> bool {
    if placement.replica_scheduling.is_none() {
        return false;
    }
    match placement.replica_scheduling_type() {
        ReplicaSchedulingType::Duplicated => {
            spec.clusters.iter().any(|c| c.replicas != spec.replicas)
        }
        ReplicaSchedulingType::Divided => spec.assigned_replicas() != i64::from(spec.replicas),
    }
}

/// Whether, and why, the binding must be scheduled now. `applied_placement` is the
/// `policy.karmada.io/applied-placement` annotation.
pub fn needs_scheduling(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    applied_placement: Option<&str>,
    clusters: &ClusterSnapshot,
) -> Option<ScheduleReason> {
    let Some(placement) = spec.placement.as_ref() else {
        // Nothing was ever applied for a binding without placement. The controller never asks
        // for one (attached bindings are not scheduled); a direct caller gets the error.
        return Some(ScheduleReason::PlacementChanged);
    };
    if placement_changed(
        placement,
        applied_placement,
        &status.scheduler_observed_affinity_name,
    ) {
        return Some(ScheduleReason::PlacementChanged);
    }
    if replicas_changed(spec, placement) {
        return Some(ScheduleReason::ReplicasChanged);
    }
    if reschedule_required(spec, status) {
        return Some(ScheduleReason::RescheduleTriggered);
    }
    let workload =
        spec.replicas != 0 || spec.replica_requirements.is_some() || !spec.components.is_empty();
    if !workload || placement.replica_scheduling_type() == ReplicaSchedulingType::Duplicated {
        return Some(ScheduleReason::AlwaysScheduled);
    }
    if !leaving_targets(spec, clusters).is_empty() {
        return Some(ScheduleReason::TargetClusterDeleting);
    }
    None
}

/// The targets in `spec.clusters` whose Cluster is being deleted or is gone altogether (its
/// deletion finished before the binding moved, e.g. while an older server without the
/// cluster finalizer ran, or a user removed the finalizer by hand): they must leave the
/// placement (trigger 5).
pub fn leaving_targets(spec: &ResourceBindingSpec, clusters: &ClusterSnapshot) -> Vec<String> {
    spec.clusters
        .iter()
        .filter(|t| clusters.get(&t.name).is_none_or(|c| c.deleting))
        .map(|t| t.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::binding::{ReplicaRequirements, TargetCluster};
    use flotilla_api::cluster::{Cluster, ClusterSpec};
    use flotilla_api::meta::Time;
    use flotilla_api::policy::{
        ClusterAffinity, ReplicaDivisionPreference, ReplicaSchedulingStrategy, Toleration,
    };

    fn divided() -> Placement {
        Placement {
            cluster_affinity: Some(ClusterAffinity {
                cluster_names: vec!["m1".into(), "m2".into()],
                ..Default::default()
            }),
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: Some(ReplicaSchedulingType::Divided),
                replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
                weight_preference: None,
            }),
            ..Default::default()
        }
    }

    fn duplicated() -> Placement {
        Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
                ..Default::default()
            }),
            ..divided()
        }
    }

    fn json(p: &Placement) -> String {
        serde_json::to_string(p).unwrap()
    }

    fn time(s: &str) -> Option<Time> {
        Some(Time::parse(s).unwrap())
    }

    struct Case {
        name: &'static str,
        spec: ResourceBindingSpec,
        status: ResourceBindingStatus,
        applied: Option<String>,
        want: Option<ScheduleReason>,
    }

    fn base(placement: Placement, clusters: &[(&str, i32)], replicas: i32) -> ResourceBindingSpec {
        ResourceBindingSpec {
            replicas,
            placement: Some(placement),
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster::new(n, *r))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn decision_order() {
        use ScheduleReason::*;
        let d = divided();
        let steady = base(d.clone(), &[("m1", 1), ("m2", 2)], 3);
        let mut m2_deleting = Cluster::new("m2", ClusterSpec::default());
        m2_deleting.metadata.deletion_timestamp = time("2024-05-01T10:00:00Z");
        let snap =
            ClusterSnapshot::new([&Cluster::new("m1", ClusterSpec::default()), &m2_deleting]);
        let scheduled_at = ResourceBindingStatus {
            last_scheduled_time: time("2024-05-01T10:00:00Z"),
            ..Default::default()
        };
        let cases = vec![
            Case {
                name: "no annotation: placement changed first",
                spec: base(d.clone(), &[("m1", 1)], 3),
                status: Default::default(),
                applied: None,
                want: Some(PlacementChanged),
            },
            Case {
                name: "tolerations changed",
                spec: base(
                    Placement {
                        cluster_tolerations: vec![Toleration::exists("x", None, None)],
                        ..d.clone()
                    },
                    &[("m1", 1), ("m2", 2)],
                    3,
                ),
                status: Default::default(),
                applied: Some(json(&d)),
                want: Some(PlacementChanged),
            },
            Case {
                name: "unparsable annotation counts as unchanged",
                spec: base(d.clone(), &[("m1", 1)], 3),
                status: Default::default(),
                applied: Some("{not json".into()),
                want: Some(ReplicasChanged),
            },
            Case {
                name: "eviction removed a cluster: replicas changed",
                spec: base(d.clone(), &[("m2", 2)], 3),
                status: Default::default(),
                applied: Some(json(&d)),
                want: Some(ReplicasChanged),
            },
            Case {
                name: "replicas changed beats reschedule trigger",
                spec: ResourceBindingSpec {
                    reschedule_triggered_at: time("2024-05-01T11:00:00Z"),
                    ..base(d.clone(), &[("m2", 2)], 3)
                },
                status: scheduled_at.clone(),
                applied: Some(json(&d)),
                want: Some(ReplicasChanged),
            },
            Case {
                name: "reschedule triggered after the last schedule",
                spec: ResourceBindingSpec {
                    reschedule_triggered_at: time("2024-05-01T11:00:00Z"),
                    ..steady.clone()
                },
                status: scheduled_at.clone(),
                applied: Some(json(&d)),
                want: Some(RescheduleTriggered),
            },
            Case {
                name: "reschedule triggered before the last schedule",
                spec: ResourceBindingSpec {
                    reschedule_triggered_at: time("2024-05-01T09:00:00Z"),
                    ..steady.clone()
                },
                status: scheduled_at.clone(),
                applied: Some(json(&d)),
                want: Some(TargetClusterDeleting),
            },
            Case {
                name: "duplicated is always scheduled",
                spec: base(duplicated(), &[("m1", 3)], 3),
                status: Default::default(),
                applied: Some(json(&duplicated())),
                want: Some(AlwaysScheduled),
            },
            Case {
                name: "duplicated with a stale replica count",
                spec: base(duplicated(), &[("m1", 2)], 3),
                status: Default::default(),
                applied: Some(json(&duplicated())),
                want: Some(ReplicasChanged),
            },
            Case {
                name: "non-workload is always scheduled",
                spec: base(d.clone(), &[], 0),
                status: Default::default(),
                applied: Some(json(&d)),
                want: Some(AlwaysScheduled),
            },
            Case {
                name: "zero replicas with requirements is a workload",
                spec: ResourceBindingSpec {
                    replica_requirements: Some(ReplicaRequirements::default()),
                    ..base(d.clone(), &[], 0)
                },
                status: Default::default(),
                applied: Some(json(&d)),
                want: None,
            },
            Case {
                name: "target cluster deleting",
                spec: steady.clone(),
                status: Default::default(),
                applied: Some(json(&d)),
                want: Some(TargetClusterDeleting),
            },
            Case {
                name: "target cluster gone (not in the snapshot)",
                spec: base(d.clone(), &[("m1", 1), ("m9", 2)], 3),
                status: Default::default(),
                applied: Some(json(&d)),
                want: Some(TargetClusterDeleting),
            },
            Case {
                name: "divided, steady: nothing",
                spec: base(d.clone(), &[("m1", 3)], 3),
                status: Default::default(),
                applied: Some(json(&d)),
                want: None,
            },
        ];
        for c in cases {
            assert_eq!(
                needs_scheduling(&c.spec, &c.status, c.applied.as_deref(), &snap),
                c.want,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn cluster_affinities_changes() {
        let terms = |second: &[&str]| Placement {
            cluster_affinities: vec![
                ClusterAffinityTerm {
                    affinity_name: "primary".into(),
                    cluster_names: vec!["m1".into()],
                    ..Default::default()
                },
                ClusterAffinityTerm {
                    affinity_name: "backup".into(),
                    cluster_names: second.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let applied = json(&terms(&["m2"]));
        let now = terms(&["m3"]);
        // A change of another term does not count while "primary" is observed.
        assert!(!placement_changed(&now, Some(&applied), "primary"));
        assert!(placement_changed(&now, Some(&applied), "backup"));
        assert!(placement_changed(&now, Some(&applied), ""));
        assert!(placement_changed(&now, Some(&applied), "gone"));
        assert!(!placement_changed(&now, Some(&json(&now)), ""));
        assert!(placement_changed(&now, Some(""), "primary"));
    }
}
