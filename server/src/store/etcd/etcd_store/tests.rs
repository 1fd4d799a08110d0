//! The read modes of [`EtcdStore`]: what a fresh read and a controller's cached read see, over
//! a mirror that follows etcd and over one nobody follows (a watch that broke).

use super::*;
use crate::store::StoreConfig;
use crate::testing::etcd::EtcdCluster;
use flotilla_api::kinds::builtin_by_plural;
use futures::StreamExt;
use serde_json::json;
use std::time::Instant;

const PREFIX: &str = "/read-modes";

fn configmaps() -> ResourceType {
    builtin_by_plural("", "configmaps").expect("a kind")
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"k": value}})
}

/// A one-member etcd and a store over it, followed as the server's is.
async fn store() -> (EtcdCluster, Arc<EtcdStore>) {
    let etcd = EtcdCluster::start(1).await.expect("etcd starts");
    let client = etcd.client().await.expect("an etcd client");
    let options = EtcdStoreOptions {
        compaction_interval: Duration::ZERO,
        ..EtcdStoreOptions::default()
    };
    let store = EtcdStore::open_with_client(client, PREFIX, StoreConfig::default(), options)
        .await
        .expect("the store opens");
    (etcd, store)
}

/// A view reading as `read` whose mirror was loaded now and is never followed: its cache
/// stays as it is, as when the watch broke.
async fn stalled_view(etcd: &EtcdCluster, read: ReadMode) -> Arc<EtcdStore> {
    let client = etcd.client().await.expect("an etcd client");
    EtcdStore::stalled(client, PREFIX, read).await
}

/// A fresh read over a cache that does not catch up (its watch broke) answers from etcd,
/// with the write another server made, and does not stall: it gives up on the cache after
/// the idle time, long before the 3 s wait.
#[tokio::test]
async fn a_fresh_read_over_a_stalled_cache_reads_etcd_within_the_idle_time() {
    let (etcd, other_server) = store().await;
    let res = configmaps();
    other_server
        .create(&res, configmap("a", "old"))
        .await
        .expect("the create");
    let view = stalled_view(&etcd, ReadMode::Fresh).await;
    let mut a = other_server
        .get(&res, Some("default"), "a")
        .await
        .expect("the get");
    a["data"]["k"] = json!("new");
    other_server.update(&res, a).await.expect("the update");
    other_server
        .create(&res, configmap("b", "new"))
        .await
        .expect("the create");

    let started = Instant::now();
    let got = view.get(&res, Some("default"), "a").await.expect("the get");
    let took = started.elapsed();
    assert_eq!(got["data"]["k"], json!("new"), "the other server's update");
    assert!(took < Duration::from_secs(1), "the read stalled {took:?}");
    let list = view
        .list(&res, Some("default"), &ListOptions::default())
        .await
        .expect("the list");
    assert_eq!(list.items.len(), 2, "the other server's create is listed");
    assert_eq!(view.read_counts(), (0, 2), "both read etcd");
}

/// A controller's read over a stalled cache still sees this process's own writes (it reads
/// etcd when the cache lacks them), and what a watch of this process delivered.
#[tokio::test]
async fn a_cached_read_sees_its_own_writes_and_what_its_watches_delivered() {
    let (etcd, other_server) = store().await;
    let res = configmaps();
    let view = stalled_view(&etcd, ReadMode::Cached).await;
    // Nothing written or delivered yet: the stalled cache answers at once.
    assert!(matches!(
        view.get(&res, Some("default"), "mine").await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(view.read_counts(), (1, 0));

    view.create(&res, configmap("mine", "v1"))
        .await
        .expect("the create");
    let got = view
        .get(&res, Some("default"), "mine")
        .await
        .expect("its own create");
    assert_eq!(got["data"]["k"], json!("v1"));
    assert_eq!(
        view.read_counts(),
        (1, 1),
        "the stalled cache lacks it: etcd"
    );

    // Another view that wrote nothing: only what its watch delivers makes it wait. The watch
    // starts before the view's mirror was loaded, so it is an etcd watch of its own (one
    // served from the stalled mirror would deliver nothing) and runs ahead of the cache.
    let before = other_server
        .current_resource_version()
        .await
        .expect("the revision");
    let view = stalled_view(&etcd, ReadMode::Cached).await;
    let from = WatchOptions {
        from: Some(before.saturating_sub(1)),
        ..WatchOptions::default()
    };
    let mut events = view.watch(&res, from).await.expect("the watch");
    other_server
        .create(&res, configmap("theirs", "v1"))
        .await
        .expect("the other server's create");
    let event = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream is open")
            .expect("an event");
        if event.object["metadata"]["name"] == json!("theirs") {
            break event;
        }
    };
    let got = view
        .get(&res, Some("default"), "theirs")
        .await
        .expect("what the watch delivered");
    assert_eq!(
        got["metadata"]["resourceVersion"],
        event.object["metadata"]["resourceVersion"]
    );
    assert_eq!(view.read_counts(), (0, 1), "it read etcd");
}

/// The controllers' view answers reads from the cache without asking etcd, and sees each of
/// its writes at once (read your writes), reads after writes, 200 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_view_reads_its_writes_without_asking_etcd() {
    let (_etcd, store) = store().await;
    let controllers = store.for_controllers();
    assert_eq!(controllers.read_mode(), ReadMode::Cached);
    let res = configmaps();
    let mut object = controllers
        .create(&res, configmap("hot", "0"))
        .await
        .expect("the create");
    let probes = store.revision_requests();
    for i in 1..=200 {
        object["data"]["k"] = json!(i.to_string());
        object = controllers.update(&res, object).await.expect("the update");
        let got = controllers
            .get_shared(&res, Some("default"), "hot")
            .await
            .expect("the get");
        assert_eq!(got["data"]["k"], json!(i.to_string()), "write {i}");
        assert_eq!(
            got["metadata"]["resourceVersion"],
            object["metadata"]["resourceVersion"]
        );
        let list = controllers
            .list(&res, Some("default"), &ListOptions::default())
            .await
            .expect("the list");
        assert_eq!(
            list.items[0]["data"]["k"],
            json!(i.to_string()),
            "write {i}"
        );
    }
    assert_eq!(
        store.revision_requests(),
        probes,
        "no read asked etcd for its revision"
    );
    let (cached, from_etcd) = store.read_counts();
    assert!(
        cached >= 400 && from_etcd < 10,
        "{cached} reads from the cache, {from_etcd} from etcd"
    );
}

/// A first page answered from the cache carries a continue token the etcd path reads: the next
/// page is the rest of the list as it was when the first was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_first_page_continues_on_etcd_at_its_revision() {
    let (_etcd, store) = store().await;
    let res = configmaps();
    for name in ["a", "b", "c"] {
        store
            .create(&res, configmap(name, "v"))
            .await
            .expect("the create");
    }
    let first = store
        .list(
            &res,
            Some("default"),
            &ListOptions {
                limit: Some(2),
                ..ListOptions::default()
            },
        )
        .await
        .expect("the first page");
    assert_eq!(
        store.read_counts().0,
        1,
        "the first page came from the cache"
    );
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.remaining, Some(1));
    store
        .create(&res, configmap("d", "v"))
        .await
        .expect("a later create");
    let rest = store
        .list(
            &res,
            Some("default"),
            &ListOptions {
                continue_token: first.continue_token.clone(),
                ..ListOptions::default()
            },
        )
        .await
        .expect("the next page");
    let names: Vec<_> = rest
        .items
        .iter()
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("c")], "the list as it was at the first page");
    assert_eq!(rest.resource_version, first.resource_version);
}

/// An update starts from the watch cache's copy when that is the revision the writer read,
/// and etcd decides the rest: over a cache that stopped where the writer read, while another
/// server moved the object on, an update that would change it and one that would change
/// nothing both answer Conflict (a cached "nothing to do" is never taken as success: the
/// other server's write would be silently lost), and one from the current revision commits.
#[tokio::test]
async fn an_update_from_the_caches_copy_commits_only_where_etcd_agrees() {
    let (etcd, other_server) = store().await;
    let res = configmaps();
    let read = other_server
        .create(&res, configmap("a", "v1"))
        .await
        .expect("the create");
    let view = stalled_view(&etcd, ReadMode::Cached).await;
    let mut moved_on = read.clone();
    moved_on["data"]["k"] = json!("v2");
    let current = other_server
        .update(&res, moved_on)
        .await
        .expect("another server's update");

    let mut change = read.clone();
    change["data"]["k"] = json!("v3");
    assert!(matches!(
        view.update(&res, change).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        view.update(&res, read.clone()).await,
        Err(StoreError::Conflict { .. })
    ));
    let stored = other_server
        .get(&res, Some("default"), "a")
        .await
        .expect("a get");
    assert_eq!(stored["data"]["k"], "v2");

    let mut from_current = current.clone();
    from_current["data"]["k"] = json!("v4");
    let updated = view
        .update(&res, from_current)
        .await
        .expect("an update from the current revision");
    assert_eq!(updated["data"]["k"], "v4");
}
