//! API benchmark (plain `main`, no harness): requests/s and p50/p99 latency of get, list (one
//! namespace of 100 objects), create and update through HTTP on 127.0.0.1, with 1 and 64
//! concurrent clients, against a server whose sled store holds 100k objects.
//!
//! Run: `cargo bench -p flotilla-server --bench api` (release). `API_BENCH_OBJECTS` changes the
//! object count (default 100000), `API_BENCH_SECONDS` the time per measurement (default 3).
//! Figures go to docs/api.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::app::{self, ServerConfig, Tls};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAMESPACES: usize = 1000;

fn object(i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("obj-{i:06}"), "namespace": format!("ns-{:04}", i % NAMESPACES),
                     "labels": {"app": format!("app-{}", i % 50)}},
        "data": {"config": "key1=value1\nkey2=value2\nkey3=value3", "payload": "x".repeat(120)}
    })
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Get,
    List,
    Create,
    Update,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn measure(
    base: &str,
    token: &str,
    objects: usize,
    op: Op,
    clients: usize,
    seconds: u64,
    created: Arc<AtomicUsize>,
) -> (f64, Duration, Duration) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let client = client.clone();
        let base = base.to_string();
        let token = token.to_string();
        let created = created.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = worker * 7919;
            while Instant::now() < deadline {
                i = (i + 104_729) % objects;
                let ns = format!("ns-{:04}", i % NAMESPACES);
                let start = Instant::now();
                let status = match op {
                    Op::Get => client
                        .get(format!(
                            "{base}/api/v1/namespaces/{ns}/configmaps/obj-{i:06}"
                        ))
                        .bearer_auth(&token)
                        .send()
                        .await
                        .unwrap()
                        .status(),
                    Op::List => {
                        let r = client
                            .get(format!("{base}/api/v1/namespaces/{ns}/configmaps"))
                            .bearer_auth(&token)
                            .send()
                            .await
                            .unwrap();
                        let s = r.status();
                        let _ = r.bytes().await.unwrap();
                        s
                    }
                    Op::Create => {
                        let n = objects + created.fetch_add(1, Ordering::SeqCst);
                        client
                            .post(format!(
                                "{base}/api/v1/namespaces/{}/configmaps",
                                format_args!("ns-{:04}", n % NAMESPACES)
                            ))
                            .bearer_auth(&token)
                            .json(&object(n))
                            .send()
                            .await
                            .unwrap()
                            .status()
                    }
                    Op::Update => client
                        .patch(format!(
                            "{base}/api/v1/namespaces/{ns}/configmaps/obj-{i:06}"
                        ))
                        .bearer_auth(&token)
                        .header("content-type", "application/merge-patch+json")
                        .body(json!({"data": {"counter": format!("{worker}-{i}")}}).to_string())
                        .send()
                        .await
                        .unwrap()
                        .status(),
                };
                assert!(status.is_success(), "{op:?} answered {status}");
                latencies.push(start.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let rate = all.len() as f64 / seconds as f64;
    (rate, percentile(&all, 0.5), percentile(&all, 0.99))
}

#[tokio::main]
async fn main() {
    let objects: usize = std::env::var("API_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seconds: u64 = std::env::var("API_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Tls::Plain;
    config.controllers = None;
    let server = app::start(config).await.unwrap();
    let rt = builtin_by_plural("", "configmaps").unwrap();
    let start = Instant::now();
    let mut loaders = Vec::new();
    for w in 0..64 {
        let store = server.store.clone();
        let rt = rt.clone();
        loaders.push(tokio::spawn(async move {
            let mut i = w;
            while i < objects {
                store.create(&rt, object(i)).await.unwrap();
                i += 64;
            }
        }));
    }
    for l in loaders {
        l.await.unwrap();
    }
    println!(
        "loaded {objects} objects in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    println!("| operation | clients | requests/s | p50 | p99 |");
    println!("|---|---|---|---|---|");
    let created = Arc::new(AtomicUsize::new(0));
    for op in [Op::Get, Op::List, Op::Create, Op::Update] {
        for clients in [1, 64] {
            let (rate, p50, p99) = measure(
                &server.url(),
                &server.admin_token,
                objects,
                op,
                clients,
                seconds,
                created.clone(),
            )
            .await;
            println!(
                "| {op:?} | {clients} | {rate:.0} | {:.2} ms | {:.2} ms |",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
    }
    server.shutdown().await.unwrap();
}
