//! A member leaving and joining, end to end with the real binaries on 127.0.0.1 (issue #23,
//! item 7; docs/members.md "Removing a member", "Joining"): a deleted member's share of a
//! Divided binding moves within seconds and its Works and Cluster then go; a member that
//! joins gets its Duplicated copies within seconds. The scheduler's periodic pass is set to an
//! hour in both, so it cannot be what moves them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, placement_of, post_manifests, pull_agent, ApiClient, Server};
use std::time::Duration;

const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const BINDING: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/web-deployment";
/// Well below the scheduler's default 15 s pass.
const WITHIN_SECONDS: Duration = Duration::from_secs(8);

/// Second-scale member health, and no periodic scheduler pass to speak of.
const FLAGS: &[&str] = &[
    "--cluster-monitor-period",
    "300ms",
    "--cluster-monitor-grace-period",
    "3s",
    "--cluster-startup-grace-period",
    "5s",
    "--scheduler-resync-period",
    "1h",
];

fn workload(replica_scheduling: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 10
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
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
  placement:
    replicaScheduling:
{replica_scheduling}"
    )
}

fn wait_ready(api: &ApiClient, name: &str) {
    eventually(
        &format!("{name} Ready"),
        Duration::from_secs(30),
        || -> Result<(), String> {
            let c = api
                .get(&format!("{CLUSTERS}/{name}"))
                .map_err(|e| e.to_string())?;
            let ready = c["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            let untainted = c["spec"]["taints"].as_array().is_none_or(Vec::is_empty);
            (ready && untainted)
                .then_some(())
                .ok_or(c["spec"]["taints"].to_string())
        },
    );
}

fn works_on(api: &ApiClient, cluster: &str) -> usize {
    api.get(&format!(
        "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{cluster}/works"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().map(Vec::len))
    .unwrap_or(0)
}

#[test]
fn a_divided_binding_leaves_a_deleted_member_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let agents = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), FLAGS).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let _m1 = pull_agent(&server, "m1", agents.path());
    let _m2 = pull_agent(&server, "m2", agents.path());
    let mut m3 = pull_agent(&server, "m3", agents.path());
    for m in ["m1", "m2", "m3"] {
        wait_ready(&api, m);
    }
    post_manifests(
        &api,
        &workload(
            "      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
          - targetCluster: {clusterNames: [m1, m2, m3]}
            weight: 1",
        ),
    );
    let on_m3 = eventually(
        "web divided over m1, m2 and m3",
        Duration::from_secs(30),
        || -> Result<i64, String> {
            let p = placement_of(&api, BINDING).ok_or("no binding")?;
            let total: i64 = p.iter().map(|(_, r)| r).sum();
            let m3 = p.iter().find(|(c, _)| c == "m3").map(|(_, r)| *r);
            match (p.len(), total, m3) {
                (3, 10, Some(r)) => Ok(r),
                _ => Err(format!("{p:?}")),
            }
        },
    );
    assert!(on_m3 >= 3, "m3 holds part of it: {on_m3}");
    eventually("a Work on m3", Duration::from_secs(30), || {
        (works_on(&api, "m3") == 1).then_some(())
    });

    // Unjoin m3: stop its agent, delete its Cluster.
    m3.process.kill();
    let (code, body) = api.send("DELETE", &format!("{CLUSTERS}/m3"), None).unwrap();
    assert_eq!(code, 200, "{body}");
    eventually(
        "web rescheduled off m3 with its 10 replicas",
        WITHIN_SECONDS,
        || -> Result<(), String> {
            let p = placement_of(&api, BINDING).ok_or("no binding")?;
            let total: i64 = p.iter().map(|(_, r)| r).sum();
            (total == 10 && !p.iter().any(|(c, _)| c == "m3"))
                .then_some(())
                .ok_or(format!("{p:?}"))
        },
    );
    eventually("m3's Work gone", WITHIN_SECONDS, || {
        (works_on(&api, "m3") == 0).then_some(())
    });
    eventually(
        "the Cluster m3 gone",
        WITHIN_SECONDS,
        || -> Result<(), String> {
            match api.send("GET", &format!("{CLUSTERS}/m3"), None) {
                Ok((404, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
}

#[test]
fn a_joining_member_gets_its_duplicated_copies_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let agents = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), FLAGS).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let _m1 = pull_agent(&server, "m1", agents.path());
    let _m2 = pull_agent(&server, "m2", agents.path());
    for m in ["m1", "m2"] {
        wait_ready(&api, m);
    }
    post_manifests(&api, &workload("      replicaSchedulingType: Duplicated"));
    eventually(
        "web duplicated on m1 and m2",
        Duration::from_secs(30),
        || -> Result<(), String> {
            let p = placement_of(&api, BINDING).ok_or("no binding")?;
            (p.len() == 2).then_some(()).ok_or(format!("{p:?}"))
        },
    );

    // m3 joins: from its agent's start, registration, first lease and status report to its
    // copy, within seconds.
    let _m3 = pull_agent(&server, "m3", agents.path());
    eventually(
        "web duplicated on m3 too",
        WITHIN_SECONDS,
        || -> Result<(), String> {
            let p = placement_of(&api, BINDING).ok_or("no binding")?;
            p.contains(&("m3".to_string(), 10))
                .then_some(())
                .ok_or(format!("{p:?}"))
        },
    );
    eventually("a Work on m3", WITHIN_SECONDS, || {
        (works_on(&api, "m3") == 1).then_some(())
    });
}
