//! Application failover end to end, with the real server and its simulated members on
//! 127.0.0.1: scenario 03 (examples/03-application-failover.yaml, a Deployment on exactly one of
//! member1..3, `failover.application` with purgeMode Never). The member stays Ready while the
//! application on it fails: its nodes are cordoned and its pods deleted through the simulated
//! member's fault API, so the Deployment reports no available replica. After the policy's
//! tolerationSeconds (rewritten from 120 s to 2 s) the binding gets an eviction task for that
//! member (producer resource-binding-application-failover-controller, reason
//! ApplicationFailure, suppressDeletion true) and the Deployment moves to another member; the
//! old Work stays, even once the new copy is Healthy, until a user sets suppressDeletion false.
//! Scenario 04: a FlinkDeployment whose job fails moves with purgeMode Immediately, the old
//! copy gone first, and the new member's copy carries the job id as the label the policy's
//! statePreservation rule names. A workload unhealthy on every member moves only as often as
//! `--application-failover-max-moves` allows, and the binding says why it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    events_about, eventually, eviction_tasks, healthy_on, placement_of, post_manifests,
    scenario_text, sim_fault, works_on, ApiClient, Kubectl, Server,
};
use serde_json::json;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";

/// Simulated members that start pods within 100 ms and renew their leases well inside the
/// default grace period.
const SIM: &[&str] = &[
    "--sim-members",
    "3",
    "--sim-pod-startup-delay-ms",
    "100",
    "--sim-lease-renew-interval-ms",
    "300",
    // The partition brake's startup wait and pacing are not what this test is about
    // (flotilla_tests::NO_EVICTION_PACING).
    "--enable-eviction-rate-limit=false",
    "--eviction-startup-grace-period",
    "0s",
];

fn reasons(api: &ApiClient) -> Vec<String> {
    events_about(api, "default", "nginx-deployment")
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

#[test]
fn scenario_03_an_unhealthy_application_moves_and_its_old_copy_waits_for_the_user() {
    flotilla_tests::require_kubectl();
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), SIM).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let k = Kubectl::new(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    // The guide's 120 s of toleration, shortened to 2 s.
    let text = scenario_text("03-application-failover.yaml")
        .replace("tolerationSeconds: 120", "tolerationSeconds: 2");
    assert!(text.contains("tolerationSeconds: 2"));
    post_manifests(&api, &text);

    let first = eventually(
        "nginx Healthy on one member",
        Duration::from_secs(60),
        || {
            let placement = placement_of(&api, RB)?;
            match placement.as_slice() {
                [(name, 2)] if healthy_on(&api, RB, name) => Some(name.clone()),
                _ => None,
            }
        },
    );

    // The application fails on its member; the member itself stays Ready.
    sim_fault(&server, &first, "cordon", &json!({"enabled": true}));
    sim_fault(
        &server,
        &first,
        "delete-pods",
        &json!({"namespace": "default", "labelSelector": "app=nginx"}),
    );
    let second = eventually(
        "nginx moved to another member",
        Duration::from_secs(60),
        || {
            let placement = placement_of(&api, RB)?;
            match placement.as_slice() {
                [(name, 2)] if *name != first => Some(name.clone()),
                _ => None,
            }
        },
    );
    let tasks = eviction_tasks(&api, RB);
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    let task = &tasks[0];
    assert_eq!(task["fromCluster"], first.as_str());
    assert_eq!(
        task["producer"],
        "resource-binding-application-failover-controller"
    );
    assert_eq!(task["reason"], "ApplicationFailure");
    assert_eq!(task["purgeMode"], "Never");
    assert_eq!(task["suppressDeletion"], true);

    // The new copy turns Healthy; the old one stays, with its task, for the user to decide.
    eventually("the new copy Healthy", Duration::from_secs(60), || {
        healthy_on(&api, RB, &second).then_some(())
    });
    assert_eq!(eviction_tasks(&api, RB).len(), 1);
    assert_eq!(works_on(&api, &first).len(), 1, "the old copy stays");

    // The user lets it go: the task ends and the old Work goes.
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
    eventually("the old Work to go", Duration::from_secs(30), || {
        works_on(&api, &first).is_empty().then_some(())
    });
    // The Event follows the binding's write.
    eventually(
        "the EvictionTaskReleased Event",
        Duration::from_secs(30),
        || {
            reasons(&api)
                .iter()
                .any(|r| r == "EvictionTaskReleased")
                .then_some(())
        },
    );
    // The binding's failover history tells it: Healthy while the task was kept, then released.
    let entry = eventually(
        "the history entry to close",
        Duration::from_secs(30),
        || {
            let rb = api.get(RB).ok()?;
            let e = rb.pointer("/status/failoverHistory/0")?.clone();
            (e["oldCopyGoneReason"] == "EvictionTaskReleased").then_some(e)
        },
    );
    assert_eq!(entry["reason"], "ApplicationFailover", "{entry}");
    assert_eq!(entry["fromCluster"], first.as_str(), "{entry}");
    assert_eq!(
        entry["producer"], "resource-binding-application-failover-controller",
        "{entry}"
    );
    assert_eq!(entry["purgeMode"], "Never", "{entry}");
    assert_eq!(entry["targetCluster"], json!([second.as_str()]), "{entry}");
    assert!(entry["healthyTime"].is_string(), "{entry}");
    assert_eq!(placement_of(&api, RB), Some(vec![(second, 2)]));
}

/// The FlinkDeployment `foo` as member `member` holds it (`None` when absent).
fn flink_on(server: &Server, member: &str) -> Option<serde_json::Value> {
    let url = format!(
        "{}/members/{member}/objects?apiVersion=flink.apache.org/v1beta1&kind=FlinkDeployment&namespace=default&name=foo",
        server.sim_members_url()
    );
    match flotilla_tests::member_call("GET", &url, None).ok()? {
        (200, o) => Some(o),
        _ => None,
    }
}

/// Scenario 04: a FlinkDeployment whose job fails moves with purgeMode Immediately (the old copy
/// is gone before the new one is created) and carries its job id to the new member as the
/// label the policy's statePreservation rule names.
#[test]
fn scenario_04_a_failed_flink_job_moves_with_its_job_id() {
    let data = tempfile::tempdir().unwrap();
    let mut args = SIM.to_vec();
    args.extend(["--sim-api", "flink.apache.org/v1beta1/FlinkDeployment"]);
    let server = Server::start(data.path(), &args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "flinkdeployments.flink.apache.org"},
        "spec": {"group": "flink.apache.org", "scope": "Namespaced",
                 "names": {"plural": "flinkdeployments", "singular": "flinkdeployment", "kind": "FlinkDeployment"},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true,
                               "subresources": {"status": {}}}]}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some(&crd),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    // The guide's 60 s of toleration, shortened to 2 s.
    let text = scenario_text("04-stateful-failover.yaml")
        .replace("tolerationSeconds: 60", "tolerationSeconds: 2");
    assert!(text.contains("tolerationSeconds: 2"));
    post_manifests(&api, &text);
    const FB: &str =
        "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/foo-flinkdeployment";
    let first =
        eventually(
            "foo placed on one member",
            Duration::from_secs(60),
            || match placement_of(&api, FB)?.as_slice() {
                [(name, _)] if flink_on(&server, name).is_some() => Some(name.clone()),
                _ => None,
            },
        );
    // The job runs on `first`, with a job id; the binding sees it Healthy.
    let status = |state: &str| {
        json!({"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
               "namespace": "default", "name": "foo",
               "status": {"jobStatus": {"jobID": "job-42", "state": state},
                          "lifecycleState": "STABLE", "jobManagerDeploymentStatus": "READY"}})
    };
    sim_fault(&server, &first, "status", &status("RUNNING"));
    eventually("foo Healthy", Duration::from_secs(60), || {
        healthy_on(&api, FB, &first).then_some(())
    });
    // The job fails. At no moment do both members hold the job (Immediately: the old copy
    // goes first).
    sim_fault(&server, &first, "status", &status("FAILED"));
    let (second, label) = eventually("foo moved", Duration::from_secs(60), || {
        let others = ["member1", "member2", "member3"];
        let holders: Vec<&str> = others
            .iter()
            .copied()
            .filter(|m| flink_on(&server, m).is_some())
            .collect();
        assert!(holders.len() <= 1, "two copies at once: {holders:?}");
        match holders.as_slice() {
            [m] if *m != first => {
                let o = flink_on(&server, m)?;
                let label = o["metadata"]["labels"]["application.karmada.io/failover-jobid"]
                    .as_str()
                    .map(String::from);
                Some((m.to_string(), label))
            }
            _ => None,
        }
    });
    assert_ne!(second, first);
    assert_eq!(label.as_deref(), Some("job-42"));
    let reasons: Vec<String> = events_about(&api, "default", "foo-flinkdeployment")
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect();
    assert!(!reasons.is_empty());
}

/// A workload unhealthy on every member moves a bounded number of times: with
/// `--application-failover-max-moves 2` it leaves its first member and then its second, and
/// then stays where it is, with the condition ApplicationFailover=False (FailoverLimitReached)
/// and an Event saying so.
#[test]
fn a_workload_unhealthy_everywhere_moves_a_bounded_number_of_times() {
    let data = tempfile::tempdir().unwrap();
    let mut args = SIM.to_vec();
    args.extend([
        "--application-failover-max-moves",
        "2",
        "--application-failover-backoff",
        "1s",
        "--application-failover-max-backoff",
        "1s",
    ]);
    let server = Server::start(data.path(), &args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, 3);
    // Every member is cordoned before anything runs: the pods never start anywhere.
    for m in ["member1", "member2", "member3"] {
        sim_fault(&server, m, "cordon", &json!({"enabled": true}));
    }
    let text = scenario_text("03-application-failover.yaml")
        .replace("tolerationSeconds: 120", "tolerationSeconds: 1")
        .replace("purgeMode: Never", "purgeMode: Immediately");
    post_manifests(&api, &text);
    let mut seen: Vec<String> = Vec::new();
    let condition = eventually(
        "the bound on moves to be reached",
        Duration::from_secs(90),
        || {
            if let Some(placement) = placement_of(&api, RB) {
                for (name, _) in placement {
                    if seen.last() != Some(&name) {
                        seen.push(name);
                    }
                }
            }
            let rb = api.get(RB).ok()?;
            rb["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "ApplicationFailover" && c["status"] == "False")
                .cloned()
        },
    );
    assert_eq!(condition["reason"], "FailoverLimitReached", "{condition}");
    // The first placement plus two moves, each to a member it had not run on.
    assert!(seen.len() <= 3, "moved more than twice: {seen:?}");
    let distinct: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "moved back: {seen:?}");
    let placed = placement_of(&api, RB).unwrap();
    assert_eq!(placed.len(), 1, "{placed:?}");
    // The Event is recorded right after the write that set the condition.
    eventually(
        "the ApplicationFailoverHalted Event",
        Duration::from_secs(10),
        || {
            let reasons = reasons(&api);
            if reasons.iter().any(|r| r == "ApplicationFailoverHalted") {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        },
    );
    let evictions: i64 = events_about(&api, "default", "nginx-deployment")
        .iter()
        .filter(|e| e["reason"] == "EvictWorkloadFromClusterSucceed")
        .map(|e| e["count"].as_i64().unwrap_or(1))
        .sum();
    assert_eq!(evictions, 2, "exactly the two moves the bound allows");
}
