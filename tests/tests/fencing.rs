//! Agent self-fencing end to end, with the real server and one real agent
//! process per member on 127.0.0.1 and second-scale timings. A Deployment whose policy asks for
//! exactly-once placement (`spec.failover.cluster.fencing.exactlyOnce`, purge mode Immediately)
//! runs on member1. member1's agent is cut off from the server with the "unreachable" fault (it
//! keeps running but renews no lease): after its `--fence-after` it deletes the Deployment
//! from its runtime and reports `fencedAt`; the server evicts member1, holds the replacement
//! with a `WaitingForFence` Event until member1's fence time, and only then creates member2's
//! Work. When the partition heals, member1 does not start the workload again: its Work is
//! being deleted, the agent finishes that, records a `Fenced` Event on it, and member2 keeps
//! the only copy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, Utc};
use flotilla_tests::{
    events_about, eventually, healthy_on, member_call, placement_of, post_manifests,
    pull_agent_with, set_agent_fault, time_at, works_on, Agent, ApiClient, Server, EXACTLY_ONCE_DB,
};
use serde_json::Value;
use std::time::{Duration, Instant};

const RB: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/db-deployment";

/// Agents fence after 3 s of silence; the server waits 6 s after the last renewal.
const FENCE_AFTER: &[&str] = &["--fence-after", "3s"];
const MEMBER_FENCE_AFTER: &str = "6s";

fn faults_of(agent: &Agent) -> Value {
    match member_call("GET", &format!("{}/faults", agent.url), None) {
        Ok((200, v)) => v,
        other => panic!("reading the faults of {}: {other:?}", agent.url),
    }
}

fn fenced_at(agent: &Agent) -> Option<DateTime<Utc>> {
    let v = faults_of(agent);
    let at = v["fencedAt"].as_str()?;
    Some(
        DateTime::parse_from_rfc3339(at)
            .unwrap()
            .with_timezone(&Utc),
    )
}

fn db_on(agent: &Agent) -> Option<Value> {
    let url = format!(
        "{}/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=db",
        agent.url
    );
    match member_call("GET", &url, None).ok()? {
        (200, d) => Some(d),
        _ => None,
    }
}

/// `t` truncated to whole seconds (creationTimestamps carry seconds).
fn whole_seconds(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap()
}

#[test]
fn a_cut_off_agent_stops_an_exactly_once_workload_before_the_replacement_starts() {
    let data = tempfile::tempdir().unwrap();
    let mut flags: Vec<&str> = flotilla_tests::FAST_PULL_FAILOVER.to_vec();
    flags.extend_from_slice(flotilla_tests::NO_EVICTION_PACING);
    flags.extend_from_slice(&["--member-fence-after", MEMBER_FENCE_AFTER]);
    let server = Server::start(&data.path().join("server"), &flags).unwrap();
    let api = ApiClient::admin(&server).unwrap();

    // member1 alone first, so the single copy lands there.
    let member1 = pull_agent_with(&server, "member1", data.path(), FENCE_AFTER);
    flotilla_tests::wait_members_ready(&api, 1);
    post_manifests(&api, EXACTLY_ONCE_DB);
    eventually("db Healthy on member1", Duration::from_secs(60), || {
        (placement_of(&api, RB) == Some(vec![("member1".to_string(), 1)])
            && healthy_on(&api, RB, "member1"))
        .then_some(())
    });
    let works = works_on(&api, "member1");
    assert_eq!(works.len(), 1);
    assert_eq!(
        works[0]["metadata"]["annotations"]["flotilla.io/placement-guarantee"],
        "ExactlyOnce"
    );
    assert!(db_on(&member1).is_some());
    let member2 = pull_agent_with(&server, "member2", data.path(), FENCE_AFTER);
    flotilla_tests::wait_members_ready(&api, 2);
    assert_eq!(faults_of(&member1)["fences"], 0);

    // Cut member1 off: it keeps running, but renews no lease.
    set_agent_fault(&member1, "unreachable", true);
    let cut = Instant::now();

    // Watch both sides in one loop: member1's fence is read before member2's Works each time,
    // so a replacement seen before the fence is a failure of the ordering.
    let mut fence_seen: Option<(DateTime<Utc>, Duration)> = None;
    let replacement = eventually(
        "the replacement Work on member2",
        Duration::from_secs(60),
        || {
            if fence_seen.is_none() {
                fence_seen = fenced_at(&member1).map(|at| (at, cut.elapsed()));
            }
            let work = works_on(&api, "member2").into_iter().next()?;
            Some((work, cut.elapsed()))
        },
    );
    let (work, work_seen) = replacement;
    let (fenced, fence_seen_after) =
        fence_seen.expect("member2's Work appeared before member1 reported its fence");
    assert!(fence_seen_after <= work_seen);
    // The Work was created no earlier than the fence (server and agent share this host's
    // clock; creationTimestamp has whole seconds).
    let created = time_at(&work, "/metadata/creationTimestamp");
    assert!(
        created >= whole_seconds(fenced),
        "member2's Work created {created}, member1 fenced {fenced}"
    );
    // The server held the dispatch for member1's fence time, and said so.
    let waits: Vec<Value> = events_about(&api, "default", "db-deployment")
        .into_iter()
        .filter(|e| e["reason"] == "WaitingForFence")
        .collect();
    assert!(!waits.is_empty(), "no WaitingForFence Event");
    assert!(
        waits[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("member1"),
        "{}",
        waits[0]
    );
    assert_eq!(faults_of(&member1)["fences"], 1);

    // The replacement runs on member2; its object there was made after member1's fence.
    eventually("db Healthy on member2", Duration::from_secs(60), || {
        healthy_on(&api, RB, "member2").then_some(())
    });
    let copy = db_on(&member2).expect("db on member2");
    assert!(time_at(&copy, "/metadata/creationTimestamp") >= whole_seconds(fenced));

    // The partition heals: member1's Work (being deleted) goes once its agent has seen it, and
    // the agent does not start the workload again on its own.
    set_agent_fault(&member1, "unreachable", false);
    eventually("member1's Work to go", Duration::from_secs(60), || {
        works_on(&api, "member1").is_empty().then_some(())
    });
    assert!(db_on(&member1).is_none(), "member1 started db again");
    // The agent told what it did once it could: a Fenced Event on the old Work.
    let work_name = works[0]["metadata"]["name"].as_str().unwrap().to_string();
    eventually(
        "the Fenced Event on member1's Work",
        Duration::from_secs(30),
        || {
            events_about(&api, "karmada-es-member1", &work_name)
                .into_iter()
                .find(|e| e["reason"] == "Fenced")
        },
    );
    assert_eq!(
        placement_of(&api, RB),
        Some(vec![("member2".to_string(), 1)])
    );
    assert!(db_on(&member2).is_some());
}
