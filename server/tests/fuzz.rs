//! Thousands of malformed or invalid bodies: every answer is a 4xx `Status`, never a 5xx, and
//! the store is exactly as it was before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use common::TestApi;
use flotilla_server::store::ListOptions;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const PP: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const RB: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";

fn valid_policy() -> Value {
    json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "keep", "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["member1"]},
                               "replicaScheduling": {"replicaSchedulingType": "Divided",
                                   "weightPreference": {"staticWeightList": [{"targetCluster": {"clusterNames": ["member1"]}, "weight": 1}]}},
                               "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}]},
                 "failover": {"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Never"}}}})
}

fn valid_cluster() -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "keep"}, "spec": {"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1",
        "taints": [{"key": "a", "effect": "NoSchedule"}]}})
}

/// Every (pointer, wrong value) that makes the valid policy undecodable or invalid.
fn policy_breakers() -> Vec<(&'static str, Value)> {
    vec![
        ("/metadata", json!("x")),
        ("/metadata/name", json!(7)),
        ("/metadata/name", json!("UPPER_case")),
        ("/metadata/name", json!("")),
        ("/metadata/labels", json!(["a"])),
        ("/metadata/labels", json!({"a": 1})),
        ("/metadata/finalizers", json!("x")),
        ("/spec", json!([])),
        ("/spec/resourceSelectors", json!("x")),
        ("/spec/resourceSelectors", json!([])),
        ("/spec/resourceSelectors/0/kind", json!("")),
        ("/spec/resourceSelectors/0/namespace", json!("other")),
        ("/spec/priority", json!("high")),
        ("/spec/placement", json!(5)),
        ("/spec/placement/clusterAffinity/clusterNames", json!(5)),
        (
            "/spec/placement/clusterAffinities",
            json!([{"affinityName": "a"}]),
        ),
        ("/spec/placement/spreadConstraints/0/minGroups", json!(-1)),
        ("/spec/placement/spreadConstraints/0/maxGroups", json!(-2)),
        (
            "/spec/placement/spreadConstraints/0/spreadByField",
            json!("region"),
        ),
        (
            "/spec/placement/spreadConstraints/0/spreadByLabel",
            json!("x"),
        ),
        (
            "/spec/placement/replicaScheduling/replicaSchedulingType",
            json!("Sideways"),
        ),
        (
            "/spec/placement/replicaScheduling/weightPreference/staticWeightList/0/weight",
            json!(0),
        ),
        (
            "/spec/placement/replicaScheduling/weightPreference/staticWeightList/0/weight",
            json!(-3),
        ),
        (
            "/spec/placement/clusterTolerations",
            json!([{"key": "a", "operator": "Lt", "value": "1"}]),
        ),
        (
            "/spec/failover/application/decisionConditions/tolerationSeconds",
            json!(-1),
        ),
        ("/spec/failover/application/purgeMode", json!("Sometimes")),
        ("/spec/failover/application/gracePeriodSeconds", json!(30)),
        ("/spec/propagateDeps", json!(false)),
        ("/spec/preemption", json!("Sometimes")),
        (
            "/spec/failover/cluster",
            json!({"purgeMode": "Graciously", "gracePeriodSeconds": -5}),
        ),
    ]
}

fn cluster_breakers() -> Vec<(&'static str, Value)> {
    vec![
        ("/spec/syncMode", json!("Sideways")),
        ("/spec/syncMode", json!(null)),
        ("/spec/apiEndpoint", json!("http://user@host:1/?q=1")),
        ("/spec/taints/0/effect", json!("Sometimes")),
        (
            "/spec/taints",
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]),
        ),
        ("/spec/zones", json!("eu")),
        ("/metadata/namespace", json!(3)),
    ]
}

fn set(mut v: Value, pointer: &str, new: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = if parent.is_empty() {
        &mut v
    } else {
        v.pointer_mut(parent).unwrap()
    };
    match target {
        Value::Object(m) => {
            m.insert(key.to_string(), new);
        }
        Value::Array(a) => {
            let i: usize = key.parse().unwrap();
            a[i] = new;
        }
        _ => panic!("bad pointer {pointer}"),
    }
    v
}

async fn snapshot(api: &TestApi) -> (u64, Vec<Value>) {
    use flotilla_api::kinds::builtin_resources;
    let mut all = Vec::new();
    for rt in builtin_resources() {
        let page = api
            .store
            .list(&rt, None, &ListOptions::default())
            .await
            .unwrap();
        all.extend(page.items);
    }
    (api.store.current_resource_version().await.unwrap(), all)
}

#[tokio::test]
async fn malformed_and_invalid_bodies_are_4xx_and_change_nothing() {
    let api = TestApi::new().await;
    // Seed objects that the bad requests aim at.
    assert_eq!(api.call("POST", PP, Some(valid_policy())).await.0, 201);
    assert_eq!(
        api.call("POST", CLUSTERS, Some(valid_cluster())).await.0,
        201
    );
    let before = snapshot(&api).await;

    let mut rng = StdRng::seed_from_u64(0x5EED);
    let mut bodies: Vec<(&str, String, String, String)> = Vec::new(); // method, path, content type, body
    let valid = valid_policy().to_string();
    for i in 0..600 {
        // Random bytes, truncated JSON, non-objects, bad YAML.
        let n = rng.gen_range(1..64);
        let junk: String = (0..n)
            .map(|_| rng.gen_range(0x20u8..0x7f) as char)
            .collect();
        bodies.push(("POST", PP.into(), "application/json".into(), junk.clone()));
        bodies.push((
            "POST",
            CLUSTERS.into(),
            "application/yaml".into(),
            format!("{junk}: [\n"),
        ));
        let cut = rng.gen_range(1..valid.len() - 1);
        bodies.push((
            "POST",
            PP.into(),
            "application/json".into(),
            valid[..cut].to_string(),
        ));
        bodies.push((
            "PUT",
            format!("{PP}/keep"),
            "application/json".into(),
            valid[..cut].to_string(),
        ));
        let scalar = [
            json!(1),
            json!("x"),
            json!([1, 2]),
            json!(null),
            json!(true),
        ][i % 5]
            .to_string();
        bodies.push(("POST", RB.into(), "application/json".into(), scalar.clone()));
        bodies.push((
            "PATCH",
            format!("{PP}/keep"),
            "application/merge-patch+json".into(),
            scalar.clone(),
        ));
        bodies.push((
            "PATCH",
            format!("{PP}/keep"),
            "application/json-patch+json".into(),
            junk.clone(),
        ));
        bodies.push((
            "PATCH",
            format!("{DEPLOY}/none"),
            "application/merge-patch+json".into(),
            "{}".into(),
        ));
    }
    for round in 0..20 {
        for (pointer, wrong) in policy_breakers() {
            let mut p = set(valid_policy(), pointer, wrong.clone());
            if pointer != "/metadata/name" && pointer != "/metadata" {
                p = set(p, "/metadata/name", json!(format!("new{round}")));
            }
            bodies.push(("POST", PP.into(), "application/json".into(), p.to_string()));
            // The same breakage as an update of the stored policy and as a merge patch.
            let mut upd = set(valid_policy(), pointer, wrong.clone());
            if pointer.starts_with("/metadata") {
                continue;
            }
            upd["metadata"]["name"] = json!("keep");
            bodies.push((
                "PUT",
                format!("{PP}/keep"),
                "application/json".into(),
                upd.to_string(),
            ));
            let mut patch = json!({});
            patch = set_deep(patch, pointer, wrong);
            bodies.push((
                "PATCH",
                format!("{PP}/keep"),
                "application/merge-patch+json".into(),
                patch.to_string(),
            ));
        }
        for (pointer, wrong) in cluster_breakers() {
            let mut c = set(valid_cluster(), pointer, wrong);
            c["metadata"]["name"] = json!(format!("c{round}"));
            bodies.push((
                "POST",
                CLUSTERS.into(),
                "application/json".into(),
                c.to_string(),
            ));
        }
    }
    assert!(bodies.len() >= 3000, "{} bodies", bodies.len());
    for (method, path, ct, body) in &bodies {
        let (status, text) = api
            .send(method, path, Some(ct), Body::from(body.clone()), &[])
            .await;
        assert!(
            status.is_client_error(),
            "{method} {path} ({ct}) with {body} answered {status}: {text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        assert_eq!(v["kind"], "Status", "{text}");
    }
    assert_eq!(snapshot(&api).await, before, "the store changed");
}

/// Builds a merge patch that sets `pointer` (creating objects on the way).
fn set_deep(mut v: Value, pointer: &str, new: Value) -> Value {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let mut cur = &mut v;
    for (i, p) in parts.iter().enumerate() {
        if p.parse::<usize>().is_ok() {
            // Lists are replaced by merge patches: replace the whole list with the broken one.
            return v;
        }
        if i == parts.len() - 1 {
            cur[*p] = new.clone();
        } else {
            if !cur[*p].is_object() {
                cur[*p] = json!({});
            }
            cur = &mut cur[*p];
        }
    }
    v
}
