//! The failover dry-run through the router: `POST .../failoversimulations` answers the request
//! with a computed status (JSON and YAML), changes nothing in the store, names the field of a
//! cluster that does not exist, refuses every other verb with a 405 `Status`, and is in
//! discovery with the verb `create` only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{assert_status, TestApi};
use flotilla_api::kinds::well_known;
use flotilla_server::store::ListOptions;
use serde_json::{json, Value};

const SIMS: &str = "/apis/flotilla.io/v1alpha1/failoversimulations";

async fn fleet(api: &TestApi) {
    for name in ["member1", "member2", "member3"] {
        let c = api
            .store
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": name}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        let mut c = c;
        c["status"] = json!({
            "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        api.store
            .update_status(&well_known::clusters(), c)
            .await
            .unwrap();
    }
    let placement = json!({"clusterAffinity": {"clusterNames": ["member1", "member2", "member3"]},
        "clusterTolerations": [{"key": "cluster.karmada.io/unreachable", "operator": "Exists",
                                "effect": "NoExecute", "tolerationSeconds": 30}],
        "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}});
    for (name, replicas, clusters) in [
        (
            "web",
            4,
            json!([{"name": "member1", "replicas": 2}, {"name": "member2", "replicas": 2}]),
        ),
        ("api", 2, json!([{"name": "member3", "replicas": 2}])),
    ] {
        api.store
            .create(
                &well_known::resource_bindings(),
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": format!("{name}-deployment"), "namespace": "default",
                                 "annotations": {"policy.karmada.io/applied-placement": placement.to_string()}},
                    "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": name},
                             "replicas": replicas, "placement": placement, "clusters": clusters}}),
            )
            .await
            .unwrap();
    }
}

/// Every stored object the simulation reads, and the store's resourceVersion.
async fn world(api: &TestApi) -> (u64, Vec<Value>) {
    let mut objects = Vec::new();
    for rt in [
        well_known::clusters(),
        well_known::resource_bindings(),
        well_known::cluster_resource_bindings(),
        well_known::events(),
    ] {
        objects.extend(
            api.store
                .list(&rt, None, &ListOptions::default())
                .await
                .unwrap()
                .items,
        );
    }
    (api.store.current_resource_version().await.unwrap(), objects)
}

#[tokio::test]
async fn a_simulation_answers_the_request_and_changes_nothing() {
    let api = TestApi::new().await;
    fleet(&api).await;
    let before = world(&api).await;
    let (code, answer) = api
        .call(
            "POST",
            SIMS,
            Some(
                json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
                        "metadata": {"name": "member1-down"},
                        "spec": {"failedClusters": ["member1"]}}),
            ),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["kind"], "FailoverSimulation");
    assert_eq!(answer["spec"]["failedClusters"], json!(["member1"]));
    let status = &answer["status"];
    assert_eq!(
        status["summary"],
        json!({"bindings": 2, "affected": 1, "evictions": 1, "pending": 0, "unplaceable": 0,
               "delayed": 0, "held": 0}),
        "{status}"
    );
    let web = &status["bindings"][0];
    assert_eq!(web["name"], "web-deployment");
    assert_eq!(
        web["clustersAfter"],
        json!([{"name": "member2", "replicas": 2}, {"name": "member3", "replicas": 2}]),
        "{web}"
    );
    let e = &web["evictions"][0];
    assert_eq!(e["cluster"], "member1");
    assert_eq!(e["producer"], "TaintManager");
    assert_eq!(e["replicas"], 2);
    // Defaults: NoExecute 300 s after the last lease renewal, then 30 s of toleration.
    assert_eq!(e["afterSeconds"], 330, "{e}");
    assert_eq!(e["oldCopy"]["fate"], "KeptUntilHealthy");
    assert_eq!(
        status["timeline"]["clusters"][0]["notReadyAfterSeconds"],
        40
    );
    // This router runs no controllers, so no partition brake: the answer says so.
    assert_eq!(status["brake"]["pacing"], false, "{status}");
    assert!(status["brake"].get("regions").is_none(), "{status}");
    assert!(
        status["brake"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no partition brake")),
        "{status}"
    );
    assert_eq!(world(&api).await, before, "the simulation wrote something");

    // YAML in, YAML out, as kubectl create -f sim.yaml -o yaml sends it.
    let (code, text) = api
        .send(
            "POST",
            SIMS,
            Some("application/yaml"),
            Body::from(
                "apiVersion: flotilla.io/v1alpha1\nkind: FailoverSimulation\nmetadata:\n  name: later\nspec:\n  failedClusters: [member1]\n  afterSeconds: 60\n",
            ),
            &[("accept", "application/yaml")],
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{text}");
    let answer: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(answer["status"]["summary"]["pending"], 1, "{text}");
    assert_eq!(
        answer["status"]["bindings"][0]["pending"][0]["afterSeconds"],
        330
    );
    assert_eq!(world(&api).await, before, "the simulation wrote something");
}

#[tokio::test]
async fn a_cluster_that_does_not_exist_is_a_422_naming_the_field() {
    let api = TestApi::new().await;
    fleet(&api).await;
    let (code, body) = api
        .call(
            "POST",
            SIMS,
            Some(json!({"metadata": {"name": "typo"},
                        "spec": {"failedClusters": ["member1", "memberX"]}})),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_status(&body, 422, "Invalid");
    assert_eq!(
        body["details"]["causes"][0]["field"], "spec.failedClusters[1]",
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("memberX"),
        "{body}"
    );
    // A misspelt field is a 400 that names it, not a different question.
    let (code, body) = api
        .call(
            "POST",
            SIMS,
            Some(json!({"metadata": {"name": "typo"},
                        "spec": {"failedClusters": ["member1"], "afterSecond": 5}})),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("afterSecond"),
        "{body}"
    );
}

#[tokio::test]
async fn only_create_is_served_and_discovery_says_so() {
    let api = TestApi::new().await;
    for (method, path) in [
        ("GET", SIMS.to_string()),
        ("GET", format!("{SIMS}/x")),
        ("DELETE", format!("{SIMS}/x")),
        ("PUT", format!("{SIMS}/x")),
        ("PATCH", format!("{SIMS}/x")),
        ("POST", format!("{SIMS}/x")),
        ("DELETE", SIMS.to_string()),
    ] {
        let (code, body) = api.call(method, &path, Some(json!({}))).await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_status(&body, 405, "MethodNotAllowed");
    }
    let (code, list) = api.call("GET", "/apis/flotilla.io/v1alpha1", None).await;
    assert_eq!(code, StatusCode::OK);
    let sims: Vec<&Value> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "failoversimulations")
        .collect();
    assert_eq!(sims.len(), 1, "{list}");
    assert_eq!(sims[0]["verbs"], json!(["create"]));
    assert_eq!(sims[0]["kind"], "FailoverSimulation");
    assert_eq!(sims[0]["namespaced"], false);
    let (_, groups) = api.call("GET", "/apis", None).await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "flotilla.io"),
        "{groups}"
    );
}
