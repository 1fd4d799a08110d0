//! The partition brake end to end, with the real server and two real agent processes on
//! 127.0.0.1 and second-scale timings: region-a (a1..a3, one agent process) and region-b
//! (b1, b2, another). Two Deployments are Duplicated on all five members with purge mode
//! Never, so every eviction leaves a task (with its creationTimestamp) that stays.
//!
//! - Region A's agent is SIGKILLed: its three members go not Ready at once, region A (and the
//!   fleet, 3 of 5) is PartialDisruption, and the six evictions (2 bindings × 3 clusters) go
//!   at the secondary rate (1/s here, against a primary of 10/s): their tasks' timestamps
//!   span at least 4 s; the evictionbrakes API, kubectl and /metrics say so.
//! - Both agents are SIGKILLed: the whole fleet is not Ready, the brake stops evictions; the
//!   EvictionHeld Event on a binding says why (the positive signal that the taint manager
//!   looked), and no binding has an eviction task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{events_about, eventually, Agent, ApiClient, Server, FAST_PULL_FAILOVER};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const RBS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const BRAKES: &str = "/apis/flotilla.io/v1alpha1/evictionbrakes";
const APPS: [&str; 2] = ["web-1", "web-2"];

/// [`FAST_PULL_FAILOVER`] with the NoExecute taint 3 s after Ready turns Unknown (so all
/// members of a killed agent are not Ready before the first taint, whatever the phase of
/// their last lease renewal) and fast brake rates.
fn server_flags() -> Vec<&'static str> {
    let mut flags: Vec<&'static str> = Vec::new();
    let mut it = FAST_PULL_FAILOVER.iter();
    while let Some(f) = it.next() {
        flags.push(f);
        if *f == "--failover-eviction-timeout" {
            it.next();
            flags.push("3s");
        }
    }
    flags.extend([
        "--resource-eviction-rate",
        "10",
        "--secondary-resource-eviction-rate",
        "1",
    ]);
    flags
}

/// One agent process hosting `n` simulated members `<prefix>1..` in `region`.
fn region_agent(server: &Server, data: &Path, prefix: &str, n: usize, region: &str) -> Agent {
    let dir = data.join(prefix).display().to_string();
    let ca = server.data_dir.join("tls.crt").display().to_string();
    let token = server.data_dir.join("join.token").display().to_string();
    let n = n.to_string();
    Agent::start(&[
        "--server",
        &server.url,
        "--token-file",
        &token,
        "--ca-file",
        &ca,
        "--data-dir",
        &dir,
        "--sim-members",
        &n,
        "--member-prefix",
        prefix,
        "--region",
        region,
        "--lease-renew-interval-ms",
        "300",
        "--cluster-status-update-frequency-ms",
        "300",
        "--pod-startup-delay-ms",
        "100",
    ])
    .unwrap()
}

struct Fleet {
    server: Server,
    api: ApiClient,
    a: Agent,
    b: Agent,
    _data: tempfile::TempDir,
}

/// The server, both regions Ready, and both Deployments placed on all five members.
fn fleet() -> Fleet {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&data.path().join("server"), &server_flags()).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let a = region_agent(&server, data.path(), "a", 3, "region-a");
    let b = region_agent(&server, data.path(), "b", 2, "region-b");
    flotilla_tests::wait_members_ready(&api, 5);
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
    for app in APPS {
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
        "both bindings on all five members",
        Duration::from_secs(60),
        || {
            APPS.iter()
                .all(|app| {
                    flotilla_tests::placement_of(&api, &binding(app)).is_some_and(|p| p.len() == 5)
                })
                .then_some(())
        },
    );
    Fleet {
        server,
        api,
        a,
        b,
        _data: data,
    }
}

fn binding(app: &str) -> String {
    format!("{RBS}/{app}-deployment")
}

/// Every eviction task of both bindings.
fn tasks(api: &ApiClient) -> Vec<Value> {
    APPS.iter()
        .flat_map(|app| flotilla_tests::eviction_tasks(api, &binding(app)))
        .collect()
}

fn brake(api: &ApiClient, name: &str) -> Value {
    api.get(&format!("{BRAKES}/{name}")).unwrap()
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

#[test]
fn a_region_that_goes_down_at_once_is_evicted_at_the_secondary_rate() {
    let mut f = fleet();
    // The startup grace (one monitor grace period, 2 s) ends; region A is Normal at 10/s.
    eventually("region-a Normal at 10/s", Duration::from_secs(30), || {
        let a = brake(&f.api, "region-a");
        (a["status"]["state"] == "Normal" && a["status"]["rate"] == "10/s").then_some(())
    });

    f.a.process.kill();
    let all = eventually(
        "six eviction tasks (2 bindings × a1..a3)",
        Duration::from_secs(60),
        || {
            let t = tasks(&f.api);
            (t.len() == 6).then_some(t)
        },
    );
    let mut stamps: Vec<chrono::DateTime<chrono::FixedOffset>> = all
        .iter()
        .map(|t| {
            assert!(
                t["fromCluster"].as_str().unwrap_or("").starts_with('a'),
                "{t}"
            );
            chrono::DateTime::parse_from_rfc3339(t["creationTimestamp"].as_str().unwrap()).unwrap()
        })
        .collect();
    stamps.sort();
    let span = (stamps[5] - stamps[0]).num_seconds();
    // Six at 1/s (burst 1) take at least 5 s; at the primary 10/s they would take 0.5 s.
    // Timestamps are whole seconds, hence 4.
    assert!(span >= 4, "the evictions spanned {span} s: {stamps:?}");

    let a = brake(&f.api, "region-a");
    assert_eq!(a["status"]["state"], "PartialDisruption", "{a}");
    assert_eq!(a["status"]["rate"], "1/s", "{a}");
    assert_eq!(a["status"]["notReadyClusters"], 3, "{a}");
    assert!(
        a["status"]["heldEvictions"].as_u64().unwrap_or(0) > 0,
        "{a}"
    );
    assert!(
        a["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("3 of 3 clusters of region region-a are not Ready"),
        "{a}"
    );
    // Region B keeps its clusters; the fleet (3 of 5 down) slows it too.
    let b = brake(&f.api, "region-b");
    assert_eq!(b["status"]["state"], "PartialDisruption", "{b}");
    assert_eq!(b["status"]["notReadyClusters"], 0, "{b}");
    assert!(
        metric(
            &f.server,
            "flotilla_evictions_held_total",
            &[r#"reason="RateLimited""#, r#"region="region-a""#]
        ) > 0.0
    );
    assert_eq!(
        metric(
            &f.server,
            "flotilla_eviction_brake_state",
            &[r#"region="region-a""#, r#"state="PartialDisruption""#]
        ),
        1.0
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
        .find(|l| l.starts_with("region-a "))
        .unwrap_or_else(|| panic!("no region-a row: {out}"));
    assert!(
        row.contains("PartialDisruption") && row.contains("1/s"),
        "{out}"
    );
    let yaml = k
        .run(&["get", "evictionbrake", "region-b", "-o", "yaml"])
        .unwrap();
    assert!(yaml.contains("kind: EvictionBrake"), "{yaml}");
    assert!(yaml.contains("state: PartialDisruption"), "{yaml}");
    drop(f.b);
}

#[test]
fn when_the_whole_fleet_goes_down_nothing_is_evicted_and_an_event_says_why() {
    let mut f = fleet();
    f.a.process.kill();
    f.b.process.kill();
    // The positive signal: the taint manager wanted to evict and the brake held it.
    let event = eventually(
        "an EvictionHeld Event on a binding",
        Duration::from_secs(60),
        || {
            APPS.iter()
                .flat_map(|app| events_about(&f.api, "default", &format!("{app}-deployment")))
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
    for app in APPS {
        assert_eq!(
            flotilla_tests::placement_of(&f.api, &binding(app)).map(|p| p.len()),
            Some(5),
            "{app} keeps all five clusters"
        );
    }
    for region in ["region-a", "region-b"] {
        let b = brake(&f.api, region);
        assert_eq!(b["status"]["state"], "FullDisruption", "{b}");
        assert_eq!(b["status"]["rate"], "stopped", "{b}");
    }
    // Both regions hold evictions; the Event seen first may be about a binding of region-b,
    // whose hold was counted before region-a's.
    eventually(
        "an eviction held in region-a for FullDisruption",
        Duration::from_secs(30),
        || {
            (metric(
                &f.server,
                "flotilla_evictions_held_total",
                &[r#"reason="FullDisruption""#, r#"region="region-a""#],
            ) > 0.0)
                .then_some(())
        },
    );
}
