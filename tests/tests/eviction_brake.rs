//! The eviction brake end to end, with the real server at its default brake settings (only
//! `--fast-failover` given, for second-scale detection) and five real agent processes on
//! 127.0.0.1, one member each. Twelve Deployments are Duplicated on all five members with
//! purge mode Never, so every eviction leaves a task (with its creationTimestamp) that stays.
//!
//! - One member's agent is SIGKILLed: the brake lets that cluster out at once, and all twelve
//!   of its bindings leave it within seconds (Karmada's pacing of 0.5 bindings/s would take
//!   24 s); the evictionbrakes API, kubectl and /metrics say so.
//! - Four of five are SIGKILLed at once: the region is PartialDisruption, one cluster is let
//!   out, the other three wait for their turns 100 s apart (0.01 clusters/s), so in the first
//!   20 s at most one cluster's bindings are evicted; the EvictionBrake object names the
//!   waiting clusters and their turns.
//! - All five are SIGKILLed: the whole fleet is not Ready, the brake stops evictions; the
//!   EvictionHeld Event on a binding says why (the positive signal that the taint manager
//!   looked), and no binding has an eviction task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    events_about, eventually, pull_agent, Agent, ApiClient, Server, FAST_PULL_FAILOVER,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const RBS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const BRAKES: &str = "/apis/flotilla.io/v1alpha1/evictionbrakes";
const APPS: usize = 12;
const MEMBERS: [&str; 5] = ["member1", "member2", "member3", "member4", "member5"];

struct Fleet {
    server: Server,
    api: ApiClient,
    agents: Vec<Agent>,
    _data: tempfile::TempDir,
}

/// The server at its default brake settings (`extra`: more flags), five members Ready, and
/// every Deployment placed on all five.
fn fleet_with(extra: &[&str]) -> Fleet {
    let data = tempfile::tempdir().unwrap();
    let mut flags = FAST_PULL_FAILOVER.to_vec();
    flags.extend_from_slice(extra);
    let server = Server::start(&data.path().join("server"), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let agents = MEMBERS
        .iter()
        .map(|m| pull_agent(&server, m, data.path()))
        .collect();
    flotilla_tests::wait_members_ready(&api, MEMBERS.len());
    let policy = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "labelSelector": {"matchLabels": {"tier": "web"}}}],
                 "placement": {"replicaScheduling": {"replicaSchedulingType": "Duplicated"}},
                 "failover": {"cluster": {"purgeMode": "Never"}}}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
            Some(&policy),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    for i in 0..APPS {
        let app = format!("web-{i}");
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": "default", "labels": {"tier": "web"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let (code, body) = api
            .send(
                "POST",
                "/apis/apps/v1/namespaces/default/deployments",
                Some(&d),
            )
            .unwrap();
        assert_eq!(code, 201, "{body}");
    }
    eventually(
        "every binding on all five members",
        Duration::from_secs(60),
        || {
            (0..APPS)
                .all(|i| {
                    flotilla_tests::placement_of(&api, &binding(i))
                        .is_some_and(|p| p.len() == MEMBERS.len())
                })
                .then_some(())
        },
    );
    // The startup grace (one monitor grace period, 2 s) is over.
    eventually("the brake Normal", Duration::from_secs(30), || {
        let b = brake(&api);
        (b["status"]["state"] == "Normal").then_some(())
    });
    Fleet {
        server,
        api,
        agents,
        _data: data,
    }
}

fn fleet() -> Fleet {
    fleet_with(&[])
}

fn binding(i: usize) -> String {
    format!("{RBS}/web-{i}-deployment")
}

/// Every eviction task of every binding.
fn tasks(api: &ApiClient) -> Vec<Value> {
    (0..APPS)
        .flat_map(|i| flotilla_tests::eviction_tasks(api, &binding(i)))
        .collect()
}

/// The clusters evicted from some binding so far.
fn evicted_clusters(api: &ApiClient) -> BTreeSet<String> {
    tasks(api)
        .iter()
        .filter_map(|t| t["fromCluster"].as_str().map(str::to_string))
        .collect()
}

/// The brake of the clusters without a region.
fn brake(api: &ApiClient) -> Value {
    api.get(&format!("{BRAKES}/no-region")).unwrap()
}

/// The value of the sample of `name` whose labels include every one of `labels` (`k="v"`) in
/// /metrics (0 when absent).
fn metric(server: &Server, name: &str, labels: &[&str]) -> f64 {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    let http = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let text = http
        .get(format!("{}/metrics", server.url))
        .bearer_auth(&server.token)
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn one_killed_member_of_five_is_evacuated_at_once() {
    let mut f = fleet();
    f.agents[0].process.kill();
    // Detection takes about 4.3 s (the taint 4 s after the last lease renewal, seen within
    // a 300 ms monitor period, toleration 0); Karmada's 0.5 bindings/s would then need 24 s
    // more for twelve bindings.
    let all = eventually(
        "every binding evicted from member1",
        Duration::from_secs(20),
        || {
            let t = tasks(&f.api);
            (t.len() == APPS).then_some(t)
        },
    );
    assert!(all.iter().all(|t| t["fromCluster"] == "member1"), "{all:?}");
    let mut stamps: Vec<chrono::DateTime<chrono::FixedOffset>> = all
        .iter()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t["creationTimestamp"].as_str().unwrap()).unwrap()
        })
        .collect();
    stamps.sort();
    // All at once: within two whole-second stamps (Karmada's pacing: 22 s apart).
    let span = (stamps[APPS - 1] - stamps[0]).num_seconds();
    assert!(span <= 2, "the evictions spanned {span} s: {stamps:?}");

    let b = brake(&f.api);
    assert_eq!(b["status"]["state"], "Normal", "{b}");
    assert_eq!(b["status"]["rate"], "0.1 clusters/s", "{b}");
    assert_eq!(names(&b["status"]["releasedClusters"]), ["member1"], "{b}");
    assert_eq!(b["status"]["notReadyClusters"], 1, "{b}");
    assert_eq!(
        metric(
            &f.server,
            "flotilla_eviction_brake_clusters_released_total",
            &[r#"region="(none)""#]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &f.server,
            "flotilla_eviction_brake_rate",
            &[r#"region="(none)""#]
        ),
        0.1
    );
    // Read-only: computed on read, nothing to write.
    let (code, answer) = f
        .api
        .send("POST", BRAKES, Some(&json!({"metadata": {"name": "x"}})))
        .unwrap();
    assert_eq!(code, 405, "{answer}");
    assert_eq!(answer["kind"], "Status", "{answer}");
    flotilla_tests::require_kubectl();
    let k = flotilla_tests::Kubectl::new(&f.server).unwrap();
    let out = k.run(&["get", "evictionbrakes"]).unwrap();
    let row = out
        .lines()
        .find(|l| l.starts_with("no-region "))
        .unwrap_or_else(|| panic!("no no-region row: {out}"));
    assert!(
        row.contains("Normal") && row.contains("0.1 clusters/s"),
        "{out}"
    );
    let yaml = k
        .run(&["get", "evictionbrake", "no-region", "-o", "yaml"])
        .unwrap();
    assert!(yaml.contains("kind: EvictionBrake"), "{yaml}");
    assert!(yaml.contains("releasedClusters:"), "{yaml}");
}

#[test]
fn four_of_five_killed_at_once_let_out_one_cluster_in_the_first_20_seconds() {
    let mut f = fleet();
    let wall_killed = chrono::Utc::now();
    for a in &mut f.agents[1..] {
        a.process.kill();
    }
    // The positive signal: one cluster let out, the three others queued for their turns.
    let b = eventually(
        "one cluster released and three queued",
        Duration::from_secs(30),
        || {
            let b = brake(&f.api);
            if names(&b["status"]["releasedClusters"]).len() == 1
                && names(&b["status"]["queuedClusters"]).len() == 3
            {
                Ok(b)
            } else {
                Err(b)
            }
        },
    );
    assert_eq!(b["status"]["state"], "PartialDisruption", "{b}");
    assert_eq!(b["status"]["rate"], "0.01 clusters/s", "{b}");
    assert_eq!(b["status"]["notReadyClusters"], 4, "{b}");
    // The brake's queue is the evidence that nothing else moves for a while: the next turn
    // comes 100 s after the first release, well past 20 s after the kill.
    let turns: Vec<chrono::DateTime<chrono::Utc>> = b["status"]["queuedClusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| flotilla_tests::time_at(c, "/turnAt"))
        .collect();
    assert!(
        turns
            .iter()
            .all(|t| *t > wall_killed + chrono::Duration::seconds(20)),
        "{b}"
    );
    let released = names(&b["status"]["releasedClusters"]);
    eventually(
        "all bindings evicted from the released cluster",
        Duration::from_secs(20),
        || (tasks(&f.api).len() == APPS).then_some(()),
    );
    let evicted = evicted_clusters(&f.api);
    assert_eq!(evicted.iter().collect::<Vec<_>>(), [&released[0]]);
    // Checked before the next turn, so the check means something.
    assert!(
        turns.iter().all(|t| chrono::Utc::now() < *t),
        "checked after a turn came: {turns:?}"
    );
    assert!(
        metric(
            &f.server,
            "flotilla_evictions_held_total",
            &[r#"reason="RateLimited""#, r#"region="(none)""#]
        ) > 0.0
    );
    assert_eq!(
        metric(
            &f.server,
            "flotilla_eviction_brake_clusters_queued",
            &[r#"region="(none)""#]
        ),
        3.0
    );
}

#[test]
fn when_the_whole_fleet_goes_down_nothing_is_evicted_and_an_event_says_why() {
    // The profile alone: --fast-failover taints a member 4 s after its last lease renewal,
    // 2 s after it is seen Unknown, so five agents killed one after the other (seen Unknown
    // up to 0.7 s apart on a loaded machine) are all Unknown before the first taint, as the
    // members of a partition are.
    let mut f = fleet_with(&[]);
    for a in &mut f.agents {
        a.process.kill();
    }
    // The positive signal: the taint manager wanted to evict and the brake held it.
    let event = eventually(
        "an EvictionHeld Event on a binding",
        Duration::from_secs(60),
        || {
            (0..APPS)
                .flat_map(|i| events_about(&f.api, "default", &format!("web-{i}-deployment")))
                .find(|e| e["reason"] == "EvictionHeld")
        },
    );
    let message = event["message"].as_str().unwrap_or("");
    assert!(
        message.contains("FullDisruption")
            && message.contains("all 5 clusters of the fleet are not Ready"),
        "{event}"
    );
    assert_eq!(event["type"], "Warning");
    assert!(tasks(&f.api).is_empty(), "{:?}", tasks(&f.api));
    for i in 0..APPS {
        assert_eq!(
            flotilla_tests::placement_of(&f.api, &binding(i)).map(|p| p.len()),
            Some(MEMBERS.len()),
            "web-{i} keeps all five clusters"
        );
    }
    let b = brake(&f.api);
    assert_eq!(b["status"]["state"], "FullDisruption", "{b}");
    assert_eq!(b["status"]["rate"], "stopped", "{b}");
    assert!(names(&b["status"]["releasedClusters"]).is_empty(), "{b}");
    assert!(
        metric(
            &f.server,
            "flotilla_evictions_held_total",
            &[r#"reason="FullDisruption""#, r#"region="(none)""#],
        ) > 0.0
    );
}
