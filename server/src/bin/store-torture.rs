//! `flotilla-store-torture`: writes to a store (sled, or the log engine with `--engine log`) as fast as it can until it is killed, so a
//! test can SIGKILL it at a random moment and check that every acknowledged write survived.
//!
//! It opens the store in `DIR`, prints `ready <resourceVersion>`, then runs `--writers` tasks.
//! Each owns `--keys` ConfigMaps in namespace `torture` and increments `data.value` of a random
//! one (creating it at 1), printing `ack <namespace>/<name> <value> <resourceVersion>` only after
//! the store call returned, i.e. after the write is durable. Every tenth step also creates a
//! Deployment owner with a ConfigMap dependent in namespace `gc` and deletes the owner, so that
//! garbage collection is in flight when the process dies.

use clap::Parser;
use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::store::{DeleteOptions, KvStore, Store, StoreConfig, StoreError};
use rand::Rng;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Hammers a sled store with acknowledged writes until killed")]
struct Args {
    /// Data directory of the store.
    dir: PathBuf,
    /// Concurrent writer tasks.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Objects per writer.
    #[arg(long, default_value_t = 8)]
    keys: usize,
    /// Event log capacity of the store.
    #[arg(long, default_value_t = 200)]
    event_log_capacity: usize,
    /// Stop after this many steps per writer (default: run until killed).
    #[arg(long)]
    steps: Option<u64>,
    /// The engine: `sled` (the server's default) or `log`.
    #[arg(long, default_value = "sled")]
    engine: String,
}

fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

fn resource_version(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn writer(
    store: Arc<dyn Store>,
    id: usize,
    keys: usize,
    steps: Option<u64>,
) -> anyhow::Result<()> {
    let configmaps =
        builtin_by_plural("", "configmaps").ok_or_else(|| anyhow::anyhow!("no configmaps"))?;
    let deployments = builtin_by_plural("apps", "deployments")
        .ok_or_else(|| anyhow::anyhow!("no deployments"))?;
    let mut step = 0u64;
    loop {
        if steps.is_some_and(|s| step >= s) {
            return Ok(());
        }
        step += 1;
        let k = rand::thread_rng().gen_range(0..keys);
        let name = format!("w{id}-k{k}");
        let stored = match store.get(&configmaps, Some("torture"), &name).await {
            Ok(obj) => obj,
            Err(StoreError::NotFound { .. }) => {
                let obj = json!({"metadata": {"name": name, "namespace": "torture"},
                                 "data": {"value": "1"}});
                let created = store.create(&configmaps, obj).await?;
                say(&format!(
                    "ack torture/{name} 1 {}",
                    resource_version(&created)
                ))?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let value: u64 = stored["data"]["value"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("{name}: data.value is not a number"))?;
        let mut next = stored;
        next["data"]["value"] = json!((value + 1).to_string());
        let updated = store.update(&configmaps, next).await?;
        say(&format!(
            "ack torture/{name} {} {}",
            value + 1,
            resource_version(&updated)
        ))?;

        if step.is_multiple_of(10) {
            let owner = store
                .create(
                    &deployments,
                    json!({"metadata": {"generateName": format!("w{id}-o-"), "namespace": "gc"},
                           "spec": {"replicas": 1}}),
                )
                .await?;
            let owner_name = owner["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let dependent = json!({"metadata": {
                "name": format!("{owner_name}-dep"), "namespace": "gc",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": owner_name, "uid": owner["metadata"]["uid"]}]}});
            store.create(&configmaps, dependent).await?;
            store
                .delete(
                    &deployments,
                    Some("gc"),
                    &owner_name,
                    &DeleteOptions::default(),
                )
                .await?;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = StoreConfig {
        event_log_capacity: args.event_log_capacity,
        // As the server runs it: batches queued, written and synced once per paced round.
        min_flush_interval: flotilla_server::app::DEFAULT_MIN_FLUSH_INTERVAL,
        ..StoreConfig::default()
    };
    let store: Arc<dyn Store> = match args.engine.as_str() {
        "sled" => KvStore::open_sled(&args.dir, config)?,
        "log" => KvStore::open_log(&args.dir, config)?,
        other => anyhow::bail!("--engine {other}: expected sled or log"),
    };
    say(&format!(
        "ready {}",
        store.current_resource_version().await?
    ))?;
    let mut tasks = Vec::new();
    for id in 0..args.writers {
        tasks.push(tokio::spawn(writer(
            store.clone(),
            id,
            args.keys.max(1),
            args.steps,
        )));
    }
    for task in tasks {
        task.await??;
    }
    store.close().await?;
    say("done")?;
    Ok(())
}
