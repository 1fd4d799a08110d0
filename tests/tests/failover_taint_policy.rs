//! A team's own failover rule end to end: with `--enable-automatic-no-execute-taints=false`
//! the built-in NoExecute taints are off, and a ClusterTaintPolicy created with kubectl adds a
//! NoExecute taint when a third party writes a custom condition (`NetworkOK=False`) into
//! member1's status. The taint manager evicts member1, scenario 02's workload (Divided 1:2
//! over member1 and member2) ends up with all 3 replicas on member2, and member1's copy goes.
//! The member's own status writer (its agent) keeps the foreign condition when it reports.
//! The negative: a member that turns not Ready gets the built-in NoSchedule taint and no
//! built-in NoExecute taint, though `--failover-eviction-timeout 0s` would have added it in the
//! same pass; and `NetworkOK=True` removes the policy's taint (removeOnConditions) without
//! moving anything back. Uses three simulated members (`--sim-members 3`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    events_about, eventually, member_call, placement_of, require_kubectl, scenarios_dir,
    wait_members_ready, ApiClient, Kubectl, Server,
};
use serde_json::{json, Value};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";

const SERVER_FLAGS: &[&str] = &[
    "--sim-members",
    "3",
    "--sim-pod-startup-delay-ms",
    "100",
    "--sim-cluster-status-update-frequency-ms",
    "300",
    "--enable-automatic-no-execute-taints=false",
    // Were the built-in NoExecute taints on, they would come with the NoSchedule ones.
    "--failover-eviction-timeout",
    "0s",
    // The partition brake's startup wait and pacing are not what this test is about
    // (flotilla_tests::NO_EVICTION_PACING).
    "--enable-eviction-rate-limit=false",
    "--eviction-startup-grace-period",
    "0s",
];

const POLICY: &str = r#"apiVersion: policy.karmada.io/v1alpha1
kind: ClusterTaintPolicy
metadata:
  name: network-down
spec:
  targetClusters:
    clusterNames: [member1]
  addOnConditions:
    - conditionType: NetworkOK
      operator: In
      statusValues: ["False"]
  removeOnConditions:
    - conditionType: NetworkOK
      operator: In
      statusValues: ["True"]
  taints:
    - key: example.com/network-down
      effect: NoExecute
"#;

const NETWORK_DOWN: &str = "example.com/network-down:NoExecute";

fn kubectl_apply_stdin(k: &Kubectl, yaml: &str) -> String {
    let mut child = k
        .command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply -f - failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn cluster(api: &ApiClient, name: &str) -> Value {
    api.get(&format!("{CLUSTERS}/{name}")).unwrap()
}

fn condition(c: &Value, type_: &str) -> Option<String> {
    c.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|x| x["type"] == type_)?["status"]
        .as_str()
        .map(String::from)
}

fn taints(c: &Value) -> Vec<String> {
    c.pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
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

fn events(api: &ApiClient, name: &str, reason: &str) -> Vec<String> {
    events_about(api, "default", name)
        .iter()
        .filter(|e| e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(String::from))
        .collect()
}

/// The messages of member1's Events of `reason` that the policy wrote (the built-in taint
/// controller uses the same reasons for its own taints).
fn policy_events(api: &ApiClient, reason: &str) -> Vec<String> {
    events(api, "member1", reason)
        .into_iter()
        .filter(|m| m.contains("ClusterTaintPolicy network-down"))
        .collect()
}

/// Sets member1's NetworkOK condition through the API (read, edit, PUT /status; a conflict
/// with the agent's own status write reads again).
fn set_network_ok(api: &ApiClient, status: &str) {
    for _ in 0..20 {
        let mut c = cluster(api, "member1");
        let conditions = c["status"]["conditions"].as_array_mut().unwrap();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let cond = json!({"type": "NetworkOK", "status": status, "reason": "Probe",
            "message": format!("network probe says {status}"), "lastTransitionTime": now});
        match conditions.iter_mut().find(|x| x["type"] == "NetworkOK") {
            Some(x) => *x = cond,
            None => conditions.push(cond),
        }
        match api
            .send("PUT", &format!("{CLUSTERS}/member1/status"), Some(&c))
            .unwrap()
        {
            (200, _) => return,
            (409, _) => continue,
            (code, body) => panic!("PUT member1/status answered {code}: {body}"),
        }
    }
    panic!("could not write member1's NetworkOK condition");
}

#[test]
fn a_cluster_taint_policy_on_a_custom_condition_moves_the_workload() {
    require_kubectl();
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), SERVER_FLAGS).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let k = Kubectl::new(&server).unwrap();
    let members = server.sim_members_url();
    wait_members_ready(&api, 3);

    let scenario = scenarios_dir().join("02-divided-weighted-failover.yaml");
    k.run(&["apply", "-f", &scenario.display().to_string()])
        .unwrap();
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    eventually("the 1:2 placement", Duration::from_secs(60), || {
        (placement_of(&api, RB) == Some(want.clone())).then_some(())
    });

    // The team's rule, applied with kubectl, readable with kubectl.
    let applied = kubectl_apply_stdin(&k, POLICY);
    assert!(applied.contains("network-down"), "{applied}");
    let listed = k.run(&["get", "clustertaintpolicies"]).unwrap();
    assert!(listed.contains("network-down"), "{listed}");

    // A third party (a network prober) reports NetworkOK=False on member1's status.
    k.run(&[
        "patch",
        "cluster",
        "member1",
        "--subresource=status",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"NetworkOK","status":"False","reason":"ProbeFailed","message":"the network probe failed"}}]"#,
    ])
    .unwrap();
    let added = eventually(
        "the policy's taint on member1, and its Event",
        Duration::from_secs(30),
        || {
            let taint = taints(&cluster(&api, "member1")).contains(&NETWORK_DOWN.to_string());
            let e = policy_events(&api, "TaintClusterSucceed");
            (taint && !e.is_empty()).then_some(e)
        },
    );
    assert!(added.iter().all(|m| m.contains(NETWORK_DOWN)), "{added:?}");

    // The taint manager evicts member1; member2 gets all 3; member1's copy goes.
    let moved = vec![("member2".to_string(), 3)];
    eventually(
        "member2 to get all 3 replicas",
        Duration::from_secs(60),
        || (placement_of(&api, RB) == Some(moved.clone())).then_some(()),
    );
    eventually(
        "the eviction Event naming member1",
        Duration::from_secs(30),
        || {
            events(&api, "nginx-deployment", "EvictWorkloadFromClusterSucceed")
                .iter()
                .any(|m| m.contains("member1"))
                .then_some(())
        },
    );
    let object = |m: &str| {
        format!(
            "{members}/members/{m}/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx"
        )
    };
    eventually(
        "member2 to run 3 replicas and member1 none",
        Duration::from_secs(60),
        || {
            let (code2, d2) = member_call("GET", &object("member2"), None).ok()?;
            let (code1, _) = member_call("GET", &object("member1"), None).ok()?;
            (code2 == 200 && d2["status"]["readyReplicas"] == 3 && code1 == 404).then_some(())
        },
    );
    eventually("the eviction task to end", Duration::from_secs(60), || {
        let rb = api.get(RB).ok()?;
        rb["spec"]["gracefulEvictionTasks"]
            .as_array()
            .is_none_or(Vec::is_empty)
            .then_some(())
    });

    // member1's agent reports its own status again (a node more, after a capacity change)
    // and keeps the foreign condition.
    let (code, body) = member_call(
        "POST",
        &format!("{members}/members/member1/faults/capacity"),
        Some(&json!({"nodes": 4})),
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    let c = eventually(
        "member1's agent to report 4 nodes",
        Duration::from_secs(30),
        || {
            let c = cluster(&api, "member1");
            (c.pointer("/status/nodeSummary/totalNum") == Some(&json!(4))).then_some(c)
        },
    );
    assert_eq!(condition(&c, "NetworkOK").as_deref(), Some("False"), "{c}");
    assert_eq!(condition(&c, "Ready").as_deref(), Some("True"), "{c}");
    assert!(taints(&c).contains(&NETWORK_DOWN.to_string()), "{c}");

    // The negative: member3 turns not Ready; it gets the built-in NoSchedule taint in a pass
    // that would also have added the NoExecute one (timeout 0 s), and gets no NoExecute taint.
    let (code, body) = member_call(
        "POST",
        &format!("{members}/members/member3/faults/unhealthy"),
        Some(&json!({"enabled": true})),
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    let member3 = eventually(
        "member3 not Ready with the not-ready NoSchedule taint",
        Duration::from_secs(30),
        || {
            let c = cluster(&api, "member3");
            (condition(&c, "Ready").as_deref() == Some("False")
                && taints(&c).contains(&"cluster.karmada.io/not-ready:NoSchedule".to_string()))
            .then_some(c)
        },
    );
    assert_eq!(
        taints(&member3),
        vec!["cluster.karmada.io/not-ready:NoSchedule".to_string()],
        "no built-in NoExecute taint: {member3}"
    );

    // The prober reports NetworkOK=True: removeOnConditions take the taint off; nothing moves
    // back.
    set_network_ok(&api, "True");
    let removed = eventually(
        "the policy's taint to go, and its Event",
        Duration::from_secs(30),
        || {
            let gone = !taints(&cluster(&api, "member1")).contains(&NETWORK_DOWN.to_string());
            let e = policy_events(&api, "UntaintClusterSucceed");
            (gone && !e.is_empty()).then_some(e)
        },
    );
    assert!(
        removed.iter().all(|m| m.contains(NETWORK_DOWN)),
        "{removed:?}"
    );
    assert!(taints(&cluster(&api, "member1")).is_empty());
    assert_eq!(placement_of(&api, RB), Some(moved));
}
