//! The pull loop against a fake server (tests/support): registration and credential reuse,
//! lease renewal, cluster status, Works applied and reported, deletion with and without the
//! finalizer, restart with the same data dir, relist after 410, HTTPS with --ca-file, and the
//! periods the server advertises (followed unless a flag says otherwise).
//! Every wait has a deadline; everything runs on 127.0.0.1 with ports from 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::app::{AgentConfig, AgentHandle, Mode};
use flotilla_agent::member::Member;
use flotilla_agent::pull::{PullTiming, Registration};
use flotilla_member::sim::SimConfig;
use flotilla_member::ObjectRef;
use serde_json::{json, Value};
use support::{eventually, FakeServer, JOIN_TOKEN};

/// How long a test waits for the agent to do something.
const WAIT: Duration = Duration::from_secs(10);

fn config(server: &str, data_dir: &Path) -> AgentConfig {
    let token_file = data_dir.parent().unwrap().join("join.token");
    std::fs::write(&token_file, format!("{JOIN_TOKEN}\n")).unwrap();
    AgentConfig {
        mode: Mode::Pull,
        server: Some(server.to_string()),
        cluster_name: Some("member1".into()),
        token_file: Some(token_file),
        data_dir: data_dir.to_path_buf(),
        registration: Registration {
            provider: "sim".into(),
            region: "eu-west".into(),
            zones: vec!["eu-west-1a".into()],
            labels: [("env".to_string(), "test".to_string())]
                .into_iter()
                .collect(),
        },
        sim: SimConfig {
            pod_startup_delay: Duration::from_millis(200),
            ..SimConfig::default()
        },
        timing: PullTiming {
            lease_renew_interval: Some(Duration::from_millis(100)),
            cluster_status_update_frequency: Some(Duration::from_millis(100)),
            work_status_period: Duration::from_millis(100),
            resync_period: Duration::from_millis(500),
            request_timeout: Duration::from_secs(5),
            ..PullTiming::default()
        },
        sim_tick: Duration::from_millis(50),
        ..AgentConfig::default()
    }
}

async fn start(server: &str, data_dir: &Path) -> AgentHandle {
    flotilla_agent::run(config(server, data_dir)).await.unwrap()
}

fn member(h: &AgentHandle) -> Arc<Member> {
    h.member("member1").unwrap().clone()
}

fn nginx(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                  "resources": {"requests": {"cpu": "100m"}}}]}}}
    })
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", "default", name)
}

fn deploy_ref() -> ObjectRef {
    ObjectRef::new("apps/v1", "Deployment", "default", "nginx")
}

async fn object(m: &Member, r: &ObjectRef) -> Option<Value> {
    m.runtime.get(r).await.unwrap()
}

/// Waits until the member has (or lacks) an object; answers it (`None` once deleted).
async fn wait_object(m: &Member, r: &ObjectRef, present: bool) -> Option<Value> {
    let what = format!("{r} to be {}", if present { "applied" } else { "deleted" });
    eventually(&what, WAIT, || async {
        let o = object(m, r).await;
        if o.is_some() == present {
            Ok(o)
        } else {
            Err(format!("{r} is {o:?}"))
        }
    })
    .await
}

/// Waits for an Event with `reason`: it travels beside the status write, so it may land just
/// after the status a test saw.
async fn wait_event(server: &FakeServer, reason: &str) {
    eventually(&format!("a {reason} Event"), WAIT, || async {
        let events = &server.inner.lock().events;
        events.iter().any(|e| e["reason"] == reason).then_some(())
    })
    .await;
}

fn applied_condition(work: &Value) -> Option<Value> {
    work["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Applied")
        .cloned()
}

#[tokio::test]
async fn registers_renews_lease_reports_status_and_reuses_its_credential() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    let agent = start(&url, &data).await;

    eventually("registration", WAIT, || async {
        (server.inner.lock().registrations == 1).then_some(())
    })
    .await;
    let body = server.inner.lock().registered_bodies[0].clone();
    assert_eq!(
        body,
        json!({"clusterName": "member1", "provider": "sim", "region": "eu-west",
                            "zones": ["eu-west-1a"], "labels": {"env": "test"}})
    );
    let cred_path = data.join("credential");
    eventually("the credential file", WAIT, || async {
        cred_path.exists().then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&cred_path).unwrap(),
        "cred-member1-1"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&cred_path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    // Lease: created, then renewed.
    let lease = eventually("the lease", WAIT, || async { server.lease("member1") }).await;
    assert_eq!(lease["spec"]["holderIdentity"], "member1");
    // Four renewal periods of 100 ms, in whole seconds.
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    assert_eq!(
        first.len(),
        "2026-01-01T00:00:00.000000Z".len(),
        "microsecond renewTime: {first}"
    );
    eventually("lease renewals", WAIT, || async {
        let l = server.lease("member1")?;
        (l["spec"]["renewTime"].as_str()? != first && server.inner.lock().lease_writes >= 4)
            .then_some(())
    })
    .await;

    // Cluster status.
    let ready = |want: &'static str| {
        let server = server.clone();
        move || {
            let server = server.clone();
            async move {
                let c = server.cluster("member1")?;
                let cond = c["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready")?
                    .clone();
                (cond["status"] == want).then_some((c, cond))
            }
        }
    };
    let (cluster, cond) = eventually("Ready=True", WAIT, ready("True")).await;
    assert_eq!(cond["reason"], "ClusterReady");
    assert_eq!(
        cond["message"],
        "cluster is healthy and ready to accept workloads"
    );
    assert_eq!(cluster["status"]["kubernetesVersion"], "v1.32.0-sim");
    assert_eq!(
        cluster["status"]["nodeSummary"],
        json!({"totalNum": 3, "readyNum": 3})
    );
    assert_eq!(
        cluster["status"]["resourceSummary"]["allocatable"],
        json!({"cpu": "24", "memory": "96Gi", "pods": "330"})
    );
    assert!(cluster["status"]["apiEnablements"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["groupVersion"] == "apps/v1"));
    // Unchanged status is not rewritten: the passes that start after this point (each begins
    // with a read of the Cluster, and passes run one after another) complete without a write.
    let (reads, writes) = {
        let inner = server.inner.lock();
        (inner.cluster_reads, inner.cluster_status_writes)
    };
    eventually("three more cluster-status passes", WAIT, || async {
        (server.inner.lock().cluster_reads >= reads + 3).then_some(())
    })
    .await;
    assert_eq!(
        server.inner.lock().cluster_status_writes,
        writes,
        "unchanged status is not rewritten"
    );

    // Unhealthy: Ready False; healthy again: True.
    let m = member(&agent);
    m.faults.set_unhealthy(true);
    let (_, cond) = eventually("Ready=False", WAIT, ready("False")).await;
    assert_eq!(cond["reason"], "ClusterNotReady");
    m.faults.set_unhealthy(false);
    eventually("Ready=True again", WAIT, ready("True")).await;

    // Unreachable: heartbeats stop, then resume. Once the lease loop has skipped a renewal its
    // last write is done; three more skipped renewals (renewal periods) without a write prove
    // that it stopped.
    let skipped_before = m.pull.lease_renewals_skipped();
    m.faults.set_unreachable(true);
    eventually("the lease loop to skip a renewal", WAIT, || async {
        (m.pull.lease_renewals_skipped() > skipped_before).then_some(())
    })
    .await;
    let writes = server.inner.lock().lease_writes;
    let skipped = m.pull.lease_renewals_skipped();
    eventually("three more skipped lease renewals", WAIT, || async {
        (m.pull.lease_renewals_skipped() >= skipped + 3).then_some(())
    })
    .await;
    assert_eq!(
        server.inner.lock().lease_writes,
        writes,
        "no heartbeat while unreachable"
    );
    m.faults.set_unreachable(false);
    eventually("heartbeats to resume", WAIT, || async {
        (server.inner.lock().lease_writes > writes).then_some(())
    })
    .await;

    // Restart with the same data dir: the stored credential is used, no new registration.
    agent.shutdown().await;
    let writes = server.inner.lock().lease_writes;
    let agent = start(&url, &data).await;
    eventually("heartbeats after restart", WAIT, || async {
        (server.inner.lock().lease_writes > writes + 2).then_some(())
    })
    .await;
    assert_eq!(server.inner.lock().registrations, 1);

    // A refused credential: the agent registers again with the join token.
    server.revoke_credentials();
    eventually("re-registration", WAIT, || async {
        (server.inner.lock().registrations == 2).then_some(())
    })
    .await;
    eventually("the new credential on disk", WAIT, || async {
        (std::fs::read_to_string(&cred_path).ok()? == "cred-member1-2").then_some(())
    })
    .await;
    let writes = server.inner.lock().lease_writes;
    eventually("heartbeats with the new credential", WAIT, || async {
        (server.inner.lock().lease_writes > writes).then_some(())
    })
    .await;
    agent.shutdown().await;
}

#[tokio::test]
async fn works_are_applied_reported_deleted_and_survive_a_restart() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    server.put_work(
        "member1",
        "nginx-work",
        vec![nginx(2), configmap("cfg")],
        true,
    );
    let agent = start(&url, &data).await;
    let m = member(&agent);

    // Applied, and the Deployment's status reported once its pods are ready.
    let work = eventually("work status with 2 ready replicas", WAIT, || async {
        let w = server.work("member1", "nginx-work")?;
        (w["status"]["manifestStatuses"][0]["status"]["readyReplicas"] == 2).then_some(w)
    })
    .await;
    let applied = applied_condition(&work).unwrap();
    assert_eq!(applied["status"], "True");
    assert_eq!(applied["reason"], "AppliedSuccessful");
    assert_eq!(applied["message"], "Manifest has been successfully applied");
    let ms = &work["status"]["manifestStatuses"];
    assert_eq!(
        ms[0]["identifier"],
        json!({"ordinal": 0, "group": "apps", "version": "v1",
        "kind": "Deployment", "resource": "deployments", "namespace": "default", "name": "nginx"})
    );
    assert_eq!(ms[0]["health"], "Healthy");
    assert_eq!(ms[0]["status"]["availableReplicas"], 2);
    // The member object's own generation, for the server to judge the status with.
    assert_eq!(ms[0]["generation"], ms[0]["status"]["observedGeneration"]);
    assert!(ms[0]["generation"].as_i64().is_some(), "{ms}");
    assert_eq!(ms[1]["identifier"]["kind"], "ConfigMap");
    let deploy = object(&m, &deploy_ref()).await.unwrap();
    let uid = deploy["metadata"]["uid"].clone();
    assert!(
        data.join("applied.json.journal").exists() || data.join("applied.json").exists(),
        "the applied-objects record is on disk"
    );
    wait_event(&server, "SyncSucceed").await;

    // A manifest removed from the Work: its object goes.
    server.put_work("member1", "nginx-work", vec![nginx(2)], true);
    wait_object(&m, &cm_ref("cfg"), false).await;
    // A scaled manifest: applied again (same object, new generation).
    server.put_work("member1", "nginx-work", vec![nginx(3)], true);
    eventually("3 ready replicas reported", WAIT, || async {
        let w = server.work("member1", "nginx-work")?;
        (w["status"]["manifestStatuses"][0]["status"]["readyReplicas"] == 3).then_some(())
    })
    .await;
    let deploy = object(&m, &deploy_ref()).await.unwrap();
    assert_eq!(deploy["metadata"]["uid"], uid);
    let reported = server.work("member1", "nginx-work").unwrap();
    assert_eq!(
        reported["status"]["manifestStatuses"][0]["generation"], deploy["metadata"]["generation"],
        "the scaled object's new generation is reported"
    );
    assert_eq!(deploy["metadata"]["generation"], 2);

    // A Work deleted without a finalizer (DELETED event): its objects go.
    server.put_work("member1", "temp", vec![configmap("temp")], false);
    wait_object(&m, &cm_ref("temp"), true).await;
    server.delete_work("member1", "temp");
    wait_object(&m, &cm_ref("temp"), false).await;

    // A Work deleted with the finalizer: objects go, then the finalizer, then the Work.
    server.put_work("member1", "fin", vec![configmap("fin")], true);
    wait_object(&m, &cm_ref("fin"), true).await;
    server.delete_work("member1", "fin");
    wait_object(&m, &cm_ref("fin"), false).await;
    eventually("the finalized work to go", WAIT, || async {
        server.work("member1", "fin").is_none().then_some(())
    })
    .await;

    // A failing manifest: Applied False with the error.
    server.put_work(
        "member1",
        "bad",
        vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})],
        true,
    );
    let cond = eventually("Applied=False", WAIT, || async {
        let c = applied_condition(&server.work("member1", "bad")?)?;
        (c["status"] == "False").then_some(c)
    })
    .await;
    assert_eq!(cond["reason"], "AppliedFailed");
    assert!(
        cond["message"].as_str().unwrap().contains("metadata.name"),
        "{cond}"
    );
    wait_event(&server, "SyncFailed").await;

    // Restart: a Work deleted while the agent is down is cleaned up; nothing is re-created.
    server.put_work("member1", "down", vec![configmap("down")], false);
    wait_object(&m, &cm_ref("down"), true).await;
    let before = object(&m, &deploy_ref()).await.unwrap();
    agent.shutdown().await;
    // Every apply is announced by a SyncSucceed Event (sent by the flush that ends a relist).
    let sync_events = |server: &support::FakeServer| {
        server
            .inner
            .lock()
            .events
            .iter()
            .filter(|e| e["reason"] == "SyncSucceed" && e["involvedObject"]["name"] == "nginx-work")
            .count()
    };
    let applies_before = sync_events(&server);
    assert!(applies_before >= 2, "the applies so far were announced");
    let watches_before = server.inner.lock().watches;
    server.delete_work("member1", "down");
    let agent = start(&url, &data).await;
    let m = member(&agent);
    let after = object(&m, &deploy_ref()).await.unwrap();
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(
        after["metadata"]["creationTimestamp"],
        before["metadata"]["creationTimestamp"]
    );
    wait_object(&m, &cm_ref("down"), false).await;
    let lists = server.inner.lock().lists;
    assert!(lists >= 2, "listed again after restart");
    // The agent opens its watch only after the relist synced every Work and flushed.
    eventually(
        "the watch opened after the restart's relist",
        WAIT,
        || async { (server.inner.lock().watches > watches_before).then_some(()) },
    )
    .await;
    assert_eq!(sync_events(&server), applies_before, "not re-applied");
    let later = object(&m, &deploy_ref()).await.unwrap();
    assert_eq!(later["metadata"]["generation"], 2, "not re-applied");
    assert_eq!(later["metadata"]["uid"], uid);
    agent.shutdown().await;
}

/// A status write the server is slow to answer does not hold up the Works that arrive
/// meanwhile: they are applied while it travels, and every status lands once it is answered.
#[tokio::test]
async fn works_are_applied_while_a_status_write_is_in_flight() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    let mut cfg = config(&url, &data);
    // Longer than any wait below: a held write never times out on its own during the test.
    cfg.timing.request_timeout = Duration::from_secs(120);
    let agent = flotilla_agent::run(cfg).await.unwrap();
    let m = member(&agent);
    eventually("a watch", WAIT, || async {
        (server.inner.lock().watches >= 1).then_some(())
    })
    .await;

    server.hold_status_writes();
    server.put_work("member1", "first", vec![configmap("first")], false);
    wait_object(&m, &cm_ref("first"), true).await;
    eventually(
        "the first Work's status write to wait at the server",
        WAIT,
        || async { (server.inner.lock().status_writes_held >= 1).then_some(()) },
    )
    .await;
    server.put_work("member1", "second", vec![configmap("second")], false);
    wait_object(&m, &cm_ref("second"), true).await;
    assert_eq!(
        server.inner.lock().work_status_writes,
        0,
        "nothing was answered yet"
    );

    server.release_status_writes();
    for name in ["first", "second"] {
        eventually("Applied=True on both Works", WAIT, || async {
            let c = applied_condition(&server.work("member1", name)?)?;
            (c["status"] == "True").then_some(())
        })
        .await;
    }
    agent.shutdown().await;
}

#[tokio::test]
async fn relists_after_410() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    server.put_work("member1", "w1", vec![configmap("one")], false);
    server.put_work("member1", "w2", vec![configmap("two")], false);
    let agent = start(&url, &data).await;
    let m = member(&agent);
    wait_object(&m, &cm_ref("one"), true).await;
    wait_object(&m, &cm_ref("two"), true).await;
    eventually("a watch", WAIT, || async {
        (server.inner.lock().watches >= 1).then_some(())
    })
    .await;
    let lists = server.inner.lock().lists;

    // A stream that ends is resumed from the last resourceVersion, without a relist.
    server.kick_watchers();
    server.put_work("member1", "w3", vec![configmap("three")], false);
    wait_object(&m, &cm_ref("three"), true).await;
    assert_eq!(server.inner.lock().lists, lists, "resumed, not relisted");

    // History lost: w2 deleted with no event, w4 created with no event; resuming gets 410.
    server.delete_work_silently("member1", "w2");
    server.compact_and_kick();
    server.put_work("member1", "w4", vec![configmap("four")], false);
    server.compact_and_kick();
    eventually("a relist", WAIT, || async {
        (server.inner.lock().lists > lists).then_some(())
    })
    .await;
    wait_object(&m, &cm_ref("two"), false).await;
    wait_object(&m, &cm_ref("four"), true).await;
    assert!(object(&m, &cm_ref("one")).await.is_some());
    agent.shutdown().await;
}

/// A relist reads every page the server answers, however few items each holds.
#[tokio::test]
async fn relists_page_by_page() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c", "d", "e"];
    for n in names {
        server.put_work("member1", &format!("w-{n}"), vec![configmap(n)], false);
    }
    let agent = start(&url, &dir.path().join("agent")).await;
    let m = member(&agent);
    for n in names {
        wait_object(&m, &cm_ref(n), true).await;
    }
    // Five Works in pages of two (support::FAKE_PAGE): three pages.
    assert!(server.inner.lock().paged_lists >= 3);
    agent.shutdown().await;
}

#[tokio::test]
async fn https_with_a_ca_file() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("tls.crt");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = FakeServer::new();
    server
        .serve_tls(
            listener,
            &cert.cert.pem(),
            &cert.signing_key.serialize_pem(),
        )
        .await;
    let url = format!("https://{addr}");

    // Without the CA the agent cannot talk to the server.
    let data = dir.path().join("no-ca");
    let agent = start(&url, &data).await;
    eventually("three failed TLS handshakes", WAIT, || async {
        (server.inner.lock().tls_handshake_failures >= 3).then_some(())
    })
    .await;
    assert_eq!(server.inner.lock().registrations, 0);
    agent.shutdown().await;

    let mut cfg = config(&url, &dir.path().join("with-ca"));
    cfg.ca_file = Some(ca);
    let agent = flotilla_agent::run(cfg).await.unwrap();
    eventually("a lease over HTTPS", WAIT, || async {
        server.lease("member1")
    })
    .await;
    agent.shutdown().await;

    let mut cfg = config(&url, &dir.path().join("bad-ca"));
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    cfg.ca_file = Some(bad);
    assert!(flotilla_agent::run(cfg).await.is_err());
}

#[tokio::test]
async fn many_sim_members_each_register_with_their_own_state() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agents");
    let mut cfg = config(&url, &data);
    cfg.cluster_name = None;
    cfg.sim_members = 3;
    cfg.member_prefix = "sim".into();
    cfg.listen = Some("127.0.0.1:0".parse().unwrap());
    let agent = flotilla_agent::run(cfg).await.unwrap();
    for name in ["sim1", "sim2", "sim3"] {
        eventually("each member's lease", WAIT, || async { server.lease(name) }).await;
        assert!(data.join(name).join("credential").exists());
    }
    server.put_work("sim2", "w", vec![configmap("only-on-sim2")], false);
    let sim2 = agent.member("sim2").unwrap().clone();
    wait_object(&sim2, &cm_ref("only-on-sim2"), true).await;
    assert!(
        object(agent.member("sim1").unwrap(), &cm_ref("only-on-sim2"))
            .await
            .is_none()
    );
    // Each member's surface is under /members/<name>.
    let addr = agent.local_addr().unwrap();
    let body = reqwest::get(format!("http://{addr}/members/sim2/objects?apiVersion=v1&kind=ConfigMap&namespace=default&name=only-on-sim2"))
        .await
        .unwrap();
    assert_eq!(body.status(), 200);
    agent.shutdown().await;
}

#[tokio::test]
async fn a_silent_watch_is_reopened_without_a_relist() {
    let server = FakeServer::new();
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&url, &dir.path().join("agent"));
    cfg.timing.watch_idle_timeout = Duration::from_millis(300);
    let agent = flotilla_agent::run(cfg).await.unwrap();
    eventually("a first watch", WAIT, || async {
        (server.inner.lock().watches >= 1).then_some(())
    })
    .await;
    let lists = server.inner.lock().lists;
    // The fake server sends no bookmarks: after 300 ms of silence the agent reopens the watch
    // (the agent's own status writes are events too, so allow for a few).
    eventually("the watch to be reopened three times", WAIT, || async {
        (server.inner.lock().watches >= 4).then_some(())
    })
    .await;
    assert_eq!(
        server.inner.lock().lists,
        lists,
        "resumed from its resourceVersion, not relisted"
    );
    server.put_work("member1", "w", vec![configmap("late")], false);
    wait_object(&member(&agent), &cm_ref("late"), true).await;
    agent.shutdown().await;
}

/// docs/members.md, "One timing for server and agents": without timing flags the agent keeps
/// the periods the server advertises (not its 10 s default), takes a new one when the server
/// changes it, learns it again after a restart that reuses its credential, and an explicit
/// flag still wins.
#[tokio::test]
async fn follows_the_timing_the_server_advertises_unless_a_flag_says_otherwise() {
    let server = FakeServer::new();
    server.advertise_timing("leaseRenewIntervalMs=100, clusterStatusUpdateFrequencyMs=100");
    let url = format!("http://{}", server.serve().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    let following = |data: &Path| {
        let mut c = config(&url, data);
        c.timing.lease_renew_interval = None;
        c.timing.cluster_status_update_frequency = None;
        c
    };
    let agent = flotilla_agent::run(following(&data)).await.unwrap();
    // At the 10 s default, five lease writes and five status reads would take 40 s.
    eventually(
        "lease renewals and status passes every 100 ms",
        WAIT,
        || async {
            let inner = server.inner.lock();
            (inner.lease_writes >= 5 && inner.cluster_reads >= 5).then_some(())
        },
    )
    .await;
    assert_eq!(
        server.lease("member1").unwrap()["spec"]["leaseDurationSeconds"],
        1
    );

    // The server restarts with a longer grace period: the next answer says 300 ms, and the
    // lease declares 4 × 300 ms, rounded up.
    server.advertise_timing("leaseRenewIntervalMs=300, clusterStatusUpdateFrequencyMs=300");
    eventually("the lease declaring 2 s", WAIT, || async {
        (server.lease("member1")?["spec"]["leaseDurationSeconds"] == 2).then_some(())
    })
    .await;
    agent.shutdown().await;

    // Restarted with its stored credential: no registration, and the timing is learnt from
    // the first answers.
    server.advertise_timing("leaseRenewIntervalMs=200, clusterStatusUpdateFrequencyMs=200");
    let agent = flotilla_agent::run(following(&data)).await.unwrap();
    let writes = server.inner.lock().lease_writes;
    eventually(
        "renewals after the restart, declaring 4 × 200 ms",
        WAIT,
        || async {
            let declared = server.lease("member1")?["spec"]["leaseDurationSeconds"].clone();
            (server.inner.lock().lease_writes >= writes + 3 && declared == 1).then_some(())
        },
    )
    .await;
    assert_eq!(
        server.inner.lock().registrations,
        1,
        "the credential was reused"
    );
    agent.shutdown().await;

    // An explicit --lease-renew-interval-ms wins over what the server asks.
    let mut explicit = config(&url, &dir.path().join("explicit"));
    explicit.cluster_name = Some("member2".into());
    explicit.timing.lease_renew_interval = Some(Duration::from_secs(10));
    let agent = flotilla_agent::run(explicit).await.unwrap();
    let lease = eventually("member2's lease", WAIT, || async {
        server.lease("member2")
    })
    .await;
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    agent.shutdown().await;
}
