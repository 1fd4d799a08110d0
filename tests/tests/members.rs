//! Members end to end, with the real binaries on 127.0.0.1 and second-scale timings: two pull
//! agents and one push member become Ready; a SIGKILLed agent turns its cluster Unknown with
//! the unreachable taints; a push member whose readyz answers 500 turns False with the
//! not-ready taints; recovery removes the taints; a restarted agent resumes without duplicating
//! anything; an agent's credential cannot read another cluster's Works.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, member_call, pull_agent, Agent, ApiClient, Server};
use serde_json::{json, Value};
use std::time::Duration;

const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const FAST: &[&str] = &[
    "--cluster-status-update-frequency",
    "500ms",
    "--cluster-failure-threshold",
    "1s",
    "--cluster-success-threshold",
    "1s",
    "--cluster-monitor-period",
    "500ms",
    "--cluster-monitor-grace-period",
    "3s",
    "--cluster-startup-grace-period",
    "5s",
    "--failover-eviction-timeout",
    "2s",
    "--member-probe-timeout",
    "1s",
];

fn ready(api: &ApiClient, name: &str) -> Option<String> {
    let c = api.get(&format!("{CLUSTERS}/{name}")).ok()?;
    c.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(String::from)
}

fn taints(api: &ApiClient, name: &str) -> Vec<String> {
    api.get(&format!("{CLUSTERS}/{name}"))
        .ok()
        .and_then(|c| c.pointer("/spec/taints").cloned())
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|t| {
            format!(
                "{}:{}",
                t["key"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn wait_ready(api: &ApiClient, name: &str, want: &str) {
    eventually(
        &format!("{name} Ready={want}"),
        Duration::from_secs(30),
        || (ready(api, name).as_deref() == Some(want)).then_some(()),
    );
}

fn wait_taints(api: &ApiClient, name: &str, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    eventually(
        &format!("{name} taints {want:?}"),
        Duration::from_secs(30),
        || {
            let mut got = taints(api, name);
            got.sort();
            (got == want).then_some(())
        },
    );
}

#[test]
fn members_join_fail_recover_and_stay_in_their_lane() {
    let dir = tempfile::tempdir().unwrap();
    let agents_dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), FAST).unwrap();
    let api = ApiClient::admin(&server).unwrap();

    let mut m1 = pull_agent(&server, "m1", agents_dir.path());
    let m2 = pull_agent(&server, "m2", agents_dir.path());
    let push = Agent::start(&[
        "--mode",
        "push",
        "--cluster-name",
        "m3",
        "--pod-startup-delay-ms",
        "200",
    ])
    .unwrap();
    let (code, body) = api
        .send(
            "POST",
            CLUSTERS,
            Some(
                &json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "m3"}, "spec": {"syncMode": "Push", "apiEndpoint": push.url}}),
            ),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    for name in ["m1", "m2", "m3"] {
        wait_ready(&api, name, "True");
        wait_taints(&api, name, &[]);
    }
    let m3 = api.get(&format!("{CLUSTERS}/m3")).unwrap();
    assert!(
        m3["status"]["kubernetesVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{m3}"
    );

    // A Work for m2 is applied by its agent.
    let works_m2 = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m2/works";
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let (code, body) = api
        .send(
            "POST",
            works_m2,
            Some(
                &json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "web", "namespace": "karmada-es-m2"},
            "spec": {"workload": {"manifests": [deployment]}}}),
            ),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let applied = |api: &ApiClient| {
        api.get(&format!("{works_m2}/web")).ok().and_then(|w| {
            let ok = w
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Applied" && c["status"] == "True");
            let ready = w
                .pointer("/status/manifestStatuses/0/status/readyReplicas")?
                .as_i64()?;
            (ok && ready == 2).then_some(w)
        })
    };
    eventually(
        "the Work applied on m2 with 2 ready replicas",
        Duration::from_secs(30),
        || applied(&api),
    );
    let object_url = |agent: &Agent| {
        format!(
            "{}/members/m2/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=web",
            agent.url
        )
    };
    let (code, before) = member_call("GET", &object_url(&m2), None).unwrap();
    assert_eq!(code, 200, "{before}");
    let uid = before["metadata"]["uid"].clone();
    assert!(uid.is_string());

    // The m1 credential cannot touch m2's Works or anything else.
    let credential = std::fs::read_to_string(agents_dir.path().join("m1/credential")).unwrap();
    let as_m1 = ApiClient::with_token(&server, credential.trim()).unwrap();
    assert_eq!(as_m1.send("GET", works_m2, None).unwrap().0, 403);
    assert_eq!(
        as_m1
            .send("GET", &format!("{works_m2}/web"), None)
            .unwrap()
            .0,
        403
    );
    assert_eq!(
        as_m1
            .send(
                "GET",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works",
                None
            )
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        as_m1
            .send("DELETE", &format!("{CLUSTERS}/m2"), None)
            .unwrap()
            .0,
        403
    );

    // SIGKILL m1's agent: Unknown, unreachable NoSchedule, then NoExecute after the timeout.
    m1.process.kill();
    wait_ready(&api, "m1", "Unknown");
    wait_taints(
        &api,
        "m1",
        &[
            "cluster.karmada.io/unreachable:NoSchedule",
            "cluster.karmada.io/unreachable:NoExecute",
        ],
    );

    // The push member's readyz answers 500: False, not-ready taints.
    let (code, _) = member_call(
        "POST",
        &format!("{}/faults/unhealthy", push.url),
        Some(&json!({"enabled": true})),
    )
    .unwrap();
    assert_eq!(code, 200);
    wait_ready(&api, "m3", "False");
    wait_taints(
        &api,
        "m3",
        &[
            "cluster.karmada.io/not-ready:NoSchedule",
            "cluster.karmada.io/not-ready:NoExecute",
        ],
    );
    let events = api.get("/api/v1/namespaces/default/events").unwrap();
    let reasons: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "m3")
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&"ClusterNotReady") && reasons.contains(&"TaintClusterSucceed"),
        "{reasons:?}"
    );

    // Recovery removes the taints.
    member_call(
        "POST",
        &format!("{}/faults/unhealthy", push.url),
        Some(&json!({"enabled": false})),
    )
    .unwrap();
    let _m1 = pull_agent(&server, "m1", agents_dir.path());
    for name in ["m1", "m3"] {
        wait_ready(&api, name, "True");
        wait_taints(&api, name, &[]);
    }

    // m2's agent restarts with the same data dir: nothing is re-created.
    drop(m2);
    let m2 = pull_agent(&server, "m2", agents_dir.path());
    eventually(
        "the Work still applied after the restart",
        Duration::from_secs(30),
        || applied(&api),
    );
    let (code, after) = member_call("GET", &object_url(&m2), None).unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        after["metadata"]["uid"], uid,
        "the member object was not re-created"
    );
    assert_eq!(
        after["metadata"]["creationTimestamp"],
        before["metadata"]["creationTimestamp"]
    );
    let (_, list): (u16, Value) = member_call(
        "GET",
        &format!(
            "{}/members/m2/objects?apiVersion=apps/v1&kind=Deployment",
            m2.url
        ),
        None,
    )
    .unwrap();
    if let Some(items) = list["items"].as_array() {
        assert_eq!(items.len(), 1, "no duplicate: {list}");
    }
}

#[test]
fn the_server_starts_a_simulated_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--sim-members",
            "3",
            "--sim-pod-startup-delay-ms",
            "100",
            "--sim-api",
            "example.io/v1/Widget",
        ],
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    for name in ["member1", "member2", "member3"] {
        wait_ready(&api, name, "True");
    }
    let c = api.get(&format!("{CLUSTERS}/member2")).unwrap();
    assert_eq!(c["spec"]["syncMode"], "Pull");
    assert!(
        c["status"]["resourceSummary"]["allocatable"]["cpu"].is_string(),
        "{c}"
    );
    let widgets_served = c["status"]["apiEnablements"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| {
            e["groupVersion"] == "example.io/v1"
                && e["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|r| r["kind"] == "Widget"))
        });
    assert!(widgets_served, "--sim-api reaches the members: {c}");
    let url = eventually("sim-members.url", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.path().join("sim-members.url")).ok()
    });
    let (code, _) = member_call("GET", &format!("{url}/members/member1/readyz"), None).unwrap();
    assert_eq!(code, 200);
}
