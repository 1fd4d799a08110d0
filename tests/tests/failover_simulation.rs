//! The failover dry-run end to end, with the real server and one real pull agent per member on
//! 127.0.0.1 and second-scale timings: scenario 02 (nginx, Divided 1:2 over member1 and
//! member2) beside three more bindings — `web`, Divided over all three members, `api`, on
//! member2 and member3 only, and `solo`, allowed on member1 alone. The dry-run "member1 fails"
//! is issued through kubectl (`kubectl create -f sim.yaml -o yaml`) and through plain HTTP;
//! both answer the same prediction and change nothing. Then member1's agent is SIGKILLed, and
//! the placements the controllers write must equal the prediction exactly, with the evictions
//! it named, and `solo` unplaceable as predicted: NoClusterFit, its Work on member1 kept.
//!
//! The server runs the eviction brake with its defaults (one failed cluster let out per 10 s
//! per region, the first at once; a startup grace of one monitor grace period, long over when
//! the dry-run is asked): the answer says member1 is let out at once and its three evictions
//! all go 4 s after the failure (the profile's taint, 4 s after the last lease renewal),
//! undelayed, and the real evictions happen together. The
//! dry-run of every member failing predicts nothing evicted: every eviction held by
//! FullDisruption, every placement kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    events_about, eventually, healthy_on, placement_of, post_manifests, require_kubectl,
    scenario_text, ApiClient, Kubectl,
};
use serde_json::{json, Value};
use std::time::Duration;

const RBS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const SIMS: &str = "/apis/flotilla.io/v1alpha1/failoversimulations";

/// More workloads beside scenario 02: `web` over the three members (4 replicas, equal
/// weights), `api` on member2 and member3 only (not touched by member1's failure), `solo` on
/// member1 only (nowhere to go).
const MORE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  replicas: 4
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
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: default
  labels: {app: api}
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
        - name: api
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
    clusterAffinity:
      clusterNames: [member1, member2, member3]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: api
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: api
  placement:
    clusterAffinity:
      clusterNames: [member2, member3]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: solo
  namespace: default
  labels: {app: solo}
spec:
  replicas: 1
  selector:
    matchLabels: {app: solo}
  template:
    metadata:
      labels: {app: solo}
    spec:
      containers:
        - name: solo
          image: nginx
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: solo
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: solo
  placement:
    clusterAffinity:
      clusterNames: [member1]
"#;

const SIM_YAML: &str = "apiVersion: flotilla.io/v1alpha1
kind: FailoverSimulation
metadata:
  name: member1-fails
spec:
  failedClusters: [member1]
";

const BINDINGS: [&str; 4] = [
    "nginx-deployment",
    "web-deployment",
    "api-deployment",
    "solo-deployment",
];

type Placement = Vec<(String, i64)>;

fn placements(api: &ApiClient) -> Option<Vec<Placement>> {
    BINDINGS
        .iter()
        .map(|b| placement_of(api, &format!("{RBS}/{b}")))
        .collect()
}

/// The predicted `spec.clusters` of every binding (bindings the answer does not list keep
/// theirs), and the predicted evictions as (binding, cluster, afterSeconds).
fn prediction(answer: &Value, now: &[Placement]) -> (Vec<Placement>, Vec<(String, String, i64)>) {
    let listed = answer["status"]["bindings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut evictions = Vec::new();
    let placements = BINDINGS
        .iter()
        .zip(now)
        .map(
            |(name, current)| match listed.iter().find(|b| b["name"] == *name) {
                Some(b) => {
                    for e in b["evictions"].as_array().cloned().unwrap_or_default() {
                        evictions.push((
                            name.to_string(),
                            e["cluster"].as_str().unwrap_or_default().to_string(),
                            e["afterSeconds"].as_i64().unwrap_or(-1),
                        ));
                    }
                    b["clustersAfter"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or_default().to_string(),
                                c["replicas"].as_i64().unwrap_or(0),
                            )
                        })
                        .collect()
                }
                None => current.clone(),
            },
        )
        .collect();
    (placements, evictions)
}

/// The binding is as the scheduler last saw it and Healthy wherever it is placed (nothing is
/// still settling that would change what the dry-run reads).
fn settled(api: &ApiClient, binding: &str, placed: &Placement) -> bool {
    let path = format!("{RBS}/{binding}");
    let Ok(rb) = api.get(&path) else {
        return false;
    };
    rb["metadata"]["generation"] == rb["status"]["schedulerObservedGeneration"]
        && placed.iter().all(|(c, _)| healthy_on(api, &path, c))
}

#[test]
fn the_dry_run_predicts_the_placements_a_real_member_failure_produces() {
    require_kubectl();
    let data = tempfile::tempdir().unwrap();
    let (server, api, [mut member1, _member2, _member3]) =
        flotilla_tests::fast_pull_fleet(data.path());
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    post_manifests(&api, MORE);
    let before = eventually(
        "nginx 1:2 on member1 and member2, web and api placed",
        Duration::from_secs(60),
        || {
            let p = placements(&api)?;
            (p[0] == [("member1".to_string(), 1), ("member2".to_string(), 2)]
                && p[1].iter().any(|(c, _)| c == "member1")
                && p.iter().all(|one| !one.is_empty())
                && BINDINGS
                    .iter()
                    .zip(&p)
                    .all(|(b, placed)| settled(&api, b, placed)))
            .then_some(p)
        },
    );
    // Members keep reporting status, so the store's resourceVersion moves on its own (the API
    // test pins it): the bindings' specs and generations must not.
    let generations = || -> Vec<Value> {
        BINDINGS
            .iter()
            .map(|b| api.get(&format!("{RBS}/{b}")).unwrap()["metadata"]["generation"].clone())
            .collect()
    };
    let generations_before = generations();

    // The dry-run through kubectl: the answer is printed as YAML.
    let kubectl = Kubectl::new(&server).unwrap();
    let file = data.path().join("sim.yaml");
    std::fs::write(&file, SIM_YAML).unwrap();
    let text = kubectl
        .run(&["create", "-f", file.to_str().unwrap(), "-o", "yaml"])
        .unwrap();
    let by_kubectl: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(by_kubectl["kind"], "FailoverSimulation", "{text}");
    // And through plain HTTP.
    let (code, by_http) = api
        .send(
            "POST",
            SIMS,
            Some(
                &json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
                         "metadata": {"name": "member1-fails"},
                         "spec": {"failedClusters": ["member1"]}}),
            ),
        )
        .unwrap();
    assert_eq!(code, 201, "{by_http}");
    let (predicted, evictions) = prediction(&by_kubectl, &before);
    assert_eq!(
        prediction(&by_http, &before),
        (predicted.clone(), evictions.clone()),
        "kubectl and HTTP answer the same"
    );
    // What the answer says, checked by hand once: nginx moves to member2 whole; web loses
    // member1; api is not touched; the evictions are due 4 s after the failure (Unknown after
    // the 2 s monitor grace period, the NoExecute taint 4 s after the last lease renewal,
    // tolerations of 0 s), and the brake, which lets member1 out at once, delays none of them.
    assert_eq!(predicted[0], [("member2".to_string(), 3)]);
    assert!(
        predicted[1].iter().all(|(c, _)| c != "member1")
            && predicted[1].iter().map(|(_, r)| r).sum::<i64>() == 4,
        "{predicted:?}"
    );
    assert_eq!(predicted[2], before[2]);
    assert!(predicted[3].is_empty(), "{predicted:?}");
    assert_eq!(
        evictions,
        [
            ("nginx-deployment".to_string(), "member1".to_string(), 4),
            ("web-deployment".to_string(), "member1".to_string(), 4),
            ("solo-deployment".to_string(), "member1".to_string(), 4)
        ],
        "{text}"
    );
    let delay = |name: &str| {
        let b = by_kubectl["status"]["bindings"]
            .as_array()
            .and_then(|bs| bs.iter().find(|b| b["name"] == name))
            .cloned()
            .unwrap_or_default();
        let brake = &b["evictions"][0]["brake"];
        (
            brake["reasons"].clone(),
            brake["dueAfterSeconds"].as_i64(),
            brake["delaySeconds"].as_i64(),
        )
    };
    assert_eq!(
        delay("nginx-deployment"),
        (Value::Null, None, None),
        "{text}"
    );
    for name in ["solo-deployment", "web-deployment"] {
        assert_eq!(delay(name), (Value::Null, None, None), "{name}: {text}");
    }
    let brake = &by_kubectl["status"]["brake"];
    assert_eq!(brake["pacing"], true, "{text}");
    assert_eq!(brake["regions"].as_array().map(Vec::len), Some(1), "{text}");
    let region = &brake["regions"][0];
    assert_eq!(
        (
            &region["region"],
            &region["state"],
            &region["rate"],
            &region["clusters"],
            &region["notReadyClusters"],
            &region["evictions"],
            &region["delayedEvictions"],
        ),
        (
            &json!("(none)"),
            &json!("Normal"),
            &json!("0.1 clusters/s"),
            &json!(3),
            &json!(1),
            &json!(3),
            &json!(0)
        ),
        "{text}"
    );
    assert_eq!(region["clustersPerSecond"], 0.1, "{text}");
    assert_eq!(by_kubectl["status"]["summary"]["delayed"], 0, "{text}");
    assert_eq!(by_kubectl["status"]["summary"]["affected"], 3, "{text}");
    let unplaceable = &by_kubectl["status"]["unplaceable"];
    assert_eq!(unplaceable.as_array().map(Vec::len), Some(1), "{text}");
    assert_eq!(unplaceable[0]["name"], "solo-deployment");
    assert_eq!(unplaceable[0]["reason"], "NoClusterFit");
    assert_eq!(unplaceable[0]["keeps"], json!(["member1"]));
    // Nothing was stored or changed.
    assert_eq!(generations(), generations_before);
    assert_eq!(placements(&api), Some(before.clone()));
    let (code, _) = api.send("GET", SIMS, None).unwrap();
    assert_eq!(code, 405);

    // Every member failing: the brake sees a fleet cut off, so nothing is evicted; each
    // binding keeps its placement, every eviction held by FullDisruption.
    let (code, all) = api
        .send(
            "POST",
            SIMS,
            Some(
                &json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
                         "metadata": {"name": "all-fail"},
                         "spec": {"failedClusters": ["member1", "member2", "member3"]}}),
            ),
        )
        .unwrap();
    assert_eq!(code, 201, "{all}");
    let status = &all["status"];
    assert_eq!(status["summary"]["evictions"], 0, "{all}");
    assert_eq!(status["summary"]["affected"], 4, "{all}");
    for (name, placed) in BINDINGS.iter().zip(&before) {
        let b = status["bindings"]
            .as_array()
            .and_then(|bs| bs.iter().find(|b| b["name"] == *name))
            .unwrap_or_else(|| panic!("{name} not in {all}"));
        assert_eq!(b["clustersAfter"], b["clustersBefore"], "{all}");
        let mut held: Vec<(String, String)> = b["held"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                assert!(
                    h["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("all 3 clusters of the fleet are not Ready")),
                    "{h}"
                );
                (
                    h["cluster"].as_str().unwrap().to_string(),
                    h["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        held.sort();
        let want: Vec<(String, String)> = placed
            .iter()
            .map(|(c, _)| (c.clone(), "FullDisruption".to_string()))
            .collect();
        assert_eq!(held, want, "{name}: {all}");
    }
    let region = &status["brake"]["regions"][0];
    assert_eq!(region["state"], "FullDisruption", "{all}");
    assert_eq!(region["rate"], "stopped", "{all}");
    assert_eq!(region["heldEvictions"], 8, "{all}");
    assert_eq!(generations(), generations_before);

    // The real failure.
    member1.process.kill();
    eventually(
        "the placements the dry-run predicted",
        Duration::from_secs(60),
        || (placements(&api)? == predicted).then_some(()),
    );
    for (binding, cluster, _) in &evictions {
        let evicted = eventually(
            &format!("the eviction Event of {binding}"),
            Duration::from_secs(30),
            || {
                events_about(&api, "default", binding)
                    .iter()
                    .find(|e| {
                        e["reason"] == "EvictWorkloadFromClusterSucceed"
                            && e["message"]
                                .as_str()
                                .is_some_and(|m| m.contains(cluster.as_str()))
                    })
                    .cloned()
            },
        );
        assert_eq!(evicted["type"], "Normal", "{evicted}");
    }
    // The brake let them go together, as predicted (Events are stamped in whole seconds).
    let mut stamps: Vec<chrono::DateTime<chrono::Utc>> = evictions
        .iter()
        .map(|(binding, _, _)| {
            events_about(&api, "default", binding)
                .iter()
                .find(|e| e["reason"] == "EvictWorkloadFromClusterSucceed")
                .and_then(|e| e["firstTimestamp"].as_str())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap()
        })
        .collect();
    stamps.sort();
    let gaps: Vec<i64> = stamps
        .windows(2)
        .map(|w| (w[1] - w[0]).num_seconds())
        .collect();
    assert!(
        gaps.iter().sum::<i64>() <= 1,
        "evictions at once: {stamps:?}"
    );
    // Exactly the predicted evictions: no other binding was evicted, and the placements stay
    // as predicted once the eviction tasks are done.
    let evicted_bindings: Vec<&str> = BINDINGS
        .iter()
        .copied()
        .filter(|b| {
            events_about(&api, "default", b)
                .iter()
                .any(|e| e["reason"] == "EvictWorkloadFromClusterSucceed")
        })
        .collect();
    assert_eq!(
        evicted_bindings,
        ["nginx-deployment", "web-deployment", "solo-deployment"]
    );
    // solo could not be placed, as predicted: the scheduler says NoClusterFit, and its task and
    // its Work on member1 stay (the last copy is not deleted).
    let solo = format!("{RBS}/solo-deployment");
    let reason = eventually(
        "solo's Scheduled condition",
        Duration::from_secs(30),
        || {
            let rb = api.get(&solo).ok()?;
            rb["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Scheduled" && c["status"] == "False")
                .and_then(|c| c["reason"].as_str().map(String::from))
        },
    );
    assert_eq!(reason, unplaceable[0]["reason"].as_str().unwrap());
    eventually(
        "the eviction tasks of the moved bindings to end",
        Duration::from_secs(60),
        || {
            BINDINGS[..3]
                .iter()
                .all(|b| flotilla_tests::eviction_tasks(&api, &format!("{RBS}/{b}")).is_empty())
                .then_some(())
        },
    );
    assert_eq!(placements(&api), Some(predicted));
    assert_eq!(flotilla_tests::eviction_tasks(&api, &solo).len(), 1);
    assert!(
        flotilla_tests::works_on(&api, "member1").iter().any(|w| {
            w["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("solo-"))
                && w.pointer("/metadata/deletionTimestamp").is_none()
        }),
        "solo's Work on member1 is kept"
    );
}
