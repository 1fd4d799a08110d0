//! ClusterTaintPolicy through the API: served in discovery as a cluster-scoped
//! `policy.karmada.io/v1alpha1` kind, created with POST (NoExecute taints included), refused
//! with a 422 naming the field for a duplicate (key, effect) or an unsupported operator, and
//! listed as a kubectl Table with its taints and conditions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{assert_status, TestApi};
use serde_json::{json, Value};

const CTP: &str = "/apis/policy.karmada.io/v1alpha1/clustertaintpolicies";

fn policy(name: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "ClusterTaintPolicy",
        "metadata": {"name": name},
        "spec": {
            "targetClusters": {"clusterNames": ["member1"]},
            "addOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                 "statusValues": ["False"]}],
            "removeOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                    "statusValues": ["True"]}],
            "taints": [{"key": "example.com/network-down", "effect": "NoExecute"}]
        }
    })
}

fn assert_invalid(s: StatusCode, body: &Value, field: &str) {
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_status(body, 422, "Invalid");
    let causes = body["details"]["causes"].as_array().expect("causes");
    assert!(
        causes.iter().any(|c| c["field"] == field),
        "want a cause on {field}: {body}"
    );
}

#[tokio::test]
async fn discovery_serves_the_kind_cluster_scoped() {
    let api = TestApi::new().await;
    let (s, body) = api
        .call("GET", "/apis/policy.karmada.io/v1alpha1", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let r = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "clustertaintpolicies")
        .cloned()
        .unwrap_or_else(|| panic!("clustertaintpolicies in {body}"));
    assert_eq!(r["kind"], "ClusterTaintPolicy");
    assert_eq!(r["namespaced"], false);
}

#[tokio::test]
async fn create_get_and_table() {
    let api = TestApi::new().await;
    let (s, created) = api.call("POST", CTP, Some(policy("network-down"))).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert_eq!(created["spec"]["taints"][0]["effect"], "NoExecute");
    let (s, got) = api.call("GET", &format!("{CTP}/network-down"), None).await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(got["spec"], policy("network-down")["spec"]);

    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let (s, text) = api
        .send("GET", CTP, None, Body::empty(), &[("accept", accept)])
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let t: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(t["kind"], "Table");
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "network-down");
    assert_eq!(cells[1], "example.com/network-down:NoExecute");
    assert_eq!(cells[2], "NetworkOK In (False)");
    assert_eq!(cells[3], "NetworkOK In (True)");
}

#[tokio::test]
async fn invalid_policies_are_422_and_nothing_is_stored() {
    let api = TestApi::new().await;
    let mut dup = policy("dup");
    dup["spec"]["taints"] = json!([
        {"key": "example.com/network-down", "effect": "NoExecute"},
        {"key": "example.com/network-down", "effect": "NoSchedule"},
        {"key": "example.com/network-down", "effect": "NoExecute", "value": "x"}
    ]);
    let (s, body) = api.call("POST", CTP, Some(dup)).await;
    assert_invalid(s, &body, "spec.taints[0]");

    let mut op = policy("op");
    op["spec"]["addOnConditions"][0]["operator"] = json!("Exists");
    let (s, body) = api.call("POST", CTP, Some(op)).await;
    assert_invalid(s, &body, "spec.addOnConditions[0].operator");

    let mut none = policy("none");
    none["spec"]["taints"] = json!([]);
    let (s, body) = api.call("POST", CTP, Some(none)).await;
    assert_invalid(s, &body, "spec.taints");

    // An update is checked too.
    let (s, body) = api.call("POST", CTP, Some(policy("ok"))).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, body) = api
        .patch(
            &format!("{CTP}/ok"),
            "application/merge-patch+json",
            json!({"spec": {"removeOnConditions": [{"conditionType": "NetworkOK",
                                                    "operator": "In", "statusValues": []}]}}),
        )
        .await;
    assert_invalid(s, &body, "spec.removeOnConditions[0].statusValues");

    let (_, list) = api.call("GET", CTP, None).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ok"]);
}
