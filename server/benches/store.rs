//! Store benchmark (plain `main`, no harness): durable writes per second with 1 and 64
//! concurrent writers on sled, then get and list latency (p50/p99) with 100k objects stored.
//!
//! Run: `cargo bench -p flotilla-server --bench store` (release). `STORE_BENCH_OBJECTS`
//! changes the object count (default 100000). Figures go to docs/store.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::store::{KvStore, ListOptions, Store, StoreConfig};
use rand::Rng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAMESPACES: usize = 1000;

fn object(i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("obj-{i:06}"),
            "namespace": format!("ns-{:04}", i % NAMESPACES),
            "labels": {"app": format!("app-{}", i % 50), "tier": "bench"},
            "annotations": {"flotilla.io/note": "a benchmark object of about four hundred bytes"}
        },
        "data": {
            "replicas": (i % 7).to_string(),
            "config": "key1=value1\nkey2=value2\nkey3=value3\nkey4=value4\nkey5=value5",
            "payload": "x".repeat(120)
        }
    })
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    (at(0.50), at(0.99))
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Creates objects `range` with `writers` concurrent tasks; returns writes per second.
async fn write_phase(store: &Arc<dyn Store>, range: std::ops::Range<usize>, writers: usize) -> f64 {
    let res = builtin_by_plural("", "configmaps").unwrap();
    let total = range.len();
    let start_index = range.start;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let res = res.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = start_index + w;
            while i < start_index + total {
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

async fn run() {
    let objects: usize = std::env::var("STORE_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let kv = KvStore::open_sled(dir.path(), StoreConfig::default()).unwrap();
    let store: Arc<dyn Store> = kv.clone();
    let res = builtin_by_plural("", "configmaps").unwrap();
    println!("# flotilla store benchmark (sled, {objects} objects)");
    println!(
        "cores: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );

    let one = 2_000.min(objects);
    let before = kv.stats();
    let w1 = write_phase(&store, 0..one, 1).await;
    let after = kv.stats();
    println!(
        "durable creates, 1 writer:   {w1:>8.0} writes/s ({} writes, {:.2} writes per flush)",
        one,
        (after.grouped_writes - before.grouped_writes) as f64
            / (after.durable_flushes - before.durable_flushes).max(1) as f64
    );

    let before = kv.stats();
    let w64 = write_phase(&store, one..objects, 64).await;
    let after = kv.stats();
    println!(
        "durable creates, 64 writers: {w64:>8.0} writes/s ({} writes, {:.2} writes per flush)",
        objects - one,
        (after.grouped_writes - before.grouped_writes) as f64
            / (after.durable_flushes - before.durable_flushes).max(1) as f64
    );

    // Updates with 64 writers (read-modify-write, each on its own object).
    let updates = 20_000.min(objects);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..64 {
        let store = store.clone();
        let res = res.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < updates {
                let ns = format!("ns-{:04}", i % NAMESPACES);
                let name = format!("obj-{i:06}");
                let mut obj = store.get(&res, Some(&ns), &name).await.unwrap();
                obj["data"]["replicas"] = json!("updated");
                store.update(&res, obj).await.unwrap();
                i += 64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    println!(
        "durable updates, 64 writers: {:>8.0} writes/s ({updates} get+update)",
        updates as f64 / started.elapsed().as_secs_f64()
    );

    let mut rng = rand::thread_rng();
    let mut samples = Vec::new();
    for _ in 0..20_000 {
        let i = rng.gen_range(0..objects);
        let ns = format!("ns-{:04}", i % NAMESPACES);
        let name = format!("obj-{i:06}");
        let t = Instant::now();
        store.get(&res, Some(&ns), &name).await.unwrap();
        samples.push(t.elapsed());
    }
    let (p50, p99) = percentiles(samples);
    println!(
        "get:                          p50 {}  p99 {}",
        us(p50),
        us(p99)
    );

    let per_ns = objects / NAMESPACES;
    let mut samples = Vec::new();
    for _ in 0..500 {
        let ns = format!("ns-{:04}", rng.gen_range(0..NAMESPACES));
        let t = Instant::now();
        let list = store
            .list(&res, Some(&ns), &ListOptions::default())
            .await
            .unwrap();
        samples.push(t.elapsed());
        assert_eq!(list.items.len(), per_ns);
    }
    let (p50, p99) = percentiles(samples);
    println!(
        "list one namespace ({per_ns} objects): p50 {}  p99 {}",
        us(p50),
        us(p99)
    );

    let mut samples = Vec::new();
    let mut token = None;
    for _ in 0..200 {
        let opts = ListOptions {
            limit: Some(500),
            continue_token: token.take(),
            ..ListOptions::default()
        };
        let t = Instant::now();
        let page = store.list(&res, None, &opts).await.unwrap();
        samples.push(t.elapsed());
        token = page.continue_token;
    }
    let (p50, p99) = percentiles(samples);
    println!(
        "list all, pages of 500:       p50 {}  p99 {}",
        us(p50),
        us(p99)
    );

    let selector: flotilla_server::store::ObjectFilter =
        Arc::new(|o: &Value| o["metadata"]["labels"]["app"] == "app-7");
    let mut samples = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let all = store
            .list(
                &res,
                None,
                &ListOptions {
                    filter: Some(selector.clone()),
                    ..ListOptions::default()
                },
            )
            .await
            .unwrap();
        samples.push(t.elapsed());
        assert_eq!(all.items.len(), objects / 50);
    }
    let (p50, _) = percentiles(samples);
    println!(
        "list all {objects} with a label filter: p50 {:.1} ms",
        p50.as_secs_f64() * 1e3
    );

    kv.close().await.unwrap();
    drop(store);
    drop(kv);
    let started = Instant::now();
    let reopened = KvStore::open_sled(dir.path(), StoreConfig::default()).unwrap();
    println!(
        "reopen with {objects} objects: {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "size on disk: {:.0} MiB",
        reopened.engine().size_on_disk().unwrap() as f64 / (1024.0 * 1024.0)
    );
    reopened.close().await.unwrap();
    println!("load average at end: {}", load_average());
}

/// The 1-minute load average (other work on the machine skews every figure).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
