//! Whole-pipeline tests: the failover scenarios' placements (examples/ 01 and 02),
//! errors and conditions, dynamic rescheduling, ordered cluster affinities, overflow tiers,
//! and property tests of the division and filter guarantees.

use std::path::Path;

use flotilla_api::binding::{
    GracefulEvictionTask, ObjectReference, ReplicaRequirements, ResourceBindingSpec,
    ResourceBindingStatus, TargetCluster,
};
use flotilla_api::cluster::{
    ApiEnablement, ApiResource, Cluster, ClusterSpec, ResourceSummary, Taint, TaintEffect,
    TAINT_CLUSTER_NOT_READY,
};
use flotilla_api::defaulting::{default_placement, DefaultingConfig};
use flotilla_api::meta::{ConditionStatus, Time};
use flotilla_api::policy::{
    ClusterAffinity, ClusterAffinityTerm, ClusterPreferences, DynamicWeightFactor,
    OverflowClusterAffinity, Placement, ReplicaDivisionPreference, ReplicaSchedulingStrategy,
    ReplicaSchedulingType, SpreadByField, SpreadConstraint, StaticClusterWeight,
};
use flotilla_api::quantity::ResourceList;
use flotilla_api::Quantity;
use proptest::prelude::*;

use super::division::{webster, Party, TieBreak};
use super::{
    condition_for, needs_scheduling, schedule, ClusterSnapshot, Explanation, ScheduleError,
    ScheduleInput, ScheduleOptions, ScheduleOutcome, ScheduleReason, SUCCESS_MESSAGE,
};

// ---------------------------------------------------------------------------------------------
// Fixtures

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap_or_default()))
        .collect()
}

/// `pairs` as a resource list, each quantity parsed (the unit tests' fixtures; a quantity that
/// does not parse fails the test).
pub(super) fn resource_list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
        .collect()
}

/// The API enablements of a member that serves `apps/v1` Deployments and nothing else.
pub(super) fn deployments_served() -> Vec<ApiEnablement> {
    vec![ApiEnablement {
        group_version: "apps/v1".into(),
        resources: vec![ApiResource {
            name: "deployments".into(),
            kind: "Deployment".into(),
        }],
    }]
}

/// A Ready member serving Deployments, with room for `pods` more pods.
fn member(name: &str, pods: i64) -> Cluster {
    let mut c = Cluster::new(name, ClusterSpec::default());
    c.status.api_enablements = deployments_served();
    c.status.resource_summary = Some(ResourceSummary {
        allocatable: list(&[("pods", &pods.to_string()), ("cpu", "100")]),
        ..Default::default()
    });
    c
}

/// What the cluster controller does to a member that is not Ready for longer than the
/// eviction timeout: NoSchedule at once, NoExecute later.
fn fail(c: &mut Cluster) {
    for effect in [TaintEffect::NoSchedule, TaintEffect::NoExecute] {
        c.spec.taints.push(Taint {
            key: TAINT_CLUSTER_NOT_READY.into(),
            value: String::new(),
            effect,
            time_added: None,
        });
    }
}

/// What the taint manager does once the NoExecute taint is no longer tolerated.
fn evict(spec: &mut ResourceBindingSpec, cluster: &str) {
    spec.graceful_evict_cluster(
        cluster,
        flotilla_api::binding::EvictionOptions {
            producer: "TaintManager".into(),
            reason: "TaintUntolerated".into(),
            ..Default::default()
        },
    );
}

fn deployment(placement: Placement, replicas: i32) -> ResourceBindingSpec {
    ResourceBindingSpec {
        resource: ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: "nginx".into(),
            uid: "6a0f2c3e-0000-4000-8000-000000000001".into(),
            ..Default::default()
        },
        replicas,
        placement: Some(placement),
        ..Default::default()
    }
}

fn run(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    clusters: &[Cluster],
) -> Result<ScheduleOutcome, ScheduleError> {
    let snap = ClusterSnapshot::new(clusters);
    schedule(&ScheduleInput {
        spec,
        status,
        clusters: &snap,
        options: ScheduleOptions::default(),
        blocked: &[],
    })
}

fn pairs(clusters: &[TargetCluster]) -> Vec<(String, i32)> {
    clusters
        .iter()
        .map(|t| (t.name.clone(), t.replicas))
        .collect()
}

fn want(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(n, r)| (n.to_string(), *r)).collect()
}

fn reason_of(e: &Explanation, cluster: &str) -> Option<String> {
    e.cluster(cluster)
        .and_then(|c| c.rejected.as_ref())
        .map(|r| r.to_string())
}

/// The placement of a scenario file's PropagationPolicy (`examples/` of the repository).
fn scenario_placement(file: &str) -> Placement {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
        if value["kind"] == "PropagationPolicy" {
            return serde_json::from_value(value["spec"]["placement"].clone())
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }
    panic!("{file} has no PropagationPolicy")
}

/// The scenario's placement as written in the file (checked against the inline copy the
/// tests read, so a change to either is seen), defaulted as admission does.
fn placement_of(file: &str, inline: &str) -> Placement {
    let mut p: Placement = serde_yaml_ng::from_str(inline).unwrap_or_default();
    assert_eq!(
        scenario_placement(file),
        p,
        "{file}: the inline copy drifted from the scenario"
    );
    default_placement(&mut p, &DefaultingConfig::default());
    p
}

const SCENARIO_01: &str = "
clusterAffinity:
  clusterNames: [member1, member2, member3, member5]
spreadConstraints:
  - spreadByField: cluster
    maxGroups: 2
    minGroups: 2
replicaScheduling:
  replicaSchedulingType: Duplicated
";

const SCENARIO_02: &str = "
clusterAffinity:
  clusterNames: [member1, member2]
replicaScheduling:
  replicaSchedulingType: Divided
  replicaDivisionPreference: Weighted
  weightPreference:
    staticWeightList:
      - targetCluster:
          clusterNames: [member1]
        weight: 1
      - targetCluster:
          clusterNames: [member2]
        weight: 2
";

// ---------------------------------------------------------------------------------------------
// Scenarios

#[test]
fn scenario_01_duplicated_failover() {
    let placement = placement_of("01-duplicated-failover.yaml", SCENARIO_01);
    let mut clusters: Vec<Cluster> = (1..=5)
        .map(|i| member(&format!("member{i}"), 100))
        .collect();
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(placement, 2);
    let allowed = ["member1", "member2", "member3", "member5"];

    // First schedule: exactly two allowed clusters, 2 replicas each, never member4.
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(out.clusters.len(), 2);
    assert!(out
        .clusters
        .iter()
        .all(|t| allowed.contains(&t.name.as_str()) && t.replicas == 2));
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member1", 2), ("member2", 2)])
    );
    assert_eq!(
        reason_of(&out.explanation, "member4").as_deref(),
        Some("cluster(s) did not match the placement cluster affinity constraint")
    );
    assert!(out
        .explanation
        .cluster("member3")
        .is_some_and(|c| !c.selected && c.rejected.is_none()));
    spec.clusters = out.clusters;

    // member1 fails. While it is only tainted, the scheduler keeps it (the taint manager, not
    // the scheduler, evicts).
    clusters[0].spec.taints.clear();
    fail(&mut clusters[0]);
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member1", 2), ("member2", 2)])
    );

    // Evicted: the healthy one stays, the failed one is replaced by another allowed cluster.
    evict(&mut spec, "member1");
    let applied = spec
        .placement
        .as_ref()
        .and_then(|p| serde_json::to_string(p).ok());
    assert_eq!(
        needs_scheduling(
            &spec,
            &status,
            applied.as_deref(),
            &ClusterSnapshot::new(&clusters)
        ),
        Some(ScheduleReason::AlwaysScheduled)
    );
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member2", 2), ("member3", 2)])
    );
    assert_eq!(
        reason_of(&out.explanation, "member1").as_deref(),
        Some("cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}")
    );
    assert_eq!(
        out.explanation.cluster("member2").and_then(|c| c.score),
        Some(100)
    );
    spec.clusters = out.clusters;

    // member3 fails too: member5 is the last allowed candidate.
    fail(&mut clusters[2]);
    evict(&mut spec, "member3");
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member2", 2), ("member5", 2)])
    );
    spec.clusters = out.clusters;

    // member5 fails: no allowed candidate is left to replace it. Nothing is rescheduled: the
    // spread constraint cannot be met, a SchedulerError that keeps spec.clusters.
    fail(&mut clusters[4]);
    evict(&mut spec, "member5");
    let err = run(&spec, &status, &clusters).unwrap_err();
    assert_eq!(
        err,
        ScheduleError::SchedulerError(
            "failed to select clusters: the number of feasible clusters is less than spreadConstraint.MinGroups"
                .into()
        )
    );
    assert_eq!(condition_for(&Err(err)).1, "SchedulerError");

    // And when even member2 is gone, no cluster fits at all: FitError (spec.clusters emptied).
    fail(&mut clusters[1]);
    evict(&mut spec, "member2");
    let err = run(&spec, &status, &clusters).unwrap_err();
    let ScheduleError::FitError {
        message,
        explanation,
    } = &err
    else {
        panic!("want FitError, got {err:?}");
    };
    assert_eq!(
        message,
        "0/5 clusters are available: 1 cluster(s) did not match the placement cluster affinity constraint, \
         4 cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}."
    );
    assert!(explanation.clusters().all(|(_, c)| c.rejected.is_some()));
    assert_eq!(condition_for(&Err(err.clone())).1, "NoClusterFit");
}

#[test]
fn scenario_01_eviction_task_blocks_a_recovered_cluster() {
    let placement = placement_of("01-duplicated-failover.yaml", SCENARIO_01);
    let clusters: Vec<Cluster> = (1..=5)
        .map(|i| member(&format!("member{i}"), 100))
        .collect();
    let mut spec = deployment(placement, 2);
    spec.clusters = vec![
        TargetCluster::new("member1", 2),
        TargetCluster::new("member2", 2),
    ];
    // member1 is healthy again but its eviction task is still running.
    evict(&mut spec, "member1");
    let out = run(&spec, &ResourceBindingStatus::default(), &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member2", 2), ("member3", 2)])
    );
    assert_eq!(
        reason_of(&out.explanation, "member1").as_deref(),
        Some("cluster(s) is in the process of eviction")
    );
}

#[test]
fn scenario_02_divided_weighted_failover() {
    let placement = placement_of("02-divided-weighted-failover.yaml", SCENARIO_02);
    let mut clusters: Vec<Cluster> = (1..=3)
        .map(|i| member(&format!("member{i}"), 100))
        .collect();
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(placement.clone(), 3);

    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("member1", 1), ("member2", 2)])
    );
    assert!(out
        .explanation
        .lines
        .iter()
        .any(|l| l.contains("seat order: #1 member2 (2/1)")));
    spec.clusters = out.clusters;
    let applied = serde_json::to_string(&placement).ok();
    let snap = ClusterSnapshot::new(&clusters);
    assert_eq!(
        needs_scheduling(&spec, &status, applied.as_deref(), &snap),
        None
    );

    // member1 fails and is evicted: member2 takes all 3.
    fail(&mut clusters[0]);
    evict(&mut spec, "member1");
    let snap = ClusterSnapshot::new(&clusters);
    assert_eq!(
        needs_scheduling(&spec, &status, applied.as_deref(), &snap),
        Some(ScheduleReason::ReplicasChanged)
    );
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("member2", 3)]));
    spec.clusters = out.clusters;

    // member1 comes back and its task is gone: nothing is scheduled, nothing moves back.
    clusters[0].spec.taints.clear();
    spec.graceful_eviction_tasks.clear();
    let snap = ClusterSnapshot::new(&clusters);
    assert_eq!(
        needs_scheduling(&spec, &status, applied.as_deref(), &snap),
        None
    );
}

/// Duplicated, spread over 1..3 clusters, on m1, m2, m3.
fn duplicated_on_three(clusters: &[Cluster]) -> ResourceBindingSpec {
    let placement = Placement {
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: Some(SpreadByField::Cluster),
            max_groups: 3,
            min_groups: 1,
            ..Default::default()
        }],
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut spec = deployment(placement, 2);
    let out = run(&spec, &ResourceBindingStatus::default(), clusters).unwrap();
    spec.clusters = out.clusters;
    spec
}

#[test]
fn duplicated_replaces_failed_clusters_only_when_enough_candidates_fit() {
    // m4 and m5 are not allowed at first (tainted), so the first result is m1, m2, m3.
    let mut clusters: Vec<Cluster> = (1..=5).map(|i| member(&format!("m{i}"), 100)).collect();
    fail(&mut clusters[3]);
    fail(&mut clusters[4]);
    let mut spec = duplicated_on_three(&clusters);
    assert_eq!(
        pairs(&spec.clusters),
        want(&[("m1", 2), ("m2", 2), ("m3", 2)])
    );
    let status = ResourceBindingStatus::default();

    // m1 and m2 fail and are evicted; m4 recovers: one candidate for two failed clusters,
    // so the binding is left on m3 as it is.
    fail(&mut clusters[0]);
    fail(&mut clusters[1]);
    evict(&mut spec, "m1");
    evict(&mut spec, "m2");
    clusters[3].spec.taints.clear();
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("m3", 2)]));
    assert!(
        out.explanation
            .lines
            .iter()
            .any(|l| l
                .contains("2 evicted cluster(s) to replace (m1, m2) but only 1 new candidate(s)")),
        "{:?}",
        out.explanation.lines
    );
    assert!(out.explanation.cluster("m4").is_some_and(|c| !c.selected));
    assert!(out.explanation.lines.iter().any(|l| l
        == "being evicted from m1 (TaintUntolerated, by TaintManager): left out by ClusterEviction while the task exists"));
    assert_eq!(
        reason_of(&out.explanation, "m1").as_deref(),
        Some("cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}")
    );

    // m5 recovers too: two candidates for two failed clusters, both replace them.
    clusters[4].spec.taints.clear();
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("m3", 2), ("m4", 2), ("m5", 2)])
    );
    spec.clusters = out.clusters;

    // Once replaced, the next pass (tasks still running) keeps the result.
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("m3", 2), ("m4", 2), ("m5", 2)])
    );
}

#[test]
fn duplicated_with_no_survivor_takes_what_fits() {
    let mut clusters: Vec<Cluster> = (1..=3).map(|i| member(&format!("m{i}"), 100)).collect();
    fail(&mut clusters[2]);
    let mut spec = duplicated_on_three(&clusters);
    assert_eq!(pairs(&spec.clusters), want(&[("m1", 2), ("m2", 2)]));
    // Both fail; m3 recovers: it is the only copy there can be, so it is used.
    fail(&mut clusters[0]);
    fail(&mut clusters[1]);
    evict(&mut spec, "m1");
    evict(&mut spec, "m2");
    clusters[2].spec.taints.clear();
    let out = run(&spec, &ResourceBindingStatus::default(), &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("m3", 2)]));
}

// ---------------------------------------------------------------------------------------------
// Errors, conditions, options

fn divided(pref: ReplicaDivisionPreference, dynamic: bool) -> Placement {
    Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Divided),
            replica_division_preference: Some(pref),
            weight_preference: dynamic.then(|| ClusterPreferences {
                dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

#[test]
fn unschedulable_when_capacity_is_short() {
    let clusters = vec![member("a", 2), member("b", 3)];
    let spec = deployment(divided(ReplicaDivisionPreference::Weighted, true), 10);
    let result = run(&spec, &ResourceBindingStatus::default(), &clusters);
    let (status, reason, message) = condition_for(&result);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "Clusters available replicas 5 are not enough to schedule."
    );
    assert!(result.unwrap_err().explanation().is_some());
}

#[test]
fn success_condition_and_missing_placement() {
    let clusters = vec![member("a", 5)];
    let spec = deployment(Placement::default(), 1);
    let ok = run(&spec, &ResourceBindingStatus::default(), &clusters);
    assert_eq!(
        condition_for(&ok),
        (
            ConditionStatus::True,
            "Success",
            SUCCESS_MESSAGE.to_string()
        )
    );
    let no_placement = ResourceBindingSpec {
        placement: None,
        ..spec
    };
    let err = run(&no_placement, &ResourceBindingStatus::default(), &clusters).unwrap_err();
    assert_eq!(condition_for(&Err(err)).1, "SchedulerError");
}

#[test]
fn resource_requirements_limit_capacity() {
    let clusters = vec![member("a", 100), member("b", 100)];
    let mut spec = deployment(divided(ReplicaDivisionPreference::Aggregated, false), 150);
    spec.replica_requirements = Some(ReplicaRequirements {
        resource_request: list(&[("cpu", "1")]),
        ..Default::default()
    });
    // 100 cpu each: 100 replicas per cluster; Aggregated needs both.
    let out = run(&spec, &ResourceBindingStatus::default(), &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 75), ("b", 75)]));
    assert_eq!(
        out.explanation
            .cluster("a")
            .and_then(|c| c.available_replicas),
        Some(100)
    );
}

#[test]
fn non_workloads_and_empty_workload_propagation() {
    let clusters = vec![member("a", 5), member("b", 5)];
    let config_map = ResourceBindingSpec {
        resource: ObjectReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "cm".into(),
            ..Default::default()
        },
        placement: Some(divided(ReplicaDivisionPreference::Weighted, false)),
        clusters: vec![TargetCluster::new("a", 0)],
        ..Default::default()
    };
    // The API is not listed: only the cluster already running it passes APIEnablement.
    let out = run(&config_map, &ResourceBindingStatus::default(), &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 0)]));
    assert_eq!(
        reason_of(&out.explanation, "b").as_deref(),
        Some("cluster(s) did not have the API resource")
    );

    // A workload scaled to zero: no cluster gets replicas, so none is kept, unless empty
    // workloads are propagated.
    let mut zero = deployment(Placement::default(), 0);
    zero.replica_requirements = Some(ReplicaRequirements::default());
    let snap = ClusterSnapshot::new(&clusters);
    let status = ResourceBindingStatus::default();
    let input = |options| ScheduleInput {
        spec: &zero,
        status: &status,
        clusters: &snap,
        options,
        blocked: &[],
    };
    let out = schedule(&input(ScheduleOptions::default())).unwrap();
    assert!(out.clusters.is_empty());
    let out = schedule(&input(ScheduleOptions {
        empty_workload_propagation: true,
    }))
    .unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 0), ("b", 0)]));
}

#[test]
fn static_weight_division_through_the_pipeline() {
    let clusters = vec![
        member("a", 1),
        member("b", 1),
        member("c", 1),
        member("d", 1),
    ];
    let weight = |names: &[&str], weight| StaticClusterWeight {
        target_cluster: ClusterAffinity {
            cluster_names: names.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        weight,
    };
    let mut p = divided(ReplicaDivisionPreference::Weighted, false);
    if let Some(rs) = p.replica_scheduling.as_mut() {
        rs.weight_preference = Some(ClusterPreferences {
            static_weight_list: vec![weight(&["a"], 3), weight(&["a", "b"], 2), weight(&["c"], 1)],
            ..Default::default()
        });
    }
    // Capacity is ignored; d matches no rule and is left out; a takes its largest weight.
    let out = run(
        &deployment(p, 14),
        &ResourceBindingStatus::default(),
        &clusters,
    )
    .unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 7), ("b", 5), ("c", 2)]));
    assert!(out
        .explanation
        .cluster("d")
        .is_some_and(|c| c.selected && c.replicas.is_none()));
}

// ---------------------------------------------------------------------------------------------
// Dynamic rescheduling

#[test]
fn dynamic_scale_up_and_down_keep_existing_assignments() {
    let clusters = vec![member("a", 10), member("b", 10), member("c", 10)];
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(divided(ReplicaDivisionPreference::Weighted, true), 6);
    spec.clusters = vec![TargetCluster::new("a", 4), TargetCluster::new("b", 2)];
    // Steady: unchanged.
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 4), ("b", 2)]));
    // Scale up to 9: 3 new replicas by free capacity (10:10:10), existing ones kept.
    spec.replicas = 9;
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 5), ("b", 3), ("c", 1)]));
    // Scale down to 3 in proportion to 4:2.
    spec.replicas = 3;
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 2), ("b", 1)]));
    // A manual reschedule divides everything again (capacity + current replicas: 14:12:10).
    spec.replicas = 6;
    spec.reschedule_triggered_at = Time::parse("2024-05-01T11:00:00Z").ok();
    let status = ResourceBindingStatus {
        last_scheduled_time: Time::parse("2024-05-01T10:00:00Z").ok(),
        ..Default::default()
    };
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 2), ("b", 2), ("c", 2)]));
}

#[test]
fn aggregated_uses_fewest_clusters_and_refills_after_eviction() {
    let clusters = vec![member("a", 4), member("b", 10), member("c", 6)];
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(divided(ReplicaDivisionPreference::Aggregated, false), 8);
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("b", 8)]));
    spec.clusters = out.clusters;
    // b is evicted: its 8 replicas go to as few clusters as hold them (c 6 + a 4).
    evict(&mut spec, "b");
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("a", 3), ("c", 5)]));
}

#[test]
fn spread_cluster_path_with_dynamic_division() {
    let clusters = vec![
        member("a", 3),
        member("b", 10),
        member("c", 8),
        member("d", 1),
    ];
    let mut p = divided(ReplicaDivisionPreference::Weighted, true);
    p.spread_constraints = vec![SpreadConstraint {
        spread_by_field: Some(SpreadByField::Cluster),
        min_groups: 2,
        max_groups: 2,
        ..Default::default()
    }];
    let out = run(
        &deployment(p, 9),
        &ResourceBindingStatus::default(),
        &clusters,
    )
    .unwrap();
    // The two with most room (b 10, c 8), 9 replicas by 10:8.
    assert_eq!(pairs(&out.clusters), want(&[("b", 5), ("c", 4)]));
    assert!(out.explanation.cluster("a").is_some_and(|c| !c.selected));
}

// ---------------------------------------------------------------------------------------------
// Ordered cluster affinities and overflow tiers

fn terms(groups: &[(&str, &[&str])]) -> Placement {
    Placement {
        cluster_affinities: groups
            .iter()
            .map(|(name, clusters)| ClusterAffinityTerm {
                affinity_name: name.to_string(),
                cluster_names: clusters.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })
            .collect(),
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn cluster_affinities_progression() {
    let mut clusters = vec![member("a", 5), member("b", 5), member("c", 5)];
    let placement = terms(&[("primary", &["a"]), ("backup", &["b"]), ("last", &["c"])]);
    let mut spec = deployment(placement, 1);
    let mut status = ResourceBindingStatus::default();

    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        (pairs(&out.clusters), out.affinity_name.as_deref()),
        (want(&[("a", 1)]), Some("primary"))
    );
    spec.clusters = out.clusters;
    status.scheduler_observed_affinity_name = "primary".into();

    // a fails and is evicted: the primary term has no fit, the backup term takes over.
    fail(&mut clusters[0]);
    evict(&mut spec, "a");
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        (pairs(&out.clusters), out.affinity_name.as_deref()),
        (want(&[("b", 1)]), Some("backup"))
    );
    assert!(
        out.explanation.lines[0].contains("\"primary\" (#1) failed: 0/3 clusters are available")
    );
    spec.clusters = out.clusters;
    status.scheduler_observed_affinity_name = "backup".into();

    // a recovers: the scheduler never goes back to the preferred term by itself.
    clusters[0].spec.taints.clear();
    spec.graceful_eviction_tasks.clear();
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(out.affinity_name.as_deref(), Some("backup"));
    // ... unless a manual reschedule starts over at the first term.
    spec.reschedule_triggered_at = Time::parse("2024-05-01T11:00:00Z").ok();
    status.last_scheduled_time = Time::parse("2024-05-01T10:00:00Z").ok();
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        (pairs(&out.clusters), out.affinity_name.as_deref()),
        (want(&[("a", 1)]), Some("primary"))
    );
    spec.reschedule_triggered_at = None;

    // Every remaining term fails: the first error, a FitError (the controller empties
    // spec.clusters and keeps the old name).
    status.scheduler_observed_affinity_name = "backup".into();
    for i in [1, 2] {
        fail(&mut clusters[i]);
    }
    spec.clusters = vec![];
    let err = run(&spec, &status, &clusters).unwrap_err();
    let ScheduleError::FitError {
        message,
        explanation,
    } = err
    else {
        panic!("want FitError");
    };
    assert!(message.starts_with("0/3 clusters are available"));
    assert!(explanation
        .lines
        .iter()
        .any(|l| l.contains("\"last\" (#3) failed")));
}

#[test]
fn cluster_affinities_first_error_decides() {
    // The first term fails on spread constraints (SchedulerError), the second has no fit:
    // the first error is returned and nothing is patched.
    let clusters = vec![member("a", 5)];
    let mut placement = terms(&[("one", &["a"]), ("two", &["b"])]);
    placement.spread_constraints = vec![SpreadConstraint {
        spread_by_field: Some(SpreadByField::Cluster),
        min_groups: 2,
        max_groups: 2,
        ..Default::default()
    }];
    let err = run(
        &deployment(placement, 1),
        &ResourceBindingStatus::default(),
        &clusters,
    )
    .unwrap_err();
    assert!(matches!(err, ScheduleError::SchedulerError(_)), "{err:?}");
}

/// Counts the replicas of `result` as running pods on their clusters.
fn occupy(clusters: &mut [Cluster], result: &[TargetCluster]) {
    for c in clusters {
        let running = result
            .iter()
            .find(|t| t.name == c.metadata.name)
            .map_or(0, |t| t.replicas);
        if let Some(rs) = c.status.resource_summary.as_mut() {
            rs.allocated = list(&[("pods", &running.to_string())]);
        }
    }
}

#[test]
fn overflow_tiers_fill_in_order_and_drain_in_reverse() {
    let mut clusters = vec![
        member("idc1", 3),
        member("idc2", 2),
        member("cloud1", 10),
        member("other", 50),
    ];
    let mut placement = divided(ReplicaDivisionPreference::Weighted, true);
    placement.cluster_affinities = vec![ClusterAffinityTerm {
        affinity_name: "idc".into(),
        cluster_names: vec!["idc1".into(), "idc2".into()],
        overflow_affinities: vec![OverflowClusterAffinity {
            affinity_name: "cloud".into(),
            cluster_names: vec!["cloud1".into()],
            ..Default::default()
        }],
        ..Default::default()
    }];
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(placement, 4);
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(pairs(&out.clusters), want(&[("idc1", 2), ("idc2", 2)]));
    assert_eq!(
        out.explanation.cluster("cloud1").and_then(|c| c.tier),
        Some(1)
    );
    assert_eq!(
        reason_of(&out.explanation, "other").as_deref(),
        Some("cluster(s) did not match the placement cluster affinity constraint")
    );
    occupy(&mut clusters, &out.clusters);
    spec.clusters = out.clusters;
    // Scale up beyond the IDC (5 pods): the rest overflows to the cloud.
    spec.replicas = 9;
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("cloud1", 4), ("idc1", 3), ("idc2", 2)])
    );
    occupy(&mut clusters, &out.clusters);
    spec.clusters = out.clusters;
    // Scale down: the cloud gives back first.
    spec.replicas = 6;
    let out = run(&spec, &status, &clusters).unwrap();
    assert_eq!(
        pairs(&out.clusters),
        want(&[("cloud1", 1), ("idc1", 3), ("idc2", 2)])
    );
    // More than every tier holds: Unschedulable.
    spec.replicas = 100;
    let err = run(&spec, &status, &clusters).unwrap_err();
    assert!(
        matches!(err, ScheduleError::Unschedulable { .. }),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Properties

#[derive(Clone, Debug)]
struct World {
    /// (pods free, tainted, in affinity, evicting)
    clusters: Vec<(i64, bool, bool, bool)>,
    /// Previous result: replicas per cluster index (0 = absent).
    previous: Vec<i32>,
    strategy: u8,
    replicas: i32,
    weights: Vec<i64>,
}

fn arb_world() -> impl proptest::strategy::Strategy<Value = World> {
    (1usize..7)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(
                    (
                        0i64..30,
                        any::<bool>(),
                        any::<bool>(),
                        prop::bool::weighted(0.2),
                    ),
                    n,
                ),
                prop::collection::vec(0i32..6, n),
                0u8..4,
                0i32..60,
                prop::collection::vec(0i64..4, n),
            )
        })
        .prop_map(|(clusters, previous, strategy, replicas, weights)| World {
            clusters,
            previous,
            strategy,
            replicas,
            weights,
        })
}

impl World {
    fn name(i: usize) -> String {
        format!("m{i}")
    }

    fn clusters(&self) -> Vec<Cluster> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(i, (pods, tainted, _, _))| {
                let mut c = member(&Self::name(i), *pods);
                if *tainted {
                    fail(&mut c);
                }
                c
            })
            .collect()
    }

    fn spec(&self) -> ResourceBindingSpec {
        let excluded: Vec<String> = (0..self.clusters.len())
            .filter(|&i| !self.clusters[i].2)
            .map(Self::name)
            .collect();
        let mut placement = match self.strategy {
            0 => divided(ReplicaDivisionPreference::Weighted, true),
            1 => divided(ReplicaDivisionPreference::Aggregated, false),
            2 => {
                let mut p = divided(ReplicaDivisionPreference::Weighted, false);
                if let Some(rs) = p.replica_scheduling.as_mut() {
                    rs.weight_preference = Some(ClusterPreferences {
                        static_weight_list: self
                            .weights
                            .iter()
                            .enumerate()
                            .map(|(i, w)| StaticClusterWeight {
                                target_cluster: ClusterAffinity {
                                    cluster_names: vec![Self::name(i)],
                                    ..Default::default()
                                },
                                weight: *w,
                            })
                            .collect(),
                        ..Default::default()
                    });
                }
                p
            }
            _ => Placement {
                replica_scheduling: Some(ReplicaSchedulingStrategy {
                    replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
                    ..Default::default()
                }),
                ..Default::default()
            },
        };
        placement.cluster_affinity = Some(ClusterAffinity {
            exclude: excluded,
            ..Default::default()
        });
        let mut spec = deployment(placement, self.replicas);
        spec.clusters = self
            .previous
            .iter()
            .enumerate()
            .filter(|(_, r)| **r > 0)
            .map(|(i, r)| TargetCluster::new(&Self::name(i), *r))
            .collect();
        for (i, c) in self.clusters.iter().enumerate() {
            if c.3 {
                spec.graceful_eviction_tasks.push(GracefulEvictionTask {
                    from_cluster: Self::name(i),
                    reason: "TaintUntolerated".into(),
                    producer: "TaintManager".into(),
                    ..Default::default()
                });
            }
        }
        spec
    }
}

proptest! {
    /// Divided results sum to spec.replicas whenever scheduling succeeds, and succeed whenever
    /// the feasible clusters hold enough replicas.
    #[test]
    fn divided_sums_to_replicas(w in arb_world()) {
        prop_assume!(w.strategy < 3);
        let spec = w.spec();
        let result = run(&spec, &ResourceBindingStatus::default(), &w.clusters());
        match &result {
            Ok(out) => {
                let total: i64 = out.clusters.iter().map(|t| i64::from(t.replicas)).sum();
                prop_assert_eq!(total, i64::from(w.replicas));
            }
            Err(ScheduleError::FitError { .. }) => {}
            Err(ScheduleError::Unschedulable { explanation, .. }) => {
                prop_assert!(w.strategy < 2, "static weights never run out of capacity");
                let capacity: i64 = explanation
                    .clusters()
                    .filter_map(|(_, c)| c.available_replicas)
                    .sum();
                prop_assert!(capacity < i64::from(w.replicas), "enough capacity ({capacity}) but unschedulable");
            }
            Err(e) => prop_assert!(false, "unexpected {e:?}"),
        }
    }

    /// No replica is ever placed on a cluster a filter rejected, and every cluster is
    /// explained.
    #[test]
    fn never_placed_on_rejected_clusters(w in arb_world()) {
        let spec = w.spec();
        if let Ok(out) = run(&spec, &ResourceBindingStatus::default(), &w.clusters()) {
            prop_assert_eq!(out.explanation.len(), w.clusters.len());
            for t in &out.clusters {
                let e = out.explanation.cluster(&t.name);
                prop_assert!(e.is_some_and(|e| e.rejected.is_none() && e.selected), "{} placed but rejected", t.name);
                let i: usize = t.name[1..].parse().unwrap_or(usize::MAX);
                let (_, tainted, allowed, evicting) = w.clusters[i];
                prop_assert!(allowed && !evicting);
                prop_assert!(!tainted || w.previous[i] > 0, "tainted {} was not running it", t.name);
            }
        }
    }

    /// Dynamic and aggregated rescheduling never take a replica off a cluster that stays
    /// feasible while the replicas do not shrink.
    #[test]
    fn rescheduling_keeps_replicas_on_feasible_clusters(w in arb_world()) {
        prop_assume!(w.strategy < 2);
        let mut spec = w.spec();
        let feasible_prev: i32 = w
            .previous
            .iter()
            .enumerate()
            .filter(|(i, _)| w.clusters[*i].2 && !w.clusters[*i].3)
            .map(|(_, r)| *r)
            .sum();
        spec.replicas = spec.replicas.max(feasible_prev);
        if let Ok(out) = run(&spec, &ResourceBindingStatus::default(), &w.clusters()) {
            for (i, prev) in w.previous.iter().enumerate() {
                let (_, _, allowed, evicting) = w.clusters[i];
                if *prev > 0 && allowed && !evicting {
                    let now = out.clusters.iter().find(|t| t.name == World::name(i)).map_or(0, |t| t.replicas);
                    prop_assert!(now >= *prev, "m{} went from {} to {}", i, prev, now);
                }
            }
        }
    }

    /// After any subset of a binding's clusters is evicted (the taint manager's
    /// `graceful_evict_cluster` on the previous result, the clusters tainted), rescheduling
    /// never chooses an evicted cluster; Divided results sum to `spec.replicas` and fail only
    /// for want of capacity or of any feasible cluster; dynamic division keeps every
    /// surviving cluster's replicas; Duplicated keeps every survivor and replaces the evicted
    /// clusters only when as many new ones fit.
    #[test]
    fn rescheduling_after_eviction(w in arb_world(), mask in any::<u8>()) {
        let mut w = w;
        for c in &mut w.clusters {
            c.3 = false;
        }
        w.previous = vec![0; w.clusters.len()];
        let mut clusters = w.clusters();
        let mut spec = w.spec();
        let Ok(first) = run(&spec, &ResourceBindingStatus::default(), &clusters) else {
            return Ok(());
        };
        spec.clusters = first.clusters;
        let mut evicted: Vec<String> = Vec::new();
        for (i, c) in clusters.iter_mut().enumerate() {
            let name = World::name(i);
            if mask & (1 << i) != 0 && spec.clusters.iter().any(|t| t.name == name) {
                fail(c);
                evict(&mut spec, &name);
                evicted.push(name);
            }
        }
        let survivors = spec.clusters.clone();
        let replicas = i64::from(w.replicas);
        match run(&spec, &ResourceBindingStatus::default(), &clusters) {
            Ok(out) => {
                for t in &out.clusters {
                    prop_assert!(!evicted.contains(&t.name), "evicted {} chosen", t.name);
                }
                let kept = |name: &str| out.clusters.iter().find(|t| t.name == name).map_or(0, |t| t.replicas);
                if w.strategy < 3 {
                    let total: i64 = out.clusters.iter().map(|t| i64::from(t.replicas)).sum();
                    prop_assert_eq!(total, replicas);
                }
                if w.strategy < 2 {
                    for s in &survivors {
                        prop_assert!(kept(&s.name) >= s.replicas, "{} went from {} to {}", s.name, s.replicas, kept(&s.name));
                    }
                }
                if w.strategy == 3 {
                    prop_assert!(out.clusters.iter().all(|t| i64::from(t.replicas) == replicas));
                    for s in &survivors {
                        prop_assert!(out.clusters.iter().any(|t| t.name == s.name), "survivor {} dropped", s.name);
                    }
                    let new = out.clusters.len() - survivors.len();
                    prop_assert!(survivors.is_empty() || new == 0 || new >= evicted.len());
                }
            }
            Err(ScheduleError::FitError { explanation, .. }) => {
                for (name, c) in explanation.clusters() {
                    prop_assert!(c.rejected.is_some(), "{} was feasible", name);
                }
            }
            Err(ScheduleError::Unschedulable { explanation, .. }) => {
                prop_assert!(w.strategy < 2, "only dynamic division runs out of capacity");
                let capacity: i64 = explanation
                    .clusters()
                    .filter_map(|(_, c)| c.available_replicas)
                    .sum();
                prop_assert!(capacity < replicas, "enough capacity ({capacity}) but unschedulable");
            }
            Err(e) => prop_assert!(false, "unexpected {e:?}"),
        }
    }

    /// Webster hands out exactly the seats asked for, whatever the party order, and the same
    /// input always gives the same answer.
    #[test]
    fn webster_sums_and_is_deterministic(
        votes in prop::collection::vec(0i64..1000, 1..8),
        seats in 0i64..200,
        uid in "[a-z0-9-]{0,12}",
    ) {
        let names: Vec<String> = (0..votes.len()).map(|i| format!("c{i}")).collect();
        let parties: Vec<Party<'_>> = names
            .iter()
            .zip(&votes)
            .map(|(name, v)| Party { name, votes: *v, initial: 0 })
            .collect();
        let tie = TieBreak::from_uid(&uid);
        let a = webster(seats, &parties, tie);
        let total: i64 = a.seats.iter().map(|(_, s)| s).sum();
        prop_assert_eq!(total, seats);
        let mut reversed = parties.clone();
        reversed.reverse();
        prop_assert_eq!(&webster(seats, &reversed, tie).seats, &a.seats);
        prop_assert_eq!(&webster(seats, &parties, tie), &a);
    }
}

#[test]
fn application_failover_tasks_and_blocks_keep_a_cluster_out() {
    let clusters: Vec<Cluster> = (1..=3)
        .map(|i| member(&format!("member{i}"), 100))
        .collect();
    let snap = ClusterSnapshot::new(&clusters);
    let status = ResourceBindingStatus::default();
    let mut spec = deployment(Placement::default(), 1);
    spec.clusters = vec![
        TargetCluster::new("member1", 1),
        TargetCluster::new("member2", 1),
    ];
    // An application failover task is filtered like a taint manager's.
    spec.graceful_evict_cluster(
        "member1",
        flotilla_api::binding::EvictionOptions {
            producer: flotilla_api::binding::EVICTION_PRODUCER_RB_APPLICATION_FAILOVER.into(),
            reason: flotilla_api::binding::EVICTION_REASON_APPLICATION_FAILURE.into(),
            ..Default::default()
        },
    );
    let until = Some(Time::new(chrono::DateTime::UNIX_EPOCH));
    let blocked = vec![
        ("member1".to_string(), None),
        ("member2".to_string(), until),
        ("member3".to_string(), until),
    ];
    let input = |blocked| ScheduleInput {
        spec: &spec,
        status: &status,
        clusters: &snap,
        options: ScheduleOptions::default(),
        blocked,
    };
    let out = schedule(&input(&blocked)).unwrap();
    let e = &out.explanation;
    assert_eq!(
        e.cluster("member1")
            .and_then(|c| c.rejected.as_ref())
            .map(|r| r.filter()),
        Some("ClusterEviction")
    );
    // member2 runs the binding now: a block keeps out, it never evicts.
    assert!(e.cluster("member2").is_some_and(|c| c.rejected.is_none()));
    assert_eq!(
        e.cluster("member3")
            .and_then(|c| c.rejected.as_ref())
            .map(|r| r.filter()),
        Some("FailoverBlock")
    );
    assert!(e
        .lines
        .iter()
        .any(|l| l.contains("failed over from member3")));
    assert_eq!(pairs(&out.clusters), want(&[("member2", 1)]));
    // Without the block member3 is a candidate again.
    let out = schedule(&input(&[])).unwrap();
    assert!(out
        .explanation
        .cluster("member3")
        .is_some_and(|c| c.rejected.is_none()));
}

// ---------------------------------------------------------------------------------------------
// A deleted member (docs/semantics.md §2, §8.1 trigger 5)

#[test]
fn a_deleted_member_loses_its_replicas_under_every_division() {
    let static_weights = {
        let mut p = divided(ReplicaDivisionPreference::Weighted, false);
        p.replica_scheduling.as_mut().unwrap().weight_preference = Some(ClusterPreferences {
            static_weight_list: ["m1", "m2", "m3"]
                .iter()
                .map(|c| StaticClusterWeight {
                    target_cluster: ClusterAffinity {
                        cluster_names: vec![c.to_string()],
                        ..Default::default()
                    },
                    weight: 1,
                })
                .collect(),
            dynamic_weight: None,
        });
        p
    };
    let duplicated = Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
            ..Default::default()
        }),
        ..Default::default()
    };
    /// (name, placement, placed, wanted after m3 is deleted)
    type Row = (
        &'static str,
        Placement,
        &'static [(&'static str, i32)],
        &'static [(&'static str, i32)],
    );
    let rows: Vec<Row> = vec![
        (
            "Duplicated",
            duplicated,
            &[("m1", 10), ("m2", 10), ("m3", 10)],
            &[("m1", 10), ("m2", 10)],
        ),
        (
            "Divided, static weights",
            static_weights,
            &[("m1", 4), ("m2", 3), ("m3", 3)],
            &[("m1", 5), ("m2", 5)],
        ),
        (
            "Divided, dynamic weight",
            divided(ReplicaDivisionPreference::Weighted, true),
            &[("m1", 4), ("m2", 3), ("m3", 3)],
            // The survivors keep theirs; m3's 3 are divided by room (equal: a tie).
            &[("m1", 6), ("m2", 4)],
        ),
        (
            "Divided, aggregated",
            divided(ReplicaDivisionPreference::Aggregated, false),
            &[("m1", 4), ("m2", 3), ("m3", 3)],
            &[("m1", 7), ("m2", 3)],
        ),
    ];
    for (name, placement, placed, wanted) in rows {
        let mut clusters: Vec<Cluster> = (1..=3).map(|i| member(&format!("m{i}"), 100)).collect();
        clusters[2].metadata.deletion_timestamp =
            Some(Time::parse("2026-01-01T00:00:00Z").unwrap());
        let mut spec = deployment(placement, 10);
        spec.clusters = placed
            .iter()
            .map(|(n, r)| TargetCluster::new(n, *r))
            .collect();
        let status = ResourceBindingStatus::default();
        let applied = serde_json::to_string(spec.placement.as_ref().unwrap()).unwrap();
        let snap = ClusterSnapshot::new(&clusters);
        let reason = needs_scheduling(&spec, &status, Some(&applied), &snap);
        assert!(reason.is_some(), "{name}: the deletion schedules");
        let out = run(&spec, &status, &clusters).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(pairs(&out.clusters), want(wanted), "{name}");
        // A Cluster gone altogether (its deletion finished before the binding moved)
        // schedules the binding too, and the same way.
        let gone: Vec<Cluster> = clusters[..2].to_vec();
        let reason = needs_scheduling(&spec, &status, Some(&applied), &ClusterSnapshot::new(&gone));
        assert!(reason.is_some(), "{name}: the gone cluster schedules");
        let out = run(&spec, &status, &gone).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(pairs(&out.clusters), want(wanted), "{name}, gone");
    }
}
