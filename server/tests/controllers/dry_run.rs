//! Property test: on randomized fleets (capacity or none, regions, a user NoSchedule taint,
//! automatic NoExecute taints on or off, a ClusterTaintPolicy tainting not-Ready clusters of
//! one region or all) and bindings (Duplicated, Divided by static or dynamic weight,
//! Aggregated; affinities by name or region; unreachable and policy-taint tolerations of 0 s,
//! 30 s or for ever; purge modes), the dry-run's answer equals what the real controllers do —
//! the cluster taint controller, the ClusterTaintPolicy controller, the taint manager and the
//! scheduler, in-process on a memory store with a fake clock, each woken when it asked to be —
//! once the failed members' Ready turns Unknown as the status controller would write it. Some
//! bindings also have application failover (tolerations of 0 s, 10 s or 60 s; purge modes
//! Immediately, Graciously, Never) and are named Unhealthy on one of their clusters: the real
//! path reads that health in the binding's status, and the application failover controller
//! runs beside the others.
//!
//! Both producers ask one partition brake (the server's `EvictionBrake`, on the fake clock),
//! with flags drawn per case: pacing on or off, primary and secondary rates (some of them not
//! a whole number of seconds apart, some 0), the unhealthy threshold, and a startup grace that
//! ends before the failure or during it; sometimes the whole fleet fails. The dry-run gets the
//! same flags and start, and must predict the same evictions at the same times (to the second:
//! tasks are stamped in whole seconds), the same placements, and the same evictions held
//! (each with the `EvictionHeld` Event the real binding got).

use chrono::{DateTime, Duration, Utc};
use flotilla_api::binding::TargetCluster;
use flotilla_api::cluster::{Cluster, CLUSTER_LEASE_NAMESPACE, CONDITION_READY};
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::simulation::{
    FailoverSimulationSpec, FailoverSimulationStatus, UnhealthyApplication, RESOURCE_BINDING,
};
use flotilla_server::controllers::failover::application_failover::ApplicationFailoverController;
use flotilla_server::controllers::failover::brake::EvictionBrake;
use flotilla_server::controllers::failover::taint_manager::TaintManagerController;
use flotilla_server::controllers::members::cluster_taint_policy::ClusterTaintPolicyController;
use flotilla_server::controllers::members::cluster_taints::ClusterTaintsController;
use flotilla_server::controllers::propagation::scheduler::SchedulerController;
use flotilla_server::controllers::runtime::controller::{Action, Reconciler};
use flotilla_server::controllers::runtime::queue::{Backoff, WorkQueue};
use flotilla_server::controllers::runtime::testing::TestWorld;
use flotilla_server::controllers::settings::BrakeSettings;
use flotilla_server::controllers::shared::cluster_cache;
use flotilla_server::simulation::{
    simulate, sort_inputs, BindingInput, BrakeOf, SimulationSettings, MAX_PASSES,
};
use flotilla_server::store::{ListOptions, Store};
use flotilla_support::clock::Clock;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
struct ClusterCase {
    /// Free pods (`None`: no resource summary).
    pods: Option<i64>,
    region: u8,
    /// Carries a user's `dedicated:NoSchedule` taint.
    dedicated: bool,
    failed: bool,
}

#[derive(Clone, Debug)]
struct BindingCase {
    replicas: i32,
    /// 0 Duplicated, 1 static weight, 2 dynamic weight, 3 Aggregated.
    strategy: u8,
    /// 0 none, 1 by names (mask), 2 by region label.
    affinity: u8,
    names: Vec<bool>,
    region: u8,
    /// 0 none, 1 `0 s`, 2 `30 s`, 3 for ever.
    toleration: u8,
    tolerate_dedicated: bool,
    /// Tolerates the policy's taint: 0 no, 1 for 20 s, 2 for ever.
    tolerate_down: u8,
    /// 0 none, 1 Graciously, 2 Immediately, 3 Never.
    purge: u8,
    /// Application failover: (toleration index, purge mode index, the index of the placed
    /// cluster where the workload is Unhealthy).
    app: Option<(u8, u8, usize)>,
}

#[derive(Clone, Debug)]
struct FleetCase {
    automatic_no_execute: bool,
    /// A ClusterTaintPolicy adding `example.com/down:NoExecute` to not-Ready clusters: none,
    /// for region r0, or for every cluster.
    policy: u8,
    /// Every cluster fails.
    all_fail: bool,
    /// The partition brake's flags.
    brake: BrakeSettings,
}

/// The server started this long before the failure (its startup grace counts from then).
const STARTED_BEFORE_S: i64 = 600;

fn brake_case() -> impl Strategy<Value = BrakeSettings> {
    (
        prop::bool::weighted(0.8),
        prop::sample::select(vec![0.1, 0.05, 2.0, 0.0]),
        prop::sample::select(vec![0.01, 0.25, 0.0]),
        // The --resource-eviction-rate ceiling: unset, or set.
        prop::sample::select(vec![None, Some(0.5), Some(3.0)]),
        prop::sample::select(vec![0.55, 0.3]),
        // The grace ends 500 s before the failure, 30 s or 100 s after it.
        prop::sample::select(vec![100u64, 630, 700]),
    )
        .prop_map(
            |(
                rate_limit,
                cluster_rate,
                secondary_cluster_rate,
                resource_rate,
                unhealthy_threshold,
                grace,
            )| {
                BrakeSettings {
                    rate_limit,
                    cluster_rate,
                    secondary_cluster_rate,
                    resource_rate,
                    unhealthy_threshold,
                    startup_grace: std::time::Duration::from_secs(grace),
                    ..BrakeSettings::default()
                }
            },
        )
}

fn fleet_case() -> impl Strategy<Value = FleetCase> {
    (
        prop::bool::weighted(0.7),
        0u8..3,
        prop::bool::weighted(0.15),
        brake_case(),
    )
        .prop_map(
            |(automatic_no_execute, policy, all_fail, brake)| FleetCase {
                automatic_no_execute,
                policy,
                all_fail,
                brake,
            },
        )
}

fn taint_policy(f: &FleetCase) -> Option<Value> {
    let targets = match f.policy {
        1 => json!({"labelSelector": {"matchLabels": {"region": "r0"}}}),
        2 => json!({"clusterNames": ["c0", "c1", "c2", "c3", "c4"]}),
        _ => return None,
    };
    Some(
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
        "metadata": {"name": "down"},
        "spec": {"targetClusters": targets,
                 "addOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["Unknown", "False"]}],
                 "removeOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}],
                 "taints": [{"key": "example.com/down", "effect": "NoExecute"}]}}),
    )
}

fn cluster_case() -> impl Strategy<Value = ClusterCase> {
    (
        prop::option::of(0i64..8),
        0u8..2,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.4),
    )
        .prop_map(|(pods, region, dedicated, failed)| ClusterCase {
            pods,
            region,
            dedicated,
            failed,
        })
}

fn binding_case() -> impl Strategy<Value = BindingCase> {
    (
        1i32..7,
        0u8..4,
        0u8..3,
        prop::collection::vec(any::<bool>(), 5),
        0u8..2,
        0u8..4,
        any::<bool>(),
        0u8..3,
        0u8..4,
        prop::option::weighted(0.35, (0u8..3, 0u8..3, 0usize..5)),
    )
        .prop_map(
            |(
                replicas,
                strategy,
                affinity,
                names,
                region,
                toleration,
                tolerate_dedicated,
                tolerate_down,
                purge,
                app,
            )| {
                BindingCase {
                    replicas,
                    strategy,
                    affinity,
                    names,
                    region,
                    toleration,
                    tolerate_dedicated,
                    tolerate_down,
                    purge,
                    app,
                }
            },
        )
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

fn name(i: usize) -> String {
    format!("c{i}")
}

fn cluster_object(i: usize, c: &ClusterCase) -> Value {
    let mut spec = json!({"syncMode": "Pull", "region": format!("r{}", c.region)});
    if c.dedicated {
        spec["taints"] = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    }
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name(i), "labels": {"region": format!("r{}", c.region)}},
           "spec": spec})
}

fn cluster_status(c: &ClusterCase) -> Value {
    let mut status = json!({
        "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "",
                        "lastTransitionTime": "2026-03-01T00:00:00Z"}]});
    if let Some(pods) = c.pods {
        status["resourceSummary"] =
            json!({"allocatable": {"pods": pods.to_string(), "cpu": "100"}});
    }
    status
}

fn placement(b: &BindingCase, clusters: usize) -> Value {
    let mut p = json!({});
    match b.affinity {
        1 => {
            let names: Vec<String> = (0..clusters)
                .filter(|i| b.names.get(*i).copied().unwrap_or(false))
                .map(name)
                .collect();
            p["clusterAffinity"] = json!({"clusterNames": names});
        }
        2 => {
            p["clusterAffinity"] =
                json!({"labelSelector": {"matchLabels": {"region": format!("r{}", b.region)}}})
        }
        _ => {}
    }
    let mut tolerations = Vec::new();
    let unreachable = |s: Option<i64>| {
        let mut t = json!({"key": "cluster.karmada.io/unreachable", "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = s {
            t["tolerationSeconds"] = json!(s);
        }
        t
    };
    match b.toleration {
        1 => tolerations.push(unreachable(Some(0))),
        2 => tolerations.push(unreachable(Some(30))),
        3 => tolerations.push(unreachable(None)),
        _ => {}
    }
    match b.tolerate_down {
        1 => tolerations.push(json!({"key": "example.com/down", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20})),
        2 => tolerations.push(json!({"key": "example.com/down", "operator": "Exists", "effect": "NoExecute"})),
        _ => {}
    }
    if b.tolerate_dedicated {
        tolerations.push(
            json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}),
        );
    }
    p["clusterTolerations"] = json!(tolerations);
    p["replicaScheduling"] = match b.strategy {
        0 => json!({"replicaSchedulingType": "Duplicated"}),
        1 => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}),
        2 => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"dynamicWeight": "AvailableReplicas"}}),
        _ => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Aggregated"}),
    };
    p
}

fn binding_object(i: usize, b: &BindingCase, clusters: usize) -> Value {
    let mut spec = json!({
        "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": format!("w{i}")},
        "replicas": b.replicas,
        "replicaRequirements": {"resourceRequest": {"cpu": "1"}},
        "placement": placement(b, clusters),
    });
    let mode = ["", "Graciously", "Immediately", "Never"][usize::from(b.purge % 4)];
    if !mode.is_empty() {
        spec["failover"] = json!({"cluster": {"purgeMode": mode}});
    }
    if let Some((toleration, purge, _)) = b.app {
        let seconds = [0, 10, 60][usize::from(toleration % 3)];
        let mode = ["Immediately", "Graciously", "Never"][usize::from(purge % 3)];
        spec["failover"]["application"] = json!({
            "decisionConditions": {"tolerationSeconds": seconds},
            "purgeMode": mode,
            "gracePeriodSeconds": 30});
    }
    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
           "metadata": {"name": format!("w{i}-deployment"), "namespace": "default"},
           "spec": spec})
}

struct Controllers {
    taints: ClusterTaintsController,
    policies: ClusterTaintPolicyController,
    manager: TaintManagerController,
    application: ApplicationFailoverController,
    scheduler: SchedulerController,
}

/// What the cluster status controller writes when a pull member's lease stops: Ready Unknown.
async fn mark_unknown(store: &dyn Store, failed: &[String], now: DateTime<Utc>) {
    let crt = well_known::clusters();
    for c in failed {
        let mut current = store.get(&crt, None, c).await.unwrap();
        let mut conditions: Vec<Condition> =
            serde_json::from_value(current["status"]["conditions"].clone()).unwrap();
        set_condition(
            &mut conditions,
            Condition::new(
                CONDITION_READY,
                ConditionStatus::Unknown,
                "ClusterStatusUnknown",
                "stopped posting",
            ),
            now,
        );
        current["status"]["conditions"] = json!(conditions);
        store.update_status(&crt, current).await.unwrap();
    }
}

fn later(now: DateTime<Utc>, a: &Action) -> Option<DateTime<Utc>> {
    match a {
        Action::RequeueAfter(d) => chrono::Duration::from_std(*d).ok().map(|d| now + d),
        _ => None,
    }
}

/// Builds the world, places every binding with the real scheduler, asks the dry-run, then
/// fails the clusters for real and returns (the answer, the bindings before, the bindings as
/// the controllers left them, the Events they recorded).
async fn run(
    fleet: &FleetCase,
    clusters: &[ClusterCase],
    bindings: &[BindingCase],
) -> (FailoverSimulationStatus, Vec<Value>, Vec<Value>, Vec<Value>) {
    let world = TestWorld::at(t0() - Duration::minutes(10));
    let (store, clock, shared) = (
        world.store.clone(),
        world.clock.clone(),
        world.shared_clock.clone(),
    );
    let (events, registry) = (world.events(), &world.metrics);
    let mut settings = SimulationSettings::default();
    settings.taints.automatic_no_execute = fleet.automatic_no_execute;
    let started = t0() - Duration::seconds(STARTED_BEFORE_S);
    settings.brake = Some(BrakeOf {
        settings: fleet.brake.clone(),
        started,
    });
    // One brake, both producers, on the fake clock.
    let brake = EvictionBrake::new(fleet.brake.clone(), started, None);
    let metrics = world.ctx.failover_metrics.clone();
    let ctl = Controllers {
        taints: ClusterTaintsController::new(
            store.clone(),
            shared.clone(),
            settings.taints,
            events.clone(),
            registry,
        )
        .unwrap(),
        policies: ClusterTaintPolicyController::new(
            store.clone(),
            shared.clone(),
            events.clone(),
            WorkQueue::new(Backoff::default()),
            registry,
        )
        .unwrap(),
        manager: TaintManagerController::new(
            store.clone(),
            shared.clone(),
            events.clone(),
            metrics.clone(),
            settings.taint_manager.clone(),
        )
        .with_brake(brake.clone()),
        application: ApplicationFailoverController::new(
            store.clone(),
            shared.clone(),
            events.clone(),
            metrics,
            settings.application_failover.clone(),
            world.ctx.interpreter.clone(),
        )
        .with_brake(brake),
        scheduler: SchedulerController::new(store.clone(), shared.clone(), events, registry)
            .unwrap(),
    };
    let crt = well_known::clusters();
    let mut taint_policies = Vec::new();
    if let Some(p) = taint_policy(fleet) {
        let created = store
            .create(&well_known::cluster_taint_policies(), p)
            .await
            .unwrap();
        taint_policies.push(serde_json::from_value(created).unwrap());
    }
    for (i, c) in clusters.iter().enumerate() {
        let mut created = store.create(&crt, cluster_object(i, c)).await.unwrap();
        created["status"] = cluster_status(c);
        store.update_status(&crt, created).await.unwrap();
        // Every member renewed its lease at t0: the failed ones for the last time.
        store
            .create(
                &well_known::leases(),
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name(i), "namespace": CLUSTER_LEASE_NAMESPACE},
                       "spec": {"holderIdentity": name(i), "renewTime": "2026-03-01T12:00:00Z"}}),
            )
            .await
            .unwrap();
    }
    let rbt = well_known::resource_bindings();
    let keys: Vec<String> = (0..bindings.len())
        .map(|i| format!("rb|default|w{i}-deployment"))
        .collect();
    for (i, b) in bindings.iter().enumerate() {
        store
            .create(&rbt, binding_object(i, b, clusters.len()))
            .await
            .unwrap();
        ctl.scheduler.reconcile(&keys[i]).await.unwrap();
    }

    // The workloads named Unhealthy read so in their binding's status from t0 on.
    clock.set(t0());
    let mut unhealthy = Vec::new();
    for (i, b) in bindings.iter().enumerate() {
        let Some((_, _, at)) = b.app else { continue };
        let mut current = store
            .get(&rbt, Some("default"), &format!("w{i}-deployment"))
            .await
            .unwrap();
        let placed = targets_of(&current);
        let Some(target) = placed.get(at % placed.len().max(1)) else {
            continue;
        };
        current["status"]["aggregatedStatus"] = json!([{"clusterName": target.name,
            "applied": true, "health": "Unhealthy"}]);
        store.update_status(&rbt, current).await.unwrap();
        unhealthy.push(UnhealthyApplication {
            kind: String::new(),
            namespace: "default".into(),
            name: format!("w{i}-deployment"),
            cluster: target.name.clone(),
        });
    }

    // The dry-run at t0, over what is stored.
    let by_name: BTreeMap<String, Cluster> =
        cluster_cache::read(store.as_ref()).await.unwrap().by_name;
    let stored = store
        .list(&rbt, None, &ListOptions::default())
        .await
        .unwrap()
        .items;
    let mut inputs: Vec<BindingInput> = stored
        .iter()
        .filter_map(|b| BindingInput::from_object(RESOURCE_BINDING, b))
        .collect();
    sort_inputs(&mut inputs);
    let failed: Vec<String> = clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.failed)
        .map(|(i, _)| name(i))
        .collect();
    let spec = FailoverSimulationSpec {
        failed_clusters: failed.clone(),
        unhealthy_applications: unhealthy,
        ..Default::default()
    };
    let answer = simulate(&spec, &by_name, &taint_policies, &inputs, &settings, t0()).unwrap();

    // The real path: the status controller turns the failed members Unknown after the grace
    // period; every controller runs whenever something asked to be woken.
    let detected = t0() + settings.health.grace.monitor;
    let mut wake: BTreeSet<DateTime<Utc>> = BTreeSet::new();
    let mut marked = false;
    // Held evictions are looked at again every 10 s while a stop lasts: run the controllers
    // well past every deadline a case can have (the last NoExecute toleration runs out 370 s
    // after the failure; pacing of up to 15 evictions at 0.1/s adds 150 s).
    let end = t0() + Duration::seconds(1200);
    for _ in 0..400 {
        let now = clock.now();
        if !marked && now >= detected {
            mark_unknown(store.as_ref(), &failed, now).await;
            marked = true;
        }
        if !marked {
            wake.insert(detected);
        }
        for i in 0..clusters.len() {
            let a = ctl.taints.reconcile(&name(i)).await.unwrap();
            wake.extend(later(now, &a));
            ctl.policies.reconcile(&name(i)).await.unwrap();
        }
        for _ in 0..MAX_PASSES {
            for key in &keys {
                let a = ctl.manager.reconcile(key).await.unwrap();
                wake.extend(later(now, &a));
                let a = ctl.application.reconcile(key).await.unwrap();
                wake.extend(later(now, &a));
                ctl.scheduler.reconcile(key).await.unwrap();
            }
        }
        let Some(next) = wake.iter().copied().find(|t| *t > now && *t <= end) else {
            break;
        };
        wake.retain(|t| *t > next);
        clock.set(next);
    }
    let mut after = store
        .list(&rbt, None, &ListOptions::default())
        .await
        .unwrap()
        .items;
    after.sort_by_key(|b| {
        b["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    let events = store
        .list(&well_known::events(), None, &ListOptions::default())
        .await
        .unwrap()
        .items;
    (answer, stored, after, events)
}

fn targets_of(b: &Value) -> Vec<TargetCluster> {
    serde_json::from_value(b["spec"]["clusters"].clone()).unwrap_or_default()
}

fn check(
    answer: &FailoverSimulationStatus,
    before: &[Value],
    after: &[Value],
    events: &[Value],
) -> Result<(), TestCaseError> {
    for b in after {
        let name = b["metadata"]["name"].as_str().unwrap_or_default();
        let clusters = targets_of(b);
        let tasks: Vec<(String, String)> = b["spec"]["gracefulEvictionTasks"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        (
                            t["fromCluster"].as_str().unwrap_or_default().to_string(),
                            t["purgeMode"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        match answer.bindings.iter().find(|s| s.name == name) {
            Some(sim) => {
                prop_assert_eq!(
                    &sim.clusters_after,
                    &clusters,
                    "placement of {}: {:?}",
                    name,
                    sim
                );
                let evicted: Vec<(String, String)> = sim
                    .evictions
                    .iter()
                    .map(|e| (e.cluster.clone(), e.purge_mode.clone().unwrap_or_default()))
                    .collect();
                prop_assert_eq!(evicted, tasks, "evictions of {}", name);
                // When: the task is stamped in whole seconds (rounded down), the answer says
                // the second the eviction happens in (rounded up).
                let stamped: Vec<i64> = b["spec"]["gracefulEvictionTasks"]
                    .as_array()
                    .map(|ts| {
                        ts.iter()
                            .map(|t| {
                                serde_json::from_value::<Time>(t["creationTimestamp"].clone())
                                    .map(|c| (c.as_datetime() - t0()).num_seconds())
                                    .unwrap_or(i64::MIN)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for (e, real) in sim.evictions.iter().zip(&stamped) {
                    prop_assert!(
                        *real == e.after_seconds || *real == e.after_seconds - 1,
                        "{} evicted from {} {} s after the failure, predicted {} s: {:?}",
                        name,
                        e.cluster,
                        real,
                        e.after_seconds,
                        sim
                    );
                }
                // Held by the brake's stop: the controller told so in an Event.
                for h in sim
                    .held
                    .iter()
                    .filter(|h| h.reason == "FullDisruption" || h.reason == "RateZero")
                {
                    let told = events.iter().any(|ev| {
                        ev["involvedObject"]["name"] == name
                            && ev["reason"] == "EvictionHeld"
                            && ev["message"].as_str().is_some_and(|m| {
                                m.contains(&format!("cluster {} ", h.cluster))
                                    && m.contains(&h.reason)
                            })
                    });
                    prop_assert!(
                        told,
                        "{} held from {} without an Event: {:?}",
                        name,
                        h.cluster,
                        h
                    );
                }
                let reason = b["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Scheduled"))
                    .and_then(|c| c["reason"].as_str())
                    .unwrap_or_default()
                    .to_string();
                if let Some(s) = &sim.scheduled {
                    prop_assert_eq!(&s.result, &reason, "Scheduled reason of {}", name);
                }
                let unplaced = answer.unplaceable.iter().any(|u| u.name == name);
                prop_assert_eq!(
                    unplaced,
                    reason != "Success",
                    "unplaceable {}: {}",
                    name,
                    reason
                );
            }
            None => {
                // Not listed: the failure changes nothing for it.
                prop_assert!(tasks.is_empty(), "{} evicted but not predicted", name);
                let was = before
                    .iter()
                    .find(|o| o["metadata"]["name"] == b["metadata"]["name"])
                    .map(targets_of)
                    .unwrap_or_default();
                prop_assert_eq!(was, clusters, "{} moved but not predicted", name);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_dry_run_predicts_what_the_controllers_do(
        fleet in fleet_case(),
        mut clusters in prop::collection::vec(cluster_case(), 3..=5),
        bindings in prop::collection::vec(binding_case(), 1..=3),
    ) {
        if fleet.all_fail {
            for c in &mut clusters {
                c.failed = true;
            }
        }
        if !clusters.iter().any(|c| c.failed) {
            clusters[0].failed = true;
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (answer, before, after, events) = rt.block_on(run(&fleet, &clusters, &bindings));
        check(&answer, &before, &after, &events)?;
    }
}
