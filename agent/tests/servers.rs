//! An agent given several servers (`--server A,B`): one fake server's store served on two
//! addresses (tests/support, [`FakeServer::listen`]), as servers sharing one etcd are. The agent
//! talks to A; when A stops (every connection closed, as a killed process), answers 5xx or
//! hangs, it carries on through B: the lease keeps being renewed well inside its duration,
//! Works are listed again on B and still applied, nothing registers again, and the switch is
//! counted. A 4xx moves nothing, and with one server nothing ever switches.
//! Every wait has a deadline; everything runs on 127.0.0.1 with ports from 0, and the
//! listeners and the agent stop when the test ends (also when it fails: the test's runtime
//! drops them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use flotilla_agent::app::{AgentConfig, AgentHandle, Mode};
use flotilla_agent::pull::PullTiming;
use flotilla_member::ObjectRef;
use serde_json::{json, Value};
use support::{eventually, FakeServer, Listener, JOIN_TOKEN};

/// How long a test waits for the agent to do something.
const WAIT: Duration = Duration::from_secs(15);

fn config(servers: &[&Listener], data_dir: &Path, lease_renew_interval: Duration) -> AgentConfig {
    let token_file = data_dir.parent().unwrap().join("join.token");
    std::fs::write(&token_file, format!("{JOIN_TOKEN}\n")).unwrap();
    let urls: Vec<String> = servers.iter().map(|l| l.url()).collect();
    AgentConfig {
        mode: Mode::Pull,
        server: Some(urls.join(",")),
        cluster_name: Some("member1".into()),
        token_file: Some(token_file),
        data_dir: data_dir.to_path_buf(),
        timing: PullTiming {
            lease_renew_interval: Some(lease_renew_interval),
            cluster_status_update_frequency: Some(Duration::from_millis(200)),
            work_status_period: Duration::from_millis(100),
            resync_period: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            ..PullTiming::default()
        },
        sim_tick: Duration::from_millis(50),
        ..AgentConfig::default()
    }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

/// Puts a Work holding ConfigMap `name` and waits until the member has the ConfigMap.
async fn apply_through(server: &FakeServer, agent: &AgentHandle, name: &str) {
    server.put_work("member1", name, vec![configmap(name)], true);
    let member = agent.member("member1").unwrap().clone();
    let r = ObjectRef::new("v1", "ConfigMap", "default", name);
    eventually(&format!("ConfigMap {name} applied"), WAIT, || async {
        member.runtime.get(&r).await.unwrap()
    })
    .await;
}

/// The URL the agent talks to now, and how often it switched.
fn on(agent: &AgentHandle) -> (String, u64) {
    let servers = agent.servers().unwrap();
    (
        servers.url(servers.current()).to_string(),
        servers.switches(),
    )
}

/// Waits until `listener` has served `n` more lease writes than `from`.
async fn lease_writes_on(listener: &Listener, from: usize, n: usize, what: &str) {
    eventually(what, WAIT, || async {
        let now = listener.lease_writes();
        if now >= from + n {
            Ok(())
        } else {
            Err(format!("{} lease writes", now - from.min(now)))
        }
    })
    .await;
}

/// The longest silence between two lease writes the fake store served, and the lease's
/// declared duration (what a server compares that silence with).
fn longest_lease_silence(server: &FakeServer) -> (Duration, Duration) {
    let inner = server.inner.lock();
    let longest = inner
        .lease_write_times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    drop(inner);
    let lease = server.lease("member1").unwrap();
    let declared = lease["spec"]["leaseDurationSeconds"].as_u64().unwrap();
    (longest, Duration::from_secs(declared))
}

fn ready(server: &FakeServer) -> Option<String> {
    let c = server.cluster("member1")?;
    c["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

#[tokio::test]
async fn carries_on_through_the_next_server_when_its_server_stops() {
    let server = FakeServer::new();
    let a = server.listen().await;
    let b = server.listen().await;
    let dir = tempfile::tempdir().unwrap();
    let period = Duration::from_millis(500);
    let agent = flotilla_agent::run(config(&[&a, &b], &dir.path().join("agent"), period))
        .await
        .unwrap();

    // Everything goes through A: registration, lease, status, Works.
    lease_writes_on(&a, 0, 3, "three lease writes through A").await;
    apply_through(&server, &agent, "before").await;
    eventually("Ready=True", WAIT, || async {
        (ready(&server).as_deref() == Some("True")).then_some(())
    })
    .await;
    assert_eq!(server.inner.lock().registrations, 1);
    assert_eq!(b.served(), 0, "nothing went to B while A answered");
    assert_eq!(on(&agent), (a.url(), 0));

    // A dies: its listener and every connection close at once.
    a.stop();
    let lists_before = b.lists();
    lease_writes_on(&b, 0, 3, "three lease writes through B").await;
    assert_eq!(
        on(&agent),
        (b.url(), 1),
        "one switch, however many requests failed on A"
    );
    // The Works were listed again on B, then watched there: a new Work is applied.
    apply_through(&server, &agent, "after").await;
    assert!(b.lists() > lists_before, "listed again on B");
    assert!(b.watches() >= 1, "watched on B");
    eventually("the new Work's status reported through B", WAIT, || async {
        let w = server.work("member1", "after")?;
        (w["status"]["conditions"][0]["status"] == "True").then_some(())
    })
    .await;
    // The same credential serves B: no second registration; the Cluster stayed Ready.
    assert_eq!(server.inner.lock().registrations, 1);
    assert_eq!(ready(&server).as_deref(), Some("True"));
    let (longest, declared) = longest_lease_silence(&server);
    assert!(
        longest < declared,
        "the lease went {longest:?} without a renewal, past its {declared:?}"
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn a_5xx_moves_the_agent_and_a_4xx_does_not() {
    let server = FakeServer::new();
    let a = server.listen().await;
    let b = server.listen().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = flotilla_agent::run(config(
        &[&a, &b],
        &dir.path().join("agent"),
        Duration::from_millis(200),
    ))
    .await
    .unwrap();
    lease_writes_on(&a, 0, 2, "lease writes through A").await;

    a.answer(503);
    lease_writes_on(&b, 0, 2, "lease writes through B after A answered 503").await;
    assert_eq!(on(&agent), (b.url(), 1));

    // A answers again, B refuses everything with 403: the agent stays on B and retries there.
    a.answer(0);
    b.answer(403);
    let a_served = a.served();
    eventually("ten requests refused with 403 by B", WAIT, || async {
        (b.refused() >= 10).then_some(())
    })
    .await;
    assert_eq!(on(&agent), (b.url(), 1), "a 4xx moves nothing");
    assert_eq!(a.served(), a_served, "nothing went back to A");
    b.answer(0);
    let from = b.lease_writes();
    lease_writes_on(&b, from, 2, "lease writes through B once it serves again").await;
    agent.shutdown().await;
}

#[tokio::test]
async fn a_hung_server_costs_the_lease_at_most_a_renewal_period() {
    let server = FakeServer::new();
    let a = server.listen().await;
    let b = server.listen().await;
    let dir = tempfile::tempdir().unwrap();
    // One-second renewals: each lease request times out after one period, and the lease
    // declares four.
    let agent = flotilla_agent::run(config(
        &[&a, &b],
        &dir.path().join("agent"),
        Duration::from_secs(1),
    ))
    .await
    .unwrap();
    lease_writes_on(&a, 0, 2, "lease writes through A").await;
    apply_through(&server, &agent, "before").await;

    // A accepts connections and never answers again (the agent's other requests would wait
    // their 5 s timeout; the lease's wait one period).
    a.freeze(true);
    lease_writes_on(&b, 0, 3, "lease writes through B after A hung").await;
    assert!(a.held() >= 1, "a request was left hanging on A");
    assert_eq!(on(&agent), (b.url(), 1));
    let (longest, declared) = longest_lease_silence(&server);
    assert!(
        longest < declared,
        "the lease went {longest:?} without a renewal, past its {declared:?}"
    );
    apply_through(&server, &agent, "after").await;
    assert!(b.lists() >= 1, "listed again on B");
    agent.shutdown().await;
}

#[tokio::test]
async fn with_one_server_nothing_switches() {
    let server = FakeServer::new();
    let a = server.listen().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = flotilla_agent::run(config(
        &[&a],
        &dir.path().join("agent"),
        Duration::from_millis(200),
    ))
    .await
    .unwrap();
    lease_writes_on(&a, 0, 2, "lease writes").await;
    a.answer(503);
    eventually("ten requests answered 503", WAIT, || async {
        (a.refused() >= 10).then_some(())
    })
    .await;
    assert_eq!(on(&agent), (a.url(), 0));
    a.answer(0);
    let from = a.lease_writes();
    lease_writes_on(&a, from, 2, "lease writes once the server answers again").await;
    apply_through(&server, &agent, "cm").await;
    agent.shutdown().await;
}
