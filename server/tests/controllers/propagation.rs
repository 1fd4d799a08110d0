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

/// The binding-works controller over `world`, with the replica interpreter.
fn binding_works(world: &TestWorld) -> BindingWorksController {
    BindingWorksController::new(
        world.store.clone(),
        world.ctx.registry.clone(),
        Arc::new(SpecReplicas),
        world.events(),
    )
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
    let works = binding_works(&world);
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

/// A Work of the name a binding's plan creates that is already stored, owned by no one (as a
/// new leader whose view has not caught up, or a collector that has not reached a dead
/// binding's Work, would find it) is read and brought to the desired state, and the binding
/// takes it over; one being deleted is left to go and looked at again soon (issue #36: such a
/// Work was skipped until the next resync).
#[tokio::test]
async fn a_work_that_exists_already_is_taken_over_never_skipped() {
    use flotilla_server::controllers::propagation::binding_works::work_name;
    use flotilla_server::controllers::runtime::controller::Action;
    let world = TestWorld::new();
    world
        .cluster("member1", json!({"syncMode": "Pull"}), json!({}))
        .await;
    world
        .cluster("member2", json!({"syncMode": "Pull"}), json!({}))
        .await;
    create(
        &world,
        &deploy_rt(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "nginx", "namespace": "default"}, "spec": {"replicas": 3}}),
    )
    .await;
    let binding = create(
        &world,
        &well_known::resource_bindings(),
        json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
               "metadata": {"name": "nginx-deployment", "namespace": "default"},
               "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "namespace": "default", "name": "nginx"},
                        "replicas": 3,
                        "clusters": [{"name": "member1", "replicas": 1},
                                     {"name": "member2", "replicas": 2}]}}),
    )
    .await;
    let name = work_name("Deployment", "default", "nginx");
    // member1's is stale and owned by no one; member2's is on its way out.
    for (cluster, finalizers) in [("member1", json!([])), ("member2", json!(["hold"]))] {
        world
            .store
            .create(
                &well_known::works(),
                json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                       "metadata": {"name": name, "namespace": format!("karmada-es-{cluster}"),
                                    "finalizers": finalizers},
                       "spec": {"workload": {"manifests": [{"stale": true}]}}}),
            )
            .await
            .unwrap();
    }
    world
        .store
        .delete(
            &well_known::works(),
            Some("karmada-es-member2"),
            &name,
            &flotilla_server::store::DeleteOptions::default(),
        )
        .await
        .unwrap();
    let works = binding_works(&world);
    let action = works
        .reconcile("rb|default|nginx-deployment")
        .await
        .unwrap();
    let work_on = |cluster: &'static str| {
        let store = world.store.clone();
        let name = name.clone();
        async move {
            store
                .get(
                    &well_known::works(),
                    Some(&format!("karmada-es-{cluster}")),
                    &name,
                )
                .await
                .unwrap()
        }
    };
    let taken = work_on("member1").await;
    let manifest = &taken["spec"]["workload"]["manifests"][0];
    assert_eq!(manifest["kind"], "Deployment", "{taken}");
    assert_eq!(manifest["spec"]["replicas"], 1, "{taken}");
    assert_eq!(
        taken["metadata"]["ownerReferences"][0]["uid"], binding["metadata"]["uid"],
        "the binding owns it now: {taken}"
    );
    let going = work_on("member2").await;
    assert_eq!(
        going["spec"]["workload"]["manifests"][0]["stale"], true,
        "a Work being deleted is left to go: {going}"
    );
    assert!(
        matches!(action, Action::RequeueAfter(d) if d <= std::time::Duration::from_secs(2)),
        "the binding looks again soon: {action:?}"
    );
}
