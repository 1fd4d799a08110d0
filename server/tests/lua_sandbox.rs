//! Hostile ResourceInterpreterCustomizations through the product path: the server runs in
//! process (memory store, every controller, plain HTTP on 127.0.0.1 port 0) with two Ready pull
//! members written through the API, and the customizations, templates and policy go in as a
//! user's would. A script that loops forever (at call or at load) is stopped and reported as an
//! Event naming the customization and the error, while templates of other kinds are still
//! propagated; a benign script's replica count is what the binding carries; once the hostile
//! customization is fixed, its kind is propagated too. A replica revision script that fails
//! sends no Work at all (never the template's full count) and is reported once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_server::app::{
    self, ControllerSettings, ServerConfig, ServerHandle, StoreBackend, Tls,
};
use flotilla_server::testing::eventually;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const CUSTOMIZATIONS: &str = "/apis/config.karmada.io/v1alpha1/resourceinterpretercustomizations";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const BINDINGS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const GROUP_VERSION: &str = "example.io/v1";
const KINDS: [(&str, &str); 3] = [
    ("Widget", "widgets"),
    ("Gadget", "gadgets"),
    ("Gizmo", "gizmos"),
];

struct Api {
    server: ServerHandle,
    client: reqwest::Client,
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.server.url()))
            .bearer_auth(&self.server.admin_token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn create(&self, path: &str, body: Value) -> Value {
        let (code, out) = self.call("POST", path, Some(&body)).await;
        assert_eq!(code, 201, "POST {path}: {out}");
        out
    }

    async fn get(&self, path: &str) -> Option<Value> {
        match self.call("GET", path, None).await {
            (200, v) => Some(v),
            _ => None,
        }
    }
}

/// How long a test waits for the server to do something.
const WAIT: Duration = Duration::from_secs(60);

/// A server with every controller and a resync short enough that templates are looked at
/// again within the test's deadlines.
async fn start() -> (Api, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store_backend = StoreBackend::Memory;
    config.tls = Tls::Plain;
    let mut settings = ControllerSettings {
        resync: Duration::from_secs(2),
        scheduler_resync: Duration::from_secs(2),
        ..ControllerSettings::default()
    };
    // The members below post no heartbeats: keep them Ready for the whole test.
    settings.health.grace.monitor = std::time::Duration::from_secs(600);
    settings.health.grace.startup = std::time::Duration::from_secs(600);
    config.controllers = Some(settings);
    let server = app::start(config).await.unwrap();
    let api = Api {
        server,
        client: reqwest::Client::new(),
    };
    (api, dir)
}

/// A pull member that serves the example kinds and says it is Ready.
async fn ready_member(api: &Api, name: &str) {
    api.create(
        CLUSTERS,
        json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
               "metadata": {"name": name}, "spec": {"syncMode": "Pull"}}),
    )
    .await;
    let resources: Vec<Value> = KINDS
        .iter()
        .map(|(kind, plural)| json!({"name": plural, "kind": kind}))
        .collect();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({
        "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                        "message": "cluster is healthy and ready to accept workloads",
                        "lastTransitionTime": now}],
        "apiEnablements": [{"groupVersion": GROUP_VERSION, "resources": resources}],
    });
    let path = format!("{CLUSTERS}/{name}");
    // The taint controller writes the new member too: read, write, and again on a conflict.
    eventually(&format!("{name}'s status written"), WAIT, || async {
        let mut cluster = api.get(&path).await?;
        cluster["status"] = status.clone();
        let (code, body) = api
            .call("PUT", &format!("{path}/status"), Some(&cluster))
            .await;
        assert!(code == 200 || code == 409, "{body}");
        (code == 200).then_some(())
    })
    .await;
}

fn customization(name: &str, kind: &str, replica_script: &str) -> Value {
    json!({"apiVersion": "config.karmada.io/v1alpha1", "kind": "ResourceInterpreterCustomization",
           "metadata": {"name": name},
           "spec": {"target": {"apiVersion": GROUP_VERSION, "kind": kind},
                    "customizations": {"replicaResource": {"luaScript": replica_script}}}})
}

async fn template(api: &Api, kind: &str, plural: &str, name: &str, size: i64) {
    api.create(
        &format!("/apis/{GROUP_VERSION}/namespaces/default/{plural}"),
        json!({"apiVersion": GROUP_VERSION, "kind": kind,
               "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}}),
    )
    .await;
}

/// The binding of a template once it is scheduled to both members with a Work on each.
async fn propagated(api: &Api, binding: &str) -> Option<Value> {
    let b = api.get(&format!("{BINDINGS}/{binding}")).await?;
    let clusters = b["spec"]["clusters"].as_array()?;
    if clusters.len() != 2 {
        return None;
    }
    for member in ["member1", "member2"] {
        let works = api
            .get(&format!(
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{member}/works"
            ))
            .await?;
        let has = works["items"]
            .as_array()?
            .iter()
            .any(|w| w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == binding);
        if !has {
            return None;
        }
    }
    Some(b)
}

/// The first Event about `kind`/`name` with `reason`.
async fn event(api: &Api, kind: &str, name: &str, reason: &str) -> Option<Value> {
    let events = api.get(EVENTS).await?;
    events["items"]
        .as_array()?
        .iter()
        .find(|e| {
            e["involvedObject"]["kind"] == kind
                && e["involvedObject"]["name"] == name
                && e["reason"] == reason
        })
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_replica_scripts_are_stopped_reported_and_propagation_goes_on() {
    let started = Instant::now();
    let (api, _dir) = start().await;
    ready_member(&api, "member1").await;
    ready_member(&api, "member2").await;

    // Widget: loops forever when asked for replicas. Gadget: benign. Gizmo: loops forever
    // as soon as it is loaded.
    let looping = "function GetReplicas(obj)\n  while true do end\nend";
    api.create(
        CUSTOMIZATIONS,
        customization("widget-replicas", "Widget", looping),
    )
    .await;
    api.create(
        CUSTOMIZATIONS,
        customization(
            "gadget-replicas",
            "Gadget",
            "function GetReplicas(obj)\n  return obj.spec.size * 2, {resourceRequest = {cpu = '250m'}}\nend",
        ),
    )
    .await;
    api.create(
        CUSTOMIZATIONS,
        customization(
            "gizmo-replicas",
            "Gizmo",
            "while true do end\nfunction GetReplicas(obj) return 1 end",
        ),
    )
    .await;
    for (kind, plural) in KINDS {
        template(&api, kind, plural, &format!("{}1", kind.to_lowercase()), 3).await;
    }
    let selectors: Vec<Value> = KINDS
        .iter()
        .map(|(kind, _)| json!({"apiVersion": GROUP_VERSION, "kind": kind}))
        .collect();
    api.create(
        "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
               "metadata": {"name": "examples", "namespace": "default"},
               "spec": {"resourceSelectors": selectors,
                        "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}}}}),
    )
    .await;

    // The benign script really runs: its replica count and requirements are on the binding,
    // and the Gadget reaches both members.
    let gadget = eventually(
        "gadget1 propagated with the script's 6 replicas",
        WAIT,
        || async {
            let b = propagated(&api, "gadget1-gadget").await?;
            (b["spec"]["replicas"] == 6).then_some(b)
        },
    )
    .await;
    assert_eq!(
        gadget["spec"]["replicaRequirements"]["resourceRequest"]["cpu"], "250m",
        "{gadget}"
    );

    // The looping replica script is stopped and reported on the template, naming the
    // customization and the budget it ran past.
    let stopped = eventually("an ApplyPolicyFailed Event on widget1", WAIT, || {
        event(&api, "Widget", "widget1", "ApplyPolicyFailed")
    })
    .await;
    let message = stopped["message"].as_str().unwrap();
    assert_eq!(stopped["type"], "Warning");
    for part in [
        "Apply policy(default/examples) failed",
        "GetReplicas of ResourceInterpreterCustomization widget-replicas for example.io/v1 Widget failed",
        "time budget",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    // No binding was written from a failed interpretation (zero replicas would have scaled the
    // members down).
    assert_eq!(
        api.call("GET", &format!("{BINDINGS}/widget1-widget"), None)
            .await
            .0,
        404
    );

    // The script that loops at load time is stopped when the customization is loaded and
    // reported on the customization; its kind falls back to no replica rule and still goes out.
    let invalid = eventually(
        "a CustomizationInvalid Event on gizmo-replicas",
        WAIT,
        || {
            event(
                &api,
                "ResourceInterpreterCustomization",
                "gizmo-replicas",
                "CustomizationInvalid",
            )
        },
    )
    .await;
    let message = invalid["message"].as_str().unwrap();
    for part in [
        "gizmo-replicas",
        "spec.customizations.replicaResource",
        "time budget",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    eventually("gizmo1 propagated without a replica rule", WAIT, || {
        propagated(&api, "gizmo1-gizmo")
    })
    .await;

    // Fixed, the Widget customization is used and the Widget goes out with its replicas.
    let path = format!("{CUSTOMIZATIONS}/widget-replicas");
    let mut fixed = api.get(&path).await.unwrap();
    fixed["spec"]["customizations"]["replicaResource"]["luaScript"] =
        json!("function GetReplicas(obj)\n  return obj.spec.size\nend");
    let (code, body) = api.call("PUT", &path, Some(&fixed)).await;
    assert_eq!(code, 200, "{body}");
    eventually(
        "widget1 propagated with 3 replicas once fixed",
        WAIT,
        || async {
            let b = propagated(&api, "widget1-widget").await?;
            (b["spec"]["replicas"] == 3).then_some(())
        },
    )
    .await;

    // The API answered throughout; a hostile script costs at most its budget per call.
    assert!(started.elapsed() < Duration::from_secs(60));
    api.server.shutdown().await.unwrap();
}

/// The Works of `binding` as (cluster, spec.size of the manifest).
async fn work_sizes(api: &Api, binding: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for member in ["member1", "member2"] {
        let Some(works) = api
            .get(&format!(
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{member}/works"
            ))
            .await
        else {
            continue;
        };
        for w in works["items"].as_array().cloned().unwrap_or_default() {
            if w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == binding {
                let size = w["spec"]["workload"]["manifests"][0]["spec"]["size"].clone();
                out.push((member.to_string(), size));
            }
        }
    }
    out
}

/// A replicaRevision script that fails never sends the template's full count to a member: the
/// cluster gets no Work, the binding and the template one SyncWorkFailed Event each naming the
/// error (not one per retry), and once the script is fixed each member gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_replica_revision_sends_no_full_size_manifest() {
    let (api, _dir) = start().await;
    ready_member(&api, "member1").await;
    ready_member(&api, "member2").await;
    let mut rules = customization(
        "gadget-rules",
        "Gadget",
        "function GetReplicas(obj)\n  return obj.spec.size\nend",
    );
    rules["spec"]["customizations"]["replicaRevision"] = json!({"luaScript": "function ReviseReplica(obj, desired)\n  error('no revision today')\nend"});
    api.create(CUSTOMIZATIONS, rules).await;
    template(&api, "Gadget", "gadgets", "gadget1", 4).await;
    api.create(
        "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
               "metadata": {"name": "gadgets", "namespace": "default"},
               "spec": {"resourceSelectors": [{"apiVersion": GROUP_VERSION, "kind": "Gadget"}],
                        "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]},
                                      "replicaScheduling": {"replicaSchedulingType": "Divided",
                                                            "replicaDivisionPreference": "Weighted",
                                                            "weightPreference": {"staticWeightList": [
                                                                {"targetCluster": {"clusterNames": ["member1"]}, "weight": 1},
                                                                {"targetCluster": {"clusterNames": ["member2"]}, "weight": 1}]}}}}}),
    )
    .await;
    for (kind, name) in [("ResourceBinding", "gadget1-gadget"), ("Gadget", "gadget1")] {
        let failed = eventually(
            &format!("a SyncWorkFailed Event on the {kind}"),
            WAIT,
            || event(&api, kind, name, "SyncWorkFailed"),
        )
        .await;
        let message = failed["message"].as_str().unwrap();
        assert!(message.contains("no revision today"), "{kind}: {message}");
        assert_eq!(failed["type"], "Warning", "{kind}");
    }
    // The binding is retried (a resync passes every 2 s) and still no Work goes out, and the
    // failure is reported once.
    let b = api
        .get(&format!("{BINDINGS}/gadget1-gadget"))
        .await
        .unwrap();
    assert!(
        b["spec"]["clusters"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "{b}"
    );
    assert!(work_sizes(&api, "gadget1-gadget").await.is_empty());

    // Fixed, the members get their shares (never the full 4 each).
    let path = format!("{CUSTOMIZATIONS}/gadget-rules");
    let mut fixed = api.get(&path).await.unwrap();
    fixed["spec"]["customizations"]["replicaRevision"]["luaScript"] =
        json!("function ReviseReplica(obj, desired)\n  obj.spec.size = desired\n  return obj\nend");
    let (code, body) = api.call("PUT", &path, Some(&fixed)).await;
    assert_eq!(code, 200, "{body}");
    // Both Works: the two members' Works are written one after the other.
    let sizes = eventually("a Work on each member", WAIT, || async {
        let sizes = work_sizes(&api, "gadget1-gadget").await;
        (sizes.len() == 2).then_some(sizes)
    })
    .await;
    assert_eq!(
        sizes,
        [
            ("member1".to_string(), json!(2)),
            ("member2".to_string(), json!(2))
        ]
    );
    // One Event per object and failure, not one per retry: a retry that fails the same way
    // adds none. (A pass that saw the binding placed on one member only fails with another
    // message, which is a failure of its own.)
    let events = api.get(EVENTS).await.unwrap();
    let mut reported: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in events["items"].as_array().unwrap() {
        if e["reason"] == "SyncWorkFailed" {
            let kind = e["involvedObject"]["kind"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let message = e["message"].as_str().unwrap_or("").to_string();
            *reported.entry((kind, message)).or_default() += 1;
        }
    }
    assert!(
        reported.values().all(|n| *n == 1),
        "one Event per object and failure, not one per retry: {reported:?}"
    );
    for kind in ["ResourceBinding", "Gadget"] {
        assert!(
            reported.keys().any(|(k, _)| k == kind),
            "no SyncWorkFailed on the {kind}: {reported:?}"
        );
    }
    api.server.shutdown().await.unwrap();
}
