//! `flotilla-server migrate-store`: a single server's sled store moves into an empty etcd
//! prefix with every object as it was (uids, owners, finalizers, a pending deletion), garbage
//! collection carries on there, and a prefix that already holds objects is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::{builtin_by_plural, well_known};
use flotilla_server::store::etcd::{EtcdStore, EtcdStoreOptions};
use flotilla_server::store::{DeleteOptions, KvStore, Store, StoreConfig, StoreError};
use flotilla_server::testing::etcd::EtcdCluster;
use flotilla_server::testing::eventually;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

fn strip_rv(mut obj: Value) -> Value {
    obj["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    obj
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sled_store_moves_into_etcd_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let configmaps = builtin_by_plural("", "configmaps").unwrap();
    let clusters = well_known::clusters();
    let (owner, dependent, held, cluster) = {
        let sled = KvStore::open_sled(&dir.path().join("store"), StoreConfig::default()).unwrap();
        let owner = sled
            .create(
                &configmaps,
                json!({"metadata": {"name": "owner", "namespace": "a"}, "data": {"k": "v"}}),
            )
            .await
            .unwrap();
        let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
        let dependent = sled
            .create(
                &configmaps,
                json!({"metadata": {"name": "dependent", "namespace": "a",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}),
            )
            .await
            .unwrap();
        sled.create(
            &configmaps,
            json!({"metadata": {"name": "held", "namespace": "b", "finalizers": ["example.com/hold"]}}),
        )
        .await
        .unwrap();
        let held = match sled
            .delete(&configmaps, Some("b"), "held", &DeleteOptions::default())
            .await
            .unwrap()
        {
            flotilla_server::store::Deleted::Pending(obj) => obj,
            other => panic!("a held object waits: {other:?}"),
        };
        let cluster = sled
            .create(
                &clusters,
                json!({"metadata": {"name": "member1"}, "spec": {"syncMode": "Push"}}),
            )
            .await
            .unwrap();
        sled.close().await.unwrap();
        (owner, dependent, held, cluster)
    };

    let etcd = EtcdCluster::start(1).await.expect("etcd starts");
    let endpoints = etcd.endpoints().join(",");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_flotilla-server"))
            .args([
                "migrate-store",
                "--from",
                "sled",
                "--to",
                "etcd",
                "--data-dir",
            ])
            .arg(dir.path())
            .args(["--etcd-endpoints", &endpoints])
            .output()
            .unwrap()
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("copied 4 objects of 2 kinds"), "{stdout}");

    let store = EtcdStore::open_with_client(
        etcd.client().await.unwrap(),
        "/flotilla",
        StoreConfig::default(),
        EtcdStoreOptions {
            compaction_interval: Duration::ZERO,
            ..EtcdStoreOptions::default()
        },
    )
    .await
    .unwrap();
    for (res, ns, name, before) in [
        (&configmaps, Some("a"), "owner", &owner),
        (&configmaps, Some("a"), "dependent", &dependent),
        (&configmaps, Some("b"), "held", &held),
        (&clusters, None, "member1", &cluster),
    ] {
        let after = store.get(res, ns, name).await.unwrap();
        assert_eq!(strip_rv(after), strip_rv(before.clone()), "{name}");
    }
    // Ownership carried over: deleting the owner collects its dependent on etcd.
    store
        .delete(&configmaps, Some("a"), "owner", &DeleteOptions::default())
        .await
        .unwrap();
    eventually(
        "the dependent to be collected",
        Duration::from_secs(10),
        || async {
            matches!(
                store.get(&configmaps, Some("a"), "dependent").await,
                Err(StoreError::NotFound { .. })
            )
            .then_some(())
        },
    )
    .await;

    // A second run finds the prefix in use and changes nothing.
    let out = run();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already holds"), "{stderr}");
}
