//! The store engines side by side (plain `main`, no harness): durable creates per second with 1
//! and 64 concurrent writers, and get latency, on sled and on etcd (one member, then three, all
//! on this machine's disk and 127.0.0.1), in the same run with the same client code. On etcd the
//! gets are measured three ways: through the store itself (the API's fresh reads: etcd's
//! revision, then the watch cache), and through the controllers' view
//! (`EtcdStore::for_controllers`, the watch cache alone) as `get` (a copy) and `get_shared`.
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

/// p50 and p99 of 2000 gets of random stored objects (`shared`: `get_shared`, no copy).
async fn gets(store: &Arc<dyn Store>, stored: usize, shared: bool) -> (Duration, Duration) {
    let res = builtin_by_plural("", "configmaps").unwrap();
    let mut samples = Vec::with_capacity(2000);
    for k in 0..2000 {
        let i = (k * 7919) % stored;
        let (namespace, name) = (format!("ns-{:03}", i % 100), format!("obj-{i:06}"));
        let started = Instant::now();
        if shared {
            store
                .get_shared(&res, Some(&namespace), &name)
                .await
                .unwrap();
        } else {
            store.get(&res, Some(&namespace), &name).await.unwrap();
        }
        samples.push(started.elapsed());
    }
    samples.sort();
    (samples[1000], samples[1980])
}

fn micros((p50, p99): (Duration, Duration)) -> String {
    format!(
        "{:.1} / {:.1} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    )
}

/// Writes, then gets through `store` and, on etcd, through the controllers' view of it.
async fn measure(name: &str, store: Arc<dyn Store>, etcd: Option<&EtcdStore>, objects: usize) {
    let one = (objects / 4).max(1);
    let w1 = creates(&store, 0..one, 1).await;
    let w64 = creates(&store, one..one + objects, 64).await;
    let get = gets(&store, one + objects, false).await;
    let (cached, cached_shared) = match etcd {
        Some(etcd) => {
            let controllers: Arc<dyn Store> = etcd.for_controllers();
            let copy = gets(&controllers, one + objects, false).await;
            let shared = gets(&controllers, one + objects, true).await;
            (micros(copy), micros(shared))
        }
        None => ("–".to_string(), "–".to_string()),
    };
    let reads = etcd.map_or(String::from("–"), |e| {
        let (cache, etcd_reads) = e.read_counts();
        format!("{cache} / {etcd_reads} / {}", e.revision_requests())
    });
    println!(
        "| {name} | {w1:.0} | {w64:.0} | {} | {cached} | {cached_shared} | {reads} |",
        micros(get)
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
    println!(
        "| engine | 1 writer | 64 writers | get p50 / p99 (the API's: fresh) | \
         controllers' get p50 / p99 | controllers' get_shared p50 / p99 | \
         reads from cache / from etcd / revision requests |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let dir = tempfile::tempdir().unwrap();
    let sled = KvStore::open_sled(
        &dir.path().join("sled"),
        StoreConfig {
            min_flush_interval: flotilla_server::app::DEFAULT_MIN_FLUSH_INTERVAL,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    measure("sled (server's pacing)", sled, None, objects).await;
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
        let view: Arc<dyn Store> = store.clone();
        measure(
            &format!("etcd, {members} member(s)"),
            view,
            Some(&store),
            objects,
        )
        .await;
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
