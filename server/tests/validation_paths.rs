//! Every write path validates Flotilla's own kinds against their schema: create, update, the
//! three patch types, server-side apply and the status subresource. A failure is a 422 naming
//! the field, and the stored object stays as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::StatusCode;
use common::{assert_status, TestApi};
use serde_json::{json, Value};

const RB: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const WORKS: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const PP: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const CPP: &str = "/apis/policy.karmada.io/v1alpha1/clusterpropagationpolicies";

const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

fn binding(name: &str) -> Value {
    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "namespace": "default", "name": "web"}}})
}

fn work(name: &str) -> Value {
    json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
           "metadata": {"name": name, "namespace": "karmada-es-m1"},
           "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                               "metadata": {"name": "c", "namespace": "default"}}]}}})
}

fn cluster(name: &str) -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name}, "spec": {"syncMode": "Pull"}})
}

fn policy(name: &str) -> Value {
    json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                    "placement": {"clusterAffinity": {"clusterNames": ["m1"]}}}})
}

/// Asserts a 422 `Invalid` Status with a cause naming `field`.
fn assert_invalid(s: StatusCode, body: &Value, field: &str, what: &str) {
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
    assert_status(body, 422, "Invalid");
    let causes = body["details"]["causes"].as_array().expect("causes");
    assert!(
        causes.iter().any(|c| c["field"] == field),
        "{what}: want a cause on {field}: {body}"
    );
}

/// Each way of writing a malformed status to `<path>/status`, as (what, method, content type,
/// body). `object` is the stored object the full-object writes start from.
fn bad_status_writes(
    object: &Value,
    bad: &Value,
) -> Vec<(&'static str, &'static str, Option<&'static str>, Value)> {
    let mut put = object.clone();
    put["status"] = bad.clone();
    vec![
        ("PUT", "PUT", None, put),
        ("merge patch", "PATCH", Some(MERGE), json!({"status": bad})),
        (
            "strategic merge patch",
            "PATCH",
            Some(STRATEGIC),
            json!({"status": bad}),
        ),
        (
            "JSON patch",
            "PATCH",
            Some(JSON_PATCH),
            json!([{"op": "add", "path": "/status", "value": bad}]),
        ),
        (
            "apply",
            "PATCH",
            Some(APPLY),
            json!({"apiVersion": object["apiVersion"], "kind": object["kind"],
                   "metadata": {"name": object["metadata"]["name"]}, "status": bad}),
        ),
    ]
}

async fn write(
    api: &TestApi,
    method: &str,
    ct: Option<&str>,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    match ct {
        None => api.call(method, path, Some(body)).await,
        Some(ct) => api.patch(path, ct, body).await,
    }
}

#[tokio::test]
async fn a_malformed_status_is_422_on_every_status_path_and_nothing_is_stored() {
    let api = TestApi::new().await;
    let (s, rb) = api.call("POST", RB, Some(binding("web-deployment"))).await;
    assert_eq!(s, StatusCode::CREATED, "{rb}");
    let (s, w) = api.call("POST", WORKS, Some(work("w1"))).await;
    assert_eq!(s, StatusCode::CREATED, "{w}");
    let (s, c) = api.call("POST", CLUSTERS, Some(cluster("m1"))).await;
    assert_eq!(s, StatusCode::CREATED, "{c}");

    let cases = [
        (format!("{RB}/web-deployment"), rb, json!([1]), "status"),
        (
            format!("{RB}/web-deployment"),
            api.call("GET", &format!("{RB}/web-deployment"), None)
                .await
                .1,
            json!({"aggregatedStatus": [{"clusterName": "m1", "applied": "yes"}]}),
            "status.aggregatedStatus[0].applied",
        ),
        (
            format!("{WORKS}/w1"),
            w,
            json!({"conditions": [1]}),
            "status.conditions[0]",
        ),
        (format!("{CLUSTERS}/m1"), c, json!("Ready"), "status"),
    ];
    for (path, object, bad, field) in cases {
        for (what, method, ct, body) in bad_status_writes(&object, &bad) {
            let (s, answer) = write(&api, method, ct, &format!("{path}/status"), body).await;
            assert_invalid(s, &answer, field, &format!("{what} of {path}/status"));
            let (_, stored) = api.call("GET", &path, None).await;
            assert_eq!(
                stored["metadata"]["resourceVersion"], object["metadata"]["resourceVersion"],
                "{what} of {path}/status wrote: {stored}"
            );
            assert_eq!(
                stored.get("status"),
                object.get("status"),
                "{what} of {path}/status"
            );
        }
    }

    // A well-formed status still goes through.
    let (s, v) = api
        .patch(
            &format!("{RB}/web-deployment/status"),
            MERGE,
            json!({"status": {"aggregatedStatus": [{"clusterName": "m1", "applied": true}]}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"]["aggregatedStatus"][0]["applied"], true);
}

#[tokio::test]
async fn main_writes_validate_spec_and_status_on_every_path() {
    let api = TestApi::new().await;
    let mut created_bad = binding("bad");
    created_bad["status"] = json!([1]);
    let (s, body) = api.call("POST", RB, Some(created_bad)).await;
    assert_invalid(s, &body, "status", "POST");
    let (s, body) = api
        .patch(&format!("{RB}/bad"), APPLY, {
            let mut b = binding("bad");
            b["spec"]["clusters"] = json!("m1");
            b
        })
        .await;
    assert_invalid(s, &body, "spec.clusters", "apply that creates");
    let (_, list) = api.call("GET", RB, None).await;
    assert_eq!(list["items"], json!([]), "nothing stored");

    let (_, rb) = api.call("POST", RB, Some(binding("web-deployment"))).await;
    let path = format!("{RB}/web-deployment");
    let mut put = rb.clone();
    put["spec"]["replicas"] = json!("three");
    let writes = [
        ("PUT", "PUT", None, put, "spec.replicas"),
        (
            "merge patch",
            "PATCH",
            Some(MERGE),
            json!({"spec": {"clusters": {"name": "m1"}}}),
            "spec.clusters",
        ),
        (
            "strategic merge patch",
            "PATCH",
            Some(STRATEGIC),
            json!({"spec": {"clusters": [7]}}),
            "spec.clusters[0]",
        ),
        (
            "JSON patch",
            "PATCH",
            Some(JSON_PATCH),
            json!([{"op": "add", "path": "/spec/resource", "value": [1]}]),
            "spec.resource",
        ),
        (
            "apply",
            "PATCH",
            Some(APPLY),
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                   "metadata": {"name": "web-deployment"}, "spec": {"replicas": [2]}}),
            "spec.replicas",
        ),
    ];
    for (what, method, ct, body, field) in writes {
        let (s, answer) = write(&api, method, ct, &path, body).await;
        assert_invalid(s, &answer, field, what);
        let (_, stored) = api.call("GET", &path, None).await;
        assert_eq!(stored, rb, "{what} changed the stored binding");
    }
}

#[tokio::test]
async fn policy_label_selectors_are_checked_by_kubernetes_rules() {
    let api = TestApi::new().await;
    let rs = "spec.resourceSelectors[0].labelSelector";
    let aff = "spec.placement.clusterAffinity.labelSelector";
    let table = [
        (
            json!({"matchLabels": {"a": null}}),
            format!("{rs}.matchLabels.a"),
            false,
        ),
        (
            json!({"matchLabels": {"a": 1}}),
            format!("{rs}.matchLabels.a"),
            false,
        ),
        (
            json!({"matchLabels": {"-a": "x"}}),
            format!("{rs}.matchLabels"),
            false,
        ),
        (
            json!({"matchLabels": {"a": "not ok!"}}),
            format!("{rs}.matchLabels"),
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Maybe", "values": ["x"]}]}),
            format!("{rs}.matchExpressions[0].operator"),
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [null]}]}),
            format!("{rs}.matchExpressions[0].values[0]"),
            false,
        ),
        (
            json!({"matchLabels": {"a": null}}),
            format!("{aff}.matchLabels.a"),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            format!("{aff}.matchExpressions[0].values"),
            true,
        ),
    ];
    let (s, good) = api.call("POST", PP, Some(policy("good"))).await;
    assert_eq!(s, StatusCode::CREATED, "{good}");
    for (selector, field, on_clusters) in table {
        let mut p = policy("bad");
        if on_clusters {
            p["spec"]["placement"]["clusterAffinity"]["labelSelector"] = selector.clone();
        } else {
            p["spec"]["resourceSelectors"][0]["labelSelector"] = selector.clone();
        }
        let (s, body) = api.call("POST", PP, Some(p.clone())).await;
        assert_invalid(s, &body, &field, &format!("POST {selector}"));

        let mut cpp = p.clone();
        cpp["kind"] = json!("ClusterPropagationPolicy");
        cpp["metadata"] = json!({"name": "bad"});
        let (s, body) = api.call("POST", CPP, Some(cpp)).await;
        assert_invalid(s, &body, &field, &format!("POST cpp {selector}"));

        // The same selector patched into a stored policy (a JSON patch keeps nulls; a merge
        // patch would read them as "remove this key").
        let (s, body) = api
            .patch(
                &format!("{PP}/good"),
                JSON_PATCH,
                json!([{"op": "replace", "path": "/spec", "value": p["spec"].clone()}]),
            )
            .await;
        assert_invalid(s, &body, &field, &format!("JSON patch {selector}"));
    }
    let (_, list) = api.call("GET", PP, None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["items"][0], good, "the good policy is unchanged");
    let (_, list) = api.call("GET", CPP, None).await;
    assert_eq!(list["items"], json!([]));
}

/// Application failover needs propagateDeps (Part 1): absent it is defaulted to true; an
/// explicit false is a 422 naming `spec.propagateDeps`, on create and on a patch of a stored
/// policy, and the stored policy stays as it was.
#[tokio::test]
async fn application_failover_with_propagate_deps_false_is_422_naming_the_field() {
    let api = TestApi::new().await;
    let mut p = policy("app");
    p["spec"]["failover"] = json!({"application": {"purgeMode": "Directly"}});
    let mut refused = p.clone();
    refused["spec"]["propagateDeps"] = json!(false);
    let (s, body) = api.call("POST", PP, Some(refused)).await;
    assert_invalid(s, &body, "spec.propagateDeps", "POST propagateDeps false");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("application failover is set, propagateDeps must be true"),
        "{body}"
    );
    let (s, created) = api.call("POST", PP, Some(p)).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert_eq!(created["spec"]["propagateDeps"], true, "{created}");
    let path = format!("{PP}/app");
    let (s, body) = api
        .patch(&path, MERGE, json!({"spec": {"propagateDeps": false}}))
        .await;
    assert_invalid(
        s,
        &body,
        "spec.propagateDeps",
        "merge patch propagateDeps false",
    );
    let (s, stored) = api.call("GET", &path, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(stored["spec"]["propagateDeps"], true, "{stored}");
}
