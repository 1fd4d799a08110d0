//! kube-rs (kube 5 and kube-runtime) against a real `flotilla-server` process, as a Rust user or
//! the kube member runtime talks to it: a watcher whose resourceVersion expired relists; a
//! quiet watcher's bookmarks keep it inside the event log; a streaming-list reflector fills and
//! follows; a kube-runtime `Recorder`'s Event (events.k8s.io/v1) is listed by
//! `kubectl get events`; with `--no-controllers` the server is a member cluster's API (Nodes
//! and their status, Namespaces with their phase, a Deployment left as written).
//!
//! Every wait polls with a deadline; everything runs on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{require_kubectl, ApiClient, Kubectl, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, ObjectReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::WatchEvent;
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, Config, ResourceExt};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest any wait of these tests lasts.
const PATIENCE: Duration = Duration::from_secs(60);

/// A runtime for one test (the test functions themselves are plain `#[test]`s, as the other
/// end-to-end tests).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A kube client from the kubeconfig the server wrote (its token and self-signed CA).
async fn client(server: &Server) -> Client {
    let kubeconfig = Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Looks at `f` every 100 ms until it answers `Some`, and returns the value; panics naming
/// `what` once `deadline` has passed.
async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "waited {deadline:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

/// What a kube-runtime watcher yielded, as a test reads it.
#[derive(Default)]
struct Seen {
    /// `Init` events: 1 for the first list, one more per relist.
    inits: usize,
    /// `InitDone` events.
    init_dones: usize,
    /// Names of the objects applied (listed or watched).
    applied: Vec<String>,
    /// The watcher's errors, as text.
    errors: Vec<String>,
}

/// Runs a kube-runtime watcher in the background, recording what it yields.
fn record<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Send + 'static,
{
    let seen = Arc::new(Mutex::new(Seen::default()));
    let writer = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let mut s = writer.lock().unwrap();
            match item {
                Ok(watcher::Event::Init) => s.inits += 1,
                Ok(watcher::Event::InitDone) => s.init_dones += 1,
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                    s.applied.push(o.meta().name.clone().unwrap_or_default())
                }
                Ok(watcher::Event::Delete(_)) => {}
                Err(e) => s.errors.push(e.to_string()),
            }
        }
    });
    (seen, task)
}

#[test]
fn an_expired_watch_relists_and_sees_the_next_change() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--store",
            "memory",
            "--event-log-capacity",
            "10",
            "--no-controllers",
        ],
    )
    .unwrap();
    runtime().block_on(async {
        let client = client(&server).await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        cms.create(
            &PostParams::default(),
            &config_map("watched-0", json!({"app": "watched"})),
        )
        .await
        .unwrap();
        // One-second watches: each ends before a bookmark is due, so the watcher resumes from
        // the resourceVersion of its list, which the writes below push out of the event log.
        let config = watcher::Config::default().labels("app=watched").timeout(1);
        let (seen, task) = record(watcher(cms.clone(), config).default_backoff());
        eventually("the first list", PATIENCE, || async {
            let s = seen.lock().unwrap();
            (s.init_dones == 1 && s.applied.contains(&"watched-0".to_string())).then_some(())
        })
        .await;
        // Three times the event log, none of them what the watcher selects.
        for i in 0..30 {
            cms.create(
                &PostParams::default(),
                &config_map(&format!("other-{i}"), json!({})),
            )
            .await
            .unwrap();
        }
        eventually("a relist after the 410", PATIENCE, || async {
            let s = seen.lock().unwrap();
            (s.inits >= 2 && s.init_dones >= 2).then_some(())
        })
        .await;
        {
            let s = seen.lock().unwrap();
            assert!(
                s.errors
                    .iter()
                    .any(|e| e.contains("410") || e.contains("Expired") || e.contains("too old")),
                "the watcher was told in the stream that its version expired: {:?}",
                s.errors
            );
        }
        cms.create(
            &PostParams::default(),
            &config_map("watched-1", json!({"app": "watched"})),
        )
        .await
        .unwrap();
        eventually("the change after the relist", PATIENCE, || async {
            seen.lock()
                .unwrap()
                .applied
                .contains(&"watched-1".to_string())
                .then_some(())
        })
        .await;
        task.abort();
    });
}

#[test]
fn a_quiet_watchers_bookmarks_keep_it_inside_the_event_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--store",
            "memory",
            "--event-log-capacity",
            "50",
            "--no-controllers",
        ],
    )
    .unwrap();
    runtime().block_on(async {
        let client = client(&server).await;
        let nodes: Api<Node> = Api::all(client.clone());
        // Three-second watches: each has a bookmark a second in (kube-apiserver's "two seconds
        // before the timeout"), and the watcher resumes from it.
        let config = watcher::Config::default().timeout(3);
        let (seen, task) = record(watcher(nodes.clone(), config).default_backoff());
        eventually("the first list", PATIENCE, || async {
            (seen.lock().unwrap().init_dones == 1).then_some(())
        })
        .await;
        // 150 writes to another kind (three times the event log), ten a second: fewer than the
        // log holds pass between a bookmark and the watch resumed from it.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        for burst in 0..15 {
            for i in 0..10 {
                cms.create(
                    &PostParams::default(),
                    &config_map(&format!("noise-{burst}-{i}"), json!({})),
                )
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "quiet-1"}}))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        eventually("the new Node", PATIENCE, || async {
            seen.lock()
                .unwrap()
                .applied
                .contains(&"quiet-1".to_string())
                .then_some(())
        })
        .await;
        {
            let s = seen.lock().unwrap();
            assert_eq!(
                (s.inits, s.init_dones),
                (1, 1),
                "the watcher never relisted: {:?}",
                s.errors
            );
            assert!(s.errors.is_empty(), "{:?}", s.errors);
        }
        task.abort();

        // The bookmarks themselves: a watch of the quiet kind is told the store's position.
        let list = nodes.list(&ListParams::default()).await.unwrap();
        let listed: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
        let wp = WatchParams::default().timeout(3);
        let mut stream = nodes.watch(&wp, &listed.to_string()).await.unwrap().boxed();
        for i in 0..5 {
            cms.create(
                &PostParams::default(),
                &config_map(&format!("late-{i}"), json!({})),
            )
            .await
            .unwrap();
        }
        let last_write: u64 = cms
            .get("late-4")
            .await
            .unwrap()
            .resource_version()
            .unwrap()
            .parse()
            .unwrap();
        let bookmark = tokio::time::timeout(PATIENCE, async {
            while let Some(event) = stream.try_next().await.unwrap() {
                if let WatchEvent::Bookmark(b) = event {
                    return b.metadata.resource_version.parse::<u64>().unwrap();
                }
            }
            panic!("the watch ended without a bookmark");
        })
        .await
        .expect("a bookmark before the timeout");
        assert!(
            bookmark >= last_write && last_write > listed,
            "bookmark {bookmark}, list {listed}, last write {last_write}"
        );
    });
}

#[test]
fn a_streaming_list_reflector_fills_and_follows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--store", "memory", "--no-controllers"]).unwrap();
    runtime().block_on(async {
        let client = client(&server).await;
        let nss: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stream"}}))
        .unwrap();
        nss.create(&PostParams::default(), &ns).await.unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "stream");
        for i in 0..3 {
            cms.create(
                &PostParams::default(),
                &config_map(&format!("cm-{i}"), json!({})),
            )
            .await
            .unwrap();
        }
        let (reader, writer) = reflector::store::<ConfigMap>();
        let stream = reflector(
            writer,
            watcher(cms.clone(), watcher::Config::default().streaming_lists()),
        )
        .default_backoff();
        let (seen, task) = record(stream);
        tokio::time::timeout(PATIENCE, reader.wait_until_ready())
            .await
            .expect("the store fills (the initial events end with their bookmark)")
            .unwrap();
        let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
        names.sort();
        assert_eq!(names, ["cm-0", "cm-1", "cm-2"]);
        cms.create(&PostParams::default(), &config_map("cm-3", json!({})))
            .await
            .unwrap();
        cms.patch(
            "cm-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .unwrap();
        cms.delete("cm-1", &DeleteParams::default()).await.unwrap();
        eventually("the live changes in the store", PATIENCE, || async {
            let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
            names.sort();
            let changed = reader.state().iter().any(|c| {
                c.name_any() == "cm-0"
                    && c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str)
                        == Some("changed")
            });
            (names == ["cm-0", "cm-2", "cm-3"] && changed).then_some(())
        })
        .await;
        {
            let s = seen.lock().unwrap();
            assert_eq!(s.inits, 1, "one streaming list, no relist: {:?}", s.errors);
        }
        task.abort();
    });
}

#[test]
fn a_recorders_event_is_listed_by_kubectl_get_events() {
    require_kubectl();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--store", "memory", "--no-controllers"]).unwrap();
    let kubectl = Kubectl::new(&server).unwrap();
    runtime().block_on(async {
        let client = client(&server).await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm = cms
            .create(&PostParams::default(), &config_map("recorded", json!({})))
            .await
            .unwrap();
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: cm.metadata.name.clone(),
            namespace: cm.metadata.namespace.clone(),
            uid: cm.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "flotilla-test".into(),
                instance: Some("flotilla-test-0".into()),
            },
        );
        let event = RecordedEvent {
            type_: EventType::Warning,
            reason: "Tested".into(),
            note: Some("published by kube-runtime".into()),
            action: "Test".into(),
            secondary: None,
        };
        recorder.publish(&event, &reference).await.unwrap();
        // The same again: the Recorder patches the Event's series.
        recorder.publish(&event, &reference).await.unwrap();
        // Through events.k8s.io/v1, as the Recorder wrote it.
        let v1: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "default");
        let listed = v1.list(&ListParams::default()).await.unwrap();
        let ours = listed
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some("Tested"))
            .expect("the Event through events.k8s.io/v1");
        assert_eq!(ours.note.as_deref(), Some("published by kube-runtime"));
        assert_eq!(ours.reporting_controller.as_deref(), Some("flotilla-test"));
        assert_eq!(ours.series.as_ref().map(|s| s.count), Some(2));
        assert_eq!(
            ours.regarding.as_ref().and_then(|r| r.name.as_deref()),
            Some("recorded")
        );
    });
    // Through core/v1, as kubectl reads Events.
    let table = kubectl.run(&["get", "events", "-n", "default"]).unwrap();
    let row = table
        .lines()
        .find(|l| l.contains("Tested"))
        .unwrap_or_else(|| panic!("kubectl get events lists the Recorder's Event:\n{table}"));
    assert!(
        row.contains("Warning") && row.contains("configmap/recorded"),
        "{row}"
    );
    assert!(row.contains("published by kube-runtime"), "{row}");
    let json_out = kubectl
        .run(&["get", "events", "-n", "default", "-o", "json"])
        .unwrap();
    let list: Value = serde_json::from_str(&json_out).unwrap();
    let core = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "Tested")
        .expect("the Event through core/v1");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "published by kube-runtime");
    assert_eq!(core["involvedObject"]["name"], "recorded");
    assert_eq!(core["reportingComponent"], "flotilla-test");
    assert_eq!(core["reportingInstance"], "flotilla-test-0");
    assert_eq!(core["series"]["count"], 2);
}

#[test]
fn without_controllers_the_server_is_a_member_clusters_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--store", "memory", "--no-controllers"]).unwrap();
    runtime().block_on(async {
        let client = client(&server).await;
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.major, "1");
        let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
        for (group, kind) in [("", "Node"), ("", "Namespace"), ("apps", "Deployment"), ("events.k8s.io", "Event")] {
            let found = discovery
                .get(group)
                .is_some_and(|g| g.recommended_resources().iter().any(|(ar, _)| ar.kind == kind));
            assert!(found, "discovery serves {group}/{kind}");
        }

        // Nodes, and their status written as envtest tests write it.
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "worker-1", "labels": {"node-role.kubernetes.io/worker": ""}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = json!({"status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0"},
        }});
        nodes
            .patch_status("worker-1", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let read = nodes.get("worker-1").await.unwrap();
        let st = read.status.unwrap();
        assert_eq!(st.allocatable.unwrap()["cpu"].0, "4");
        assert_eq!(st.conditions.unwrap()[0].status, "True");
        // A write of the main resource keeps the status (a status subresource).
        nodes
            .patch(
                "worker-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}, "status": {"allocatable": {"cpu": "1"}}})),
            )
            .await
            .unwrap();
        let read = nodes.get("worker-1").await.unwrap();
        assert_eq!(read.status.unwrap().allocatable.unwrap()["cpu"].0, "4");
        assert_eq!(read.spec.unwrap().unschedulable, Some(true));

        // Namespaces carry their phase.
        let nss: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}))
        .unwrap();
        let created = nss.create(&PostParams::default(), &ns).await.unwrap();
        assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
        let listed = nss.list(&ListParams::default()).await.unwrap();
        assert!(listed
            .items
            .iter()
            .all(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active")));

        // Metadata only, as kube's list_metadata asks.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "apps");
        for i in 0..3 {
            cms.create(&PostParams::default(), &config_map(&format!("m-{i}"), json!({})))
                .await
                .unwrap();
        }
        let meta = cms.list_metadata(&ListParams::default()).await.unwrap();
        assert_eq!(meta.items.len(), 3);
        assert_eq!(meta.items[0].types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));
        // A page cut by a limit says how many follow, as kube-apiserver's does.
        let page = cms.list(&ListParams::default().limit(1)).await.unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.metadata.remaining_item_count, Some(2));
        assert!(page.metadata.continue_.is_some());

        // A Deployment (server-side apply, then its status) stays as written: no controller
        // claims it, binds it or writes a Work.
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "apps");
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        });
        let applied = deployments
            .patch("web", &PatchParams::apply("flotilla-test"), &Patch::Apply(&deployment))
            .await
            .unwrap();
        let policy = json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                     "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}},
        });
        let policies: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            "apps",
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
                "propagationpolicies",
            ),
        );
        policies
            .create(&PostParams::default(), &serde_json::from_value(policy).unwrap())
            .await
            .unwrap();
        let status = json!({"status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                                       "availableReplicas": 2, "updatedReplicas": 2}});
        deployments
            .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let read = deployments.get("web").await.unwrap();
        assert_eq!(read.metadata.generation, applied.metadata.generation);
        assert_eq!(read.metadata.labels, applied.metadata.labels);
        assert_eq!(read.status.unwrap().available_replicas, Some(2));
    });
    // No controller runs at all: none registered its metrics (with controllers, each one's
    // queue depth is there from its start). So nothing bound the Deployment or wrote a Work.
    let (code, metrics) = get_text(&server, "/metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("flotilla_apiserver_requests_total"));
    assert!(
        !metrics.contains("flotilla_controller_"),
        "a controller runs under --no-controllers"
    );
    let api = ApiClient::admin(&server).unwrap();
    let bindings = api
        .get("/apis/work.karmada.io/v1alpha2/namespaces/apps/resourcebindings")
        .unwrap();
    assert_eq!(bindings["items"], json!([]));
    let works = api.get("/apis/work.karmada.io/v1alpha1/works").unwrap();
    assert_eq!(works["items"], json!([]));
    for path in ["/readyz", "/healthz", "/livez"] {
        assert_eq!(get_text(&server, path), (200, "ok".to_string()), "{path}");
    }
}

/// A GET of the server's own paths (health, metrics), answered as text.
fn get_text(server: &Server, path: &str) -> (u16, String) {
    let ca = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    let http = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let resp = http
        .get(format!("{}{path}", server.url))
        .bearer_auth(&server.token)
        .send()
        .unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}
