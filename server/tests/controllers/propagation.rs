//! A template on its way to the members: the detector makes the binding, binding-works its
//! Works.

use flotilla_api::admission::admit;
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_api::kinds::{builtin_by_plural, well_known, ResourceType};
use flotilla_server::controllers::propagation::binding_works::BindingWorksController;
use flotilla_server::controllers::propagation::detector::{binding_name, template_key, Detector};
use flotilla_server::controllers::runtime::controller::Reconciler;
use flotilla_server::controllers::runtime::queue::WorkQueue;
use flotilla_server::controllers::runtime::testing::{SpecReplicas, TestWorld};
use flotilla_server::store::ListOptions;
use serde_json::{json, Value};
use std::sync::Arc;

/// Stores `obj` as the API would: with a uid, admitted (defaulted and validated).
async fn create(world: &TestWorld, rt: &ResourceType, mut obj: Value) -> Value {
    obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    admit(
        &rt.group,
        &rt.kind,
        &mut obj,
        None,
        &DefaultingConfig::default(),
        chrono::Utc::now(),
    )
    .unwrap();
    world.store.create(rt, obj).await.unwrap()
}

fn deploy_rt() -> ResourceType {
    builtin_by_plural("apps", "deployments").unwrap()
}

#[tokio::test]
async fn a_template_with_a_250_character_name_gets_a_binding_and_works() {
    let world = TestWorld::new();
    let detector = Detector::new(
        world.store.clone(),
        world.shared_clock.clone(),
        world.ctx.registry.clone(),
        Arc::new(SpecReplicas),
        world.events(),
        WorkQueue::default(),
    );
    let long = "n".repeat(250);
    create(
        &world,
        &deploy_rt(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": long, "namespace": "default"}, "spec": {"replicas": 3}}),
    )
    .await;
    create(
        &world,
        &well_known::propagation_policies(),
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
               "metadata": {"name": "p", "namespace": "default"},
               "spec": {"priority": 0,
                        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": long}],
                        "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}}}),
    )
    .await;
    detector
        .reconcile(&template_key(&deploy_rt(), "default", &long))
        .await
        .unwrap();
    let bindings = world
        .store
        .list(
            &well_known::resource_bindings(),
            None,
            &ListOptions::default(),
        )
        .await
        .unwrap()
        .items;
    assert_eq!(bindings.len(), 1, "one binding");
    let name = bindings[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(name, binding_name(&long, "Deployment"));
    assert!(
        flotilla_api::names::dns1123_subdomain(&name).is_empty(),
        "{name}"
    );

    // Scheduled to member1, it makes its Work there.
    world
        .store
        .create(
            &well_known::clusters(),
            json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                   "metadata": {"name": "member1"}, "spec": {"syncMode": "Pull"}}),
        )
        .await
        .unwrap();
    let mut b = bindings[0].clone();
    b["spec"]["clusters"] = json!([{"name": "member1", "replicas": 3}]);
    world
        .store
        .update(&well_known::resource_bindings(), b)
        .await
        .unwrap();
    let works = BindingWorksController::new(
        world.store.clone(),
        world.ctx.registry.clone(),
        Arc::new(SpecReplicas),
        world.events(),
    );
    works
        .reconcile(&format!("rb|default|{name}"))
        .await
        .unwrap();
    let made = world
        .store
        .list(
            &well_known::works(),
            Some("karmada-es-member1"),
            &ListOptions::default(),
        )
        .await
        .unwrap()
        .items;
    assert_eq!(made.len(), 1, "one Work on member1");
    let work = made[0]["metadata"]["name"].as_str().unwrap();
    assert!(
        flotilla_api::names::dns1123_subdomain(work).is_empty(),
        "{work}"
    );
}
