//! Failover scenarios 01 and 05 of `examples/` end to end, with the real server and its
//! simulated members (`--sim-members N`, one agent process) on 127.0.0.1 and second-scale
//! timings. A member fails through the sim fault API (`POST /faults/unreachable`): its lease
//! stops, Ready turns Unknown, the unreachable NoExecute taint comes, and the taint manager
//! evicts it (tolerations of 0 s).
//!
//! - scenario 01 (Duplicated on exactly two of member1, member2, member3, member5): the failed
//!   cluster is replaced by one allowed spare, the healthy one stays untouched (its Work keeps
//!   its uid), member4 is never chosen (checked on every poll), the eviction task ends once the
//!   new placement is Healthy; with no allowed spare left, a failure is not replaced and the
//!   binding says why (the cluster spread constraint cannot be met).
//! - scenario 05 (Duplicated on member1 and member2, purgeMode Graciously with the policy's
//!   grace period): member2's copy is made Unhealthy, member1 fails; the task carries the
//!   policy's grace period, stays while it runs, and ends with `EvictionTaskTimedOut` when it
//!   passes — long before the server-wide `--graceful-eviction-timeout` (10m) — and only then
//!   does member1's Work get its deletionTimestamp.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    eventually, eviction_tasks, health_on, healthy_on, post_manifests, scenario_text, sim_fault,
    works_on, ApiClient, Server, FAST_PULL_FAILOVER,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const EVENTS: &str = "/api/v1/namespaces/default/events";

/// Simulated members that start pods within 100 ms, report their status every second and
/// renew their leases well inside the 2 s grace period of [`FAST_PULL_FAILOVER`].
const SIM: &[&str] = &[
    "--sim-pod-startup-delay-ms",
    "100",
    "--sim-cluster-status-update-frequency-ms",
    "1000",
    "--sim-lease-renew-interval-ms",
    "300",
];

fn start(data: &Path, members: usize, extra: &[&str]) -> (Server, ApiClient) {
    let n = members.to_string();
    let mut args: Vec<&str> = vec!["--sim-members", &n];
    args.extend_from_slice(FAST_PULL_FAILOVER);
    args.extend_from_slice(SIM);
    args.extend_from_slice(extra);
    let server = Server::start(data, &args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    flotilla_tests::wait_members_ready(&api, members);
    (server, api)
}

/// Makes `member` unreachable and waits until the server sees it: Ready is no longer True and
/// the unreachable NoExecute taint is on the Cluster.
fn fail(server: &Server, api: &ApiClient, member: &str) {
    sim_fault(server, member, "unreachable", &json!({"enabled": true}));
    eventually(
        &format!("{member} not Ready, with the unreachable NoExecute taint"),
        Duration::from_secs(30),
        || {
            let c = api.get(&format!("{CLUSTERS}/{member}")).ok()?;
            let ready = c["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?["status"]
                .clone();
            let tainted = c["spec"]["taints"].as_array()?.iter().any(|t| {
                t["key"] == "cluster.karmada.io/unreachable" && t["effect"] == "NoExecute"
            });
            (ready != "True" && tainted).then_some(())
        },
    );
}

/// `spec.clusters` as (name, replicas), or `None` before the binding exists. Every look
/// checks that member4 is not among them.
fn placement(api: &ApiClient) -> Option<Vec<(String, i64)>> {
    let rb = api.get(RB).ok()?;
    let clusters: Vec<(String, i64)> = rb["spec"]["clusters"]
        .as_array()?
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["replicas"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        clusters.iter().all(|(n, _)| n != "member4"),
        "member4 was chosen: {clusters:?}"
    );
    Some(clusters)
}

fn names(placement: &[(String, i64)]) -> BTreeSet<String> {
    placement.iter().map(|(n, _)| n.clone()).collect()
}

/// The uid of the one Work on `cluster`.
fn work_uid(api: &ApiClient, cluster: &str) -> String {
    let works = works_on(api, cluster);
    assert_eq!(works.len(), 1, "one Work on {cluster}: {works:#?}");
    works[0]["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The binding's Events as (reason, message), oldest first.
fn events(api: &ApiClient) -> Vec<(String, String)> {
    let mut items = api
        .get(&format!(
            "{EVENTS}?fieldSelector=involvedObject.name%3Dnginx-deployment"
        ))
        .ok()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default();
    items.sort_by_key(|e| e["firstTimestamp"].as_str().unwrap_or("").to_string());
    items
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn scheduled_condition(api: &ApiClient) -> Option<Value> {
    api.get(RB).ok()?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Scheduled")
        .cloned()
}

#[test]
fn scenario_01_duplicated_replaces_a_failed_cluster_by_an_allowed_spare_and_then_has_none() {
    let allowed: BTreeSet<String> = ["member1", "member2", "member3", "member5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let data = tempfile::tempdir().unwrap();
    // Three of the five members fail within seconds: the eviction brake reads that as a
    // partition (PartialDisruption) and lets the third out only 100 s after the first. This
    // scenario is about the scheduler's rules, not the brake: pacing off.
    let (server, api) = start(data.path(), 5, flotilla_tests::NO_EVICTION_PACING);
    post_manifests(&api, &scenario_text("01-duplicated-failover.yaml"));

    let first = eventually(
        "Duplicated on two allowed clusters, Healthy on both",
        Duration::from_secs(60),
        || {
            let p = placement(&api)?;
            (p.len() == 2
                && p.iter().all(|(n, r)| allowed.contains(n) && *r == 2)
                && p.iter().all(|(n, _)| healthy_on(&api, RB, n)))
            .then_some(p)
        },
    );
    let (failed, kept) = (first[0].0.clone(), first[1].0.clone());
    let kept_uid = work_uid(&api, &kept);

    // One of the two fails: it is replaced by an allowed spare; the other never moves.
    fail(&server, &api, &failed);
    let second = eventually(
        "the failed cluster replaced, the new placement Healthy and the task ended",
        Duration::from_secs(60),
        || {
            let p = placement(&api)?;
            assert!(
                names(&p).contains(&kept),
                "{kept} left the placement: {p:?}"
            );
            let replaced = p.len() == 2
                && p.iter()
                    .all(|(n, r)| allowed.contains(n) && *n != failed && *r == 2);
            (replaced
                && p.iter().all(|(n, _)| healthy_on(&api, RB, n))
                && eviction_tasks(&api, RB).is_empty())
            .then_some(p)
        },
    );
    let replacement = names(&second).into_iter().find(|n| *n != kept).unwrap();
    assert_eq!(
        work_uid(&api, &kept),
        kept_uid,
        "{kept}'s Work was never touched"
    );
    // The Events are recorded right after the writes the wait above saw: wait for them too.
    eventually(
        "the eviction's and the task's Events",
        Duration::from_secs(10),
        || {
            let reasons: Vec<String> = events(&api).into_iter().map(|(r, _)| r).collect();
            ["EvictWorkloadFromClusterSucceed", "EvictionTaskDoneHealthy"]
                .iter()
                .all(|want| reasons.iter().any(|r| r == want))
                .then_some(())
                .ok_or(format!("{reasons:?}"))
        },
    );

    // The last allowed spare fails too (it runs nothing of this binding), then the
    // replacement: nothing is left to replace it with.
    let spare = allowed
        .iter()
        .find(|n| **n != failed && **n != kept && **n != replacement)
        .unwrap()
        .clone();
    fail(&server, &api, &spare);
    fail(&server, &api, &replacement);
    // The positive signal that the scheduler looked at the binding after the failure: its
    // Warning naming the eviction. The cluster spread constraint (minGroups 2) cannot be met
    // by the one feasible cluster left, so the scheduler keeps the current clusters. (The
    // Duplicated rule "replace only when at least as many new candidates fit as failed" never
    // refuses in this scenario: maxGroups 2 with one survivor leaves one slot, which any new
    // candidate fills; what refuses here is minGroups.)
    let evicting = format!("Evicting from {replacement} (TaintUntolerated)");
    let message = eventually(
        "the scheduler's ScheduleBindingFailed Event naming the eviction",
        Duration::from_secs(60),
        || {
            assert!(names(&placement(&api)?).contains(&kept));
            events(&api)
                .into_iter()
                .find(|(r, m)| r == "ScheduleBindingFailed" && m.contains(&evicting))
                .map(|(_, m)| m)
        },
    );
    assert!(
        message.contains("the number of feasible clusters is less than spreadConstraint.MinGroups"),
        "{message}"
    );
    assert!(
        message.contains("the current clusters and the eviction tasks are kept"),
        "{message}"
    );
    assert_eq!(
        placement(&api),
        Some(vec![(kept.clone(), 2)]),
        "no replacement for {replacement}"
    );
    let cond = scheduled_condition(&api).unwrap();
    assert_eq!(cond["status"], "False", "{cond}");
    assert_eq!(cond["reason"], "SchedulerError", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("less than spreadConstraint.MinGroups"),
        "{cond}"
    );
    assert_eq!(
        work_uid(&api, &kept),
        kept_uid,
        "{kept}'s Work was never touched"
    );
    assert!(works_on(&api, "member4").is_empty(), "nothing on member4");
    assert!(
        works_on(&api, &spare).is_empty(),
        "nothing on the failed spare"
    );
}

#[test]
fn scenario_05_the_policys_grace_period_ends_the_task_although_the_new_copy_never_heals() {
    let data = tempfile::tempdir().unwrap();
    // A long server-wide timeout, so that only the policy's grace period can end the task.
    let (server, api) = start(data.path(), 2, &["--graceful-eviction-timeout", "10m"]);
    // The scenario's 100 s grace period, shortened to 8 s.
    const GRACE: i64 = 8;
    let text = scenario_text("05-configurable-cluster-failover.yaml");
    assert!(text.contains("gracePeriodSeconds: 100"));
    post_manifests(
        &api,
        &text.replace(
            "gracePeriodSeconds: 100",
            &format!("gracePeriodSeconds: {GRACE}"),
        ),
    );
    let both = vec![("member1".to_string(), 2), ("member2".to_string(), 2)];
    eventually(
        "Duplicated on member1 and member2, Healthy on both",
        Duration::from_secs(60),
        || {
            (placement(&api) == Some(both.clone())
                && healthy_on(&api, RB, "member1")
                && healthy_on(&api, RB, "member2"))
            .then_some(())
        },
    );

    // member2's copy turns Unhealthy (and stays so), then member1 fails.
    sim_fault(
        &server,
        "member2",
        "status",
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default",
                "name": "nginx", "status": {"availableReplicas": 0}}),
    );
    eventually(
        "member2 Unhealthy in the binding's aggregatedStatus",
        Duration::from_secs(30),
        || (health_on(&api, RB, "member2").as_deref() == Some("Unhealthy")).then_some(()),
    );
    fail(&server, &api, "member1");

    let task = eventually(
        "member1's eviction task, stamped",
        Duration::from_secs(30),
        || {
            let t = eviction_tasks(&api, RB);
            (t.len() == 1 && t[0]["creationTimestamp"].is_string()).then(|| t[0].clone())
        },
    );
    assert_eq!(task["fromCluster"], "member1", "{task}");
    assert_eq!(task["purgeMode"], "Graciously", "{task}");
    assert_eq!(task["gracePeriodSeconds"], GRACE, "{task}");
    let created = chrono::DateTime::parse_from_rfc3339(task["creationTimestamp"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    let deadline = created + chrono::Duration::seconds(GRACE);
    assert_eq!(placement(&api), Some(vec![("member2".to_string(), 2)]));

    // While the period runs the task stays, and member1's Work with it, although member2 never
    // turns Healthy. Looked at until a second before the deadline.
    let mut looks = 0;
    while chrono::Utc::now() < deadline - chrono::Duration::seconds(1) {
        let t = eviction_tasks(&api, RB);
        let now = chrono::Utc::now();
        if now >= deadline {
            break;
        }
        assert_eq!(t.len(), 1, "the task stays before its deadline ({now})");
        assert_eq!(t[0]["creationTimestamp"], task["creationTimestamp"]);
        let works = works_on(&api, "member1");
        assert_eq!(works.len(), 1, "member1's Work stays");
        assert!(
            works[0].pointer("/metadata/deletionTimestamp").is_none(),
            "member1's Work is not deleted before the deadline: {:#}",
            works[0]
        );
        assert_ne!(health_on(&api, RB, "member2").as_deref(), Some("Healthy"));
        looks += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(looks > 0, "the task was looked at before its deadline");

    // The period ends: the task goes, timed out, and only then member1's Work is deleted.
    eventually("the task to end", Duration::from_secs(30), || {
        eviction_tasks(&api, RB).is_empty().then_some(())
    });
    let ended = chrono::Utc::now();
    assert!(ended >= deadline, "ended at {ended}, deadline {deadline}");
    assert!(
        ended < created + chrono::Duration::seconds(60),
        "the 8 s grace period ended it, not the 10m --graceful-eviction-timeout (ended {ended}, \
         created {created})"
    );
    // The Event is recorded just after the task's removal is written: wait for it.
    let evs = eventually(
        "the EvictionTaskTimedOut Event",
        Duration::from_secs(10),
        || {
            let evs = events(&api);
            evs.iter()
                .any(|(r, _)| r == "EvictionTaskTimedOut")
                .then_some(evs)
        },
    );
    let timed_out: Vec<&String> = evs
        .iter()
        .filter(|(r, _)| r == "EvictionTaskTimedOut")
        .map(|(_, m)| m)
        .collect();
    assert_eq!(timed_out.len(), 1, "{evs:?}");
    assert!(
        timed_out[0].contains("cluster member1")
            && timed_out[0].contains("grace period passed (gracePeriodSeconds 8)"),
        "{}",
        timed_out[0]
    );
    assert!(
        evs.iter().all(|(r, _)| r != "EvictionTaskDoneHealthy"),
        "{evs:?}"
    );
    assert_eq!(health_on(&api, RB, "member2").as_deref(), Some("Unhealthy"));
    eventually(
        "member1's Work to be marked for deletion (member1 is down)",
        Duration::from_secs(30),
        || {
            let works = works_on(&api, "member1");
            (works.is_empty()
                || works
                    .iter()
                    .all(|w| w.pointer("/metadata/deletionTimestamp").is_some()))
            .then_some(())
        },
    );
    assert_eq!(placement(&api), Some(vec![("member2".to_string(), 2)]));
}
