//! Several controllers on one in-memory store and fake clock (a [`TestWorld`]), each told its
//! keys in turn as the runtime would: the chains across controllers that no controller's own
//! tests can show. One test binary; each file of `controllers/` is one chain.
//!
//! [`TestWorld`]: flotilla_server::controllers::runtime::testing::TestWorld
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "controllers/application_failover.rs"]
mod application_failover;
#[path = "controllers/dry_run.rs"]
mod dry_run;
#[path = "controllers/failback.rs"]
mod failback;
#[path = "controllers/failover_chain.rs"]
mod failover_chain;
#[path = "controllers/members_lifecycle.rs"]
mod members_lifecycle;
#[path = "controllers/propagation.rs"]
mod propagation;

use flotilla_api::kinds::well_known;
use flotilla_server::store::Store;
use serde_json::{json, Value};

/// A Work of `binding` for its Deployment `name` on `cluster`, applied and reporting
/// `readyReplicas: 2` of 2 (Applied since `applied_at`): the new copy of a failover, Healthy.
async fn healthy_work(
    store: &dyn Store,
    binding: &Value,
    cluster: &str,
    name: &str,
    applied_at: &str,
) {
    store
        .create(
            &well_known::works(),
            json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                "metadata": {"name": name, "namespace": format!("karmada-es-{cluster}"),
                    "annotations": {"flotilla.io/assigned-replicas": "2"},
                    "ownerReferences": [{"apiVersion": "work.karmada.io/v1alpha2",
                        "kind": "ResourceBinding", "name": binding["metadata"]["name"],
                        "uid": binding["metadata"]["uid"], "controller": true}]},
                "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": "default"}, "spec": {"replicas": 2}}]}}}),
        )
        .await
        .unwrap();
    let mut w = store
        .get(
            &well_known::works(),
            Some(&format!("karmada-es-{cluster}")),
            name,
        )
        .await
        .unwrap();
    w["status"] = json!({"conditions": [{"type": "Applied", "status": "True",
        "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": applied_at}],
        "manifestStatuses": [{"identifier": {"ordinal": 0}, "status": {"readyReplicas": 2}}]});
    store.update_status(&well_known::works(), w).await.unwrap();
}
