//! Application failover and the scheduler together: a cluster the workload left is blocked
//! for a while, and the scheduler keeps it out until the block ends.

use chrono::{DateTime, TimeZone, Utc};
use flotilla_api::kinds::well_known;
use flotilla_server::controllers::failover::application_failover::{
    ApplicationFailoverController, NO_TARGET_RETRY,
};
use flotilla_server::controllers::propagation::scheduler::SchedulerController;
use flotilla_server::controllers::runtime::controller::{Action, Reconciler};
use flotilla_server::controllers::runtime::testing::TestWorld;
use flotilla_server::controllers::settings::ApplicationFailoverSettings;
use serde_json::{json, Value};
use std::time::Duration;

/// `secs` after [`TestWorld::epoch`].
fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0)
        .single()
        .unwrap_or_default()
}

/// The scheduler and application failover together on two members: the workload
/// leaves the first, then is due to leave the second; the first is blocked, so the
/// Immediately eviction is held until the block ends, and then it moves back.
#[tokio::test]
async fn the_scheduler_keeps_a_blocked_cluster_out_until_the_block_ends() {
    let world = TestWorld::at(at(0));
    let (store, clock, shared) = (
        world.store.clone(),
        world.clock.clone(),
        world.shared_clock.clone(),
    );
    let events = world.events();
    let settings = ApplicationFailoverSettings {
        block_period: Duration::from_secs(1_000),
        backoff: Duration::from_secs(60),
        ..Default::default()
    };
    let af = ApplicationFailoverController::new(
        store.clone(),
        shared.clone(),
        events.clone(),
        world.ctx.failover_metrics.clone(),
        settings,
        world.ctx.interpreter.clone(),
    );
    let scheduler =
        SchedulerController::new(store.clone(), shared.clone(), events, &world.metrics).unwrap();
    for name in ["member1", "member2"] {
        world
            .cluster(
                name,
                json!({"syncMode": "Pull"}),
                json!({"apiEnablements": [{"groupVersion": "apps/v1",
                    "resources": [{"name": "deployments", "kind": "Deployment"}]}]}),
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
                         "replicas": 2, "propagateDeps": true,
                         "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]},
                                       "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}],
                                       "replicaScheduling": {"replicaSchedulingType": "Duplicated"}},
                         "failover": {"application": {"decisionConditions": {"tolerationSeconds": 0}, "purgeMode": "Immediately"}}}}),
        )
        .await
        .unwrap();
    let get = || async {
        store
            .get(&rt, Some("default"), "nginx-deployment")
            .await
            .unwrap()
    };
    let placed = |b: &Value| -> Vec<String> {
        b["spec"]["clusters"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let unhealthy_on = |cluster: &str| {
        let cluster = cluster.to_string();
        let store = store.clone();
        let rt = rt.clone();
        async move {
            let mut b = store
                .get(&rt, Some("default"), "nginx-deployment")
                .await
                .unwrap();
            b["status"]["aggregatedStatus"] =
                json!([{"clusterName": cluster, "applied": true, "health": "Unhealthy"}]);
            store.update_status(&rt, b).await.unwrap();
        }
    };
    // What graceful eviction does when the old copy is gone: the task ends.
    let drop_tasks = || async {
        let mut b = get().await;
        b["spec"]["gracefulEvictionTasks"] = json!([]);
        store.update(&rt, b).await.unwrap();
    };
    const KEY: &str = "rb|default|nginx-deployment";
    scheduler.reconcile(KEY).await.unwrap();
    let first = placed(&get().await);
    assert_eq!(first.len(), 1, "{first:?}");
    let (from, to) = if first[0] == "member1" {
        ("member1", "member2")
    } else {
        ("member2", "member1")
    };
    // Unhealthy with tolerationSeconds 0: evicted at once, placed on the other.
    unhealthy_on(from).await;
    af.reconcile(KEY).await.unwrap();
    scheduler.reconcile(KEY).await.unwrap();
    assert_eq!(placed(&get().await), [to]);
    drop_tasks().await;
    clock.advance(chrono::Duration::seconds(100));
    af.reconcile(KEY).await.unwrap();
    // Unhealthy there too, past the back-off; but `from` is blocked and nothing else
    // fits, so the Immediately eviction (which would delete the only copy) is held.
    unhealthy_on(to).await;
    assert_eq!(
        af.reconcile(KEY).await.unwrap(),
        Action::RequeueAfter(NO_TARGET_RETRY)
    );
    scheduler.reconcile(KEY).await.unwrap();
    assert_eq!(placed(&get().await), [to]);
    let held = world
        .stored_events()
        .await
        .iter()
        .filter(|e| e["reason"] == "ApplicationFailoverHeld")
        .count();
    assert_eq!(held, 1);
    // The block of `from` ends 1000 s after its task went (at 100): then it fits, the
    // eviction goes ahead and the scheduler places the workload there again.
    clock.advance(chrono::Duration::seconds(999));
    af.reconcile(KEY).await.unwrap();
    assert_eq!(
        placed(&get().await),
        [to],
        "still blocked one second before"
    );
    clock.advance(chrono::Duration::seconds(1));
    af.reconcile(KEY).await.unwrap();
    assert!(placed(&get().await).is_empty());
    scheduler.reconcile(KEY).await.unwrap();
    assert_eq!(placed(&get().await), [from]);
}
