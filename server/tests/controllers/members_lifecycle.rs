//! A member leaving and joining, through the controllers as the server wires and runs them
//! (their watches, fan-outs and queues) on one in-memory store, with the scheduler's periodic
//! pass set to an hour so that only the Cluster change itself can be what moves a binding
//! (docs/semantics.md §2, §8.1):
//! - a deleted Cluster stays behind its finalizer while the scheduler moves every binding off
//!   it (Duplicated, Divided by static weight, by dynamic weight, aggregated, and a binding
//!   whose last copy it held), its Works go without the member, then it is gone — also when
//!   it was deleted while no controller ran;
//! - a Cluster that joins, or loses its `NoSchedule` taint, gets its Duplicated copies at once.

use flotilla_api::cluster::CLUSTER_CONTROLLER_FINALIZER;
use flotilla_api::kinds::{builtin_by_plural, well_known};
use flotilla_server::controllers::runtime::testing::TestWorld;
use flotilla_server::controllers::settings::ControllerSettings;
use flotilla_server::controllers::{spawn, wiring, ControllerHandle};
use flotilla_server::store::{DeleteOptions, ListOptions, StoreError};
use flotilla_server::testing::eventually;
use serde_json::{json, Value};
use std::time::Duration;

/// How long a step may take: far below the periodic pass (an hour here).
const STEP: Duration = Duration::from_secs(10);

fn world() -> TestWorld {
    let settings = ControllerSettings {
        scheduler_resync: Duration::from_secs(3600),
        ..ControllerSettings::default()
    };
    TestWorld::with_settings(TestWorld::epoch(), settings)
}

/// Runs the scheduler, binding-works and cluster-removal as the server wires them.
fn start(world: &TestWorld) -> (tokio::sync::watch::Sender<bool>, Vec<ControllerHandle>) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let handles = [
        wiring::scheduler,
        wiring::binding_works,
        wiring::cluster_removal,
    ]
    .iter()
    .map(|build| {
        spawn(
            world.store.clone(),
            build(&world.ctx).unwrap(),
            None,
            stopped.clone(),
        )
    })
    .collect();
    (stop, handles)
}

async fn stop(handles: Vec<ControllerHandle>) {
    for h in handles {
        h.stop().await;
    }
}

/// A Ready member serving Deployments with room for `pods` pods, with `taints`.
async fn member(world: &TestWorld, name: &str, pods: u32, taints: Value) {
    world
        .cluster(
            name,
            json!({"syncMode": "Pull", "taints": taints}),
            json!({"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                                   "message": "", "lastTransitionTime": "2023-11-14T00:00:00Z"}],
                   "apiEnablements": [{"groupVersion": "apps/v1",
                       "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                   "resourceSummary": {"allocatable": {"pods": pods.to_string(), "cpu": "100"}}}),
        )
        .await;
}

/// A Deployment `name` and its binding with `placement`, not placed yet.
async fn workload(world: &TestWorld, name: &str, replicas: u32, placement: Value) {
    let deployments = builtin_by_plural("apps", "deployments").unwrap();
    world
        .store
        .create(
            &deployments,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"replicas": replicas,
                            "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await
        .unwrap();
    world
        .store
        .create(
            &well_known::resource_bindings(),
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                   "metadata": {"name": format!("{name}-deployment"), "namespace": "default"},
                   "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                         "namespace": "default", "name": name},
                            "replicas": replicas, "placement": placement}}),
        )
        .await
        .unwrap();
}

/// `name`'s placement as `cluster:replicas` pairs, sorted.
async fn placement(world: &TestWorld, name: &str) -> Vec<(String, i64)> {
    let b = world
        .store
        .get(
            &well_known::resource_bindings(),
            Some("default"),
            &format!("{name}-deployment"),
        )
        .await
        .unwrap();
    let mut pairs: Vec<(String, i64)> = b["spec"]["clusters"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["replicas"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    pairs.sort();
    pairs
}

async fn works_in(world: &TestWorld, cluster: &str) -> Vec<Value> {
    world
        .store
        .list(
            &well_known::works(),
            Some(&format!("karmada-es-{cluster}")),
            &ListOptions::default(),
        )
        .await
        .unwrap()
        .items
}

fn divided(preference: &str, dynamic: bool) -> Value {
    let mut p = json!({"replicaScheduling": {"replicaSchedulingType": "Divided",
                                             "replicaDivisionPreference": preference}});
    if dynamic {
        p["replicaScheduling"]["weightPreference"] = json!({"dynamicWeight": "AvailableReplicas"});
    }
    p
}

/// The workloads of the deletion tests: every division type, each with part of it on m3, and
/// one whose only copy is on m3.
const WORKLOADS: [&str; 5] = ["dup", "static", "dynamic", "aggregated", "only-m3"];

async fn place_on_three(world: &TestWorld) {
    member(world, "m1", 6, json!([])).await;
    member(world, "m2", 6, json!([])).await;
    member(world, "m3", 100, json!([])).await;
    let dup = json!({"replicaScheduling": {"replicaSchedulingType": "Duplicated"}});
    workload(world, "dup", 2, dup).await;
    let mut weights = divided("Weighted", false);
    weights["replicaScheduling"]["weightPreference"] = json!({"staticWeightList": [
        {"targetCluster": {"clusterNames": ["m1", "m2", "m3"]}, "weight": 1}]});
    workload(world, "static", 10, weights).await;
    workload(world, "dynamic", 10, divided("Weighted", true)).await;
    workload(world, "aggregated", 10, divided("Aggregated", false)).await;
    workload(
        world,
        "only-m3",
        2,
        json!({"clusterAffinity": {"clusterNames": ["m3"]},
               "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}),
    )
    .await;
}

/// Waits until every workload has part of it on m3, with its Work there, and m3 has the
/// cluster finalizer.
async fn wait_until_placed(world: &TestWorld) {
    for name in WORKLOADS {
        eventually(&format!("{name} placed on m3"), STEP, || async {
            let p = placement(world, name).await;
            p.iter()
                .any(|(c, _)| c == "m3")
                .then_some(())
                .ok_or(format!("{p:?}"))
        })
        .await;
    }
    eventually("a Work per workload on m3", STEP, || async {
        let n = works_in(world, "m3").await.len();
        (n == WORKLOADS.len())
            .then_some(())
            .ok_or(format!("{n} Works"))
    })
    .await;
    eventually("m3 carries the cluster finalizer", STEP, || async {
        let c = world
            .store
            .get(&well_known::clusters(), None, "m3")
            .await
            .unwrap();
        (c["metadata"]["finalizers"] == json!([CLUSTER_CONTROLLER_FINALIZER]))
            .then_some(())
            .ok_or(c["metadata"].to_string())
    })
    .await;
}

/// Waits until no binding lists m3 (each Divided one with its 10 replicas elsewhere, the
/// last-copy one with nothing), m3's Works are gone, and so is m3.
async fn wait_until_removed(world: &TestWorld) {
    for name in WORKLOADS {
        eventually(&format!("{name} off m3"), STEP, || async {
            let p = placement(world, name).await;
            let total: i64 = p.iter().map(|(_, r)| r).sum();
            let want = match name {
                "dup" => 4,
                "only-m3" => 0,
                _ => 10,
            };
            (!p.iter().any(|(c, _)| c == "m3") && total == want)
                .then_some(())
                .ok_or(format!("{p:?}"))
        })
        .await;
    }
    eventually("m3's Works gone", STEP, || async {
        let left = works_in(world, "m3").await;
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    })
    .await;
    eventually("m3 gone", STEP, || async {
        match world.store.get(&well_known::clusters(), None, "m3").await {
            Err(StoreError::NotFound { .. }) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_deleted_member_is_left_by_every_binding_then_removed() {
    let world = world();
    let (_stop, handles) = start(&world);
    place_on_three(&world).await;
    wait_until_placed(&world).await;

    world
        .store
        .delete(
            &well_known::clusters(),
            None,
            "m3",
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
    wait_until_removed(&world).await;
    let reasons: Vec<String> = world
        .stored_events()
        .await
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "m3")
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    assert!(reasons.iter().any(|r| r == "ClusterRemoved"), "{reasons:?}");
    stop(handles).await;
}

#[tokio::test]
async fn a_member_deleted_while_no_controller_runs_is_removed_after_the_start() {
    let world = world();
    let (_stop, handles) = start(&world);
    place_on_three(&world).await;
    wait_until_placed(&world).await;
    stop(handles).await;

    // The server is down: the delete only marks the Cluster (its finalizer holds it).
    world
        .store
        .delete(
            &well_known::clusters(),
            None,
            "m3",
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
    let restarted = world.restarted();
    let (_stop, handles) = start(&restarted);
    wait_until_removed(&restarted).await;
    stop(handles).await;
}

/// A Duplicated workload on m1 and m2, and a satisfied Divided one.
async fn placed_on_two(world: &TestWorld) {
    member(world, "m1", 100, json!([])).await;
    member(world, "m2", 100, json!([])).await;
    workload(
        world,
        "dup",
        2,
        json!({"replicaScheduling": {"replicaSchedulingType": "Duplicated"}}),
    )
    .await;
    workload(world, "divided", 4, divided("Weighted", true)).await;
    for (name, want) in [("dup", 2), ("divided", 2)] {
        eventually(&format!("{name} on m1 and m2"), STEP, || async {
            let p = placement(world, name).await;
            (p.len() == want).then_some(()).ok_or(format!("{p:?}"))
        })
        .await;
    }
}

#[tokio::test]
async fn a_joining_member_gets_the_duplicated_copies_at_once() {
    let world = world();
    let (_stop, handles) = start(&world);
    placed_on_two(&world).await;
    let divided_before = placement(&world, "divided").await;

    member(&world, "m3", 100, json!([])).await;
    eventually("dup on m3", STEP, || async {
        let p = placement(&world, "dup").await;
        (p.len() == 3).then_some(()).ok_or(format!("{p:?}"))
    })
    .await;
    // A satisfied Divided binding keeps its replicas where they are (Karmada's rule).
    assert_eq!(placement(&world, "divided").await, divided_before);
    stop(handles).await;
}

#[tokio::test]
async fn a_member_that_loses_its_no_schedule_taint_gets_the_duplicated_copies_at_once() {
    let world = world();
    let (_stop, handles) = start(&world);
    // m3 is there from the start, but tainted: the workloads are placed without it.
    member(
        &world,
        "m3",
        100,
        json!([{"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}]),
    )
    .await;
    placed_on_two(&world).await;
    assert_eq!(placement(&world, "dup").await.len(), 2);

    let mut m3 = world
        .store
        .get(&well_known::clusters(), None, "m3")
        .await
        .unwrap();
    m3["spec"]["taints"] = json!([]);
    world
        .store
        .update(&well_known::clusters(), m3)
        .await
        .unwrap();
    eventually("dup on m3", STEP, || async {
        let p = placement(&world, "dup").await;
        (p.len() == 3).then_some(()).ok_or(format!("{p:?}"))
    })
    .await;
    stop(handles).await;
}
