//! Health-gated failback end to end, with the real server and one real
//! agent process per member on 127.0.0.1 and second-scale timings. A Deployment spread to one
//! cluster (Duplicated, `maxGroups: 1`) whose policy asks for failback after 6 s runs on
//! member1. member1 is cut off (the agent's "unreachable" fault: it renews no lease), the
//! workload fails over to member2, and the failover ends. When member1 comes back, the server
//! waits (a `FailbackPending` Event names the time), moves the workload back no earlier than
//! 6 s after member1 turned Ready (a `FailingBack` Event), keeps member2's copy under a
//! `Failback` eviction task until member1's copy is Healthy, and then removes it; the
//! binding's history tells both moves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, Utc};
use flotilla_tests::{
    events_about, eventually, eviction_tasks, healthy_on, placement_of, post_manifests, pull_agent,
    set_agent_fault, time_at, works_on, ApiClient, Server,
};
use serde_json::{json, Value};
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/web-deployment";
const WINDOW_SECONDS: i64 = 6;

const MANIFESTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: web
  failover:
    cluster:
      purgeMode: Graciously
      failback:
        stabilizationSeconds: 6
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    spreadConstraints:
      - spreadByField: cluster
        maxGroups: 1
        minGroups: 1
"#;

/// member1's Ready condition when it is True.
fn ready_since(api: &ApiClient) -> Option<DateTime<Utc>> {
    let c = api
        .get("/apis/cluster.karmada.io/v1alpha1/clusters/member1")
        .ok()?;
    let ready = c["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")?
        .clone();
    Some(time_at(&ready, "/lastTransitionTime"))
}

fn history(api: &ApiClient) -> Vec<Value> {
    api.get(RB)
        .ok()
        .and_then(|b| b.pointer("/status/failoverHistory").cloned())
        .and_then(|h| h.as_array().cloned())
        .unwrap_or_default()
}

fn event(api: &ApiClient, reason: &str) -> Option<Value> {
    events_about(api, "default", "web-deployment")
        .into_iter()
        .find(|e| e["reason"] == reason)
}

#[test]
fn failback_returns_the_workload_only_after_the_window_and_through_the_graceful_path() {
    let data = tempfile::tempdir().unwrap();
    let mut flags: Vec<&str> = flotilla_tests::FAST_PULL_FAILOVER.to_vec();
    flags.extend_from_slice(flotilla_tests::NO_EVICTION_PACING);
    let server = Server::start(&data.path().join("server"), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();

    // member1 alone first, so the copy lands there.
    let member1 = pull_agent(&server, "member1", data.path());
    flotilla_tests::wait_members_ready(&api, 1);
    post_manifests(&api, MANIFESTS);
    eventually("web Healthy on member1", Duration::from_secs(60), || {
        (placement_of(&api, RB) == Some(vec![("member1".to_string(), 2)])
            && healthy_on(&api, RB, "member1"))
        .then_some(())
    });
    let _member2 = pull_agent(&server, "member2", data.path());
    flotilla_tests::wait_members_ready(&api, 2);

    // Cluster failover: member1 cut off, the workload moves to member2 and the failover ends.
    set_agent_fault(&member1, "unreachable", true);
    eventually(
        "the failover to member2 to end",
        Duration::from_secs(60),
        || {
            (placement_of(&api, RB) == Some(vec![("member2".to_string(), 2)])
                && healthy_on(&api, RB, "member2")
                && eviction_tasks(&api, RB).is_empty())
            .then_some(())
        },
    );
    let h = history(&api);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["reason"], "ClusterFailover");
    assert!(h[0].get("failedBackTime").is_none());

    // member1 comes back. The server waits the window out and says until when.
    set_agent_fault(&member1, "unreachable", false);
    let back = eventually("member1 Ready again", Duration::from_secs(60), || {
        ready_since(&api)
    });
    let pending = eventually("the FailbackPending Event", Duration::from_secs(30), || {
        event(&api, "FailbackPending")
    });
    // "… moves back at <time> if it stays Ready": the window counts from member1's Ready
    // transition (or, a moment later, from when the server first saw it untainted).
    let msg = pending["message"].as_str().unwrap_or("");
    let due = back + chrono::Duration::seconds(WINDOW_SECONDS);
    let announced = msg
        .split("moves back at ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("no time in {msg}"));
    assert!(
        announced >= due && announced <= due + chrono::Duration::seconds(3),
        "{msg} (member1 Ready since {back})"
    );

    // The move back: the binding names member1 again, no earlier than the window's end, and
    // member2 keeps its copy under a Failback task while member1's is not Healthy yet.
    let (tasks, member2_works) = eventually("the move back", Duration::from_secs(60), || {
        (placement_of(&api, RB) == Some(vec![("member1".to_string(), 2)]))
            .then(|| (eviction_tasks(&api, RB), works_on(&api, "member2")))
    });
    // The Event is recorded right after the move is written.
    let moving = eventually("a FailingBack Event", Duration::from_secs(10), || {
        event(&api, "FailingBack")
    });
    let moved_at = time_at(&moving, "/firstTimestamp");
    assert!(
        moved_at >= announced,
        "moved back at {moved_at}, before the window's end {announced}"
    );
    let h = history(&api);
    let failback = h
        .iter()
        .find(|e| e["reason"] == "Failback")
        .unwrap_or_else(|| panic!("no Failback entry in {h:?}"));
    assert_eq!(failback["fromCluster"], "member2");
    assert_eq!(failback["targetCluster"], json!(["member1"]));
    assert!(time_at(failback, "/failoverTime") >= announced);
    assert!(h[0].get("failedBackTime").is_some(), "{h:?}");
    // Either the task is still there keeping member2's copy, or member1 was already Healthy
    // and the task ended: then the history says so, in that order.
    if !tasks.is_empty() {
        assert_eq!(tasks[0]["fromCluster"], "member2");
        assert_eq!(tasks[0]["reason"], "Failback");
        assert_eq!(
            member2_works.len(),
            1,
            "member2's copy went before the task ended"
        );
    }

    // member1 Healthy, then member2's copy goes.
    eventually(
        "member1 Healthy and member2's copy gone",
        Duration::from_secs(60),
        || {
            (healthy_on(&api, RB, "member1")
                && eviction_tasks(&api, RB).is_empty()
                && works_on(&api, "member2").is_empty())
            .then_some(())
        },
    );
    let h = history(&api);
    let failback = h.iter().find(|e| e["reason"] == "Failback").unwrap();
    assert_eq!(
        failback["oldCopyGoneReason"], "EvictionTaskDoneHealthy",
        "{failback}"
    );
    let healthy = time_at(failback, "/healthyTime");
    let gone = time_at(failback, "/oldCopyGoneTime");
    assert!(healthy <= gone, "{failback}");
}
