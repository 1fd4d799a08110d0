//! Crash test with a real process: `flotilla-store-torture` writes to a store (sled, then the
//! log engine) and is
//! SIGKILLed at a random moment; the store must then open cleanly with every acknowledged
//! write in it, a resourceVersion counter past every acknowledged one, a contiguous event log,
//! and garbage collection finished after the reopen. Rounds reuse one directory, so each round
//! also recovers from the previous crash.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::store::{Engine, KvStore, ListOptions, Store, StoreConfig, WatchOptions};
use flotilla_server::testing::eventually;
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 20;
const EVENT_LOG_CAPACITY: usize = 200;
const WAIT: Duration = Duration::from_secs(10);

/// Kills and reaps the child however the test ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the child acknowledged: key -> highest value, and the highest resourceVersion.
#[derive(Default)]
struct Acks {
    values: HashMap<String, u64>,
    max_rv: u64,
}

impl Acks {
    fn record(&mut self, line: &str) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["ack", key, value, rv] = parts.as_slice() {
            let value: u64 = value.parse().unwrap();
            let rv: u64 = rv.parse().unwrap();
            let entry = self.values.entry(key.to_string()).or_default();
            *entry = (*entry).max(value);
            self.max_rv = self.max_rv.max(rv);
        }
    }
}

/// Runs the torture binary until a random moment after it is ready, then kills it.
/// Returns the complete lines it printed.
fn run_and_kill(dir: &Path, engine: &str, rng: &mut impl Rng) -> Vec<String> {
    let child = Command::new(env!("CARGO_BIN_EXE_flotilla-store-torture"))
        .arg(dir)
        .args(["--engine", engine])
        .args(["--writers", "8", "--keys", "6"])
        .args(["--event-log-capacity", &EVENT_LOG_CAPACITY.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start flotilla-store-torture");
    let mut guard = ChildGuard(child);
    let stdout = guard.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                // A line cut by the kill has no newline: it was never acknowledged.
                Ok(_) if line.ends_with('\n') => {
                    if tx.send(line.trim_end().to_string()).is_err() {
                        return;
                    }
                }
                Ok(_) => return,
            }
        }
    });
    let mut lines = Vec::new();
    let ready = rx
        .recv_timeout(WAIT)
        .expect("flotilla-store-torture did not print `ready` in time");
    assert!(ready.starts_with("ready "), "first line: {ready}");
    std::thread::sleep(Duration::from_millis(rng.gen_range(20..=300)));
    guard.0.kill().unwrap();
    guard.0.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    lines
}

/// Reopens the store the torture binary wrote with `engine` and checks it.
async fn verify(dir: &Path, engine: &str, acks: &Acks, round: usize) {
    let config = StoreConfig {
        event_log_capacity: EVENT_LOG_CAPACITY,
        ..StoreConfig::default()
    };
    let opened = |e: &dyn std::fmt::Display| {
        format!("round {round}: the store did not open after a kill: {e}")
    };
    match engine {
        "log" => match KvStore::open_log(dir, config) {
            Ok(store) => check(store, acks, round).await,
            Err(e) => panic!("{}", opened(&e)),
        },
        _ => match KvStore::open_sled(dir, config) {
            Ok(store) => check(store, acks, round).await,
            Err(e) => panic!("{}", opened(&e)),
        },
    }
}

async fn check<E: Engine>(store: Arc<KvStore<E>>, acks: &Acks, round: usize) {
    let configmaps = builtin_by_plural("", "configmaps").unwrap();
    let deployments = builtin_by_plural("apps", "deployments").unwrap();

    for (key, acked) in &acks.values {
        let (ns, name) = key.split_once('/').unwrap();
        let obj = store
            .get(&configmaps, Some(ns), name)
            .await
            .unwrap_or_else(|e| panic!("round {round}: acknowledged {key} lost: {e}"));
        let value: u64 = obj["data"]["value"].as_str().unwrap().parse().unwrap();
        assert!(
            value >= *acked,
            "round {round}: {key} has {value}, but {acked} was acknowledged"
        );
    }
    // Garbage collection finishes what the kill interrupted (before the log is read: its
    // deletions are writes that extend and trim the event log).
    eventually(&format!("round {round}: gc to finish"), WAIT, || async {
        store.gc_idle().then_some(())
    })
    .await;
    let current = store.current_resource_version().await.unwrap();
    assert!(
        current >= acks.max_rv,
        "round {round}: counter {current} is behind acknowledged {}",
        acks.max_rv
    );

    // The event log is contiguous up to the counter.
    let stats = store.stats();
    assert!(stats.retained_events as usize <= EVENT_LOG_CAPACITY);
    if let Some(oldest) = stats.oldest_event {
        assert_eq!(
            oldest + stats.retained_events - 1,
            current,
            "round {round}: event log is not contiguous"
        );
        let mut all = store
            .watch(
                &configmaps,
                WatchOptions {
                    from: Some(oldest - 1),
                    ..WatchOptions::default()
                },
            )
            .await
            .unwrap();
        let mut deploys = store
            .watch(
                &deployments,
                WatchOptions {
                    from: Some(oldest - 1),
                    ..WatchOptions::default()
                },
            )
            .await
            .unwrap();
        let mut seen = 0u64;
        let mut last = 0;
        let deadline = tokio::time::Instant::now() + WAIT;
        // Both kinds together account for every retained event, in order per stream.
        while seen < stats.retained_events {
            let event = tokio::select! {
                e = all.next() => e,
                e = deploys.next() => e,
                _ = tokio::time::sleep_until(deadline) => panic!("round {round}: replay stalled"),
            };
            let event = event.unwrap().unwrap();
            assert!(event.resource_version >= oldest && event.resource_version <= current);
            last = last.max(event.resource_version);
            seen += 1;
        }
        assert_eq!(last, current);
    }

    let owners: HashSet<Value> = store
        .list(&deployments, Some("gc"), &ListOptions::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o["metadata"]["uid"].clone())
        .collect();
    for dependent in store
        .list(&configmaps, Some("gc"), &ListOptions::default())
        .await
        .unwrap()
        .items
    {
        let owner = &dependent["metadata"]["ownerReferences"][0]["uid"];
        assert!(
            owners.contains(owner),
            "round {round}: {} outlived its owner",
            dependent["metadata"]["name"]
        );
    }

    // New writes go on after every acknowledged resourceVersion.
    let probe = store
        .create(
            &configmaps,
            json!({"metadata": {"generateName": "probe-", "namespace": "probe"}}),
        )
        .await
        .unwrap();
    let probe_rv: u64 = probe["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(probe_rv > acks.max_rv && probe_rv > current);
    store.close().await.unwrap();
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    crash_rounds("sled");
}

#[test]
fn acknowledged_writes_survive_sigkill_on_the_log_engine() {
    crash_rounds("log");
}

fn crash_rounds(engine: &str) {
    let started = Instant::now();
    let seed: u64 = rand::random();
    eprintln!("crash test ({engine}) seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut acks = Acks::default();
    let mut total = 0;
    for round in 0..ROUNDS {
        let lines = run_and_kill(dir.path(), engine, &mut rng);
        total += lines.len();
        for line in &lines {
            acks.record(line);
        }
        runtime.block_on(verify(dir.path(), engine, &acks, round));
    }
    eprintln!(
        "crash test ({engine}): {ROUNDS} rounds, {total} acknowledged writes, {} keys, {:?}",
        acks.values.len(),
        started.elapsed()
    );
    assert!(total > 0, "the torture binary never acknowledged a write");
}
