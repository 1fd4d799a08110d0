//! Tests of the dependencies distributor: the snapshots in `spec.requiredBy`, the
//! depended-by labels, which binding events concern it, attach and release, the index of
//! propagating bindings, and the controller on a `TestWorld`.

use super::*;
use crate::controllers::runtime::testing::{stored_events, TestWorld};
use flotilla_api::kinds::ResourceType;

fn snap(ns: &str, name: &str, clusters: &[&str]) -> BindingSnapshot {
    BindingSnapshot {
        namespace: ns.into(),
        name: name.into(),
        clusters: clusters.iter().map(|c| TargetCluster::new(c, 0)).collect(),
    }
}

#[test]
fn snapshots_merge_in_place_and_are_removed_by_binding() {
    let a = snap("default", "a", &["m1"]);
    let b = snap("default", "b", &["m2"]);
    let a2 = snap("default", "a", &["m1", "m3"]);
    let other_ns_a = snap("other", "a", &["m9"]);
    type Case<'a> = (
        &'a str,
        Vec<BindingSnapshot>,
        BindingSnapshot,
        Vec<BindingSnapshot>,
    );
    let merges: Vec<Case> = vec![
        ("into empty", vec![], a.clone(), vec![a.clone()]),
        (
            "appended",
            vec![a.clone()],
            b.clone(),
            vec![a.clone(), b.clone()],
        ),
        (
            "replaced in place",
            vec![a.clone(), b.clone()],
            a2.clone(),
            vec![a2.clone(), b.clone()],
        ),
        ("same again", vec![a.clone()], a.clone(), vec![a.clone()]),
        (
            "namespace matters",
            vec![a.clone()],
            other_ns_a.clone(),
            vec![a.clone(), other_ns_a.clone()],
        ),
    ];
    for (what, existing, new, want) in merges {
        assert_eq!(merge_snapshot(&existing, &new), want, "{what}");
    }
    // (what, snapshots, namespace/name of the binding released, what is left)
    type Removal<'a> = (
        &'a str,
        Vec<BindingSnapshot>,
        (&'a str, &'a str),
        Vec<BindingSnapshot>,
    );
    let removals: Vec<Removal> = vec![
        ("only one", vec![a.clone()], ("default", "a"), vec![]),
        (
            "others stay",
            vec![a.clone(), b.clone()],
            ("default", "a"),
            vec![b.clone()],
        ),
        ("absent", vec![b.clone()], ("default", "a"), vec![b.clone()]),
        (
            "other namespace stays",
            vec![a.clone(), other_ns_a.clone()],
            ("other", "a"),
            vec![a.clone()],
        ),
    ];
    for (what, existing, (ns, name), want) in removals {
        assert_eq!(remove_snapshot(&existing, ns, name), want, "{what}");
    }
}

#[test]
fn depended_by_labels_are_valid_and_distinct() {
    let a = depended_by_label("default", "web-deployment");
    assert_eq!(a, depended_by_label("default", "web-deployment"));
    assert_ne!(a, depended_by_label("default", "api-deployment"));
    assert_ne!(a, depended_by_label("other", "web-deployment"));
    let (prefix, name) = a.split_once('/').unwrap();
    assert_eq!(prefix, "resourcebinding.karmada.io");
    assert!(name.len() <= 63 && name.starts_with("depended-by-"), "{a}");
}

#[test]
fn binding_events_concern_dependents_and_their_attached_bindings_only() {
    let cases = [
        (
            "plain binding",
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {}}),
            vec![],
        ),
        (
            "propagates",
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"propagateDeps": true}}),
            vec!["rb|default|a"],
        ),
        (
            "turned off, still recorded",
            json!({"metadata": {"name": "a", "namespace": "default",
                                "annotations": {DEPENDENCIES_ANNOTATION: "[]"}}, "spec": {}}),
            vec!["rb|default|a"],
        ),
        (
            "attached: its dependents",
            json!({"metadata": {"name": "cfg-configmap", "namespace": "default"},
                   "spec": {"requiredBy": [{"namespace": "default", "name": "a"}, {"namespace": "default", "name": "b"}]}}),
            vec!["rb|default|a", "rb|default|b"],
        ),
    ];
    for (what, binding, want) in cases {
        assert_eq!(binding_keys_concerned(&binding), want, "{what}");
    }
}

#[test]
fn dependencies_are_recorded_sorted_and_removed_when_none() {
    let b = json!({"metadata": {"name": "web-deployment", "annotations": {"keep": "me"}}});
    assert_eq!(recorded_dependencies(&b), Ok(None));
    let cm = DependencyRef::of(&config_map("u", "1"));
    let secret = DependencyRef {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: "default".into(),
        name: "a-secret".into(),
    };
    let deps: BTreeSet<DependencyRef> = [secret.clone(), cm.clone()].into();
    let with = with_recorded_dependencies(&b, &deps);
    assert_eq!(
        with["metadata"]["annotations"][DEPENDENCIES_ANNOTATION],
        r#"[{"apiVersion":"v1","kind":"ConfigMap","namespace":"default","name":"cfg"},{"apiVersion":"v1","kind":"Secret","namespace":"default","name":"a-secret"}]"#
    );
    assert_eq!(recorded_dependencies(&with), Ok(Some(deps)));
    assert_eq!(with["metadata"]["annotations"]["keep"], "me");
    assert_eq!(with_recorded_dependencies(&with, &BTreeSet::new()), b);
    let bare = json!({"metadata": {"name": "x"}});
    let round = with_recorded_dependencies(
        &with_recorded_dependencies(&bare, &[cm.clone()].into()),
        &BTreeSet::new(),
    );
    assert_eq!(round, bare, "no empty annotations left behind");
    let mut garbage = b.clone();
    garbage["metadata"]["annotations"][DEPENDENCIES_ANNOTATION] = json!("not json");
    assert!(recorded_dependencies(&garbage).is_err());
    assert_eq!(cm.binding_name(), "cfg-configmap");
}

fn config_map(uid: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cfg", "namespace": "default", "uid": uid, "resourceVersion": rv},
           "data": {"k": "v"}})
}

fn web<'a>(clusters: &'a [TargetCluster]) -> Dependent<'a> {
    Dependent {
        namespace: "default",
        name: "web-deployment",
        permanent_id: "web-id",
        clusters,
    }
}

fn attached(owner: &str, required_by: Value, placement: Option<Value>) -> Value {
    let mut b = json!({"apiVersion": BINDING_API_VERSION, "kind": "ResourceBinding",
        "metadata": {"name": "cfg-configmap", "namespace": "default",
                     "labels": {RB_PERMANENT_ID_LABEL: "cfg-rb-id"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": owner, "controller": true}]},
        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cfg", "uid": owner, "resourceVersion": "5"},
                 "requiredBy": required_by}});
    if let Some(p) = placement {
        b["spec"]["placement"] = p;
    }
    b
}

#[test]
fn attach_creates_merges_refreshes_and_refuses_a_foreign_owner() {
    let two = [TargetCluster::new("m1", 0), TargetCluster::new("m2", 0)];
    let label = depended_by_label("default", "web-deployment");
    // None yet: a new binding owned by the dependency.
    let AttachedPlan::Create(created) =
        plan_attach(None, &config_map("cm-uid", "5"), &web(&two)).unwrap()
    else {
        panic!("create expected")
    };
    assert_eq!(created["metadata"]["name"], "cfg-configmap");
    assert_eq!(created["metadata"]["labels"][&label], "web-id");
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "cm-uid");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    assert_eq!(created["spec"]["resource"]["name"], "cfg");
    assert_eq!(created["spec"]["resource"]["resourceVersion"], "5");
    assert_eq!(
        created["spec"]["requiredBy"],
        json!([{"namespace": "default", "name": "web-deployment", "clusters": [{"name": "m1"}, {"name": "m2"}]}])
    );
    assert!(created["spec"].get("placement").is_none());

    let other =
        json!([{"namespace": "default", "name": "api-deployment", "clusters": [{"name": "m3"}]}]);
    #[derive(Debug)]
    enum Want {
        Keep,
        Update { required_by_changed: bool },
        Refused,
    }
    let cases: Vec<(&str, Value, Value, Want)> = vec![
        (
            "another binding's snapshot stays, ours is added",
            attached("cm-uid", other.clone(), None),
            config_map("cm-uid", "5"),
            Want::Update {
                required_by_changed: true,
            },
        ),
        (
            "nothing changed",
            {
                let mut b = attached(
                    "cm-uid",
                    json!([{"namespace": "default", "name": "web-deployment", "clusters": [{"name": "m1"}, {"name": "m2"}]}]),
                    None,
                );
                b["metadata"]["labels"][&label] = json!("web-id");
                b
            },
            config_map("cm-uid", "5"),
            Want::Keep,
        ),
        (
            "the dependency changed: only spec.resource follows",
            {
                let mut b = attached(
                    "cm-uid",
                    json!([{"namespace": "default", "name": "web-deployment", "clusters": [{"name": "m1"}, {"name": "m2"}]}]),
                    None,
                );
                b["metadata"]["labels"][&label] = json!("web-id");
                b
            },
            config_map("cm-uid", "6"),
            Want::Update {
                required_by_changed: false,
            },
        ),
        (
            "a policy's binding keeps its placement",
            attached(
                "cm-uid",
                json!(null),
                Some(json!({"clusterAffinity": {"clusterNames": ["m9"]}})),
            ),
            config_map("cm-uid", "5"),
            Want::Update {
                required_by_changed: true,
            },
        ),
        (
            "controlled by an earlier object of that name (#2090)",
            attached("old-uid", other.clone(), None),
            config_map("cm-uid", "5"),
            Want::Refused,
        ),
        (
            "being deleted",
            {
                let mut b = attached("cm-uid", other.clone(), None);
                b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                b
            },
            config_map("cm-uid", "5"),
            Want::Refused,
        ),
    ];
    for (what, existing, dependency, want) in cases {
        let got = plan_attach(Some(&existing), &dependency, &web(&two));
        match (got, want) {
            (Ok(AttachedPlan::Keep), Want::Keep) => {}
            (
                Ok(AttachedPlan::Update {
                    binding,
                    required_by_changed,
                }),
                Want::Update {
                    required_by_changed: changed,
                },
            ) => {
                assert_eq!(required_by_changed, changed, "{what}");
                assert_eq!(binding["metadata"]["labels"][&label], "web-id", "{what}");
                assert_eq!(
                    binding["spec"]["resource"],
                    resource_ref(&dependency),
                    "{what}"
                );
                assert_eq!(
                    binding["spec"]["placement"], existing["spec"]["placement"],
                    "{what}"
                );
                let rb: Vec<BindingSnapshot> =
                    serde_json::from_value(binding["spec"]["requiredBy"].clone()).unwrap();
                assert!(
                    rb.iter()
                        .any(|s| s.name == "web-deployment" && s.clusters.len() == 2),
                    "{what}: {rb:?}"
                );
                if existing["spec"]["requiredBy"] == other {
                    assert_eq!(rb[0].name, "api-deployment", "{what}");
                }
            }
            (Err(_), Want::Refused) => {}
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn release_removes_the_snapshot_and_deletes_only_unplaced_empty_bindings() {
    let label = depended_by_label("default", "web-deployment");
    let ours =
        json!({"namespace": "default", "name": "web-deployment", "clusters": [{"name": "m1"}]});
    let theirs =
        json!({"namespace": "default", "name": "api-deployment", "clusters": [{"name": "m3"}]});
    let with_label = |mut b: Value| {
        b["metadata"]["labels"][&label] = json!("web-id");
        b
    };
    let placement = json!({"clusterAffinity": {"clusterNames": ["m9"]}});
    // (what, existing, Delete? / Keep? / Update with requiredBy)
    let cases: Vec<(&str, Value, &str, Value)> = vec![
        (
            "last snapshot, no placement",
            with_label(attached("u", json!([ours]), None)),
            "delete",
            json!(null),
        ),
        (
            "others still require it",
            with_label(attached("u", json!([ours, theirs]), None)),
            "update",
            json!([theirs]),
        ),
        (
            "placed by a policy",
            with_label(attached("u", json!([ours]), Some(placement.clone()))),
            "update",
            json!(null),
        ),
        (
            "not ours",
            attached("u", json!([theirs]), None),
            "keep",
            json!(null),
        ),
        (
            "not ours, even with nothing left in it",
            attached("u", json!(null), None),
            "keep",
            json!(null),
        ),
        (
            "being deleted",
            {
                let mut b = with_label(attached("u", json!([ours]), None));
                b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                b
            },
            "keep",
            json!(null),
        ),
    ];
    for (what, existing, want, required_by) in cases {
        match (
            plan_release(&existing, "default", "web-deployment").unwrap(),
            want,
        ) {
            (AttachedPlan::Delete, "delete") | (AttachedPlan::Keep, "keep") => {}
            (
                AttachedPlan::Update {
                    binding,
                    required_by_changed,
                },
                "update",
            ) => {
                assert!(required_by_changed, "{what}");
                assert_eq!(
                    binding["spec"]
                        .get("requiredBy")
                        .cloned()
                        .unwrap_or(Value::Null),
                    required_by,
                    "{what}"
                );
                assert!(
                    binding["metadata"]["labels"].get(&label).is_none(),
                    "{what}"
                );
                assert_eq!(
                    binding["spec"]["placement"], existing["spec"]["placement"],
                    "{what}"
                );
            }
            (got, want) => panic!("{what}: got {got:?}, want {want}"),
        }
    }
}

// ---- the controller on an in-memory store, with the real interpreter ----

struct Fixture {
    store: Arc<dyn Store>,
    distributor: DependenciesDistributor,
}

fn fixture() -> Fixture {
    let world = TestWorld::new();
    let distributor = DependenciesDistributor::new(
        world.store.clone(),
        world.shared_clock.clone(),
        world.ctx.registry.clone(),
        world.ctx.interpreter.clone(),
        world.events(),
        WorkQueue::default(),
        &world.metrics,
    )
    .unwrap();
    Fixture {
        store: world.store,
        distributor,
    }
}

fn rt(plural: &str) -> ResourceType {
    builtin_by_plural(if plural == "deployments" { "apps" } else { "" }, plural).unwrap()
}

async fn put(store: &Arc<dyn Store>, rt: &ResourceType, mut obj: Value) -> Value {
    obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    store.create(rt, obj).await.unwrap()
}

async fn deployment(store: &Arc<dyn Store>, name: &str, config: &str) -> Value {
    put(
        store,
        &rt("deployments"),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx",
            "envFrom": [{"configMapRef": {"name": config}}]}]}}}}),
    )
    .await
}

async fn binding_for(store: &Arc<dyn Store>, template: &Value, clusters: &[&str]) -> Value {
    let name = format!("{}-deployment", str_at(template, "/metadata/name"));
    let mut b = json!({"apiVersion": BINDING_API_VERSION, "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": "default", "labels": {RB_PERMANENT_ID_LABEL: format!("{name}-id")}},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default",
                              "name": str_at(template, "/metadata/name"), "uid": str_at(template, "/metadata/uid")},
                 "propagateDeps": true, "replicas": 1,
                 "placement": {"clusterAffinity": {"clusterNames": clusters}}}});
    b["spec"]["clusters"] = json!(clusters
        .iter()
        .map(|c| json!({"name": c, "replicas": 1}))
        .collect::<Vec<_>>());
    put(store, &well_known::resource_bindings(), b).await
}

async fn get_rb(store: &Arc<dyn Store>, name: &str) -> Option<Value> {
    match store
        .get(&well_known::resource_bindings(), Some("default"), name)
        .await
    {
        Ok(b) => Some(b),
        Err(StoreError::NotFound { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

async fn update_rb(store: &Arc<dyn Store>, name: &str, f: impl FnOnce(&mut Value)) {
    let mut b = get_rb(store, name).await.unwrap();
    f(&mut b);
    store
        .update(&well_known::resource_bindings(), b)
        .await
        .unwrap();
}

fn required_by_of(b: &Value) -> Vec<(String, Vec<String>)> {
    required_by(b)
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.clusters.into_iter().map(|c| c.name).collect()))
        .collect()
}

fn decisions(f: &Fixture, action: &str) -> u64 {
    f.distributor.decisions.with_label_values(&[action]).get()
}

async fn event_reasons(store: &Arc<dyn Store>) -> Vec<String> {
    stored_events(store)
        .await
        .iter()
        .map(|e| str_at(e, "/reason").to_string())
        .collect()
}

#[tokio::test]
async fn dependencies_follow_their_bindings_and_go_when_nothing_requires_them() {
    let f = fixture();
    let cm = put(&f.store, &rt("configmaps"), config_map("", "")).await;
    let web = deployment(&f.store, "web", "cfg").await;
    let api = deployment(&f.store, "api", "cfg").await;
    binding_for(&f.store, &web, &["m1", "m2"]).await;
    binding_for(&f.store, &api, &["m3"]).await;

    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap")
        .await
        .expect("attached binding");
    assert_eq!(
        required_by_of(&a),
        [(
            "web-deployment".to_string(),
            vec!["m1".to_string(), "m2".to_string()]
        )]
    );
    assert_eq!(
        a["metadata"]["ownerReferences"][0]["uid"],
        cm["metadata"]["uid"]
    );
    assert_eq!(
        a["metadata"]["labels"][depended_by_label("default", "web-deployment")],
        "web-deployment-id"
    );
    let recorded = recorded_dependencies(&get_rb(&f.store, "web-deployment").await.unwrap());
    assert_eq!(
        recorded.unwrap().unwrap().into_iter().collect::<Vec<_>>(),
        [DependencyRef::of(&cm)],
        "the binding records what it requires"
    );
    assert!(
        a["metadata"]["labels"][RB_PERMANENT_ID_LABEL].is_string(),
        "admitted: {a}"
    );
    assert_eq!(a["spec"]["resource"]["uid"], cm["metadata"]["uid"]);
    assert_eq!(decisions(&f, "created"), 1);
    assert!(event_reasons(&f.store)
        .await
        .contains(&"AttachedBindingCreated".to_string()));

    // A second dependent merges its snapshot.
    f.distributor
        .reconcile("rb|default|api-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(required_by_of(&a).len(), 2, "{a}");

    // The first one moves: its snapshot follows, the other stays.
    update_rb(&f.store, "web-deployment", |b| {
        b["spec"]["clusters"] = json!([{"name": "m2", "replicas": 1}])
    })
    .await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(
        required_by_of(&a),
        [
            ("web-deployment".to_string(), vec!["m2".to_string()]),
            ("api-deployment".to_string(), vec!["m3".to_string()])
        ]
    );

    // The ConfigMap changes: spec.resource follows, so the binding's works are rewritten.
    let mut changed = f
        .store
        .get(&rt("configmaps"), Some("default"), "cfg")
        .await
        .unwrap();
    changed["data"]["k"] = json!("v2");
    let changed = f.store.update(&rt("configmaps"), changed).await.unwrap();
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(
        a["spec"]["resource"]["resourceVersion"],
        changed["metadata"]["resourceVersion"]
    );
    assert_eq!(decisions(&f, "refreshed"), 1);

    // propagateDeps turned off: the snapshot and label go, the other binding's stays.
    update_rb(&f.store, "web-deployment", |b| {
        b["spec"]["propagateDeps"] = json!(false)
    })
    .await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(
        required_by_of(&a),
        [("api-deployment".to_string(), vec!["m3".to_string()])]
    );
    assert!(a["metadata"]["labels"]
        .get(depended_by_label("default", "web-deployment"))
        .is_none());
    let web_rb = get_rb(&f.store, "web-deployment").await.unwrap();
    assert_eq!(recorded_dependencies(&web_rb), Ok(None), "record removed");
    let keys = (f.distributor.sources()[0].keys)(&web_rb);
    assert!(
        keys.is_empty(),
        "a binding with nothing to do is not queued: {keys:?}"
    );

    // The last dependent is deleted: the attached binding goes.
    f.store
        .delete(
            &well_known::resource_bindings(),
            Some("default"),
            "api-deployment",
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
    f.distributor
        .reconcile("rb|default|api-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_none());
    assert_eq!(decisions(&f, "deleted"), 1);
    assert!(event_reasons(&f.store)
        .await
        .contains(&"AttachedBindingDeleted".to_string()));
}

#[tokio::test]
async fn a_template_that_stops_using_a_dependency_releases_it() {
    let f = fixture();
    put(&f.store, &rt("configmaps"), config_map("", "")).await;
    let web = deployment(&f.store, "web", "cfg").await;
    binding_for(&f.store, &web, &["m1"]).await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_some());
    let mut t = f
        .store
        .get(&rt("deployments"), Some("default"), "web")
        .await
        .unwrap();
    t["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "other"}}]);
    f.store.update(&rt("deployments"), t).await.unwrap();
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_none());
    // Unscheduled (no clusters): nothing is required either.
    let mut t = f
        .store
        .get(&rt("deployments"), Some("default"), "web")
        .await
        .unwrap();
    t["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "cfg"}}]);
    f.store.update(&rt("deployments"), t).await.unwrap();
    update_rb(&f.store, "web-deployment", |b| {
        b["spec"]["clusters"] = json!([])
    })
    .await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_none());
}

#[tokio::test]
async fn an_unreadable_record_falls_back_to_the_label_scan() {
    let f = fixture();
    put(&f.store, &rt("configmaps"), config_map("", "")).await;
    let web = deployment(&f.store, "web", "cfg").await;
    binding_for(&f.store, &web, &["m1"]).await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_some());
    update_rb(&f.store, "web-deployment", |b| {
        b["spec"]["propagateDeps"] = json!(false);
        b["metadata"]["annotations"][DEPENDENCIES_ANNOTATION] = json!("[broken");
    })
    .await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_none());
    let b = get_rb(&f.store, "web-deployment").await.unwrap();
    assert_eq!(recorded_dependencies(&b), Ok(None), "{b}");
}

#[tokio::test]
async fn a_dependency_created_later_is_found_through_its_namespace() {
    let f = fixture();
    let web = deployment(&f.store, "web", "cfg").await;
    binding_for(&f.store, &web, &["m1"]).await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    assert!(
        get_rb(&f.store, "cfg-configmap").await.is_none(),
        "no ConfigMap yet"
    );
    put(&f.store, &rt("configmaps"), config_map("", "")).await;
    // The ConfigMap's event maps to its namespace, which queues the propagateDeps bindings.
    let keys = (f.distributor.sources()[1].keys)(&config_map("x", "1"));
    assert_eq!(keys, ["deps-ns|default"]);
    f.distributor.reconcile(&keys[0]).await.unwrap();
    assert_eq!(f.distributor.queue.len(), 1);
    let key = f.distributor.queue.next().await.unwrap();
    assert_eq!(key, "rb|default|web-deployment");
    f.distributor.reconcile(&key).await.unwrap();
    assert!(get_rb(&f.store, "cfg-configmap").await.is_some());
}

#[test]
fn the_index_keeps_the_propagating_bindings_of_each_namespace() {
    let rb = |ns: &str, name: &str, deps: bool| {
        serde_json::json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"namespace": ns, "name": name}, "spec": {"propagateDeps": deps}})
    };
    let index = PropagatingBindings::default();
    index.observe(false, &rb("default", "web", true));
    assert_eq!(
        index.in_namespace("default"),
        None,
        "not complete before the list"
    );
    index.relisted(
        &well_known::resource_bindings(),
        &[
            rb("default", "web", true),
            rb("default", "api", false),
            rb("x", "other", true),
        ],
    );
    assert_eq!(
        index.in_namespace("default"),
        Some(vec!["rb|default|web".to_string()])
    );
    assert_eq!(
        index.in_namespace("x"),
        Some(vec!["rb|x|other".to_string()])
    );
    assert_eq!(index.in_namespace("empty"), Some(vec![]));
    index.observe(false, &rb("default", "api", true));
    index.observe(true, &rb("default", "web", true));
    index.observe(false, &rb("x", "other", false));
    assert_eq!(
        index.in_namespace("default"),
        Some(vec!["rb|default|api".to_string()])
    );
    assert_eq!(index.in_namespace("x"), Some(vec![]));
}

#[tokio::test]
async fn once_its_feed_listed_a_namespace_fans_out_from_the_index() {
    let f = fixture();
    // Only in the index (the store has no binding): the fan-out reads no binding.
    let listed = serde_json::json!({"metadata": {"namespace": "default", "name": "web-deployment"},
        "spec": {"propagateDeps": true}});
    f.distributor
        .propagating
        .relisted(&well_known::resource_bindings(), &[listed]);
    f.distributor.reconcile("deps-ns|default").await.unwrap();
    assert_eq!(f.distributor.queue.len(), 1);
    assert_eq!(
        f.distributor.queue.next().await.unwrap(),
        "rb|default|web-deployment"
    );
}

#[tokio::test]
async fn a_policy_placed_dependency_keeps_its_placement_and_a_foreign_owner_blocks() {
    let f = fixture();
    let cm = put(&f.store, &rt("configmaps"), config_map("", "")).await;
    let web = deployment(&f.store, "web", "cfg").await;
    binding_for(&f.store, &web, &["m1"]).await;
    // The ConfigMap's own binding, as the detector writes it.
    let mut own = attached(
        str_at(&cm, "/metadata/uid"),
        json!(null),
        Some(json!({"clusterAffinity": {"clusterNames": ["m9"]}})),
    );
    own["spec"]["clusters"] = json!([{"name": "m9"}]);
    own["spec"].as_object_mut().unwrap().remove("requiredBy");
    put(&f.store, &well_known::resource_bindings(), own).await;
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(
        required_by_of(&a),
        [("web-deployment".to_string(), vec!["m1".to_string()])]
    );
    assert_eq!(a["spec"]["clusters"], json!([{"name": "m9"}]));
    // Released: still placed by its policy, so it stays.
    f.store
        .delete(
            &well_known::resource_bindings(),
            Some("default"),
            "web-deployment",
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
    f.distributor
        .reconcile("rb|default|web-deployment")
        .await
        .unwrap();
    let a = get_rb(&f.store, "cfg-configmap")
        .await
        .expect("kept: a policy placed it");
    assert!(a["spec"].get("requiredBy").is_none(), "{a}");

    // A binding of that name controlled by another (live) object — as when a ConfigMap was
    // deleted and created again before its old binding was collected: error, nothing
    // written, one Event.
    let other = put(
        &f.store,
        &rt("secrets"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "holder", "namespace": "default"}}),
    )
    .await;
    let other_uid = str_at(&other, "/metadata/uid").to_string();
    f.store
        .delete(
            &well_known::resource_bindings(),
            Some("default"),
            "cfg-configmap",
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
    put(
        &f.store,
        &well_known::resource_bindings(),
        attached(
            &other_uid,
            json!([{"namespace": "default", "name": "x"}]),
            None,
        ),
    )
    .await;
    binding_for(&f.store, &web, &["m1"]).await;
    for _ in 0..2 {
        let err = f
            .distributor
            .reconcile("rb|default|web-deployment")
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&other_uid), "{err}");
    }
    let a = get_rb(&f.store, "cfg-configmap").await.unwrap();
    assert_eq!(required_by_of(&a), [("x".to_string(), vec![])]);
    assert_eq!(decisions(&f, "blocked"), 2);
    let warnings = event_reasons(&f.store)
        .await
        .iter()
        .filter(|r| *r == "SyncScheduleResultToDependenciesFailed")
        .count();
    assert_eq!(warnings, 1, "one Event per failure, not per retry");
}
