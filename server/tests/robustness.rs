//! The router under random requests: every kind, every verb, every patch type, the query
//! parameters Flotilla reads (valid and not), hostile names, and bodies made by mutating valid
//! objects. For each request: no panic and no 5xx, every error a `Status` whose code is the
//! HTTP code, and nothing changed in the store outside the request's own object (its
//! collection for creates and collection deletes, and what a delete cascades to).
//!
//! A fixed seed and 3 000 requests run in CI. More on demand:
//! `FLOTILLA_FUZZ_SEED=7 FLOTILLA_FUZZ_CASES=100000 cargo test -p flotilla-server --test robustness`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use common::TestApi;
use flotilla_api::kinds::builtin_resources;
use flotilla_server::store::ListOptions;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One kind the fuzzer aims at, with a valid object of it.
struct Kind {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    namespaced: bool,
    valid: Value,
}

impl Kind {
    fn collection(&self, ns: &str) -> String {
        let gv = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if self.namespaced {
            format!("{gv}/namespaces/{ns}/{}", self.plural)
        } else {
            format!("{gv}/{}", self.plural)
        }
    }

    fn storage(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        format!("{group}/{}", self.plural)
    }
}

fn catalogue() -> Vec<Kind> {
    let meta = |name: &str, ns: bool| {
        if ns {
            json!({"name": name, "namespace": "default", "labels": {"app": "fuzz"}})
        } else {
            json!({"name": name, "labels": {"app": "fuzz"}})
        }
    };
    let placement = json!({"clusterAffinity": {"clusterNames": ["member1", "member2"]},
        "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
            "weightPreference": {"staticWeightList": [{"targetCluster": {"clusterNames": ["member1"]}, "weight": 1}]}},
        "clusterTolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]});
    let resource = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"});
    vec![
        Kind {
            group: "",
            version: "v1",
            plural: "configmaps",
            namespaced: true,
            valid: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("seed", true), "data": {"k": "v"}}),
        },
        Kind {
            group: "",
            version: "v1",
            plural: "secrets",
            namespaced: true,
            valid: json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("seed", true), "type": "Opaque", "data": {"k": "dg=="}}),
        },
        Kind {
            group: "",
            version: "v1",
            plural: "namespaces",
            namespaced: false,
            valid: json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta("seed", false)}),
        },
        Kind {
            group: "apps",
            version: "v1",
            plural: "deployments",
            namespaced: true,
            valid: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("seed", true),
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}}),
        },
        Kind {
            group: "policy.karmada.io",
            version: "v1alpha1",
            plural: "propagationpolicies",
            namespaced: true,
            valid: json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy", "metadata": meta("seed", true),
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "labelSelector": {"matchLabels": {"app": "web"}}}],
                    "placement": placement, "propagateDeps": true,
                    "failover": {"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Gracefully", "gracePeriodSeconds": 60}}}}),
        },
        Kind {
            group: "policy.karmada.io",
            version: "v1alpha1",
            plural: "clusterpropagationpolicies",
            namespaced: false,
            valid: json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterPropagationPolicy", "metadata": meta("seed", false),
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace", "name": "team"}],
                    "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}}}),
        },
        Kind {
            group: "cluster.karmada.io",
            version: "v1alpha1",
            plural: "clusters",
            namespaced: false,
            valid: json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": meta("seed", false),
                "spec": {"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1", "region": "eu", "zones": ["a"],
                    "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
        },
        Kind {
            group: "work.karmada.io",
            version: "v1alpha2",
            plural: "resourcebindings",
            namespaced: true,
            valid: json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding", "metadata": meta("seed", true),
                "spec": {"resource": resource, "replicas": 2, "placement": placement,
                    "clusters": [{"name": "member1", "replicas": 2}]},
                "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "Success", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                    "aggregatedStatus": [{"clusterName": "member1", "applied": true, "health": "Healthy"}]}}),
        },
        Kind {
            group: "work.karmada.io",
            version: "v1alpha2",
            plural: "clusterresourcebindings",
            namespaced: false,
            valid: json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ClusterResourceBinding", "metadata": meta("seed", false),
                "spec": {"resource": {"apiVersion": "v1", "kind": "Namespace", "name": "team"},
                    "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}, "clusters": [{"name": "member1"}]}}),
        },
        Kind {
            group: "work.karmada.io",
            version: "v1alpha1",
            plural: "works",
            namespaced: true,
            valid: json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work", "metadata": meta("seed", true),
                "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2}}]}},
                "status": {"conditions": [{"type": "Applied", "status": "True", "reason": "AppliedSuccessful",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        },
        Kind {
            group: "config.karmada.io",
            version: "v1alpha1",
            plural: "resourceinterpretercustomizations",
            namespaced: false,
            valid: json!({"apiVersion": "config.karmada.io/v1alpha1", "kind": "ResourceInterpreterCustomization", "metadata": meta("seed", false),
                "spec": {"target": {"apiVersion": "example.io/v1", "kind": "Widget"},
                    "customizations": {"healthInterpretation": {"luaScript": "function InterpretHealth(obj) return true end"}}}}),
        },
        Kind {
            group: "apiextensions.k8s.io",
            version: "v1",
            plural: "customresourcedefinitions",
            namespaced: false,
            valid: json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gadgets.example.io"},
                "spec": {"group": "example.io", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}}),
        },
        Kind {
            group: "coordination.k8s.io",
            version: "v1",
            plural: "leases",
            namespaced: true,
            valid: json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("seed", true),
                "spec": {"holderIdentity": "member1", "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}}),
        },
        Kind {
            group: "",
            version: "v1",
            plural: "events",
            namespaced: true,
            valid: json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("seed", true),
                "involvedObject": {"kind": "Deployment", "name": "web", "namespace": "default"},
                "reason": "Fuzz", "message": "m", "type": "Normal"}),
        },
        Kind {
            group: "example.io",
            version: "v1",
            plural: "widgets",
            namespaced: true,
            valid: json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": meta("seed", true),
                "spec": {"size": 3, "nested": {"list": [1, 2, {"a": "b"}]}}, "status": {"ready": true}}),
        },
    ]
}

/// Values a mutation writes.
fn random_value(rng: &mut StdRng) -> Value {
    let deep = (0..40).fold(json!(1), |v, _| json!({ "d": v }));
    let pool = [
        json!(null),
        json!(-1),
        json!(0),
        json!(1.5e308),
        json!(""),
        json!("x"),
        json!("../.."),
        json!("UPPER_case"),
        json!("a".repeat(300)),
        json!([]),
        json!({}),
        json!([1, "a", null]),
        json!({"a": null}),
        json!({"a": 1}),
        json!(true),
        json!(["x"]),
        json!([{"name": "member1"}]),
        deep,
    ];
    pool.choose(rng).cloned().unwrap_or(Value::Null)
}

/// Every JSON pointer in a value.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        _ => {}
    }
}

/// A few random changes to a valid object.
fn mutate(rng: &mut StdRng, mut v: Value) -> Value {
    for _ in 0..rng.gen_range(0..4) {
        let mut ps = Vec::new();
        pointers(&v, String::new(), &mut ps);
        let Some(p) = ps.choose(rng).cloned() else {
            break;
        };
        match rng.gen_range(0..3) {
            0 => {
                if let Some(slot) = v.pointer_mut(&p) {
                    *slot = random_value(rng);
                }
            }
            1 => {
                let (parent, key) = p.rsplit_once('/').unwrap_or(("", ""));
                match v.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.remove(&key.replace("~1", "/").replace("~0", "~"));
                    }
                    Some(Value::Array(a)) if !a.is_empty() => {
                        a.pop();
                    }
                    _ => {}
                }
            }
            _ => {
                if let Some(Value::Object(m)) = v.pointer_mut(&p) {
                    m.insert(format!("unknown{}", rng.gen_range(0..3)), random_value(rng));
                }
            }
        }
    }
    v
}

fn random_name(rng: &mut StdRng) -> String {
    let names = [
        "seed", "seed", "seed", "seed", "seed", "seed", "other", "other", "new1", "new2",
        "missing", "%2F", "%2E%2E", "a%2Fb", "%25", "UPPER", "a%20b", "%FF", "x%00",
    ];
    names.choose(rng).unwrap().to_string()
}

fn random_query(rng: &mut StdRng) -> String {
    let pool: [(&str, &[&str]); 13] = [
        ("dryRun", &["All", "All", "Bogus", ""]),
        ("fieldValidation", &["Strict", "Ignore", "Warn", "Bogus"]),
        (
            "labelSelector",
            &[
                "app=fuzz",
                "app in ()",
                "!!",
                "a in (b",
                "x notin (y)",
                "",
                "app",
            ],
        ),
        (
            "fieldSelector",
            &["metadata.name=seed", "metadata.name", "spec.x=1", "=="],
        ),
        ("limit", &["1", "-1", "x", "0"]),
        ("continue", &["garbage", ""]),
        (
            "propagationPolicy",
            &["Background", "Orphan", "Foreground", "Sideways"],
        ),
        ("gracePeriodSeconds", &["0", "abc", "-5"]),
        ("resourceVersion", &["1", "x", "0", "99999999"]),
        ("resourceVersionMatch", &["NotOlderThan", "Exact", "Bogus"]),
        ("orphanDependents", &["true", "maybe"]),
        ("timeoutSeconds", &["1", "-1"]),
        ("watch", &["false", "0", "yes"]),
    ];
    let mut parts = Vec::new();
    for _ in 0..[0, 0, 0, 1, 1, 2].choose(rng).copied().unwrap_or(0) {
        let (k, values) = pool.choose(rng).unwrap();
        let v = values.choose(rng).unwrap();
        parts.push(format!(
            "{k}={}",
            form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn random_json_patch(rng: &mut StdRng, target: &Value) -> Value {
    let mut ps = vec![
        String::new(),
        "/metadata".into(),
        "/spec/-".into(),
        "/nope/x".into(),
    ];
    pointers(target, String::new(), &mut ps);
    let ops = (0..rng.gen_range(1..5))
        .map(|_| {
            let op = ["add", "remove", "replace", "move", "copy", "test", "bogus"]
                .choose(rng)
                .unwrap();
            let path = ps.choose(rng).unwrap();
            let from = ps.choose(rng).unwrap();
            json!({"op": op, "path": path, "from": from, "value": random_value(rng)})
        })
        .collect();
    Value::Array(ops)
}

/// One random request: method, path, content type and body.
fn random_request(rng: &mut StdRng, kinds: &[Kind]) -> (String, String, Option<String>, String) {
    let kind = kinds.choose(rng).unwrap();
    let ns = ["default", "default", "default", "other", "BAD_NS"]
        .choose(rng)
        .unwrap();
    let name = random_name(rng);
    let collection = kind.collection(ns);
    let object = format!("{collection}/{name}");
    let sub = ["", "", "", "/status", "/scale", "/explain", "/bogus"]
        .choose(rng)
        .unwrap();
    let query = random_query(rng);
    let mut obj = mutate(rng, kind.valid.clone());
    if rng.gen_bool(0.7) {
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("name".into(), json!(name.replace('%', "")));
        }
    }
    let body_json = obj.to_string();
    match rng.gen_range(0..10) {
        0 => (
            "GET".into(),
            format!("{object}{sub}{query}"),
            None,
            String::new(),
        ),
        1 => (
            "GET".into(),
            format!("{collection}{query}"),
            None,
            String::new(),
        ),
        2 => {
            let (ct, body) = if rng.gen_bool(0.2) {
                (
                    "application/yaml".to_string(),
                    serde_yaml_ng::to_string(&obj).unwrap(),
                )
            } else if rng.gen_bool(0.1) {
                let cut = rng.gen_range(0..body_json.len());
                ("application/json".into(), body_json[..cut].to_string())
            } else {
                ("application/json".into(), body_json)
            };
            (
                "POST".into(),
                format!("{collection}{query}"),
                Some(ct),
                body,
            )
        }
        3 => (
            "PUT".into(),
            format!("{object}{sub}{query}"),
            Some("application/json".into()),
            body_json,
        ),
        4..=6 => {
            let (ct, body) = match rng.gen_range(0..4) {
                0 => (
                    "application/merge-patch+json",
                    mutate(rng, json!({"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}}))
                        .to_string(),
                ),
                1 => (
                    "application/json-patch+json",
                    random_json_patch(rng, &kind.valid).to_string(),
                ),
                2 => (
                    "application/strategic-merge-patch+json",
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "$patch": *["delete", "replace", "bogus"].choose(rng).unwrap()}]}},
                        "$retainKeys": ["replicas"], "$setElementOrder/x": [{"name": 1}]}, "metadata": {"finalizers": [random_value(rng)]}})
                        .to_string(),
                ),
                _ => ("application/apply-patch+yaml", body_json),
            };
            (
                "PATCH".into(),
                format!("{object}{sub}{query}"),
                Some(ct.into()),
                body,
            )
        }
        7 => (
            "DELETE".into(),
            format!("{object}{query}"),
            None,
            String::new(),
        ),
        8 => {
            let body = [
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}),
                json!({"propagationPolicy": "Orphan"}),
                json!({"propagationPolicy": 5}),
                json!({"gracePeriodSeconds": "x"}),
                json!({"preconditions": {"uid": "nope"}}),
                json!([1]),
            ]
            .choose(rng)
            .unwrap()
            .to_string();
            let path = if rng.gen_bool(0.5) {
                format!("{collection}{query}")
            } else {
                format!("{object}{query}")
            };
            ("DELETE".into(), path, Some("application/json".into()), body)
        }
        _ => (
            ["POST", "PUT", "HEAD", "OPTIONS", "TRACE"]
                .choose(rng)
                .unwrap()
                .to_string(),
            format!("{object}{sub}"),
            Some("text/plain".into()),
            "x".into(),
        ),
    }
}

/// (storage, namespace, name) -> (resourceVersion, uid, owner uids).
type Snapshot = BTreeMap<(String, String, String), (String, String, Vec<String>)>;

async fn snapshot(api: &TestApi) -> Snapshot {
    let mut rts = builtin_resources();
    rts.push(flotilla_server::kinds::KindRegistry::adhoc(
        "example.io",
        "v1",
        "widgets",
        true,
    ));
    let mut out = Snapshot::new();
    for rt in rts {
        let page = api
            .store
            .list(&rt, None, &ListOptions::default())
            .await
            .unwrap();
        for item in page.items {
            let s = |p: &str| {
                item.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let owners = item
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|o| o["uid"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            out.insert(
                (
                    rt.storage_name(),
                    s("/metadata/namespace"),
                    s("/metadata/name"),
                ),
                (s("/metadata/resourceVersion"), s("/metadata/uid"), owners),
            );
        }
    }
    out
}

/// What a request may change: its object, or its collection for creates and collection
/// deletes; plus, for deletes, what cascades (dependents by owner uid, a namespace's objects).
fn allowed(
    before: &Snapshot,
    changed: &BTreeSet<(String, String, String)>,
    kinds: &[Kind],
    method: &str,
    path: &str,
) -> Option<(String, String, String)> {
    let path = path.split('?').next().unwrap_or("");
    for key in changed {
        let (storage, ns, name) = key;
        let kind = kinds.iter().find(|k| &k.storage() == storage);
        let Some(kind) = kind else {
            return Some(key.clone());
        };
        let collection = kind.collection(ns);
        let own = path == format!("{collection}/{name}")
            || path.starts_with(&format!("{collection}/{name}/"))
            || ((method == "POST" || method == "DELETE") && path == collection)
            || (method == "DELETE"
                && kind.namespaced
                && path.ends_with(&format!("/{}", kind.plural))
                && !path.contains("/namespaces/"));
        // A server-side apply creates the object it names.
        let applied = method == "PATCH" && path == format!("{collection}/{name}");
        let cascaded = before.get(key).is_some_and(|(_, _, owners)| {
            owners.iter().any(|o| {
                changed
                    .iter()
                    .any(|c| c != key && before.get(c).is_some_and(|(_, uid, _)| uid == o))
            })
        }) || (method == "DELETE"
            && changed
                .iter()
                .any(|c| c.0 == "core/namespaces" && c.2 == *ns && !ns.is_empty()));
        if !(own || applied || cascaded) {
            return Some(key.clone());
        }
    }
    None
}

#[tokio::test]
async fn random_requests_never_panic_answer_status_and_touch_only_their_object() {
    let seed: u64 = std::env::var("FLOTILLA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0F10_711A);
    let cases: usize = std::env::var("FLOTILLA_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let api = TestApi::new().await;
    let kinds = catalogue();
    for kind in &kinds {
        for name in ["seed", "other"] {
            let mut obj = kind.valid.clone();
            obj["metadata"]["name"] = json!(name);
            if kind.plural == "customresourcedefinitions" {
                continue;
            }
            let (code, body) = api
                .call("POST", &kind.collection("default"), Some(obj))
                .await;
            assert_eq!(code, 201, "seeding {}: {body}", kind.plural);
        }
    }
    let crd = kinds
        .iter()
        .find(|k| k.plural == "customresourcedefinitions")
        .unwrap();
    let (code, body) = api
        .call("POST", &crd.collection(""), Some(crd.valid.clone()))
        .await;
    assert_eq!(code, 201, "{body}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    let mut before = snapshot(&api).await;
    for case in 0..cases {
        let (method, path, ct, body) = random_request(&mut rng, &kinds);
        let rv = api.store.current_resource_version().await.unwrap();
        let (status, text) = api
            .send(&method, &path, ct.as_deref(), Body::from(body.clone()), &[])
            .await;
        let what = format!("seed {seed} case {case}: {method} {path} ({ct:?}) {body}");
        *codes.entry(status.as_u16()).or_default() += 1;
        assert!(
            !status.is_server_error(),
            "{what} answered {status}: {text}"
        );
        // A HEAD answer has no body, by HTTP's rules.
        if !status.is_success() && method != "HEAD" {
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{what}: {status} is no Status: {text:?}"));
            assert_eq!(v["kind"], "Status", "{what}: {text}");
            assert_eq!(v["code"], status.as_u16(), "{what}: {text}");
            assert!(status.is_client_error(), "{what}: {status}");
        }
        if api.store.current_resource_version().await.unwrap() == rv {
            continue;
        }
        let after = snapshot(&api).await;
        let changed: BTreeSet<_> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k).map(|v| &v.0) != after.get(*k).map(|v| &v.0))
            .cloned()
            .collect();
        if !status.is_success() {
            assert!(
                changed.is_empty(),
                "{what} failed ({status}) but changed {changed:?}"
            );
        }
        if let Some(key) = allowed(&before, &changed, &kinds, &method, &path) {
            panic!("{what} changed {key:?}, outside its own object");
        }
        before = after;
    }
    eprintln!("answers by code: {codes:?}");
    // The mix must reach both outcomes, or the generator tests nothing.
    let ok: usize = codes
        .iter()
        .filter(|(c, _)| **c < 300)
        .map(|(_, n)| n)
        .sum();
    let refused: usize = codes
        .iter()
        .filter(|(c, _)| **c >= 400)
        .map(|(_, n)| n)
        .sum();
    assert!(ok > cases / 20 && refused > cases / 5, "{codes:?}");
}
