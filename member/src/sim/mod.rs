//! `sim`: the embedded simulated member runtime, in the manner of kwok. Nodes with allocatable
//! cpu/memory/pods; pods placed first-fit by their requests and Ready after a startup delay;
//! Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs that own their pods and report
//! Kubernetes-shaped status; every other kind stored as given. A fault API (cordon, delete
//! pods, capacity, status override) makes it fail on purpose.
//!
//! [`state::SimState`] is the whole model and takes `now` as an argument; [`SimRuntime`] wraps
//! it with a [`Clock`], change notification and a state file (`sim-state.json`, written
//! atomically and at most once per save period), and [`SimDriver`] ticks many sims from one
//! task.

pub mod placement;
mod pod_index;
pub mod pods;
pub mod state;
pub mod workloads;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_api::quantity::{Quantity, ResourceList};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::{
    CapacityChange, ClusterSummary, ListFilter, MemberRuntime, ObjectRef, RuntimeError,
    RuntimeFaults,
};
use flotilla_support::clock::Clock;
use flotilla_support::files;
pub use state::{NodeShape, SimState};

/// How the sim stores an object: group (not version), kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl From<&ObjectRef> for ObjectKey {
    fn from(r: &ObjectRef) -> Self {
        ObjectKey {
            group: r.group().to_string(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// The sim's knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Number of nodes.
    pub nodes: usize,
    /// Allocatable cpu per node.
    pub node_cpu: Quantity,
    /// Allocatable memory per node.
    pub node_memory: Quantity,
    /// Allocatable pods per node.
    pub node_pods: Quantity,
    /// How long a placed pod takes to become Running and Ready.
    pub pod_startup_delay: Duration,
    /// How long a job pod runs before it succeeds.
    pub job_run: Duration,
    /// The reported Kubernetes version.
    pub kubernetes_version: String,
    /// APIs reported as served besides the built-in ones, as (group version, kind).
    pub extra_apis: Vec<(String, String)>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            node_cpu: Quantity::from_units(8),
            node_memory: Quantity::parse("32Gi").unwrap_or_default(),
            node_pods: Quantity::from_units(110),
            pod_startup_delay: Duration::from_millis(1000),
            job_run: Duration::from_millis(2000),
            kubernetes_version: "v1.32.0-sim".into(),
            extra_apis: vec![("flink.apache.org/v1beta1".into(), "FlinkDeployment".into())],
        }
    }
}

impl SimConfig {
    /// The node shape this config asks for.
    pub fn node_shape(&self) -> NodeShape {
        let allocatable: ResourceList = [
            ("cpu", &self.node_cpu),
            ("memory", &self.node_memory),
            ("pods", &self.node_pods),
        ]
        .into_iter()
        .map(|(k, q)| (k.to_string(), q.clone()))
        .collect();
        NodeShape {
            nodes: self.nodes,
            allocatable,
        }
    }
}

/// The sim as a [`MemberRuntime`]: a [`SimState`] behind a lock, read at the clock's time.
pub struct SimRuntime {
    state: Mutex<SimState>,
    clock: Arc<dyn Clock>,
    changes: watch::Sender<u64>,
    state_file: Option<PathBuf>,
    unsaved: AtomicBool,
}

impl std::fmt::Debug for SimRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRuntime")
            .field("state_file", &self.state_file)
            .finish_non_exhaustive()
    }
}

impl SimRuntime {
    /// A sim restored from `state_file` when it exists (else fresh), saving there from now on.
    /// Without a state file the sim lives in memory only.
    pub fn open(
        config: SimConfig,
        clock: Arc<dyn Clock>,
        state_file: Option<PathBuf>,
    ) -> Result<Arc<Self>, RuntimeError> {
        let saved = match &state_file {
            Some(path) => files::read_optional(path).map_err(|e| RuntimeError::Load {
                path: path.display().to_string(),
                source: Box::new(e),
            })?,
            None => None,
        };
        let mut state = match (saved, &state_file) {
            (Some(bytes), Some(path)) => {
                SimState::restore(&config, &bytes).map_err(|e| RuntimeError::Load {
                    path: path.display().to_string(),
                    source: Box::new(e),
                })?
            }
            _ => SimState::new(&config),
        };
        state.reconcile(clock.now());
        let (changes, _) = watch::channel(state.revision());
        Ok(Arc::new(SimRuntime {
            state: Mutex::new(state),
            clock,
            changes,
            state_file,
            unsaved: AtomicBool::new(true),
        }))
    }

    /// Runs `f` on the state at the clock's time, then announces any change.
    fn with_state<T>(
        &self,
        f: impl FnOnce(&mut SimState, chrono::DateTime<chrono::Utc>) -> T,
    ) -> T {
        let now = self.clock.now();
        let (out, revision) = {
            let mut state = self.state.lock();
            let out = f(&mut state, now);
            (out, state.revision())
        };
        let moved = self.changes.send_if_modified(|r| {
            if *r == revision {
                false
            } else {
                *r = revision;
                true
            }
        });
        if moved {
            self.unsaved.store(true, Ordering::Release);
        }
        out
    }

    /// Advances the sim to the clock's time (cheap when nothing is due).
    pub fn tick(&self) {
        let now = self.clock.now();
        if !self.state.lock().needs_reconcile(now) {
            return;
        }
        self.with_state(|s, now| s.reconcile(now));
    }

    /// Writes the state file if anything changed since the last save.
    pub fn save(&self) -> Result<(), RuntimeError> {
        let Some(path) = &self.state_file else {
            return Ok(());
        };
        if !self.unsaved.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let bytes = self.state.lock().snapshot();
        let result = bytes
            .map_err(std::io::Error::other)
            .and_then(|b| files::write_atomic(path, &b));
        result.map_err(|source| {
            self.unsaved.store(true, Ordering::Release);
            RuntimeError::Persist {
                path: path.display().to_string(),
                source,
            }
        })
    }

    /// A copy of the node list.
    pub fn nodes(&self) -> Vec<state::Node> {
        self.state.lock().nodes().to_vec()
    }
}

#[async_trait]
impl MemberRuntime for SimRuntime {
    async fn apply(&self, manifest: Value) -> Result<Value, RuntimeError> {
        self.with_state(|s, now| s.apply(manifest, now))
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, RuntimeError> {
        Ok(self.state.lock().get(&ObjectKey::from(object)).cloned())
    }

    async fn resource_version(&self, object: &ObjectRef) -> Result<Option<String>, RuntimeError> {
        let state = self.state.lock();
        Ok(state
            .get(&ObjectKey::from(object))
            .and_then(crate::resource_version_of))
    }

    async fn delete(&self, object: &ObjectRef) -> Result<Option<Value>, RuntimeError> {
        Ok(self.with_state(|s, now| s.delete(&ObjectKey::from(object), now)))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Value>, RuntimeError> {
        Ok(self.state.lock().list(filter))
    }

    async fn summary(&self) -> Result<ClusterSummary, RuntimeError> {
        Ok(self.state.lock().summary())
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn flush(&self) -> Result<(), RuntimeError> {
        self.save()
    }

    fn faults(&self) -> Option<&dyn RuntimeFaults> {
        Some(self)
    }
}

#[async_trait]
impl RuntimeFaults for SimRuntime {
    async fn cordon(&self, enabled: bool) -> Result<(), RuntimeError> {
        self.with_state(|s, now| s.cordon(enabled, now));
        Ok(())
    }

    async fn delete_pods(
        &self,
        namespace: &str,
        label_selector: &str,
    ) -> Result<usize, RuntimeError> {
        self.with_state(|s, now| s.delete_pods(namespace, label_selector, now))
    }

    async fn set_capacity(&self, change: CapacityChange) -> Result<(), RuntimeError> {
        self.with_state(|s, now| s.set_capacity(&change, now));
        Ok(())
    }

    async fn set_status(&self, object: &ObjectRef, status: Value) -> Result<Value, RuntimeError> {
        self.with_state(|s, now| s.set_status(&ObjectKey::from(object), status, now))
    }

    async fn describe(&self) -> Result<Value, RuntimeError> {
        let s = self.state.lock();
        let first = s
            .nodes()
            .first()
            .map(|n| n.allocatable.clone())
            .unwrap_or_default();
        Ok(json!({
            "cordoned": s.cordoned(),
            "capacity": {
                "nodes": s.nodes().len(),
                "cpu": first.get("cpu"),
                "memory": first.get("memory"),
                "pods": first.get("pods"),
            },
            "statusOverrides": s.status_overrides(),
        }))
    }
}

/// Share of the time saving the sims may take: after a save that took `d`, the next one waits
/// at least `d * SAVE_DUTY_DIVISOR` (a save costs every object the members hold, so a fixed
/// period would make a large member spend most of its time saving).
const SAVE_DUTY_DIVISOR: u32 = 20;

/// Ticks a set of sims from one task and saves them in the background.
#[derive(Debug)]
pub struct SimDriver {
    sims: Vec<Arc<SimRuntime>>,
    tick: Duration,
    save_every: Duration,
}

impl SimDriver {
    /// A driver ticking every `tick` and saving changed sims every `save_every`, or less
    /// often when saving takes more than a twentieth of the time.
    pub fn new(sims: Vec<Arc<SimRuntime>>, tick: Duration, save_every: Duration) -> Self {
        SimDriver {
            sims,
            tick,
            save_every,
        }
    }

    /// Runs until `shutdown` turns true, then saves every sim one last time.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_save = tokio::time::Instant::now() + self.save_every;
        let sims = Arc::new(self.sims);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    for sim in sims.iter() {
                        sim.tick();
                    }
                }
                _ = tokio::time::sleep_until(next_save) => {
                    let sims = sims.clone();
                    let started = tokio::time::Instant::now();
                    let _ = tokio::task::spawn_blocking(move || save_all(&sims)).await;
                    let took = started.elapsed();
                    next_save = tokio::time::Instant::now()
                        + self.save_every.max(took * SAVE_DUTY_DIVISOR);
                }
                _ = crate::stopped(&mut shutdown) => break,
            }
        }
        let _ = tokio::task::spawn_blocking(move || save_all(&sims)).await;
    }
}

fn save_all(sims: &[Arc<SimRuntime>]) {
    for sim in sims {
        if let Err(e) = sim.save() {
            tracing::warn!(error = %flotilla_support::error_chain(&e), "saving sim state failed");
        }
    }
}

#[cfg(test)]
mod tests;
