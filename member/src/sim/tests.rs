//! Scenario tests of the sim driven by a fake clock: apply, advance time, tick, look.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeZone;
use serde_json::{json, Value};

use super::*;
use crate::{ListFilter, MemberRuntime, ObjectRef, RuntimeFaults};
use flotilla_support::clock::FakeClock;

fn clock() -> Arc<FakeClock> {
    Arc::new(FakeClock::new(
        chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
    ))
}

fn config(nodes: usize, cpu: &str) -> SimConfig {
    SimConfig {
        nodes,
        node_cpu: Quantity::parse(cpu).unwrap(),
        node_memory: Quantity::parse("8Gi").unwrap(),
        node_pods: Quantity::from_units(110),
        pod_startup_delay: Duration::from_secs(1),
        job_run: Duration::from_secs(2),
        ..SimConfig::default()
    }
}

fn sim(nodes: usize, cpu: &str) -> (Arc<SimRuntime>, Arc<FakeClock>) {
    let c = clock();
    let s = SimRuntime::open(config(nodes, cpu), c.clone(), None).unwrap();
    (s, c)
}

fn deployment(name: &str, replicas: i64, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                                          "resources": {"requests": {"cpu": cpu}}}]}
            }
        }
    })
}

fn dref(name: &str) -> ObjectRef {
    ObjectRef::new("apps/v1", "Deployment", "default", name)
}

async fn pods(s: &SimRuntime) -> Vec<Value> {
    s.list(&ListFilter {
        kind: "Pod".into(),
        ..ListFilter::default()
    })
    .await
    .unwrap()
}

async fn phases(s: &SimRuntime) -> Vec<String> {
    let mut p: Vec<String> = pods(s)
        .await
        .iter()
        .map(|p| p["status"]["phase"].as_str().unwrap_or("").to_string())
        .collect();
    p.sort();
    p
}

fn step(s: &SimRuntime, c: &FakeClock, ms: u64) {
    c.advance(chrono::Duration::milliseconds(ms as i64));
    s.tick();
}

#[tokio::test]
async fn pods_fit_by_requests() {
    // (nodes, cpu per node, replicas, cpu per pod) → (running, pending)
    let cases = [
        (2, "8", 4, "3", (4, 0)),
        (2, "8", 5, "3", (4, 1)),
        (1, "1", 3, "500m", (2, 1)),
        (3, "8", 10, "0", (10, 0)),
        (1, "4", 1, "5", (0, 1)),
    ];
    for (nodes, cpu, replicas, per_pod, (running, pending)) in cases {
        let (s, c) = sim(nodes, cpu);
        s.apply(deployment("web", replicas, per_pod)).await.unwrap();
        step(&s, &c, 1000);
        let p = phases(&s).await;
        let got = (
            p.iter().filter(|x| *x == "Running").count(),
            p.iter().filter(|x| *x == "Pending").count(),
        );
        assert_eq!(
            got,
            (running, pending),
            "{nodes} nodes x {cpu}, {replicas} x {per_pod}"
        );
    }
}

#[tokio::test]
async fn startup_delay_then_ready() {
    let (s, c) = sim(3, "8");
    let applied = s.apply(deployment("web", 2, "100m")).await.unwrap();
    assert_eq!(applied["metadata"]["generation"], 1);
    assert!(applied["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));
    assert_eq!(applied["status"]["replicas"], 2);
    assert_eq!(applied["status"]["unavailableReplicas"], 2);
    assert_eq!(applied["status"]["conditions"][0]["status"], "False");
    step(&s, &c, 999);
    assert_eq!(phases(&s).await, ["Pending", "Pending"]);
    step(&s, &c, 1);
    assert_eq!(phases(&s).await, ["Running", "Running"]);
    let d = s.get(&dref("web")).await.unwrap().unwrap();
    assert_eq!(d["status"]["readyReplicas"], 2);
    assert_eq!(d["status"]["availableReplicas"], 2);
    assert_eq!(d["status"]["updatedReplicas"], 2);
    assert_eq!(d["status"]["observedGeneration"], 1);
    assert!(d["status"].get("unavailableReplicas").is_none());
    assert_eq!(d["status"]["conditions"][0]["status"], "True");
    for p in pods(&s).await {
        assert_eq!(p["status"]["conditions"][3]["type"], "Ready");
        assert_eq!(p["status"]["conditions"][3]["status"], "True");
        assert!(p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("sim-node-")));
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Deployment");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["uid"],
            d["metadata"]["uid"]
        );
        assert_eq!(p["metadata"]["labels"]["app"], "web");
    }
}

#[tokio::test]
async fn cordon_leaves_new_pods_pending() {
    let (s, c) = sim(2, "8");
    s.apply(deployment("web", 2, "100m")).await.unwrap();
    step(&s, &c, 1000);
    s.cordon(true).await.unwrap();
    step(&s, &c, 1000);
    assert_eq!(
        phases(&s).await,
        ["Running", "Running"],
        "running pods stay"
    );
    assert_eq!(s.delete_pods("default", "app=web").await.unwrap(), 2);
    step(&s, &c, 5000);
    let p = pods(&s).await;
    assert_eq!(p.len(), 2, "deleted pods are recreated");
    for pod in &p {
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["conditions"][0]["reason"], "Unschedulable");
        assert_eq!(
            pod["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 2 node(s) were unschedulable."
        );
    }
    let d = s.get(&dref("web")).await.unwrap().unwrap();
    assert_eq!(d["status"]["unavailableReplicas"], 2);
    s.cordon(false).await.unwrap();
    step(&s, &c, 1000);
    assert_eq!(phases(&s).await, ["Running", "Running"]);
    assert_eq!(s.describe().await.unwrap()["cordoned"], false);
}

/// The phase of the one pod of Deployment `name`.
async fn phase_of(s: &SimRuntime, name: &str) -> String {
    pods(s)
        .await
        .iter()
        .find(|p| p["metadata"]["labels"]["app"] == name)
        .map(|p| p["status"]["phase"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_full_member_still_places_what_fits_and_frees_room_oldest_first() {
    // One node of 1 cpu; six pods of 400m: two run, four wait, oldest first.
    let (s, c) = sim(1, "1");
    for i in 0..6 {
        s.apply(deployment(&format!("web-{i}"), 1, "400m"))
            .await
            .unwrap();
    }
    step(&s, &c, 1000);
    assert_eq!(phase_of(&s, "web-0").await, "Running");
    assert_eq!(phase_of(&s, "web-1").await, "Running");
    for i in 2..6 {
        let name = format!("web-{i}");
        assert_eq!(phase_of(&s, &name).await, "Pending", "{name}");
    }
    // Pods applied while others wait at the same usage are each looked at: one that does not
    // fit waits with its reason, one that fits runs though older pods wait.
    s.apply(deployment("big", 1, "2")).await.unwrap();
    s.apply(deployment("tiny", 1, "100m")).await.unwrap();
    step(&s, &c, 1000);
    assert_eq!(phase_of(&s, "big").await, "Pending");
    assert_eq!(phase_of(&s, "tiny").await, "Running");
    let big = pods(&s)
        .await
        .into_iter()
        .find(|p| p["metadata"]["labels"]["app"] == "big")
        .unwrap();
    assert_eq!(
        big["status"]["conditions"][0]["message"],
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    // Room frees: the oldest waiting pod takes it, not a newer one.
    s.delete(&dref("web-0")).await.unwrap();
    step(&s, &c, 1000);
    assert_eq!(phase_of(&s, "web-2").await, "Running");
    for name in ["web-3", "web-4", "web-5", "big"] {
        assert_eq!(phase_of(&s, name).await, "Pending", "{name}");
    }
}

#[tokio::test]
async fn pod_deletion_recreates_and_selectors_pick() {
    let (s, c) = sim(1, "8");
    s.apply(deployment("web", 2, "100m")).await.unwrap();
    s.apply(deployment("api", 1, "100m")).await.unwrap();
    step(&s, &c, 1000);
    let before: Vec<Value> = pods(&s)
        .await
        .iter()
        .map(|p| p["metadata"]["uid"].clone())
        .collect();
    assert_eq!(s.delete_pods("", "app=api").await.unwrap(), 1);
    assert_eq!(s.delete_pods("other", "").await.unwrap(), 0);
    let after = pods(&s).await;
    assert_eq!(after.len(), 3);
    let fresh = after
        .iter()
        .filter(|p| !before.contains(&p["metadata"]["uid"]))
        .count();
    assert_eq!(fresh, 1);
    assert!(s.delete_pods("", "app in (").await.is_err());
    // Deleting one pod through the object API: recreated too.
    let name = after[0]["metadata"]["name"].as_str().unwrap().to_string();
    s.delete(&ObjectRef::new("v1", "Pod", "default", &name))
        .await
        .unwrap();
    assert_eq!(pods(&s).await.len(), 3);
    // Deleting the workload deletes its pods.
    s.delete(&dref("web")).await.unwrap();
    assert_eq!(pods(&s).await.len(), 1);
}

#[tokio::test]
async fn spec_change_bumps_generation_and_replaces_pods() {
    let (s, c) = sim(1, "8");
    let first = s.apply(deployment("web", 1, "100m")).await.unwrap();
    step(&s, &c, 1000);
    let same = s.apply(deployment("web", 1, "100m")).await.unwrap();
    assert_eq!(same["metadata"]["generation"], 1);
    assert_eq!(
        same["metadata"]["resourceVersion"],
        s.get(&dref("web")).await.unwrap().unwrap()["metadata"]["resourceVersion"]
    );
    let old_pod = pods(&s).await[0]["metadata"]["name"].clone();
    let mut changed = deployment("web", 1, "200m");
    changed["metadata"]["labels"]["extra"] = json!("x");
    let second = s.apply(changed).await.unwrap();
    assert_eq!(second["metadata"]["generation"], 2);
    assert_eq!(second["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        second["metadata"]["creationTimestamp"],
        first["metadata"]["creationTimestamp"]
    );
    let p = pods(&s).await;
    assert_eq!(p.len(), 1);
    assert_ne!(p[0]["metadata"]["name"], old_pod);
    step(&s, &c, 1000);
    let d = s.get(&dref("web")).await.unwrap().unwrap();
    assert_eq!(d["status"]["observedGeneration"], 2);
    assert_eq!(d["status"]["updatedReplicas"], 1);
    assert_eq!(
        d["status"]["conditions"][1]["reason"],
        "NewReplicaSetAvailable"
    );
}

#[tokio::test]
async fn daemonset_per_node_and_statefulset_in_order() {
    let (s, c) = sim(3, "8");
    s.apply(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "a"}]}}}}))
        .await
        .unwrap();
    s.cordon(true).await.unwrap();
    step(&s, &c, 1000);
    let ds = s
        .get(&ObjectRef::new(
            "apps/v1",
            "DaemonSet",
            "kube-system",
            "agent",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ds["status"]["desiredNumberScheduled"], 3);
    assert_eq!(ds["status"]["numberReady"], 3, "daemon pods ignore cordons");
    let mut nodes: Vec<String> = pods(&s)
        .await
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap().to_string())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    s.cordon(false).await.unwrap();

    s.apply(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "db"}},
                                             "spec": {"containers": [{"name": "db"}]}}}}))
        .await
        .unwrap();
    let sts = ObjectRef::new("apps/v1", "StatefulSet", "default", "db");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let st = s.get(&sts).await.unwrap().unwrap();
        seen.push((
            st["status"]["replicas"].clone(),
            st["status"]["readyReplicas"].clone(),
        ));
        step(&s, &c, 1000);
    }
    assert_eq!(
        seen,
        vec![
            (json!(1), Value::Null),
            (json!(2), json!(1)),
            (json!(3), json!(2)),
            (json!(3), json!(3))
        ]
    );
    let st = s.get(&sts).await.unwrap().unwrap();
    assert_eq!(st["status"]["currentReplicas"], 3);
    assert_eq!(st["status"]["updatedReplicas"], 3);
    assert_eq!(st["status"]["availableReplicas"], 3);
    assert!(s
        .get(&ObjectRef::new("v1", "Pod", "default", "db-2"))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn job_completes_after_run_time() {
    let (s, c) = sim(1, "8");
    s.apply(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default"},
        "spec": {"completions": 2, "parallelism": 1,
                 "template": {"spec": {"containers": [{"name": "pi"}], "restartPolicy": "Never"}}}}))
        .await
        .unwrap();
    let job = ObjectRef::new("batch/v1", "Job", "default", "pi");
    let status = |v: Value| v["status"].clone();
    step(&s, &c, 1000);
    let st = status(s.get(&job).await.unwrap().unwrap());
    assert_eq!(
        (st["active"].clone(), st["ready"].clone()),
        (json!(1), json!(1))
    );
    step(&s, &c, 2000);
    let st = status(s.get(&job).await.unwrap().unwrap());
    assert_eq!(st["succeeded"], 1);
    assert_eq!(st["active"], 1, "the second pod was started");
    assert!(st.get("completionTime").is_none());
    step(&s, &c, 1000);
    step(&s, &c, 2000);
    let st = status(s.get(&job).await.unwrap().unwrap());
    assert_eq!(st["succeeded"], 2);
    assert!(st.get("active").is_none());
    assert_eq!(st["completionTime"], "2026-01-01T00:00:06Z");
    assert_eq!(st["conditions"][0]["type"], "Complete");
    assert_eq!(phases(&s).await, ["Succeeded", "Succeeded"]);
    let summary = s.summary().await.unwrap();
    assert_eq!(
        summary.resource_summary.allocated["pods"],
        Quantity::from_units(0)
    );
}

#[tokio::test]
async fn status_override_sticks() {
    let (s, c) = sim(1, "8");
    let flink = ObjectRef::new("flink.apache.org/v1beta1", "FlinkDeployment", "jobs", "wc");
    s.apply(
        json!({"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "wc", "namespace": "jobs"}, "spec": {"job": {"parallelism": 2}},
        "status": {"ignored": true}}),
    )
    .await
    .unwrap();
    assert!(
        s.status(&flink).await.unwrap().is_none(),
        "applied status is ignored"
    );
    s.set_status(
        &flink,
        json!({"jobStatus": {"jobID": "abc", "state": "RUNNING"}}),
    )
    .await
    .unwrap();
    s.set_status(&flink, json!({"jobStatus": {"state": "FAILED"}}))
        .await
        .unwrap();
    step(&s, &c, 5000);
    // Re-applying the manifest keeps the status.
    s.apply(
        json!({"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "wc", "namespace": "jobs"}, "spec": {"job": {"parallelism": 3}}}),
    )
    .await
    .unwrap();
    assert_eq!(
        s.status(&flink).await.unwrap().unwrap(),
        json!({"jobStatus": {"jobID": "abc", "state": "FAILED"}})
    );
    // On a computed kind the override is merged over what the sim computes, and stays.
    s.apply(deployment("web", 2, "100m")).await.unwrap();
    s.set_status(&dref("web"), json!({"availableReplicas": 0}))
        .await
        .unwrap();
    step(&s, &c, 2000);
    let st = s.status(&dref("web")).await.unwrap().unwrap();
    assert_eq!(
        (st["readyReplicas"].clone(), st["availableReplicas"].clone()),
        (json!(2), json!(0))
    );
    let overrides = s.describe().await.unwrap()["statusOverrides"].clone();
    assert_eq!(overrides.as_array().unwrap().len(), 2);
    s.set_status(&dref("web"), Value::Null).await.unwrap();
    assert_eq!(
        s.status(&dref("web")).await.unwrap().unwrap()["availableReplicas"],
        2
    );
    assert!(s.set_status(&dref("missing"), json!({})).await.is_err());
}

#[tokio::test]
async fn capacity_cut_evicts_and_summary_adds_up() {
    let (s, c) = sim(2, "4");
    s.apply(deployment("web", 4, "2")).await.unwrap();
    step(&s, &c, 1000);
    let sum = s.summary().await.unwrap();
    assert_eq!(sum.node_summary.total_num, 2);
    assert_eq!(
        sum.resource_summary.allocatable["cpu"],
        Quantity::from_units(8)
    );
    assert_eq!(
        sum.resource_summary.allocatable["memory"].to_string(),
        "16Gi"
    );
    assert_eq!(
        sum.resource_summary.allocated["cpu"],
        Quantity::from_units(8)
    );
    assert_eq!(
        sum.resource_summary.allocated["pods"],
        Quantity::from_units(4)
    );
    assert_eq!(
        sum.resource_summary.allocating["pods"],
        Quantity::from_units(0)
    );
    assert_eq!(sum.kubernetes_version, "v1.32.0-sim");
    assert!(sum
        .api_enablements
        .iter()
        .any(|e| e.group_version == "apps/v1"
            && e.resources
                .iter()
                .any(|r| r.name == "deployments" && r.kind == "Deployment")));
    let gvs: Vec<&str> = sum
        .api_enablements
        .iter()
        .map(|e| e.group_version.as_str())
        .collect();
    let mut sorted = gvs.clone();
    sorted.sort();
    assert_eq!(gvs, sorted);

    s.set_capacity(CapacityChange {
        nodes: Some(1),
        ..CapacityChange::default()
    })
    .await
    .unwrap();
    step(&s, &c, 1000);
    assert_eq!(
        phases(&s).await,
        ["Pending", "Pending", "Running", "Running"]
    );
    let sum = s.summary().await.unwrap();
    assert_eq!(
        sum.resource_summary.allocating["cpu"],
        Quantity::from_units(4)
    );
    assert_eq!(
        sum.resource_summary.allocating["pods"],
        Quantity::from_units(2)
    );

    s.set_capacity(CapacityChange {
        cpu: Some(Quantity::parse("2").unwrap()),
        ..CapacityChange::default()
    })
    .await
    .unwrap();
    step(&s, &c, 1000);
    assert_eq!(
        phases(&s).await,
        ["Pending", "Pending", "Pending", "Running"],
        "overcommitted node evicts"
    );
    s.set_capacity(CapacityChange {
        nodes: Some(4),
        cpu: Some(Quantity::parse("4").unwrap()),
        ..CapacityChange::default()
    })
    .await
    .unwrap();
    step(&s, &c, 1000);
    assert_eq!(
        phases(&s).await,
        ["Running", "Running", "Running", "Running"]
    );
    assert_eq!(s.describe().await.unwrap()["capacity"]["nodes"], 4);
}

#[tokio::test]
async fn state_file_restores_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim-state.json");
    let c = clock();
    let s = SimRuntime::open(config(2, "8"), c.clone(), Some(path.clone())).unwrap();
    let mut changes = s.subscribe();
    s.apply(deployment("web", 2, "100m")).await.unwrap();
    assert!(changes.has_changed().unwrap(), "apply is announced");
    changes.mark_unchanged();
    step(&s, &c, 500);
    s.cordon(true).await.unwrap();
    s.save().unwrap();
    let before = pods(&s).await;
    drop(s);

    let s = SimRuntime::open(config(2, "8"), c.clone(), Some(path.clone())).unwrap();
    let after = pods(&s).await;
    let uids = |v: &[Value]| {
        v.iter()
            .map(|p| p["metadata"]["uid"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(uids(&before), uids(&after));
    assert_eq!(s.describe().await.unwrap()["cordoned"], true);
    step(&s, &c, 500);
    assert_eq!(
        phases(&s).await,
        ["Running", "Running"],
        "the startup delay carries over"
    );

    // A different node shape on the command line wins over the saved one.
    s.save().unwrap();
    drop(s);
    let s = SimRuntime::open(config(5, "8"), c, Some(path)).unwrap();
    assert_eq!(s.nodes().len(), 5);
}

#[tokio::test]
async fn bare_pods_and_plain_objects() {
    let (s, c) = sim(2, "8");
    s.apply(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "sim-node-1", "containers": [{"name": "c"}]}}),
    )
    .await
    .unwrap();
    let cm = s
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}))
        .await
        .unwrap();
    assert_eq!(cm["metadata"]["namespace"], "default");
    assert!(cm.get("status").is_none());
    step(&s, &c, 1000);
    let p = s
        .get(&ObjectRef::new("v1", "Pod", "default", "p"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(p["spec"]["nodeName"], "sim-node-1");
    s.delete(&ObjectRef::new("v1", "Pod", "default", "p"))
        .await
        .unwrap();
    assert!(pods(&s).await.is_empty(), "bare pods are not recreated");
    let err = s
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}))
        .await;
    assert!(matches!(err, Err(RuntimeError::Invalid(_))));
}
