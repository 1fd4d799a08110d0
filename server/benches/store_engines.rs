//! The store engines side by side (plain `main`, no harness): durable creates per second with 1
//! and 64 concurrent writers, and get latency, on sled and on etcd (one member, then three, all
//! on this machine's disk and 127.0.0.1), in the same run with the same client code.
//!
//! Run: `cargo bench -p flotilla-server --bench store_engines` (release). `ENGINES_BENCH_OBJECTS`
//! sets the objects each write phase creates (default 4000). etcd is Debian's (`scripts/setup.sh`
//! installs it). Figures go to docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::store::etcd::{EtcdStore, EtcdStoreOptions};
use flotilla_server::store::{KvStore, Store, StoreConfig};
use flotilla_server::testing::etcd::EtcdCluster;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn object(i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("obj-{i:06}"),
            "namespace": format!("ns-{:03}", i % 100),
            "labels": {"app": format!("app-{}", i % 50), "tier": "bench"},
        },
        "data": {"config": "key1=value1\nkey2=value2\nkey3=value3", "payload": "x".repeat(200)}
    })
}

/// Creates objects `range` with `writers` concurrent tasks; answers writes per second.
async fn creates(store: &Arc<dyn Store>, range: std::ops::Range<usize>, writers: usize) -> f64 {
    let res = builtin_by_plural("", "configmaps").unwrap();
    let started = Instant::now();
    let total = range.len();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, res, start) = (store.clone(), res.clone(), range.start);
        tasks.push(tokio::spawn(async move {
            let mut i = start + w;
            while i < start + total {
                store.create(&res, object(i)).await.unwrap();
                i += writers;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// p50 and p99 of 2000 gets of random stored objects.
async fn gets(store: &Arc<dyn Store>, stored: usize) -> (Duration, Duration) {
    let res = builtin_by_plural("", "configmaps").unwrap();
    let mut samples = Vec::with_capacity(2000);
    for k in 0..2000 {
        let i = (k * 7919) % stored;
        let started = Instant::now();
        store
            .get(
                &res,
                Some(&format!("ns-{:03}", i % 100)),
                &format!("obj-{i:06}"),
            )
            .await
            .unwrap();
        samples.push(started.elapsed());
    }
    samples.sort();
    (samples[1000], samples[1980])
}

async fn measure(name: &str, store: Arc<dyn Store>, objects: usize) {
    let one = (objects / 4).max(1);
    let w1 = creates(&store, 0..one, 1).await;
    let w64 = creates(&store, one..one + objects, 64).await;
    let (p50, p99) = gets(&store, one + objects).await;
    println!(
        "| {name} | {w1:.0} | {w64:.0} | {:.0} µs | {:.0} µs |",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    store.close().await.unwrap();
}

async fn run() {
    let objects: usize = std::env::var("ENGINES_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    println!(
        "# store engines: durable creates (writes/s) and gets, {objects} objects at 64 writers"
    );
    println!(
        "cores: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("| engine | 1 writer | 64 writers | get p50 | get p99 |");
    println!("| --- | --- | --- | --- | --- |");
    let dir = tempfile::tempdir().unwrap();
    let sled = KvStore::open_sled(
        &dir.path().join("sled"),
        StoreConfig {
            min_flush_interval: flotilla_server::app::DEFAULT_MIN_FLUSH_INTERVAL,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    measure("sled (server's pacing)", sled, objects).await;
    for members in [1, 3] {
        let etcd = EtcdCluster::start(members).await.expect("etcd starts");
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
        measure(&format!("etcd, {members} member(s)"), store, objects).await;
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
