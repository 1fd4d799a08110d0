//! Cluster failover end to end in PUSH mode, with the real server and one real push agent
//! (`flotilla-agent --mode push`) per member on 127.0.0.1 and second-scale timings: scenario 02
//! (Divided 1:2 over member1 and member2). The server probes each member's `/readyz` every
//! 300 ms; member1's agent is SIGKILLed, its probes fail, Ready turns False after the 1 s
//! failure threshold, the not-ready NoExecute taint follows after 1 s, the taint manager evicts
//! member1 (tolerations of 0 s) and member2 gets all 3 replicas. The eviction task stays while
//! member2 runs fewer than 3 ready replicas (its pods take 2 s to start) and ends once they are
//! Healthy. member1's Work waits with a deletionTimestamp while member1 is down; member1's
//! agent is restarted on the same address with the same data directory (so it still holds the
//! old copy), the server deletes the copy through the member's API, then the Work goes; nothing
//! moves back. At no moment do two Works of the binding exist for one cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    events_about, eventually, healthy_on, member_call, placement_of, post_manifests, push_agent,
    register_push_member, scenario_text, wait_members_ready, works_on, Agent, ApiClient, Server,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const ALL_WORKS: &str = "/apis/work.karmada.io/v1alpha1/works";

/// Second-scale timings for push members: probes every 300 ms (each timing out after 1 s), a
/// flip of Ready after 1 s of failed or good probes, the NoExecute taint 1 s after Ready left
/// True, and policies that tolerate it for 0 s.
const PUSH_FAST: &[&str] = &[
    "--cluster-status-update-frequency",
    "300ms",
    "--push-status-period",
    "1s",
    "--member-probe-timeout",
    "1s",
    "--cluster-failure-threshold",
    "1s",
    "--cluster-success-threshold",
    "1s",
    "--failover-eviction-timeout",
    "1s",
    "--default-not-ready-toleration-seconds",
    "0",
    "--default-unreachable-toleration-seconds",
    "0",
    // The partition brake's startup wait and pacing are not what this test is about
    // (flotilla_tests::NO_EVICTION_PACING).
    "--enable-eviction-rate-limit=false",
    "--eviction-startup-grace-period",
    "0s",
];

fn placement(api: &ApiClient) -> Option<Vec<(String, i64)>> {
    placement_of(api, RB)
}

fn tasks(api: &ApiClient) -> Option<Vec<Value>> {
    let rb = api.get(RB).ok()?;
    Some(
        rb["spec"]["gracefulEvictionTasks"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    )
}

fn reasons(api: &ApiClient) -> Vec<String> {
    events_about(api, "default", "nginx-deployment")
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

/// The member's own answer for the nginx Deployment: status code and body.
fn nginx_answer(agent: &Agent) -> (u16, Value) {
    let url = format!(
        "{}/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx",
        agent.url
    );
    member_call("GET", &url, None).unwrap()
}

/// The nginx Deployment as the member's own API holds it (`None` when absent).
fn nginx_on(agent: &Agent) -> Option<Value> {
    match nginx_answer(agent) {
        (200, d) => Some(d),
        _ => None,
    }
}

fn ready_replicas(d: &Value) -> i64 {
    d.pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn ready_status(api: &ApiClient, name: &str) -> Option<String> {
    let c = api.get(&format!("{CLUSTERS}/{name}")).ok()?;
    c.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
        .map(String::from)
}

fn taints(api: &ApiClient, name: &str) -> Vec<String> {
    api.get(&format!("{CLUSTERS}/{name}"))
        .ok()
        .and_then(|c| c.pointer("/spec/taints").and_then(Value::as_array).cloned())
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

/// Fails when two Works of the binding exist for one cluster (one execution namespace);
/// answers how many Works the binding has.
fn assert_no_duplicate_works(api: &ApiClient) -> usize {
    let list = api.get(ALL_WORKS).unwrap();
    let mut per_cluster: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in list["items"].as_array().into_iter().flatten() {
        let of_binding = w
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|owners| owners.iter().any(|o| o["name"] == "nginx-deployment"));
        if of_binding {
            per_cluster
                .entry(w["metadata"]["namespace"].as_str().unwrap_or("").into())
                .or_default()
                .push(w["metadata"]["name"].as_str().unwrap_or("").into());
        }
    }
    for (namespace, names) in &per_cluster {
        assert!(
            names.len() <= 1,
            "two Works of the binding in {namespace}: {names:?}"
        );
    }
    per_cluster.values().map(Vec::len).sum()
}

/// [`eventually`] that also checks, at every poll, that no cluster has two Works of the binding.
fn wait_checking<T>(
    api: &ApiClient,
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    eventually(what, within, || {
        assert_no_duplicate_works(api);
        check()
    })
}

#[test]
fn scenario_02_a_killed_push_member_moves_its_replicas_and_its_copy_goes_when_it_returns() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&data.path().join("server"), PUSH_FAST).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let agents = data.path().join("agents");
    let mut member1 = push_agent("member1", &agents, "127.0.0.1:0", 200).unwrap();
    // member2's pods take 2 s to become ready, so the eviction task is seen waiting for them.
    let member2 = push_agent("member2", &agents, "127.0.0.1:0", 2000).unwrap();
    let member3 = push_agent("member3", &agents, "127.0.0.1:0", 200).unwrap();
    for (name, agent) in [
        ("member1", &member1),
        ("member2", &member2),
        ("member3", &member3),
    ] {
        register_push_member(&api, name, &agent.url).unwrap();
    }
    wait_members_ready(&api, 3);
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    wait_checking(
        &api,
        "the 1:2 placement, Healthy on both",
        Duration::from_secs(60),
        || {
            (placement(&api) == Some(want.clone())
                && healthy_on(&api, RB, "member1")
                && healthy_on(&api, RB, "member2"))
            .then_some(())
        },
    );
    assert_eq!(assert_no_duplicate_works(&api), 2, "one Work per cluster");
    assert_eq!(
        nginx_on(&member1).map(|d| d["spec"]["replicas"].clone()),
        Some(serde_json::json!(1))
    );
    // member1's runtime has saved its copy, so the restarted agent will still hold it.
    let state = agents.join("member1/sim-state.json");
    eventually(
        "member1's saved state to hold nginx",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&state)
                .ok()
                .filter(|s| s.contains("nginx"))
        },
    );

    // SIGKILL: probes fail, Ready leaves True, the not-ready NoExecute taint comes.
    let member1_addr = member1.listen_addr().to_string();
    member1.process.kill();
    wait_checking(
        &api,
        "member1 not Ready with the not-ready NoExecute taint",
        Duration::from_secs(30),
        || {
            (ready_status(&api, "member1").is_some_and(|s| s != "True")
                && taints(&api, "member1")
                    .contains(&"cluster.karmada.io/not-ready:NoExecute".to_string()))
            .then_some(())
        },
    );
    let moved = vec![("member2".to_string(), 3)];
    wait_checking(
        &api,
        "member2 to get all 3 replicas",
        Duration::from_secs(60),
        || (placement(&api) == Some(moved.clone())).then_some(()),
    );
    // The task waits for member2's 3 replicas: seen while fewer are ready there, gone after.
    let mut seen_waiting = false;
    wait_checking(
        &api,
        "the eviction task to end",
        Duration::from_secs(60),
        || {
            let ready = nginx_on(&member2).map(|d| ready_replicas(&d));
            let t = tasks(&api)?;
            if let Some(task) = t.first() {
                assert_eq!(task["fromCluster"], "member1", "{t:?}");
                seen_waiting |= ready.is_some_and(|r| r < 3);
                return None;
            }
            Some(())
        },
    );
    assert!(
        seen_waiting,
        "the task existed while member2 had fewer than 3 ready replicas"
    );
    let d = nginx_on(&member2).unwrap();
    assert_eq!(
        (d["spec"]["replicas"].as_i64(), ready_replicas(&d)),
        (Some(3), 3)
    );
    assert!(
        healthy_on(&api, RB, "member2"),
        "{:#}",
        api.get(RB).unwrap()
    );
    eventually(
        "the Events of the eviction and of the task's end",
        Duration::from_secs(30),
        || {
            let r = reasons(&api);
            (r.iter().any(|r| r == "EvictWorkloadFromClusterSucceed")
                && r.iter().any(|r| r == "EvictionTaskDoneHealthy"))
            .then_some(())
        },
    );

    // member1 is down: its Work waits for it with a deletionTimestamp.
    let pending = wait_checking(
        &api,
        "member1's Work to be marked for deletion",
        Duration::from_secs(30),
        || {
            let works = works_on(&api, "member1");
            (!works.is_empty()
                && works
                    .iter()
                    .all(|w| w.pointer("/metadata/deletionTimestamp").is_some()))
            .then_some(works.len())
        },
    );
    assert_eq!(pending, 1, "the Work waits for its member");

    // member1 returns on the same address with its old copy: the server deletes the copy,
    // then the Work; nothing moves back.
    let member1 = push_agent("member1", &agents, &member1_addr, 200).unwrap();
    assert_eq!(member1.listen_addr(), member1_addr);
    // It came back with its state: the copy is there until the server, once member1 has been
    // Ready for the 1 s success threshold, deletes it.
    assert_eq!(
        nginx_answer(&member1).0,
        200,
        "the restarted member still holds its old copy"
    );
    wait_checking(
        &api,
        "member1's Work to go",
        Duration::from_secs(60),
        || works_on(&api, "member1").is_empty().then_some(()),
    );
    assert_eq!(
        nginx_answer(&member1).0,
        404,
        "the copy is deleted before the Work goes"
    );
    wait_members_ready(&api, 3);
    wait_checking(
        &api,
        "member1's taints to go",
        Duration::from_secs(30),
        || taints(&api, "member1").is_empty().then_some(()),
    );
    assert_eq!(placement(&api), Some(moved));
    assert_eq!(
        nginx_on(&member2).map(|d| d["spec"]["replicas"].clone()),
        Some(serde_json::json!(3))
    );
    assert_eq!(
        nginx_answer(&member3).0,
        404,
        "member3 is not in the affinity"
    );
}
