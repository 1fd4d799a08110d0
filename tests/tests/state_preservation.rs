//! State preservation end to end, with the real server and its simulated
//! members: a one-cluster Deployment whose policy's `failover.cluster` (purgeMode Immediately)
//! has two rules, one that reads the reflected status (`{.readyReplicas}`) and one that
//! matches nothing. A NoExecute taint on its member evicts it: the old copy goes first, the
//! Work for the new member carries the label of the rule that matched, and the rule that did
//! not is a Warning Event and the binding condition `StatePreserved=False` — the eviction was
//! not held back. The label stays on the workload after the eviction task ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, ApiClient, Server};
use serde_json::{json, Value};
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const READY_LABEL: &str = "failover.example.io/ready-replicas";
const MISSING_LABEL: &str = "failover.example.io/missing";

fn works_on(api: &ApiClient, cluster: &str) -> Vec<Value> {
    api.get(&format!(
        "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{cluster}/works"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

fn placed_on(api: &ApiClient) -> Vec<String> {
    api.get(RB)
        .ok()
        .and_then(|rb| rb["spec"]["clusters"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect()
}

fn healthy_on(api: &ApiClient, cluster: &str) -> bool {
    api.get(RB).ok().is_some_and(|rb| {
        rb["status"]["aggregatedStatus"]
            .as_array()
            .is_some_and(|items| {
                items.iter().any(|i| {
                    i["clusterName"] == cluster
                        && i["health"] == "Healthy"
                        && i["status"]["readyReplicas"] == 1
                })
            })
    })
}

#[test]
fn cluster_failover_carries_the_state_that_matched_and_reports_the_rule_that_did_not() {
    let data = tempfile::tempdir().unwrap();
    // Pods take 2 s to start: the new copy stays un-Healthy (and its eviction task, which
    // carries the state, stays) long enough to look at its Work.
    let mut flags = vec!["--sim-members", "3", "--sim-pod-startup-delay-ms", "2000"];
    flags.extend_from_slice(flotilla_tests::NO_EVICTION_PACING);
    let server = Server::start(data.path(), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}});
    let policy = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "nginx", "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]},
                               "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}]},
                 "failover": {"cluster": {"purgeMode": "Immediately", "statePreservation": {"rules": [
                     {"aliasLabelName": READY_LABEL, "jsonPath": "{ .readyReplicas }"},
                     {"aliasLabelName": MISSING_LABEL, "jsonPath": "{ .noSuchField }"}]}}}}});
    for (path, body) in [
        ("/apis/apps/v1/namespaces/default/deployments", deployment),
        (
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
            policy,
        ),
    ] {
        let (code, answer) = api.send("POST", path, Some(&body)).unwrap();
        assert_eq!(code, 201, "{answer}");
    }
    let old = eventually(
        "nginx Healthy with 1 ready replica on one member",
        Duration::from_secs(60),
        || match placed_on(&api).as_slice() {
            [one] if healthy_on(&api, one) => Some(one.clone()),
            _ => None,
        },
    );
    let new = if old == "member1" {
        "member2"
    } else {
        "member1"
    };
    let (code, answer) = api
        .send(
            "PATCH",
            &format!("/apis/cluster.karmada.io/v1alpha1/clusters/{old}"),
            Some(&json!({"spec": {"taints": [
                {"key": "example.com/maintenance", "effect": "NoExecute"}]}})),
        )
        .unwrap();
    assert_eq!(code, 200, "{answer}");
    // The new member's Work carries the preserved label; Immediately: the old copy went first.
    let manifest_labels = eventually("a Work on the new member", Duration::from_secs(60), || {
        works_on(&api, new)
            .first()
            .map(|w| w["spec"]["workload"]["manifests"][0]["metadata"]["labels"].clone())
    });
    assert_eq!(manifest_labels[READY_LABEL], "1", "{manifest_labels}");
    assert!(manifest_labels.get(MISSING_LABEL).is_none());
    assert_eq!(manifest_labels["app"], "nginx");
    assert!(
        works_on(&api, &old).is_empty(),
        "the old copy is gone before the new one is dispatched"
    );
    let rb = api.get(RB).unwrap();
    let task = &rb["spec"]["gracefulEvictionTasks"][0];
    assert_eq!(task["fromCluster"], old.as_str(), "{rb}");
    assert_eq!(task["preservedLabelState"], json!({READY_LABEL: "1"}));
    // The rule that matched nothing is said, not swallowed.
    let cond = rb["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "StatePreserved"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(cond["status"], "False", "{rb}");
    assert_eq!(cond["reason"], "StatePreservationFailed");
    assert!(
        cond["message"]
            .as_str()
            .unwrap_or("")
            .contains(MISSING_LABEL),
        "{cond}"
    );
    let events = api
        .get(&format!(
            "{EVENTS}?fieldSelector=involvedObject.name%3Dnginx-deployment"
        ))
        .unwrap();
    let failed: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "StatePreservationFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    assert_eq!(failed[0]["type"], "Warning");
    assert!(failed[0]["message"]
        .as_str()
        .unwrap_or("")
        .contains(MISSING_LABEL));
    // The new copy turns Healthy and the task ends; the Work is rewritten afterwards (here by a
    // template change, the positive signal that the binding controller planned it again
    // without the task) and still carries the state it started from.
    eventually("the eviction task to end", Duration::from_secs(60), || {
        api.get(RB)
            .ok()
            .filter(|rb| {
                rb["spec"]["gracefulEvictionTasks"]
                    .as_array()
                    .is_none_or(|t| t.is_empty())
            })
            .map(|_| ())
    });
    let (code, answer) = api
        .send(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/nginx",
            Some(&json!({"metadata": {"labels": {"revision": "2"}}})),
        )
        .unwrap();
    assert_eq!(code, 200, "{answer}");
    let labels = eventually(
        "the new member's Work rewritten with the template change",
        Duration::from_secs(30),
        || {
            works_on(&api, new)
                .first()
                .map(|w| w["spec"]["workload"]["manifests"][0]["metadata"]["labels"].clone())
                .filter(|l| l["revision"] == "2")
        },
    );
    assert_eq!(labels[READY_LABEL], "1", "{labels}");
    drop(server);
}
