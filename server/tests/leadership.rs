//! Leader election on a real etcd started by the test: one leader at a time, takeover once a
//! term ends, resignation hands over at once, a renewal that cannot reach etcd ends the term
//! at the renew deadline, and the fence: a deposed leader's controller writes commit nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::leadership::{election_prefix, Elector, LeaderElectionTiming, TermEnd};
use flotilla_server::store::etcd::{EtcdStore, EtcdStoreOptions};
use flotilla_server::store::{Store, StoreConfig, StoreError};
use flotilla_server::testing::etcd::EtcdCluster;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const PREFIX: &str = "/flotilla";

fn short() -> LeaderElectionTiming {
    LeaderElectionTiming::for_lease(Duration::from_secs(3))
}

async fn etcd() -> EtcdCluster {
    EtcdCluster::start(1)
        .await
        .expect("etcd starts (scripts/setup.sh installs it)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_resigning_hands_over_at_once() {
    let etcd = etcd().await;
    let a = Elector::new(etcd.client().await.unwrap(), PREFIX, "a", short());
    let b = Elector::new(etcd.client().await.unwrap(), PREFIX, "b", short());
    let (_stop_tx, stop) = watch::channel(false);
    let term_a = a.campaign(&mut stop.clone()).await.unwrap().unwrap();
    let mut stop_b = stop.clone();
    let b_campaign = tokio::spawn(async move {
        let term = b.campaign(&mut stop_b).await.unwrap().unwrap();
        (Instant::now(), term)
    });
    // b waits while a leads, even past a's lease: a keeps renewing it (etcd's lease clock
    // cannot be driven, so this one waits in real time).
    tokio::time::sleep(short().lease_duration + Duration::from_secs(2)).await;
    assert!(
        !b_campaign.is_finished(),
        "b must not lead while a's term lasts"
    );
    assert!(!term_a.is_over());
    let resigned = Instant::now();
    term_a.resign().await;
    let (led, term_b) = tokio::time::timeout(Duration::from_secs(5), b_campaign)
        .await
        .expect("b leads after a resigned")
        .unwrap();
    let handover = led.duration_since(resigned);
    assert!(
        handover < Duration::from_secs(2),
        "b led {handover:?} after a resigned"
    );
    assert!(term_b.revision() > 0);
    term_b.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_term_ends_with_its_lease() {
    let etcd = etcd().await;
    let a = Elector::new(etcd.client().await.unwrap(), PREFIX, "a", short());
    let b = Elector::new(etcd.client().await.unwrap(), PREFIX, "b", short());
    let (_tx, stop) = watch::channel(false);
    let term_a = a.campaign(&mut stop.clone()).await.unwrap().unwrap();
    // a dies: nothing renews its lease any more, nothing resigns.
    let died = Instant::now();
    drop(term_a);
    let term_b = tokio::time::timeout(Duration::from_secs(10), b.campaign(&mut stop.clone()))
        .await
        .expect("b leads once a's lease expired")
        .unwrap()
        .unwrap();
    let takeover = died.elapsed();
    assert!(
        takeover <= short().lease_duration + Duration::from_secs(1) + Duration::from_millis(500),
        "takeover took {takeover:?}"
    );
    term_b.resign().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_at_its_renew_deadline() {
    let mut etcd = etcd().await;
    let timing = short();
    let a = Elector::new(etcd.client().await.unwrap(), PREFIX, "a", timing);
    let (_tx, mut stop) = watch::channel(false);
    let term = a.campaign(&mut stop).await.unwrap().unwrap();
    let cut = Instant::now();
    etcd.kill(0);
    let why = tokio::time::timeout(Duration::from_secs(10), term.ended())
        .await
        .expect("the term ends");
    let after = cut.elapsed();
    assert_eq!(why, TermEnd::RenewDeadline);
    assert!(
        after <= timing.renew_deadline + timing.retry_period * 2,
        "stopped {after:?} after etcd went away"
    );
    assert!(
        after < timing.lease_duration,
        "a leader must stop before its lease can expire ({after:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_writes_are_refused_by_its_fence() {
    let etcd = etcd().await;
    let store = EtcdStore::open_with_client(
        etcd.client().await.unwrap(),
        PREFIX,
        StoreConfig::default(),
        EtcdStoreOptions::default(),
    )
    .await
    .unwrap();
    let configmaps = builtin_by_plural("", "configmaps").unwrap();
    let a = Elector::new(etcd.client().await.unwrap(), PREFIX, "a", short());
    let b = Elector::new(etcd.client().await.unwrap(), PREFIX, "b", short());
    let (_tx, stop) = watch::channel(false);
    let term_a = a.campaign(&mut stop.clone()).await.unwrap().unwrap();
    let as_a = store.fenced(term_a.fence());
    let cm =
        |name: &str| json!({"metadata": {"name": name, "namespace": "ns"}, "data": {"by": "a"}});
    as_a.create(&configmaps, cm("while-leading")).await.unwrap();

    // a "pauses" past its lease: its lease goes (as etcd would expire it) and b leads.
    let mut leases = etcd.client().await.unwrap().lease_client();
    let mut kv = etcd.client().await.unwrap().kv_client();
    let key = kv
        .get(
            election_prefix(PREFIX),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .kvs()[0]
        .lease();
    leases.revoke(key).await.unwrap();
    let term_b = tokio::time::timeout(Duration::from_secs(10), b.campaign(&mut stop.clone()))
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let as_b = store.fenced(term_b.fence());
    as_b.create(&configmaps, cm("by-b")).await.unwrap();

    // a wakes up and writes as if it still led: nothing commits.
    let before = store.current_resource_version().await.unwrap();
    for name in ["late-1", "late-2"] {
        match as_a.create(&configmaps, cm(name)).await {
            Err(StoreError::Fenced { .. }) => {}
            other => panic!("a deposed leader's write must be refused, got {other:?}"),
        }
    }
    let stored = store
        .get(&configmaps, Some("ns"), "while-leading")
        .await
        .unwrap();
    let mut update = stored.clone();
    update["data"]["by"] = json!("a, late");
    assert!(matches!(
        as_a.update(&configmaps, update).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        as_a.delete(&configmaps, Some("ns"), "by-b", &Default::default())
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(term_a.refusals(), 4);
    assert_eq!(term_a.ended().await, TermEnd::Fenced);
    assert_eq!(store.current_resource_version().await.unwrap(), before);
    assert!(store.get(&configmaps, Some("ns"), "late-1").await.is_err());
    assert!(store.get(&configmaps, Some("ns"), "by-b").await.is_ok());
    // b's writes, and the API's unfenced ones, go on.
    as_b.create(&configmaps, cm("by-b-2")).await.unwrap();
    store.create(&configmaps, cm("by-a-client")).await.unwrap();
    term_b.resign().await;
}

/// `--leader-elect=false` runs controllers unfenced, so such a server must be its fleet's only
/// one: it refuses to start while another server takes part in the election (issue #36: it
/// started, and both acted), and starts once none does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_leader_election_refuses_to_join_an_electing_fleet() {
    use flotilla_server::app::{self, ServerConfig, StartError, StoreBackend};
    use flotilla_server::leadership::election_holder;
    use flotilla_server::store::etcd::EtcdConfig;

    let etcd = etcd().await;
    let client = etcd.client().await.unwrap();
    assert_eq!(election_holder(&client, PREFIX).await.unwrap(), None);
    let a = Elector::new(client.clone(), PREFIX, "server-a", short());
    let (_tx, stop) = watch::channel(false);
    let term_a = a.campaign(&mut stop.clone()).await.unwrap().unwrap();
    let (_, holder) = election_holder(&client, PREFIX).await.unwrap().unwrap();
    assert_eq!(holder, "server-a");

    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut config = ServerConfig::new(dir.path());
        config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        config.store_backend = StoreBackend::Etcd;
        config.etcd = EtcdConfig::new(etcd.endpoints());
        config.etcd.prefix = PREFIX.to_string();
        config.leader_election.enabled = false;
        config
    };
    match app::start(config()).await {
        Err(StartError::LeaderElection(message)) => {
            assert!(message.contains("server-a"), "{message}");
            assert!(message.contains("--leader-elect"), "{message}");
        }
        Err(other) => panic!("expected a refusal naming the leader, got {other}"),
        Ok(_) => panic!("a server without leader election started beside a leader"),
    }
    term_a.resign().await;
    let alone = app::start(config())
        .await
        .expect("alone, it starts without leader election");
    alone.shutdown().await.unwrap();
}
