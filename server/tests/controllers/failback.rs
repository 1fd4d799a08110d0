//! Failback with the scheduler and graceful eviction beside it: the workload moves back to a
//! recovered cluster once it has been fit for the stabilization window, and the old copies go
//! once the returning one is Healthy.

use chrono::{SecondsFormat, TimeZone, Utc};
use flotilla_api::kinds::well_known;
use flotilla_server::controllers::failover::failback::FailbackController;
use flotilla_server::controllers::failover::graceful_eviction::GracefulEvictionController;
use flotilla_server::controllers::propagation::scheduler::SchedulerController;
use flotilla_server::controllers::runtime::controller::{Action, Reconciler};
use flotilla_server::controllers::runtime::testing::{SpecReplicas, TestWorld};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "rb|default|app-deployment";

/// The controller on the memory store with a fake clock, with the scheduler and graceful
/// eviction beside it: the wait (told once), a flap of a taint that starts the window again,
/// the move (spec, history, Event, metric) that the scheduler leaves alone, and its end when
/// the returning copy is Healthy.
#[tokio::test]
async fn waits_out_the_window_through_a_flap_then_moves_back_gracefully() {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let world = TestWorld::at(t0 + chrono::Duration::seconds(200));
    let (store, clock, shared) = (
        world.store.clone(),
        world.clock.clone(),
        world.shared_clock.clone(),
    );
    let (events, metrics) = (world.events(), world.ctx.failover_metrics.clone());
    let clusters_rt = well_known::clusters();
    let set_taints = |taints: Value| {
        let store = store.clone();
        let rt = clusters_rt.clone();
        async move {
            let mut c = store.get(&rt, None, "m1").await.unwrap();
            c["spec"]["taints"] = taints;
            store.update(&rt, c).await.unwrap();
        }
    };
    for (name, since) in [("m1", 100), ("m2", -1000), ("m3", -1000)] {
        world
            .cluster(
                name,
                json!({"syncMode": "Pull"}),
                json!({
                    "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                    "resourceSummary": {"allocatable": {"pods": "100", "cpu": "100"}},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "",
                        "lastTransitionTime": (t0 + chrono::Duration::seconds(since)).to_rfc3339_opts(SecondsFormat::Secs, true)}]}),
            )
            .await;
    }
    let rt = well_known::resource_bindings();
    let created = store
        .create(
            &rt,
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": "app-deployment", "namespace": "default"},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "app"},
                    "replicas": 2,
                    "placement": {"clusterAffinity": {"clusterNames": ["m1", "m2", "m3"]},
                        "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                            "weightPreference": {"staticWeightList": [{"targetCluster": {"clusterNames": ["m1"]}, "weight": 1}]}}},
                    "clusters": [{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}],
                    "failover": {"cluster": {"failback": {"stabilizationSeconds": 60}}}}}),
        )
        .await
        .unwrap();
    let mut b = created.clone();
    b["status"] = json!({"schedulerObservedGeneration": created["metadata"]["generation"],
        "failoverHistory": [{"reason": "ClusterFailover", "failoverTime": "2026-01-01T00:00:00Z",
            "fromCluster": "m1", "originalCluster": ["m1"], "replicas": 2,
            "oldCopyGoneTime": "2026-01-01T00:00:20Z", "oldCopyGoneReason": "EvictionTaskDoneHealthy"}]});
    store.update_status(&rt, b).await.unwrap();
    let get = || async {
        store
            .get(&rt, Some("default"), "app-deployment")
            .await
            .unwrap()
    };
    let reasons = || async {
        world
            .stored_events()
            .await
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == "app-deployment")
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["count"].as_i64().unwrap_or(1),
                )
            })
            .collect::<Vec<_>>()
    };
    let failback = FailbackController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        metrics.clone(),
    );

    // m1 has been Ready since 100 s, but the controller sees it fit for the first time
    // now (200 s): the window runs to 260 s; one FailbackPending Event says so.
    let wait = |secs: u64| Action::RequeueAfter(Duration::from_secs(secs));
    assert_eq!(failback.reconcile(KEY).await.unwrap(), wait(60));
    clock.advance(chrono::Duration::seconds(59));
    assert_eq!(failback.reconcile(KEY).await.unwrap(), wait(1));
    assert_eq!(reasons().await, vec![("FailbackPending".to_string(), 1)]);
    assert_eq!(
        get().await["spec"]["clusters"].as_array().map(Vec::len),
        Some(2)
    );

    // A taint comes and goes (Ready does not change): the window starts again.
    set_taints(json!([{"key": "example.com/maintenance", "effect": "NoSchedule"}])).await;
    assert_eq!(failback.reconcile(KEY).await.unwrap(), Action::Done);
    clock.advance(chrono::Duration::seconds(1));
    set_taints(json!([])).await;
    assert_eq!(failback.reconcile(KEY).await.unwrap(), wait(60));
    clock.advance(chrono::Duration::seconds(60));

    // The move: m1 gets its 2 replicas back; m2 and m3 keep theirs under Failback tasks.
    assert_eq!(failback.reconcile(KEY).await.unwrap(), Action::Done);
    let b = get().await;
    assert_eq!(
        b["spec"]["clusters"],
        json!([{"name": "m1", "replicas": 2}]),
        "{b}"
    );
    let tasks = b["spec"]["gracefulEvictionTasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    assert!(tasks
        .iter()
        .all(|t| t["reason"] == "Failback" && t["producer"] == "Failback"));
    let h = b["status"]["failoverHistory"].as_array().unwrap();
    assert_eq!(h.len(), 3, "{h:?}");
    assert_eq!(h[0]["failedBackTime"], "2026-01-01T00:05:20Z");
    assert_eq!(h[1]["reason"], "Failback");
    assert_eq!(h[1]["fromCluster"], "m2");
    assert_eq!(h[1]["targetCluster"], json!(["m1"]));
    assert!(h[1].get("oldCopyGoneTime").is_none());
    assert!(reasons().await.iter().any(|(r, _)| r == "FailingBack"));
    let metric = metrics.failbacks.with_label_values(&["m1"]).get();
    assert_eq!(metric, 1);

    // The scheduler leaves the move alone; looking again moves nothing more.
    let scheduler = SchedulerController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        &world.metrics,
    )
    .unwrap();
    scheduler.reconcile(KEY).await.unwrap();
    assert_eq!(
        get().await["spec"]["clusters"],
        json!([{"name": "m1", "replicas": 2}])
    );
    assert_eq!(failback.reconcile(KEY).await.unwrap(), Action::Done);

    // Graceful eviction ends the tasks once m1's copy is Healthy.
    let ge = GracefulEvictionController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        metrics.clone(),
        Arc::new(SpecReplicas),
        Duration::from_secs(600),
    );
    ge.reconcile(KEY).await.unwrap();
    assert_eq!(
        get().await["spec"]["gracefulEvictionTasks"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let b = get().await;
    super::healthy_work(store.as_ref(), &b, "m1", "app", "2026-01-01T00:05:21Z").await;
    clock.advance(chrono::Duration::seconds(5));
    ge.reconcile(KEY).await.unwrap();
    let b = get().await;
    assert_eq!(b["spec"]["gracefulEvictionTasks"], json!([]), "{b}");
    let h = b["status"]["failoverHistory"].as_array().unwrap();
    for e in &h[1..] {
        assert_eq!(e["oldCopyGoneReason"], "EvictionTaskDoneHealthy", "{e}");
        assert!(e.get("healthyTime").is_some(), "{e}");
    }
}
