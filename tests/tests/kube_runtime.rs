//! The kube runtime (`flotilla_member::kube`) against a real Kubernetes-compatible API
//! server: a `flotilla-server --no-controllers` on 127.0.0.1, which, like controller-runtime's
//! envtest, serves the API and runs nothing behind it, so these tests write the statuses,
//! Nodes and Pods a cluster's controllers and kubelets would. The runtime is built as the
//! agent builds it: a kube-rs client from the server's kubeconfig (TLS with its CA and a
//! token), or from an endpoint, a token and a CA bundle, as push mode will.
//!
//! Checked: apply (the managed label, the namespace created, idempotence), status flowing back
//! through `get` and the change counter, conflicts with objects Flotilla did not create (left
//! unchanged; taken over with Overwrite), deletes (ours only), kinds resolved by discovery
//! (a CRD installed after start, an irregular plural), and the cluster summary (version,
//! enablements, health, nodes, resources).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use flotilla_member::kube::{
    client_for_endpoint, client_from_kubeconfig, KubeRuntime, KubeSettings,
};
use flotilla_member::{MemberRuntime, ObjectRef, RuntimeError};
use flotilla_tests::Server;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::Client;
use serde_json::{json, Value};

const MANAGED: &str = "karmada.io/managed";
const WORK_NAMESPACE: &str = "karmada-es-member1";

/// Waits until `f` answers `Ok`, looking every 50 ms; panics after `deadline` naming `what`
/// and what the last look saw.
async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let seen = match f().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= until {
            panic!("waited {deadline:?} for {what}; last seen: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A member API server, a kube-rs client of it, and a kube runtime on that client.
struct Member {
    runtime: KubeRuntime,
    client: Client,
    server: Option<Server>,
    _dir: tempfile::TempDir,
}

impl Member {
    async fn start() -> Member {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let server =
            tokio::task::spawn_blocking(move || Server::start(&path, &["--no-controllers"]))
                .await
                .unwrap()
                .expect("a flotilla-server --no-controllers as the member API");
        let client = client_from_kubeconfig(Some(&server.kubeconfig()), None)
            .await
            .expect("a client from the member API's kubeconfig");
        let settings = KubeSettings {
            cluster: "member1".into(),
            ..KubeSettings::default()
        };
        let runtime = KubeRuntime::new(client.clone(), settings).unwrap();
        Member {
            runtime,
            client,
            server: Some(server),
            _dir: dir,
        }
    }

    fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates a Deployment as someone other than Flotilla would (no managed label).
    async fn create_foreign(&self, ns: &str, name: &str, replicas: i64) -> Deployment {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if namespaces.get_opt(ns).await.unwrap().is_none() {
            let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            namespaces.create(&PostParams::default(), &n).await.unwrap();
        }
        let mut d = deployment(ns, name, replicas, json!({}));
        d["metadata"]["labels"] = json!({"app": name, "owner": "someone-else"});
        let d: Deployment = serde_json::from_value(d).unwrap();
        self.deployments(ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap()
    }
}

/// A Deployment manifest as a Work carries it, with these annotations.
fn deployment(ns: &str, name: &str, replicas: i64, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name},
            "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    })
}

/// The annotations the control plane puts on a Work's manifest.
fn work_marks(work: &str, extra: &[(&str, &str)]) -> Value {
    let mut a = json!({
        "work.karmada.io/name": work,
        "work.karmada.io/namespace": WORK_NAMESPACE,
    });
    for (k, v) in extra {
        a[*k] = json!(v);
    }
    a
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_marks_and_reports_status() {
    let m = Member::start().await;
    let r = ObjectRef::new("apps/v1", "Deployment", "shop", "web");
    let manifest = deployment("shop", "web", 2, work_marks("web-deployment", &[]));

    // The namespace does not exist yet: it is created; the object carries the managed label
    // though the manifest did not.
    let applied = m.runtime.apply(manifest.clone()).await.unwrap();
    assert_eq!(label(&applied, MANAGED), Some("true"), "{applied}");
    assert_eq!(applied["kind"], "Deployment");
    let generation = applied["metadata"]["generation"].as_i64().unwrap();
    let rv = applied["metadata"]["resourceVersion"].clone();
    // The namespace it made is marked Flotilla's (a Work placing the Namespace itself takes it
    // over without a conflict).
    let namespaces: Api<Namespace> = Api::all(m.client.clone());
    let shop = namespaces
        .get_opt("shop")
        .await
        .unwrap()
        .expect("namespace shop");
    assert_eq!(
        shop.metadata
            .labels
            .unwrap_or_default()
            .get(MANAGED)
            .map(String::as_str),
        Some("true")
    );
    let ns_work = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop",
        "annotations": work_marks("shop-namespace", &[])}});
    m.runtime.apply(ns_work).await.unwrap();
    let live = m.deployments("shop").get("web").await.unwrap();
    let live = serde_json::to_value(&live).unwrap();
    assert_eq!(label(&live, MANAGED), Some("true"));
    assert_eq!(label(&live, "app"), Some("web"));
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(
        live["metadata"]["annotations"]["work.karmada.io/name"],
        "web-deployment"
    );

    // Applying the same manifest again changes nothing.
    let again = m.runtime.apply(manifest.clone()).await.unwrap();
    assert_eq!(again["metadata"]["generation"].as_i64(), Some(generation));
    assert_eq!(
        again["metadata"]["resourceVersion"], rv,
        "a no-op apply writes nothing"
    );

    // A new spec is applied over it.
    let mut scaled = manifest.clone();
    scaled["spec"]["replicas"] = json!(3);
    let scaled = m.runtime.apply(scaled).await.unwrap();
    assert_eq!(scaled["spec"]["replicas"], 3);
    assert!(scaled["metadata"]["generation"].as_i64() > Some(generation));

    // The member's deployment controller (the test) writes the status: it comes back through
    // `get` (from the reflector once synced), and the change counter moves.
    let mut changes = m.runtime.subscribe();
    let seen = *changes.borrow_and_update();
    let status = json!({"status": {"observedGeneration": scaled["metadata"]["generation"],
        "replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 3}});
    let written = m
        .deployments("shop")
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let written_rv = written.metadata.resource_version.clone().unwrap();
    let runtime = &m.runtime;
    let r2 = r.clone();
    let got = eventually("the status through get", Duration::from_secs(10), || {
        let r = r2.clone();
        async move {
            let o = runtime.get(&r).await.map_err(|e| e.to_string())?;
            let o = o.ok_or("no object")?;
            if o.pointer("/status/availableReplicas") == Some(&json!(3)) {
                Ok(o)
            } else {
                Err(o.to_string())
            }
        }
    })
    .await;
    assert_eq!(label(&got, MANAGED), Some("true"));
    eventually(
        "the change counter to move",
        Duration::from_secs(10),
        || {
            let now = *changes.borrow();
            async move {
                if now != seen {
                    Ok(())
                } else {
                    Err(format!("still {now}"))
                }
            }
        },
    )
    .await;
    eventually(
        "resourceVersion of the status write",
        Duration::from_secs(10),
        || {
            let r = r.clone();
            let want = written_rv.clone();
            async move {
                let rv = runtime
                    .resource_version(&r)
                    .await
                    .map_err(|e| e.to_string())?;
                if rv.as_deref() == Some(want.as_str()) {
                    Ok(())
                } else {
                    Err(format!("{rv:?}, want {want}"))
                }
            }
        },
    )
    .await;
    let status = m.runtime.status(&r).await.unwrap().unwrap();
    assert_eq!(status["readyReplicas"], 3);
    let want = [("apps/v1", "Deployment", true), ("v1", "Namespace", true)];
    let want: Vec<(String, String, bool)> = want
        .into_iter()
        .map(|(v, k, synced)| (v.to_string(), k.to_string(), synced))
        .collect();
    eventually(
        "one synced watch per kind applied",
        Duration::from_secs(10),
        || {
            let watched = runtime.watched_kinds();
            let want = want.clone();
            async move {
                if watched == want {
                    Ok(())
                } else {
                    Err(format!("{watched:?}"))
                }
            }
        },
    )
    .await;

    // An object of a kind no one applied, and one that does not exist.
    assert!(m
        .runtime
        .get(&ObjectRef::new("v1", "ConfigMap", "shop", "nothing"))
        .await
        .unwrap()
        .is_none());
    assert!(m
        .runtime
        .get(&ObjectRef::new("apps/v1", "Deployment", "shop", "nothing"))
        .await
        .unwrap()
        .is_none());

    // After a restart the pull loop reads what it applied before without applying it again:
    // the first read of one of Flotilla's objects starts its kind's watch, so status changes
    // wake the pull loop again.
    let restarted = KubeRuntime::new(m.client.clone(), KubeSettings::default()).unwrap();
    assert!(restarted.watched_kinds().is_empty());
    assert!(restarted.get(&r).await.unwrap().is_some());
    let restarted = &restarted;
    eventually(
        "the restarted runtime's watch",
        Duration::from_secs(10),
        || async {
            match restarted.watched_kinds().as_slice() {
                [(_, kind, true)] if kind == "Deployment" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let mut changes = restarted.subscribe();
    let seen = *changes.borrow_and_update();
    let status = json!({"status": {"readyReplicas": 2, "availableReplicas": 2}});
    m.deployments("shop")
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|n| *n != seen))
        .await
        .expect("the restarted runtime's change counter to move within 10 s")
        .unwrap();
    let status = json!({"status": {"readyReplicas": 3, "availableReplicas": 3}});
    m.deployments("shop")
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually(
        "the status back at 3 through the cache",
        Duration::from_secs(10),
        || {
            let r = r.clone();
            async move {
                let o = runtime
                    .get(&r)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("gone")?;
                if o.pointer("/status/availableReplicas") == Some(&json!(3)) {
                    Ok(())
                } else {
                    Err(o["status"].to_string())
                }
            }
        },
    )
    .await;

    // What the pull loop reads on every tick comes from the cache: with the member's API
    // gone, the object and its status are still answered (the health probe says it is gone).
    let mut m = m;
    let server = m.server.take().unwrap();
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .unwrap();
    let cached = m.runtime.get(&r).await.unwrap().expect("from the cache");
    assert_eq!(cached["status"]["availableReplicas"], 3);
    assert!(!m.runtime.summary().await.unwrap().healthy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_flotilla_did_not_create_are_conflicts_unless_overwritten() {
    let m = Member::start().await;
    let before = m.create_foreign("shop", "legacy", 5).await;
    let before_rv = before.metadata.resource_version.clone();

    // Abort (the default): refused, naming the object and the way out; left as it was.
    let err = m
        .runtime
        .apply(deployment(
            "shop",
            "legacy",
            2,
            work_marks("legacy-deployment", &[]),
        ))
        .await
        .unwrap_err();
    let RuntimeError::Conflict(message) = &err else {
        panic!("want a conflict, got {err:?}");
    };
    for part in [
        "apps/v1 Deployment shop/legacy",
        "not created by Flotilla",
        "Overwrite",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let after = m.deployments("shop").get("legacy").await.unwrap();
    assert_eq!(after.metadata.resource_version, before_rv, "left unchanged");
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(5));
    assert!(!after
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .contains_key(MANAGED));
    // The same with `abort` said out loud.
    let abort = work_marks(
        "legacy-deployment",
        &[("work.karmada.io/conflict-resolution", "abort")],
    );
    assert!(matches!(
        m.runtime
            .apply(deployment("shop", "legacy", 2, abort))
            .await,
        Err(RuntimeError::Conflict(_))
    ));
    // Deleting it is refused too.
    let r = ObjectRef::new("apps/v1", "Deployment", "shop", "legacy");
    assert!(matches!(
        m.runtime.delete(&r).await,
        Err(RuntimeError::Conflict(_))
    ));
    let after = m.deployments("shop").get("legacy").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before_rv,
        "still unchanged"
    );

    // Overwrite takes it over: our label, our spec (the other labels stay: apply merges).
    let overwrite = work_marks(
        "legacy-deployment",
        &[("work.karmada.io/conflict-resolution", "overwrite")],
    );
    let taken = m
        .runtime
        .apply(deployment("shop", "legacy", 2, overwrite))
        .await
        .unwrap();
    assert_eq!(label(&taken, MANAGED), Some("true"));
    assert_eq!(taken["spec"]["replicas"], 2);
    let live = serde_json::to_value(m.deployments("shop").get("legacy").await.unwrap()).unwrap();
    assert_eq!(label(&live, MANAGED), Some("true"));
    assert_eq!(live["spec"]["replicas"], 2);

    // Now Flotilla's, but another Work's: a Work that did not write it is refused.
    let err = m
        .runtime
        .apply(deployment(
            "shop",
            "legacy",
            4,
            work_marks("other-deployment", &[]),
        ))
        .await
        .unwrap_err();
    let RuntimeError::Conflict(message) = &err else {
        panic!("want a conflict, got {err:?}");
    };
    assert!(
        message.contains(&format!(
            "belongs to Work {WORK_NAMESPACE}/legacy-deployment"
        )),
        "{message}"
    );
    let live = m.deployments("shop").get("legacy").await.unwrap();
    assert_eq!(live.spec.unwrap().replicas, Some(2));
    // Its own Work applies again (no overwrite needed any more).
    m.runtime
        .apply(deployment(
            "shop",
            "legacy",
            3,
            work_marks("legacy-deployment", &[]),
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_ours_and_leaves_foreign_objects() {
    let m = Member::start().await;
    let r = ObjectRef::new("apps/v1", "Deployment", "shop", "web");
    let applied = m
        .runtime
        .apply(deployment(
            "shop",
            "web",
            1,
            work_marks("web-deployment", &[]),
        ))
        .await
        .unwrap();
    let deleted = m.runtime.delete(&r).await.unwrap().expect("it existed");
    assert_eq!(deleted["metadata"]["uid"], applied["metadata"]["uid"]);
    let api = m.deployments("shop");
    eventually("the Deployment gone", Duration::from_secs(10), || {
        let api = api.clone();
        async move {
            match api.get_opt("web").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(d) => Err(format!("still there: {:?}", d.metadata.deletion_timestamp)),
            }
        }
    })
    .await;
    let runtime = &m.runtime;
    eventually("get to say it is gone", Duration::from_secs(10), || {
        let r = r.clone();
        async move {
            match runtime.get(&r).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(o) => Err(o.to_string()),
            }
        }
    })
    .await;
    // Gone already is done.
    assert!(m.runtime.delete(&r).await.unwrap().is_none());
    // A kind the member does not serve cannot hold the object.
    let nowhere = ObjectRef::new("nowhere.example.io/v1", "Thing", "shop", "web");
    assert!(m.runtime.delete(&nowhere).await.unwrap().is_none());

    // Someone else's object of the same name is never deleted.
    m.create_foreign("shop", "web", 1).await;
    let err = m.runtime.delete(&r).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Conflict(m) if m.contains("not Flotilla's")),
        "{err:?}"
    );
    assert!(api.get_opt("web").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_resolve_through_discovery_including_new_crds() {
    let m = Member::start().await;
    // Not served (yet): the apply says so.
    let octopus = json!({"apiVersion": "example.io/v1", "kind": "Octopus",
        "metadata": {"name": "paul", "namespace": "sea"}, "spec": {"arms": 8}});
    let err = m.runtime.apply(octopus.clone()).await.unwrap_err();
    assert!(err.to_string().contains("serves no Octopus"), "{err}");

    // A CRD with a plural no rule guesses ("octopi"), installed after the runtime started:
    // a miss refreshes discovery.
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "octopi.example.io"},
        "spec": {
            "group": "example.io",
            "scope": "Namespaced",
            "names": {"plural": "octopi", "singular": "octopus", "kind": "Octopus",
                "listKind": "OctopusList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(m.client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let runtime = &m.runtime;
    let applied = eventually("the Octopus applied", Duration::from_secs(20), || {
        let o = octopus.clone();
        async move { runtime.apply(o).await.map_err(|e| e.to_string()) }
    })
    .await;
    assert_eq!(label(&applied, MANAGED), Some("true"));
    let octopi = ApiResource {
        group: "example.io".into(),
        version: "v1".into(),
        api_version: "example.io/v1".into(),
        kind: "Octopus".into(),
        plural: "octopi".into(),
    };
    let live = Api::<DynamicObject>::namespaced_with(m.client.clone(), "sea", &octopi)
        .get("paul")
        .await
        .unwrap();
    assert_eq!(live.data["spec"]["arms"], 8);

    // A cluster-scoped kind: the manifest's namespace is not used.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "reef", "namespace": "sea"}});
    let applied = m.runtime.apply(ns).await.unwrap();
    assert!(applied["metadata"].get("namespace").is_none(), "{applied}");
    let got = m
        .runtime
        .get(&ObjectRef::new("v1", "Namespace", "", "reef"))
        .await
        .unwrap()
        .expect("the namespace");
    assert_eq!(label(&got, MANAGED), Some("true"));

    // `list` by kind goes to the API.
    let listed = m
        .runtime
        .list(&flotilla_member::ListFilter {
            api_version: "example.io/v1".into(),
            kind: "Octopus".into(),
            namespace: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["metadata"]["name"], "paul");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_reports_version_apis_health_nodes_and_resources() {
    let mut m = Member::start().await;
    // Two nodes, one Ready; their status written as a kubelet would.
    let nodes: Api<Node> = Api::all(m.client.clone());
    for (name, ready, cpu, memory) in [("n1", "True", "4", "8Gi"), ("n2", "False", "2", "4Gi")] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = json!({"status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        }});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    // Pods: one running on n1, one pending (no node), one finished (not counted).
    let pods: Api<Pod> = Api::namespaced(m.client.clone(), "default");
    for (name, node, phase, cpu, memory) in [
        ("running", Some("n1"), "Running", "500m", "1Gi"),
        ("pending", None, "Pending", "1", "256Mi"),
        ("done", Some("n1"), "Succeeded", "2", "2Gi"),
    ] {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
    let version = m.client.apiserver_version().await.unwrap().git_version;
    assert!(!version.is_empty());

    // Quantities as the sim writes them: sums canonical, memory in binary units.
    let want_resources = json!({
        "allocatable": {"cpu": "6", "memory": "12Gi", "pods": "220"},
        "allocated": {"cpu": "500m", "memory": "1Gi", "pods": "1"},
        "allocating": {"cpu": "1", "memory": "256Mi", "pods": "1"},
    });
    let runtime = &m.runtime;
    let summary = eventually(
        "the summary to count the nodes and pods",
        Duration::from_secs(20),
        || async {
            let s = runtime
                .summary()
                .await
                .map_err(|e| flotilla_support::error_chain(&e))?;
            let resources = serde_json::to_value(&s.resource_summary).unwrap();
            let nodes = (s.node_summary.total_num, s.node_summary.ready_num);
            if nodes == (2, 1) && resources == want_resources {
                Ok(s)
            } else {
                Err(format!("nodes {nodes:?}, resources {resources}"))
            }
        },
    )
    .await;
    assert!(summary.healthy);
    assert_eq!(summary.kubernetes_version, version);
    // Enablements: sorted group versions, resources with kinds, no subresources.
    let gvs: Vec<&str> = summary
        .api_enablements
        .iter()
        .map(|e| e.group_version.as_str())
        .collect();
    let mut sorted = gvs.clone();
    sorted.sort_unstable();
    assert_eq!(gvs, sorted);
    let has = |gv: &str, name: &str, kind: &str| {
        summary.api_enablements.iter().any(|e| {
            e.group_version == gv && e.resources.iter().any(|r| r.name == name && r.kind == kind)
        })
    };
    assert!(has("apps/v1", "deployments", "Deployment"), "{gvs:?}");
    assert!(has("v1", "nodes", "Node"));
    assert!(has("v1", "pods", "Pod"));
    assert!(summary
        .api_enablements
        .iter()
        .all(|e| e.resources.iter().all(|r| !r.name.contains('/'))));

    // The member's API server gone: unhealthy (not an error), as Karmada reports an offline
    // cluster.
    let server = m.server.take().unwrap();
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .unwrap();
    let s = m.runtime.summary().await.unwrap();
    assert!(!s.healthy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_with_a_token_and_ca_bundle_reaches_the_member() {
    // How push mode builds its client: the Cluster's apiEndpoint, and the token and caBundle
    // of its secretRef.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let server = tokio::task::spawn_blocking(move || Server::start(&path, &["--no-controllers"]))
        .await
        .unwrap()
        .unwrap();
    let ca = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    let client = client_for_endpoint(&server.url, &server.token, Some(&ca), false).unwrap();
    let runtime = KubeRuntime::new(client, KubeSettings::default()).unwrap();
    let applied = runtime
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}))
        .await
        .unwrap();
    assert_eq!(label(&applied, MANAGED), Some("true"));
    assert!(runtime.summary().await.unwrap().healthy);

    // Without the CA the server's certificate is not trusted; skipping verification works
    // without it; a wrong token is refused.
    let untrusted = client_for_endpoint(&server.url, &server.token, None, false).unwrap();
    assert!(untrusted.apiserver_version().await.is_err());
    let insecure = client_for_endpoint(&server.url, &server.token, None, true).unwrap();
    insecure.apiserver_version().await.unwrap();
    let wrong = client_for_endpoint(&server.url, "not-the-token", Some(&ca), false).unwrap();
    let cms: Api<DynamicObject> = Api::namespaced_with(
        wrong,
        "default",
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    let err = cms.get("settings").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "{err:?}"
    );
    tokio::task::spawn_blocking(move || drop(server))
        .await
        .unwrap();
}
