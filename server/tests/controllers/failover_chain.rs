//! A cluster failover through the controllers that make it: the taint manager evicts, the
//! scheduler places the workload anew, graceful eviction ends the task once the new copy is
//! Healthy, and the binding's history records each step.

use chrono::{TimeZone, Utc};
use flotilla_api::kinds::well_known;
use flotilla_server::controllers::failover::graceful_eviction::GracefulEvictionController;
use flotilla_server::controllers::failover::taint_manager::TaintManagerController;
use flotilla_server::controllers::propagation::scheduler::SchedulerController;
use flotilla_server::controllers::runtime::controller::Reconciler;
use flotilla_server::controllers::runtime::testing::{SpecReplicas, TestWorld};
use flotilla_server::controllers::settings::TaintManagerSettings;
use flotilla_server::store::{WatchEvent, WatchOptions};
use serde_json::{json, Value};
use std::sync::Arc;

/// One failover through the real controllers on the memory store with a fake clock:
/// the taint manager evicts (the entry opens), the scheduler places (the entry gets the
/// new placement in its status write), the new copy reports Healthy and graceful
/// eviction drops the task (the entry gets healthy and gone times); each step has its
/// Event with the same facts.
#[tokio::test]
async fn evict_reschedule_healthy_drop_fills_one_entry() {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let world = TestWorld::at(t0);
    let (store, clock, shared) = (
        world.store.clone(),
        world.clock.clone(),
        world.shared_clock.clone(),
    );
    let (events, metrics) = (world.events(), world.ctx.failover_metrics.clone());
    let ready = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
        "message": "", "lastTransitionTime": "2025-12-31T00:00:00Z"}],
        "apiEnablements": [{"groupVersion": "apps/v1",
            "resources": [{"name": "deployments", "kind": "Deployment"}]}]});
    for (name, taints) in [
        (
            "member1",
            json!([{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute",
                "timeAdded": "2025-12-31T23:59:00Z"}]),
        ),
        ("member2", json!([])),
    ] {
        world
            .cluster(
                name,
                json!({"syncMode": "Pull", "taints": taints}),
                ready.clone(),
            )
            .await;
    }
    let rt = well_known::resource_bindings();
    store
        .create(
            &rt,
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": "nginx-deployment", "namespace": "default"},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                         "replicas": 2,
                         "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}},
                         "clusters": [{"name": "member1", "replicas": 2}, {"name": "member2", "replicas": 2}]}}),
        )
        .await
        .unwrap();
    let get = || async {
        store
            .get(&rt, Some("default"), "nginx-deployment")
            .await
            .unwrap()
    };
    let history = |b: &Value| b["status"]["failoverHistory"].clone();
    const KEY: &str = "rb|default|nginx-deployment";
    let tm = TaintManagerController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        metrics.clone(),
        TaintManagerSettings::default(),
    );
    let scheduler = SchedulerController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        &world.metrics,
    )
    .unwrap();
    let ge = GracefulEvictionController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        metrics,
        Arc::new(SpecReplicas),
        std::time::Duration::from_secs(600),
    );

    // The binding's writes since `from`, as a watch delivers them, up to its current one.
    let writes_since = |from: Value| {
        let store = store.clone();
        let rt = rt.clone();
        async move {
            let from = from["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok());
            let last: u64 = store
                .get(&rt, Some("default"), "nginx-deployment")
                .await
                .unwrap()["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap();
            let mut watch = store
                .watch(
                    &rt,
                    WatchOptions {
                        from,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            let mut seen = Vec::new();
            while seen
                .last()
                .is_none_or(|e: &WatchEvent| e.resource_version < last)
            {
                let next = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    futures::StreamExt::next(&mut watch),
                )
                .await
                .expect("the binding's last write on the watch");
                seen.push(next.unwrap().unwrap());
            }
            seen
        }
    };

    // Evicted: the entry opens with what, why, who, when and the placement before, in
    // the eviction's own write.
    let before = get().await;
    tm.reconcile(KEY).await.unwrap();
    let writes = writes_since(before).await;
    assert_eq!(writes.len(), 1, "one write: the eviction and its entry");
    assert_eq!(
        writes[0].object["spec"]["gracefulEvictionTasks"][0]["fromCluster"],
        "member1"
    );
    assert_eq!(
        writes[0].object["status"]["failoverHistory"][0]["fromCluster"],
        "member1"
    );
    let h = history(&get().await);
    assert_eq!(h.as_array().map(Vec::len), Some(1), "{h}");
    let e = &h[0];
    assert_eq!(e["reason"], "ClusterFailover");
    assert_eq!(e["fromCluster"], "member1");
    assert_eq!(e["replicas"], 2);
    assert_eq!(e["evictionReason"], "TaintUntolerated");
    assert_eq!(e["producer"], "TaintManager");
    assert_eq!(e["purgeMode"], "Graciously");
    assert_eq!(e["failoverTime"], "2026-01-01T00:00:00Z");
    assert_eq!(e["originalCluster"], json!(["member1", "member2"]));
    assert!(
        e["message"].as_str().unwrap_or("").contains("not-ready"),
        "{e}"
    );
    assert!(e.get("targetCluster").is_none(), "{e}");

    // Rescheduled: the scheduler's own write adds the placement, with the new
    // `spec.clusters` and the generation it observed.
    clock.advance(chrono::Duration::seconds(5));
    let before = get().await;
    scheduler.reconcile(KEY).await.unwrap();
    let writes = writes_since(before).await;
    assert_eq!(
        writes.len(),
        1,
        "one write: the placement and the scheduler's status"
    );
    let b = get().await;
    assert_eq!(
        b["spec"]["clusters"],
        json!([{"name": "member2", "replicas": 2}]),
        "{b}"
    );
    assert_eq!(
        b["status"]["schedulerObservedGeneration"], b["metadata"]["generation"],
        "{b}"
    );
    let e = &history(&b)[0];
    assert_eq!(e["targetCluster"], json!(["member2"]), "{b}");
    assert_eq!(e["rescheduledTime"], "2026-01-01T00:00:05Z");
    assert!(e.get("healthyTime").is_none(), "{e}");

    // Not Healthy yet: the task stays and the entry stays open.
    clock.advance(chrono::Duration::seconds(5));
    ge.reconcile(KEY).await.unwrap();
    assert!(history(&get().await)[0].get("oldCopyGoneTime").is_none());

    // The new copy reports Healthy: the task ends and the entry is complete.
    let b = get().await;
    super::healthy_work(
        store.as_ref(),
        &b,
        "member2",
        "nginx",
        "2026-01-01T00:00:00Z",
    )
    .await;
    clock.advance(chrono::Duration::seconds(20));
    ge.reconcile(KEY).await.unwrap();
    let b = get().await;
    assert_eq!(b["spec"]["gracefulEvictionTasks"], json!([]), "{b}");
    let e = &history(&b)[0];
    assert_eq!(e["healthyTime"], "2026-01-01T00:00:30Z", "{e}");
    assert_eq!(e["oldCopyGoneTime"], "2026-01-01T00:00:30Z");
    assert_eq!(e["oldCopyGoneReason"], "EvictionTaskDoneHealthy");
    assert_eq!(history(&b).as_array().map(Vec::len), Some(1));

    // The Events tell the same story, on the binding; the eviction's, Karmada's, also on the
    // Deployment.
    let events = world.stored_events().await;
    let said_on = |object: &str, reason: &str, needle: &str| {
        events.iter().any(|e| {
            e["reason"] == reason
                && e["involvedObject"]["name"] == object
                && e["message"].as_str().unwrap_or("").contains(needle)
        })
    };
    let said = |reason: &str, needle: &str| said_on("nginx-deployment", reason, needle);
    assert!(
        said("EvictWorkloadFromClusterSucceed", "member1"),
        "{events:?}"
    );
    assert!(
        said_on("nginx", "EvictWorkloadFromClusterSucceed", "member1"),
        "{events:?}"
    );
    assert!(said("EvictionTaskDoneHealthy", "member1"), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "ScheduleBindingSucceed"
                && e["message"].as_str().unwrap_or("").contains("member2")),
        "{events:?}"
    );
}
