//! Cluster failover end to end, with the real server and one real agent process per member on
//! 127.0.0.1 and second-scale timings: scenario 02 (Divided 1:2 over member1 and member2) in
//! pull mode. member1's agent is SIGKILLed; its lease stops, Ready turns Unknown, the
//! unreachable NoExecute taint comes, the taint manager evicts member1 (tolerations of 0 s),
//! member2 gets all 3 replicas, and the eviction task ends only once member2's copy is
//! Healthy. member1's Work then waits with a deletionTimestamp while member1 is down, and goes
//! when its agent returns and has removed the copy; nothing moves back. The binding's failover
//! history and the fleet's `failovers` list tell the same story.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    eventually, eviction_tasks, healthy_on, member_call, placement_of, post_manifests, pull_agent,
    scenario_text, works_on, Agent, ApiClient, Server,
};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const EVENTS: &str = "/api/v1/namespaces/default/events";

fn placement(api: &ApiClient) -> Option<Vec<(String, i64)>> {
    placement_of(api, RB)
}

fn event_reasons(api: &ApiClient) -> Vec<String> {
    api.get(&format!(
        "{EVENTS}?fieldSelector=involvedObject.name%3Dnginx-deployment"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
    .iter()
    .filter_map(|e| e["reason"].as_str().map(String::from))
    .collect()
}

/// Waits for an Event with `reason` about the binding. The controller that ends an eviction
/// task records its Event after the binding's write, so a test that saw the write waits for it.
fn wait_event(api: &ApiClient, reason: &str) {
    eventually(
        &format!("a {reason} Event"),
        Duration::from_secs(30),
        || event_reasons(api).iter().any(|r| r == reason).then_some(()),
    );
}

/// The (type, reason) of each Event about the object of `kind` named `name` in `default`.
fn events_of(api: &ApiClient, kind: &str, name: &str) -> Vec<(String, String)> {
    api.get(&format!(
        "{EVENTS}?fieldSelector=involvedObject.kind%3D{kind},involvedObject.name%3D{name}"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
    .iter()
    .map(|e| {
        let field = |f: &str| e[f].as_str().unwrap_or("").to_string();
        (field("type"), field("reason"))
    })
    .collect()
}

fn nginx_replicas_on(agent: &Agent) -> Option<i64> {
    let url = format!(
        "{}/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx",
        agent.url
    );
    match member_call("GET", &url, None).ok()? {
        (200, d) => d["spec"]["replicas"].as_i64(),
        _ => None,
    }
}

#[test]
fn scenario_02_a_killed_pull_member_moves_its_replicas_and_its_copy_goes_when_it_returns() {
    let data = tempfile::tempdir().unwrap();
    let (server, api, [mut member1, member2, _member3]) =
        flotilla_tests::fast_pull_fleet(data.path());
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    eventually(
        "the 1:2 placement, Healthy on both",
        Duration::from_secs(60),
        || {
            (placement(&api) == Some(want.clone())
                && healthy_on(&api, RB, "member1")
                && healthy_on(&api, RB, "member2"))
            .then_some(())
        },
    );

    member1.process.kill();
    let moved = vec![("member2".to_string(), 3)];
    eventually(
        "member2 to get all 3 replicas",
        Duration::from_secs(60),
        || (placement(&api) == Some(moved.clone())).then_some(()),
    );
    // The eviction leaves an Event; the task ends only when member2 runs 3 Healthy replicas.
    eventually("the eviction task to end", Duration::from_secs(60), || {
        let rb = api.get(RB).ok()?;
        let tasks = rb["spec"]["gracefulEvictionTasks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        tasks.is_empty().then_some(())
    });
    // Karmada's eviction Event, as Karmada records it: Normal, on the binding and on the
    // Deployment it propagates.
    let evicted = (
        "Normal".to_string(),
        "EvictWorkloadFromClusterSucceed".to_string(),
    );
    for (kind, name) in [
        ("ResourceBinding", "nginx-deployment"),
        ("Deployment", "nginx"),
    ] {
        let events = events_of(&api, kind, name);
        assert!(events.contains(&evicted), "{kind} {name}: {events:?}");
    }
    wait_event(&api, "EvictionTaskDoneHealthy");
    // (The task ended on member2's Healthy report, which EvictionTaskDoneHealthy says; on a
    // loaded machine a late lease may turn member2's health Unknown for a moment after it.)
    eventually("member2 Healthy", Duration::from_secs(30), || {
        healthy_on(&api, RB, "member2").then_some(())
    });
    assert_eq!(nginx_replicas_on(&member2), Some(3));
    history_tells_the_failover(&server, &api);

    // member1 is down: its Work waits for it with a deletionTimestamp.
    let pending = eventually(
        "member1's Work to be marked for deletion",
        Duration::from_secs(30),
        || {
            let works = works_on(&api, "member1");
            works
                .iter()
                .all(|w| w.pointer("/metadata/deletionTimestamp").is_some())
                .then_some(works.len())
        },
    );
    assert_eq!(pending, 1, "the Work waits for its member");

    // member1 returns: the copy there is deleted, then its Work; nothing moves back.
    let member1 = pull_agent(&server, "member1", data.path());
    eventually("member1's Work to go", Duration::from_secs(60), || {
        works_on(&api, "member1").is_empty().then_some(())
    });
    eventually("member1 to run no nginx", Duration::from_secs(30), || {
        nginx_replicas_on(&member1).is_none().then_some(())
    });
    flotilla_tests::wait_members_ready(&api, 3);
    assert_eq!(placement(&api), Some(moved));
}

/// The binding's `status.failoverHistory` (as `kubectl get rb -o yaml` shows it) and the
/// fleet list `failovers` (API and kubectl) tell scenario 02's failover: member1 left with its
/// 1 replica, member2 chosen, Healthy, the task done; the list is read-only.
fn history_tells_the_failover(server: &Server, api: &ApiClient) {
    // The history's last step is written right after the task's end.
    let entry = eventually(
        "the history entry to be complete",
        Duration::from_secs(30),
        || {
            let rb = api.get(RB).ok()?;
            let e = rb.pointer("/status/failoverHistory/0")?.clone();
            (e["oldCopyGoneReason"] == "EvictionTaskDoneHealthy").then_some(e)
        },
    );
    assert_eq!(entry["reason"], "ClusterFailover", "{entry}");
    assert_eq!(entry["fromCluster"], "member1", "{entry}");
    assert_eq!(entry["replicas"], 1, "{entry}");
    assert_eq!(entry["evictionReason"], "TaintUntolerated", "{entry}");
    assert_eq!(entry["producer"], "TaintManager", "{entry}");
    assert_eq!(
        entry["originalCluster"],
        serde_json::json!(["member1", "member2"]),
        "{entry}"
    );
    assert_eq!(
        entry["targetCluster"],
        serde_json::json!(["member2"]),
        "{entry}"
    );
    for step in [
        "failoverTime",
        "rescheduledTime",
        "healthyTime",
        "oldCopyGoneTime",
    ] {
        assert!(entry[step].is_string(), "{step} missing: {entry}");
    }
    let list = api
        .get("/apis/flotilla.io/v1alpha1/failovers?limit=5")
        .unwrap();
    let items = list["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(
        items[0]["status"]["binding"]["name"], "nginx-deployment",
        "{list}"
    );
    assert_eq!(items[0]["status"]["fromCluster"], "member1", "{list}");
    let (code, answer) = api
        .send(
            "DELETE",
            &format!(
                "/apis/flotilla.io/v1alpha1/failovers/{}",
                items[0]["metadata"]["name"].as_str().unwrap_or("")
            ),
            None,
        )
        .unwrap();
    assert_eq!(code, 405, "{answer}");
    flotilla_tests::require_kubectl();
    let k = flotilla_tests::Kubectl::new(server).unwrap();
    let yaml = k
        .run(&[
            "get",
            "rb",
            "nginx-deployment",
            "-n",
            "default",
            "-o",
            "yaml",
        ])
        .unwrap();
    assert!(yaml.contains("failoverHistory:"), "{yaml}");
    assert!(yaml.contains("fromCluster: member1"), "{yaml}");
    assert!(
        yaml.contains("oldCopyGoneReason: EvictionTaskDoneHealthy"),
        "{yaml}"
    );
    let out = k.run(&["get", "failovers"]).unwrap();
    let row = out
        .lines()
        .find(|l| l.starts_with("default.nginx-deployment.member1."))
        .unwrap_or_else(|| panic!("no row for the failover: {out}"));
    assert!(
        row.contains("member2") && row.contains("TaintUntolerated"),
        "{out}"
    );
}

/// Three simulated members in one agent process, Ready.
fn server_with_sim_members(data: &Path) -> (Server, ApiClient) {
    let mut flags = vec!["--sim-members", "3", "--sim-pod-startup-delay-ms", "100"];
    flags.extend_from_slice(flotilla_tests::NO_EVICTION_PACING);
    let server = Server::start(data, &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    (server, api)
}

/// How many times the graceful eviction controller held a task for the last copy.
fn held_count(api: &ApiClient) -> i64 {
    api.get(&format!(
        "{EVENTS}?fieldSelector=involvedObject.name%3Dnginx-deployment"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
    .iter()
    .filter(|e| e["reason"] == "EvictionTaskHeld")
    .map(|e| e["count"].as_i64().unwrap_or(1))
    .sum()
}

fn nginx_with_policy(api: &ApiClient, placement: Value, failover: Value) {
    let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}});
    let policy = serde_json::json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "nginx", "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                 "placement": placement, "failover": failover}});
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
}

fn taint_member1(k: &flotilla_tests::Kubectl) {
    k.run(&[
        "patch",
        "cluster",
        "member1",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"taints":[{"key":"example.com/maintenance","effect":"NoExecute"}]}}"#,
    ])
    .unwrap();
}

#[test]
fn purge_mode_never_keeps_the_old_work_until_suppress_deletion_is_lifted() {
    flotilla_tests::require_kubectl();
    let data = tempfile::tempdir().unwrap();
    let (server, api) = server_with_sim_members(data.path());
    let k = flotilla_tests::Kubectl::new(&server).unwrap();
    nginx_with_policy(
        &api,
        serde_json::json!({"clusterAffinity": {"clusterNames": ["member1", "member2"]},
            "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                "weightPreference": {"staticWeightList": [
                    {"targetCluster": {"clusterNames": ["member1"]}, "weight": 1},
                    {"targetCluster": {"clusterNames": ["member2"]}, "weight": 2}]}}}),
        serde_json::json!({"cluster": {"purgeMode": "Never"}}),
    );
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    eventually("the 1:2 placement", Duration::from_secs(60), || {
        (placement(&api) == Some(want.clone()) && !works_on(&api, "member1").is_empty())
            .then_some(())
    });
    taint_member1(&k);
    eventually(
        "member2 Healthy with all 3 replicas",
        Duration::from_secs(60),
        || {
            (placement(&api) == Some(vec![("member2".to_string(), 3)])
                && healthy_on(&api, RB, "member2"))
            .then_some(())
        },
    );
    let t = eviction_tasks(&api, RB);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["fromCluster"], "member1");
    assert_eq!(t[0]["purgeMode"], "Never");
    assert_eq!(t[0]["suppressDeletion"], true);
    // The new placement is Healthy (a Graciously task would end now), yet the old copy stays.
    assert_eq!(eviction_tasks(&api, RB).len(), 1);
    assert_eq!(works_on(&api, "member1").len(), 1, "the old copy stays");
    // A user lifts suppressDeletion: the task ends and member1's copy goes.
    k.run(&[
        "patch",
        "rb",
        "nginx-deployment",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/gracefulEvictionTasks/0/suppressDeletion","value":false}]"#,
    ])
    .unwrap();
    eventually("the task to end", Duration::from_secs(30), || {
        eviction_tasks(&api, RB).is_empty().then_some(())
    });
    eventually("member1's Work to go", Duration::from_secs(30), || {
        works_on(&api, "member1").is_empty().then_some(())
    });
    wait_event(&api, "EvictionTaskReleased");
}

#[test]
fn when_the_only_feasible_cluster_fails_nothing_is_deleted_and_the_binding_says_why() {
    flotilla_tests::require_kubectl();
    let data = tempfile::tempdir().unwrap();
    let (server, api) = server_with_sim_members(data.path());
    let k = flotilla_tests::Kubectl::new(&server).unwrap();
    nginx_with_policy(
        &api,
        serde_json::json!({"clusterAffinity": {"clusterNames": ["member1"]}}),
        serde_json::json!({"cluster": {"purgeMode": "Graciously", "gracePeriodSeconds": 1}}),
    );
    eventually("nginx on member1", Duration::from_secs(60), || {
        healthy_on(&api, RB, "member1").then_some(())
    });
    taint_member1(&k);
    // Evicted, nowhere to go: the binding says why, and keeps the task past its grace period.
    let message = eventually(
        "Scheduled=False naming member1",
        Duration::from_secs(30),
        || {
            let rb = api.get(RB).ok()?;
            let c = rb["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Scheduled")?
                .clone();
            (c["status"] == "False" && c["message"].as_str()?.contains("member1"))
                .then(|| c["message"].as_str().unwrap_or("").to_string())
        },
    );
    assert!(!message.is_empty());
    wait_event(&api, "EvictionTaskHeld");
    // Past the task's 1 s grace period, another pass (woken by a label on member1, which the
    // task names) holds the task again instead of dropping it.
    let created = eviction_tasks(&api, RB)[0]["creationTimestamp"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .unwrap();
    eventually("the grace period to pass", Duration::from_secs(10), || {
        (chrono::Utc::now() > created + chrono::Duration::seconds(2)).then_some(())
    });
    let before = held_count(&api);
    k.run(&["label", "cluster", "member1", "example.com/poke=1"])
        .unwrap();
    eventually(
        "another pass over the held task",
        Duration::from_secs(30),
        || (held_count(&api) > before).then_some(()),
    );
    assert_eq!(
        eviction_tasks(&api, RB).len(),
        1,
        "the task stays past its 1 s grace period"
    );
    assert_eq!(
        works_on(&api, "member1").len(),
        1,
        "the last copy is not deleted"
    );
    let url = format!(
        "{}/members/member1/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx",
        server.sim_members_url()
    );
    assert_eq!(
        member_call("GET", &url, None).unwrap().0,
        200,
        "still running on member1"
    );
}

/// A failover interrupted by a crash finishes after restart: the server (and the simulated
/// members it started) is SIGKILLed while the eviction task waits for member2's new replicas,
/// then started again on the same data directory. The task, the new placement and member1's
/// old Work were durable; the restarted controllers pick them up, the task ends once member2
/// is Healthy, and member1's copy goes.
#[test]
fn a_failover_interrupted_by_a_crash_finishes_after_restart() {
    flotilla_tests::require_kubectl();
    let data = tempfile::tempdir().unwrap();
    // Pods take 3 s to start: the task is still waiting when the server dies.
    let mut flags = vec!["--sim-members", "3", "--sim-pod-startup-delay-ms", "3000"];
    flags.extend_from_slice(flotilla_tests::NO_EVICTION_PACING);
    let mut server = Server::start(data.path(), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    nginx_with_policy(
        &api,
        serde_json::json!({"clusterAffinity": {"clusterNames": ["member1", "member2"]},
            "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                "weightPreference": {"staticWeightList": [
                    {"targetCluster": {"clusterNames": ["member1"]}, "weight": 1},
                    {"targetCluster": {"clusterNames": ["member2"]}, "weight": 2}]}}}),
        serde_json::json!({"cluster": {"purgeMode": "Graciously"}}),
    );
    eventually(
        "the 1:2 placement, Healthy on both",
        Duration::from_secs(60),
        || {
            (placement(&api) == Some(vec![("member1".into(), 1), ("member2".into(), 2)])
                && healthy_on(&api, RB, "member1")
                && healthy_on(&api, RB, "member2"))
            .then_some(())
        },
    );
    taint_member1(&flotilla_tests::Kubectl::new(&server).unwrap());
    let moved = vec![("member2".to_string(), 3)];
    eventually(
        "the task, with member2 given all 3 replicas",
        Duration::from_secs(30),
        || {
            (placement(&api) == Some(moved.clone()) && eviction_tasks(&api, RB).len() == 1)
                .then_some(())
        },
    );

    // Crash mid-failover: member2's third replica is not running yet.
    server.process.kill();
    let server = Server::start(data.path(), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    assert_eq!(
        placement(&api),
        Some(moved.clone()),
        "the placement was durable"
    );
    eventually("the task to end", Duration::from_secs(60), || {
        eviction_tasks(&api, RB).is_empty().then_some(())
    });
    eventually("member1's Work to go", Duration::from_secs(30), || {
        works_on(&api, "member1").is_empty().then_some(())
    });
    wait_event(&api, "EvictionTaskDoneHealthy");
    let url = format!(
        "{}/members/member2/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx",
        server.sim_members_url()
    );
    let (code, d) = member_call("GET", &url, None).unwrap();
    assert_eq!(code, 200);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(placement(&api), Some(moved));
}
