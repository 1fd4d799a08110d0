//! Tests of the failover dry-run: cluster failures evicted and rescheduled as the controllers
//! would, push members' failure threshold, ClusterTaintPolicies, unhealthy applications, held
//! moves, refused names, and the brake's delays, stops and pending evictions.

use super::*;
use serde_json::{json, Value};

fn at0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A Ready member serving Deployments, pull or push, with room for `pods` pods.
fn cluster(name: &str, pull: bool, pods: i64) -> Cluster {
    serde_json::from_value(json!({
        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"syncMode": if pull { "Pull" } else { "Push" }},
        "status": {
            "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
            "resourceSummary": {"allocatable": {"pods": pods.to_string(), "cpu": "100"}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                            "message": "", "lastTransitionTime": "2026-03-01T00:00:00Z"}]
        }
    }))
    .unwrap()
}

fn fleet(clusters: &[Cluster]) -> BTreeMap<String, Cluster> {
    clusters
        .iter()
        .map(|c| (c.metadata.name.clone(), c.clone()))
        .collect()
}

/// A placed ResourceBinding `default/<name>-deployment`.
fn binding(
    name: &str,
    replicas: i32,
    placement: Value,
    clusters: Value,
    failover: Value,
) -> BindingInput {
    let mut spec = json!({
        "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": name},
        "replicas": replicas,
        "placement": placement,
        "clusters": clusters,
    });
    if !failover.is_null() {
        spec["failover"] = failover;
    }
    let object = json!({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": format!("{name}-deployment"), "namespace": "default", "generation": 1,
                     "annotations": {flotilla_api::policy::APPLIED_PLACEMENT_ANNOTATION: placement.to_string()}},
        "spec": spec,
        "status": {"schedulerObservedGeneration": 1, "lastScheduledTime": "2026-03-01T00:00:00Z",
                   "conditions": [{"type": "Scheduled", "status": "True", "reason": "Success",
                                   "message": crate::scheduler::SUCCESS_MESSAGE,
                                   "lastTransitionTime": "2026-03-01T00:00:00Z"}]}
    });
    BindingInput::from_object(RESOURCE_BINDING, &object).unwrap()
}

fn unreachable_for(seconds: Option<i64>) -> Value {
    match seconds {
        Some(s) => json!([{"key": "cluster.karmada.io/unreachable", "operator": "Exists",
                           "effect": "NoExecute", "tolerationSeconds": s}]),
        None => {
            json!([{"key": "cluster.karmada.io/unreachable", "operator": "Exists", "effect": "NoExecute"}])
        }
    }
}

fn divided(names: &[&str], tolerations: Value) -> Value {
    json!({"clusterAffinity": {"clusterNames": names}, "clusterTolerations": tolerations,
           "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                                 "weightPreference": {"staticWeightList": [
                                     {"targetCluster": {"clusterNames": ["m1"]}, "weight": 2},
                                     {"targetCluster": {"clusterNames": ["m2", "m3"]}, "weight": 1}]}}})
}

fn duplicated(names: &[&str], tolerations: Value) -> Value {
    json!({"clusterAffinity": {"clusterNames": names}, "clusterTolerations": tolerations,
           "replicaScheduling": {"replicaSchedulingType": "Duplicated"}})
}

fn request(failed: &[&str], after: Option<i64>) -> FailoverSimulationSpec {
    FailoverSimulationSpec {
        failed_clusters: failed.iter().map(|s| s.to_string()).collect(),
        after_seconds: after,
        ..Default::default()
    }
}

fn targets(v: &[TargetCluster]) -> Vec<(String, i32)> {
    v.iter().map(|c| (c.name.clone(), c.replicas)).collect()
}

fn pairs(v: &[(&str, i32)]) -> Vec<(String, i32)> {
    v.iter().map(|(n, r)| (n.to_string(), *r)).collect()
}

/// One binding, one request: (evictions as (cluster, afterSeconds, fate), placement after,
/// pending as (cluster, afterSeconds), unplaceable reason).
#[allow(clippy::type_complexity)]
fn run_one(
    clusters: &[Cluster],
    b: BindingInput,
    req: FailoverSimulationSpec,
) -> Option<(
    Vec<(String, i64, String)>,
    Vec<(String, i32)>,
    Vec<(String, i64)>,
    Option<String>,
)> {
    let status = simulate(
        &req,
        &fleet(clusters),
        &[],
        &[b],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    assert_eq!(status.summary.bindings, 1);
    assert!(
        status.brake.regions.is_empty(),
        "no brake: {:?}",
        status.brake
    );
    let out = status.bindings.first()?;
    Some((
        out.evictions
            .iter()
            .map(|e| (e.cluster.clone(), e.after_seconds, e.old_copy.fate.clone()))
            .collect(),
        targets(&out.clusters_after),
        out.pending
            .iter()
            .map(|p| (p.cluster.clone(), p.after_seconds))
            .collect(),
        status.unplaceable.first().map(|u| u.reason.clone()),
    ))
}

#[test]
fn cluster_failures_evict_and_reschedule_as_the_controllers_would() {
    let three = [
        cluster("m1", true, 100),
        cluster("m2", true, 100),
        cluster("m3", true, 100),
    ];
    let m123 = ["m1", "m2", "m3"];
    let kept = |c: &str, s: i64| (c.to_string(), s, "KeptUntilHealthy".to_string());
    // Defaults: pull members go Unknown after 40 s; NoExecute after 300 s (the eviction
    // timeout counts from the last lease renewal, taken as the moment of failure).
    #[allow(clippy::type_complexity)]
    #[rustfmt::skip] // the table keeps its layout
    let cases: Vec<(&str, BindingInput, FailoverSimulationSpec, Option<(Vec<(String, i64, String)>, Vec<(String, i32)>, Vec<(String, i64)>, Option<String>)>)> = vec![
        (
            "divided: untolerated NoExecute evicts when it comes; m2 and m3 share m1's replicas",
            binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], None),
            Some((vec![kept("m1", 300)], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
        ),
        (
            "tolerationSeconds add to the taint's time",
            binding("web", 4, divided(&m123, unreachable_for(Some(60))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], None),
            Some((vec![kept("m1", 360)], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
        ),
        (
            "afterSeconds before the eviction: nothing moves yet, the eviction is pending",
            binding("web", 4, divided(&m123, unreachable_for(Some(60))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], Some(100)),
            Some((vec![], pairs(&[("m1", 2), ("m2", 1), ("m3", 1)]), vec![("m1".to_string(), 360)], None)),
        ),
        (
            "tolerated for ever: not affected",
            binding("web", 4, divided(&m123, unreachable_for(None)), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], None),
            None,
        ),
        (
            "tolerated for a century: nothing within the year the run looks at",
            binding("web", 4, divided(&m123, unreachable_for(Some(100 * 366 * 24 * 3600))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], Some(i64::MAX)),
            None,
        ),
        (
            "not on the failed cluster: not affected",
            binding("web", 2, divided(&["m2", "m3"], json!([])), json!([{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
            request(&["m1"], None),
            None,
        ),
        (
            "duplicated: the failed cluster leaves, the free one is added",
            binding("web", 3, duplicated(&m123, json!([])), json!([{"name": "m1", "replicas": 3}, {"name": "m2", "replicas": 3}, {"name": "m3", "replicas": 3}]), Value::Null),
            request(&["m1", "m2"], None),
            Some((vec![kept("m1", 300), kept("m2", 300)], pairs(&[("m3", 3)]), vec![], None)),
        ),
        (
            "purge mode Immediately: the old copy goes first",
            binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), json!({"cluster": {"purgeMode": "Immediately"}})),
            request(&["m1"], None),
            Some((vec![("m1".to_string(), 300, "DeletedFirst".to_string())], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
        ),
        (
            "purge mode Never: kept until suppression is lifted",
            binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), json!({"cluster": {"purgeMode": "Never"}})),
            request(&["m1"], None),
            Some((vec![("m1".to_string(), 300, "KeptUntilSuppressionLifted".to_string())], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
        ),
        (
            "no other cluster fits: the binding keeps its clusters and says why",
            binding("web", 2, divided(&["m1"], json!([])), json!([{"name": "m1", "replicas": 2}]), Value::Null),
            request(&["m1"], None),
            Some((vec![kept("m1", 300)], vec![], vec![], Some("NoClusterFit".to_string()))),
        ),
    ];
    for (name, b, req, want) in cases {
        assert_eq!(run_one(&three, b, req), want, "{name}");
    }
}

#[test]
fn push_members_go_not_ready_after_the_failure_threshold() {
    let fleet_ = [cluster("m1", false, 100), cluster("m2", false, 100)];
    let b = binding(
        "web",
        2,
        divided(&["m1", "m2"], json!([])),
        json!([{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 1}]),
        Value::Null,
    );
    let status = simulate(
        &request(&["m1"], None),
        &fleet(&fleet_),
        &[],
        &[b],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    let line = &status.timeline.clusters[0];
    assert_eq!(
        (
            line.ready.as_str(),
            line.not_ready_after_seconds,
            line.no_execute_after_seconds
        ),
        ("False", 30, Some(330))
    );
    assert!(
        line.taints
            .iter()
            .any(|t| t.contains("not-ready") && t.contains("NoExecute")),
        "{line:?}"
    );
    assert_eq!(status.bindings[0].evictions[0].after_seconds, 330);
    assert_eq!(
        targets(&status.bindings[0].clusters_after),
        pairs(&[("m2", 2)])
    );
    assert_eq!(status.failed_at, Some(Time::new(at0())));
}

#[test]
fn cluster_taint_policies_taint_the_failed_cluster_as_their_controller_would() {
    let three = [
        cluster("m1", true, 100),
        cluster("m2", true, 100),
        cluster("m3", true, 100),
    ];
    let policy: ClusterTaintPolicy = serde_json::from_value(json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
        "metadata": {"name": "down"},
        "spec": {"targetClusters": {"clusterNames": ["m1", "m2", "m3"]},
                 "addOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["Unknown", "False"]}],
                 "removeOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}],
                 "taints": [{"key": "example.com/down", "effect": "NoExecute"}]}
    }))
    .unwrap();
    let b = || {
        binding(
            "web",
            4,
            divided(&["m1", "m2", "m3"], json!([])),
            json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]),
            Value::Null,
        )
    };
    // Automatic NoExecute taints off: only the policy's taint evicts, as soon as Ready
    // turns Unknown (40 s).
    let mut settings = SimulationSettings::default();
    settings.taints.automatic_no_execute = false;
    let status = simulate(
        &request(&["m1"], None),
        &fleet(&three),
        std::slice::from_ref(&policy),
        &[b()],
        &settings,
        at0(),
    )
    .unwrap();
    let line = &status.timeline.clusters[0];
    assert_eq!(line.no_execute_after_seconds, Some(40), "{line:?}");
    assert!(
        line.taints.iter().any(|t| t.contains("example.com/down")),
        "{line:?}"
    );
    assert_eq!(status.bindings[0].evictions[0].after_seconds, 40);
    assert_eq!(
        targets(&status.bindings[0].clusters_after),
        pairs(&[("m2", 2), ("m3", 2)])
    );
    // Without the policy nothing would evict.
    let status = simulate(
        &request(&["m1"], None),
        &fleet(&three),
        &[],
        &[b()],
        &settings,
        at0(),
    )
    .unwrap();
    assert_eq!(status.timeline.clusters[0].no_execute_after_seconds, None);
    assert!(status.bindings.is_empty(), "{:?}", status.bindings);
}

#[test]
fn an_unhealthy_application_moves_after_its_toleration() {
    let three = [
        cluster("m1", true, 100),
        cluster("m2", true, 100),
        cluster("m3", true, 100),
    ];
    let b = binding(
        "web",
        2,
        duplicated(&["m1", "m2", "m3"], json!([])),
        json!([{"name": "m1", "replicas": 2}]),
        json!({"application": {"decisionConditions": {"tolerationSeconds": 120}, "purgeMode": "Graciously", "gracePeriodSeconds": 90}}),
    );
    let b = BindingInput {
        spec: ResourceBindingSpec {
            clusters: vec![TargetCluster::new("m1", 2)],
            ..b.spec.clone()
        },
        ..b
    };
    let mut req = request(&[], None);
    req.unhealthy_applications = vec![flotilla_api::simulation::UnhealthyApplication {
        kind: String::new(),
        namespace: "default".into(),
        name: "web-deployment".into(),
        cluster: "m1".into(),
    }];
    let status = simulate(
        &req,
        &fleet(&three),
        &[],
        &[b],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    let out = &status.bindings[0];
    assert_eq!(out.evictions.len(), 1, "{out:?}");
    let e = &out.evictions[0];
    assert_eq!(
        (e.cluster.as_str(), e.after_seconds, e.reason.as_str()),
        ("m1", 120, "ApplicationFailure")
    );
    assert_eq!(e.producer, EVICTION_PRODUCER_RB_APPLICATION_FAILOVER);
    assert_eq!(
        e.old_copy,
        OldCopy {
            fate: "KeptUntilHealthy".into(),
            grace_period_seconds: Some(90)
        }
    );
    // Duplicated: m1 is blocked while its task exists, the others take it.
    assert_eq!(targets(&out.clusters_after), pairs(&[("m2", 2), ("m3", 2)]));
    // Looking at 60 s: the timer still runs.
    req.after_seconds = Some(60);
    let b = binding(
        "web",
        2,
        duplicated(&["m1", "m2", "m3"], json!([])),
        json!([{"name": "m1", "replicas": 2}]),
        json!({"application": {"decisionConditions": {"tolerationSeconds": 120}}}),
    );
    let status = simulate(
        &req,
        &fleet(&three),
        &[],
        &[b],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    let p = &status.bindings[0].pending;
    assert_eq!(
        (p[0].cluster.as_str(), p[0].after_seconds),
        ("m1", 120),
        "{p:?}"
    );
}

#[test]
fn held_moves_and_cluster_resource_bindings_are_reported() {
    let two = [cluster("m1", true, 100), cluster("m2", true, 100)];
    let app = |cluster: &str, kind: &str, namespace: &str, name: &str| {
        flotilla_api::simulation::UnhealthyApplication {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            cluster: cluster.into(),
        }
    };
    // Immediately, and no other cluster in the affinity: application failover holds the
    // move (the only copy would go with nothing in its place).
    let only_m1 = binding(
        "web",
        2,
        duplicated(&["m1"], json!([])),
        json!([{"name": "m1", "replicas": 2}]),
        json!({"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Immediately"}}),
    );
    let mut req = request(&[], Some(15));
    req.unhealthy_applications = vec![app("m1", "", "default", "web-deployment")];
    let status = simulate(
        &req,
        &fleet(&two),
        &[],
        &[only_m1],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    let out = &status.bindings[0];
    assert!(out.evictions.is_empty(), "{out:?}");
    assert_eq!(
        out.held,
        [HeldEviction {
            cluster: "m1".into(),
            reason: "NoTarget".into(),
            producer: EVICTION_PRODUCER_RB_APPLICATION_FAILOVER.into(),
            ..Default::default()
        }]
    );
    assert_eq!(targets(&out.clusters_after), pairs(&[("m1", 2)]));

    // A ClusterResourceBinding: its own producer, no namespace.
    let mut crb = binding(
        "web",
        2,
        duplicated(&["m1", "m2"], json!([])),
        json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 2}]),
        json!({"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Never"}}),
    );
    crb.kind = CLUSTER_RESOURCE_BINDING;
    crb.namespace = String::new();
    crb.name = "web-cluster".into();
    let mut req = request(&[], None);
    req.unhealthy_applications = vec![app("m2", CLUSTER_RESOURCE_BINDING, "", "web-cluster")];
    let status = simulate(
        &req,
        &fleet(&two),
        &[],
        &[crb],
        &SimulationSettings::default(),
        at0(),
    )
    .unwrap();
    let out = &status.bindings[0];
    assert_eq!(
        (out.kind.as_str(), out.namespace.as_str()),
        (CLUSTER_RESOURCE_BINDING, "")
    );
    let e = &out.evictions[0];
    assert_eq!(e.producer, EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER);
    assert_eq!((e.cluster.as_str(), e.after_seconds), ("m2", 10));
    assert_eq!(e.old_copy.fate, "KeptUntilSuppressionLifted");
    assert_eq!(targets(&out.clusters_after), pairs(&[("m1", 2)]));
}

#[test]
fn names_that_do_not_exist_are_refused_by_field() {
    let three = [cluster("m1", true, 100), cluster("m2", true, 100)];
    let b = binding(
        "web",
        2,
        divided(&["m1", "m2"], json!([])),
        json!([{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 1}]),
        Value::Null,
    );
    let mut req = request(&["m1", "nope"], None);
    req.unhealthy_applications = vec![
        flotilla_api::simulation::UnhealthyApplication {
            kind: String::new(),
            namespace: "default".into(),
            name: "gone".into(),
            cluster: "m1".into(),
        },
        flotilla_api::simulation::UnhealthyApplication {
            kind: String::new(),
            namespace: "default".into(),
            name: "web-deployment".into(),
            cluster: "m9".into(),
        },
    ];
    let Err(SimulationError::Invalid(errors)) = simulate(
        &req,
        &fleet(&three),
        &[],
        &[b],
        &SimulationSettings::default(),
        at0(),
    ) else {
        panic!("refused");
    };
    let paths: Vec<&str> = errors.errors().iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.failedClusters[1]",
            "spec.unhealthyApplications[0].name",
            "spec.unhealthyApplications[1].cluster"
        ]
    );
}

/// What the brake does to the evictions of one request: `fleet` as (cluster, region,
/// failed), `n` bindings `b0`…, each Duplicated over the whole fleet and placed on every
/// cluster (so each is evicted from every failed one, untolerated, 300 s after the
/// failure), the brake's flags, the server started `started` seconds before the failure.
/// Answers per binding (name, evictions as (cluster, afterSeconds, brake reasons,
/// delaySeconds), held as (cluster, reason)) and the status.
#[allow(clippy::type_complexity)]
fn braked(
    fleet_spec: &[(&str, &str, bool)],
    n: usize,
    brake: BrakeSettings,
    started: i64,
    after: Option<i64>,
) -> (
    Vec<(
        String,
        Vec<(String, i64, Vec<String>, i64)>,
        Vec<(String, String)>,
    )>,
    FailoverSimulationStatus,
) {
    let clusters: Vec<Cluster> = fleet_spec
        .iter()
        .map(|&(name, region, _)| {
            let mut c = cluster(name, true, 100);
            c.spec.region = region.to_string();
            c
        })
        .collect();
    let names: Vec<&str> = fleet_spec.iter().map(|c| c.0).collect();
    let placed: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "replicas": 1}))
        .collect();
    // Listed in the answer's order, asked in key order: the same here.
    let bindings: Vec<BindingInput> = (0..n)
        .map(|i| {
            binding(
                &format!("b{i}"),
                1,
                duplicated(&names, json!([])),
                json!(placed),
                Value::Null,
            )
        })
        .collect();
    let failed: Vec<&str> = fleet_spec.iter().filter(|c| c.2).map(|c| c.0).collect();
    let settings = SimulationSettings {
        brake: Some(BrakeOf {
            settings: brake,
            started: at0() - Duration::seconds(started),
        }),
        ..SimulationSettings::default()
    };
    let status = simulate(
        &request(&failed, after),
        &fleet(&clusters),
        &[],
        &bindings,
        &settings,
        at0(),
    )
    .unwrap();
    let per_binding = status
        .bindings
        .iter()
        .map(|b| {
            (
                b.name.clone(),
                b.evictions
                    .iter()
                    .map(|e| {
                        let (reasons, delay) = e
                            .brake
                            .as_ref()
                            .map(|d| (d.reasons.clone(), d.delay_seconds))
                            .unwrap_or_default();
                        (e.cluster.clone(), e.after_seconds, reasons, delay)
                    })
                    .collect(),
                b.held
                    .iter()
                    .map(|h| (h.cluster.clone(), h.reason.clone()))
                    .collect(),
            )
        })
        .collect();
    (per_binding, status)
}

#[test]
fn the_brake_delays_and_stops_evictions_as_the_servers_brake_would() {
    let long_ago = 3600;
    let rl = || vec!["RateLimited".to_string()];
    let ev =
        |c: &str, at: i64, reasons: Vec<String>, delay: i64| (c.to_string(), at, reasons, delay);
    let none = Vec::<String>::new;
    let one_of_four = [
        ("m1", "", true),
        ("m2", "", false),
        ("m3", "", false),
        ("m4", "", false),
    ];
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<(&str, &str, bool)>,
        usize,
        BrakeSettings,
        i64,
        Vec<Vec<(String, i64, Vec<String>, i64)>>,
        Vec<Vec<(String, String)>>,
    )> = vec![
        (
            "Normal: one failed cluster, let out at once: all its bindings go when due",
            one_of_four.to_vec(),
            3,
            BrakeSettings::default(),
            long_ago,
            vec![
                vec![ev("m1", 300, none(), 0)],
                vec![ev("m1", 300, none(), 0)],
                vec![ev("m1", 300, none(), 0)],
            ],
            vec![vec![], vec![], vec![]],
        ),
        (
            "Normal: two failed clusters of a region, the second 10 s (0.1/s) after the first",
            vec![
                ("m1", "", true),
                ("m2", "", true),
                ("m3", "", false),
                ("m4", "", false),
                ("m5", "", false),
                ("m6", "", false),
            ],
            2,
            BrakeSettings::default(),
            long_ago,
            vec![
                vec![ev("m1", 300, none(), 0), ev("m2", 310, rl(), 10)],
                vec![ev("m1", 300, none(), 0), ev("m2", 310, rl(), 10)],
            ],
            vec![vec![], vec![]],
        ),
        (
            "pacing off: all at once",
            one_of_four.to_vec(),
            3,
            BrakeSettings {
                rate_limit: false,
                ..BrakeSettings::default()
            },
            long_ago,
            vec![
                vec![ev("m1", 300, none(), 0)],
                vec![ev("m1", 300, none(), 0)],
                vec![ev("m1", 300, none(), 0)],
            ],
            vec![vec![], vec![], vec![]],
        ),
        (
            "startup grace: due at 300 s, the server started 10 s before the failure with a grace of 400 s: from 390 s on, the cluster and all its bindings",
            one_of_four.to_vec(),
            2,
            BrakeSettings {
                startup_grace: std::time::Duration::from_secs(400),
                ..BrakeSettings::default()
            },
            10,
            vec![
                vec![ev("m1", 390, vec!["StartupGrace".into()], 90)],
                vec![ev("m1", 390, vec!["StartupGrace".into()], 90)],
            ],
            vec![vec![], vec![]],
        ),
        (
            "a region over the threshold: its clusters let out at the secondary rate (0.01/s), each with all its bindings",
            vec![
                ("a1", "a", true),
                ("a2", "a", true),
                ("a3", "a", true),
                ("b1", "b", false),
                ("b2", "b", false),
                ("b3", "b", false),
                ("b4", "b", false),
            ],
            2,
            BrakeSettings::default(),
            long_ago,
            vec![
                vec![
                    ev("a1", 300, none(), 0),
                    ev("a2", 400, rl(), 100),
                    ev("a3", 500, rl(), 200),
                ],
                vec![
                    ev("a1", 300, none(), 0),
                    ev("a2", 400, rl(), 100),
                    ev("a3", 500, rl(), 200),
                ],
            ],
            vec![vec![], vec![]],
        ),
        (
            "the whole fleet fails: nothing is evicted, every eviction is held by FullDisruption",
            vec![("m1", "a", true), ("m2", "b", true)],
            1,
            BrakeSettings::default(),
            long_ago,
            vec![vec![]],
            vec![vec![
                ("m1".into(), "FullDisruption".into()),
                ("m2".into(), "FullDisruption".into()),
            ]],
        ),
        (
            "a rate of 0: stopped (RateZero)",
            one_of_four.to_vec(),
            1,
            BrakeSettings {
                cluster_rate: 0.0,
                ..BrakeSettings::default()
            },
            long_ago,
            vec![vec![]],
            vec![vec![("m1".into(), "RateZero".into())]],
        ),
    ];
    for (case, fleet_spec, n, brake, started, evictions, held) in cases {
        let (got, status) = braked(&fleet_spec, n, brake, started, None);
        let want: Vec<_> = (0..n)
            .map(|i| {
                (
                    format!("b{i}-deployment"),
                    evictions[i].clone(),
                    held[i].clone(),
                )
            })
            .collect();
        assert_eq!(got, want, "{case}: {:?}", status.brake);
        // A held eviction keeps its cluster; the scheduler places the others' replicas.
        for b in &status.bindings {
            for h in &b.held {
                assert!(
                    b.clusters_after.iter().any(|c| c.name == h.cluster),
                    "{case}: {b:?}"
                );
            }
        }
    }
}

#[test]
fn the_answer_tells_each_regions_state_and_what_the_brake_did() {
    // Region a loses all three clusters: PartialDisruption from 40 s (when they turn
    // Unknown), at 0.01 clusters/s.
    let fleet_spec = [
        ("a1", "a", true),
        ("a2", "a", true),
        ("a3", "a", true),
        ("b1", "b", false),
        ("b2", "b", false),
        ("b3", "b", false),
        ("b4", "b", false),
    ];
    let (_, status) = braked(&fleet_spec, 1, BrakeSettings::default(), 3600, None);
    let brake = &status.brake;
    assert!(brake.pacing);
    assert_eq!(brake.startup_grace_until, None);
    let regions: Vec<(&str, &str, &str, usize, usize, usize, usize)> = brake
        .regions
        .iter()
        .map(|r| {
            (
                r.region.as_str(),
                r.state.as_str(),
                r.rate.as_str(),
                r.clusters,
                r.not_ready_clusters,
                r.evictions,
                r.delayed_evictions,
            )
        })
        .collect();
    assert_eq!(
        regions,
        [
            ("a", "PartialDisruption", "0.01 clusters/s", 3, 3, 3, 2),
            ("b", "Normal", "0.1 clusters/s", 4, 0, 0, 0)
        ]
    );
    let a = &brake.regions[0];
    assert_eq!(
        a.states
            .iter()
            .map(|s| (s.after_seconds, s.state.as_str()))
            .collect::<Vec<_>>(),
        [(0, "Normal"), (40, "PartialDisruption")]
    );
    assert_eq!(a.clusters_per_second, Some(0.01));
    assert_eq!(a.resource_eviction_rate, None);
    assert_eq!(
        a.message,
        "3 of 3 clusters of region a are not Ready (more than 55%)"
    );
    assert_eq!(
        brake.message,
        "the brake delays 2 of the 3 evictions (the longest by 200 s) and stops 0"
    );
    assert_eq!((status.summary.delayed, status.summary.held), (2, 0));

    // The whole fleet: held, and the Event the binding would get says why.
    let (_, status) = braked(
        &[("m1", "", true), ("m2", "", true)],
        1,
        BrakeSettings::default(),
        3600,
        None,
    );
    let held = &status.bindings[0].held[0];
    assert_eq!(held.producer, EVICTION_PRODUCER_TAINT_MANAGER);
    assert_eq!(held.region, "(none)");
    assert!(
        held.message
            .contains("all 2 clusters of the fleet are not Ready"),
        "{held:?}"
    );
    assert_eq!(
        status.bindings[0].clusters_after,
        status.bindings[0].clusters_before
    );
    assert_eq!(status.brake.regions[0].state, "FullDisruption");
    assert_eq!(status.brake.regions[0].held_evictions, 2);
    assert_eq!((status.summary.evictions, status.summary.held), (0, 2));

    // Pacing off and a startup grace still running: both said.
    let (_, status) = braked(
        &[("m1", "", true), ("m2", "", false), ("m3", "", false)],
        1,
        BrakeSettings {
            rate_limit: false,
            ..BrakeSettings::default()
        },
        10,
        None,
    );
    assert!(!status.brake.pacing);
    assert!(
        status.brake.message.contains("pacing is off"),
        "{}",
        status.brake.message
    );
    assert_eq!(
        status.brake.startup_grace_until,
        Some(Time::new(at0() + Duration::seconds(30)))
    );
    assert_eq!(
        status.brake.regions[0]
            .states
            .iter()
            .map(|s| (s.after_seconds, s.state.as_str(), s.rate.as_str()))
            .collect::<Vec<_>>(),
        [(0, "StartupGrace", "stopped"), (30, "Normal", "unlimited")]
    );
}

#[test]
fn paced_evictions_past_the_horizon_are_pending_with_their_delay() {
    // Two failed clusters of six: m1 is let out when due (300 s), m2 10 s later, past the
    // horizon (301 s).
    let (_, status) = braked(
        &[
            ("m1", "", true),
            ("m2", "", true),
            ("m3", "", false),
            ("m4", "", false),
            ("m5", "", false),
            ("m6", "", false),
        ],
        3,
        BrakeSettings::default(),
        3600,
        Some(301),
    );
    let got: Vec<(usize, usize, Option<i64>, Option<i64>)> = status
        .bindings
        .iter()
        .map(|b| {
            (
                b.evictions.len(),
                b.pending.len(),
                b.pending.first().map(|p| p.after_seconds),
                b.pending
                    .first()
                    .and_then(|p| p.brake.as_ref())
                    .map(|d| d.delay_seconds),
            )
        })
        .collect();
    assert_eq!(got, [(1, 1, Some(310), Some(10)); 3]);
    // Not yet evicted at the horizon: they keep m2 then.
    assert!(status.bindings[1]
        .clusters_after
        .iter()
        .any(|c| c.name == "m2"));
}
