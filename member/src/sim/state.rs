//! The simulated cluster's state and its control loop: stored objects, nodes, the sim's pod
//! bookkeeping, and [`SimState::reconcile`], which at a given instant advances pods, evicts
//! what no longer fits, runs the workload controllers, places pending pods and recomputes every
//! status. No I/O and no clock: the caller passes `now`, so tests drive it with a fake clock.

use flotilla_api::json_pointer::JsonPointer;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use flotilla_api::cluster::{ApiEnablement, ApiResource, NodeSummary, ResourceSummary};
use flotilla_api::quantity::{add_lists, Quantity, ResourceList};
use flotilla_api::selector::LabelRequirements;
use flotilla_api::Time;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::placement::{self, NodeUsage, Placement, PODS};
use super::pod_index::PodIndex;
use super::pods::{pod_status, PodSim};
use super::workloads::{self, NewPod, PodName, PodView, WorkloadKind};
use super::{ObjectKey, SimConfig};
use crate::hashing::short_hash;
use crate::{
    group_of, resource_plural, CapacityChange, ClusterSummary, ListFilter, ObjectRef, RuntimeError,
};
use flotilla_api::pod_requests::pod_requests_skipping_unreadable;

/// One simulated node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Allocatable cpu, memory, pods.
    pub allocatable: ResourceList,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// The node shape the sim was started with (count and per-node allocatable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeShape {
    /// Number of nodes.
    pub nodes: usize,
    /// Per-node allocatable.
    pub allocatable: ResourceList,
}

/// One stored object with the sim's extras.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The object as a member API server would return it.
    pub object: Value,
    /// Status set through the fault API; merged over the computed status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_override: Option<Value>,
    /// Pod bookkeeping, for pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSim>,
}

/// The on-disk form of [`SimState`] (`sim-state.json`): read as [`SavedSnapshot`], written
/// from references into the state (so a save does not copy every object first).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Snapshot<C, N, O> {
    version: u32,
    resource_version: u64,
    seq: u64,
    cordoned: bool,
    configured: C,
    nodes: N,
    objects: O,
}

/// A snapshot as read back.
type SavedSnapshot = Snapshot<NodeShape, Vec<Node>, Vec<Entry>>;

const SNAPSHOT_VERSION: u32 = 1;

/// The built-in APIs the sim reports as served (group version, plural, kind).
const SERVED_APIS: &[(&str, &str, &str)] = &[
    ("v1", "configmaps", "ConfigMap"),
    ("v1", "events", "Event"),
    ("v1", "namespaces", "Namespace"),
    ("v1", "nodes", "Node"),
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    ("v1", "persistentvolumes", "PersistentVolume"),
    ("v1", "pods", "Pod"),
    ("v1", "secrets", "Secret"),
    ("v1", "serviceaccounts", "ServiceAccount"),
    ("v1", "services", "Service"),
    ("apps/v1", "controllerrevisions", "ControllerRevision"),
    ("apps/v1", "daemonsets", "DaemonSet"),
    ("apps/v1", "deployments", "Deployment"),
    ("apps/v1", "replicasets", "ReplicaSet"),
    ("apps/v1", "statefulsets", "StatefulSet"),
    (
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
    ),
    ("batch/v1", "cronjobs", "CronJob"),
    ("batch/v1", "jobs", "Job"),
    ("coordination.k8s.io/v1", "leases", "Lease"),
    ("networking.k8s.io/v1", "ingresses", "Ingress"),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy"),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
    ),
    ("rbac.authorization.k8s.io/v1", "roles", "Role"),
    ("storage.k8s.io/v1", "storageclasses", "StorageClass"),
];

/// The simulated cluster.
#[derive(Debug)]
pub struct SimState {
    startup_delay: Duration,
    job_run: Duration,
    kubernetes_version: String,
    extra_apis: Vec<(String, String)>,
    configured: NodeShape,
    nodes: Vec<Node>,
    cordoned: bool,
    objects: BTreeMap<ObjectKey, Entry>,
    resource_version: u64,
    seq: u64,
    revision: u64,
    dirty: bool,
    next_due: Option<DateTime<Utc>>,
    /// Objects (workloads, pods) changed since the last reconcile: only they, and the owners
    /// of changed pods, are reconciled and have their status recomputed, so applying one
    /// object costs that object, not the whole cluster.
    marked: BTreeSet<ObjectKey>,
    /// The next reconcile looks at every object (after node, capacity or bulk changes).
    sweep: bool,
    /// The next reconcile checks nodes for overcommitment.
    evict_due: bool,
    /// The pods' lookups, kept up to date with `objects`.
    pods: PodIndex,
    /// What the last placement pass that placed nothing saw (see [`RefusedThrough`]).
    refused: Option<RefusedThrough>,
}

/// A placement pass that placed no pod: every pending pod up to `seq` was refused at `usage`.
/// A pod's requests and node pin are fixed when it is created, and placement depends only on
/// them and the nodes' usage, so while the usage is the same each of those pods would be
/// refused again with the same message. The next pass looks only at the pods that came after
/// them: a member full of pending pods then costs each new pod one placement, not a look at
/// every pending pod.
#[derive(Debug)]
struct RefusedThrough {
    usage: Vec<NodeUsage>,
    seq: u64,
}

fn node_name(i: usize) -> String {
    format!("sim-node-{i}")
}

fn host_ip(i: usize) -> String {
    format!("10.0.{}.{}", i / 250, i % 250 + 1)
}

/// Memory-like quantities read better with binary suffixes (`32Gi`).
fn pretty(name: &str, q: &Quantity) -> Quantity {
    if name != "memory" && name != "ephemeral-storage" {
        return q.clone();
    }
    let bytes = q.value();
    for (suffix, unit) in [
        ("Ti", 1i128 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes != 0 && bytes % unit == 0 {
            return Quantity::parse(&format!("{}{suffix}", bytes / unit))
                .unwrap_or_else(|_| q.clone());
        }
    }
    Quantity::parse(&bytes.to_string()).unwrap_or_else(|_| q.clone())
}

/// [`pretty`] of every quantity of a list.
pub(crate) fn pretty_list(list: ResourceList) -> ResourceList {
    list.iter()
        .map(|(k, q)| (k.clone(), pretty(k, q)))
        .collect()
}

fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.lookup("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::thread_rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

impl SimState {
    /// A fresh cluster shaped by the config.
    pub fn new(config: &SimConfig) -> Self {
        let configured = config.node_shape();
        let mut state = SimState {
            startup_delay: config.pod_startup_delay,
            job_run: config.job_run,
            kubernetes_version: config.kubernetes_version.clone(),
            extra_apis: config.extra_apis.clone(),
            configured: configured.clone(),
            nodes: Vec::new(),
            cordoned: false,
            objects: BTreeMap::new(),
            resource_version: 0,
            seq: 0,
            revision: 0,
            dirty: true,
            next_due: None,
            marked: BTreeSet::new(),
            sweep: true,
            evict_due: true,
            pods: PodIndex::default(),
            refused: None,
        };
        state.reshape(&configured);
        state
    }

    /// Restores a saved cluster. When the config's node shape differs from the one the saved
    /// cluster was started with, the config wins (as a capacity change would).
    pub fn restore(config: &SimConfig, bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let snap: SavedSnapshot = serde_json::from_slice(bytes)?;
        let mut state = SimState::new(config);
        state.resource_version = snap.resource_version;
        state.seq = snap.seq;
        state.cordoned = snap.cordoned;
        state.nodes = snap.nodes;
        state.objects = snap
            .objects
            .into_iter()
            .filter_map(|e| {
                let key = ObjectRef::from_manifest(&e.object).ok()?;
                Some((ObjectKey::from(&key), e))
            })
            .collect();
        if snap.configured != state.configured {
            let shape = state.configured.clone();
            state.reshape(&shape);
        }
        state.rebuild_pod_index();
        state.dirty = true;
        state.sweep = true;
        state.evict_due = true;
        Ok(state)
    }

    /// The state in its on-disk form.
    pub fn snapshot(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&Snapshot {
            version: SNAPSHOT_VERSION,
            resource_version: self.resource_version,
            seq: self.seq,
            cordoned: self.cordoned,
            configured: &self.configured,
            nodes: self.nodes.as_slice(),
            objects: self.objects.values().collect::<Vec<_>>(),
        })
    }

    /// Moves on every change of objects or statuses.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn reshape(&mut self, shape: &NodeShape) {
        self.nodes = (0..shape.nodes)
            .map(|i| Node {
                name: node_name(i),
                allocatable: shape.allocatable.clone(),
                unschedulable: self.cordoned,
            })
            .collect();
        self.rebuild_pod_index();
        self.sweep_all();
    }

    /// The sim's timing, as the pod index needs it.
    fn timing(&self) -> (Duration, Duration) {
        (self.startup_delay, self.job_run)
    }

    fn rebuild_pod_index(&mut self) {
        self.pods = PodIndex::build(&self.objects, &self.nodes, self.timing());
    }

    /// Brings the pod index in line with the object at `key` (changed or gone).
    fn reindex(&mut self, key: &ObjectKey) {
        let timing = self.timing();
        self.pods.update(key, self.objects.get(key), timing);
    }

    /// Removes an object (and its part of the pod index).
    fn remove_object(&mut self, key: &ObjectKey) -> Option<Entry> {
        let removed = self.objects.remove(key);
        if removed.is_some() {
            self.reindex(key);
        }
        removed
    }

    fn changed(&mut self) {
        self.revision += 1;
        self.dirty = true;
    }

    /// A change that may concern any object: the next reconcile looks at everything.
    fn sweep_all(&mut self) {
        self.sweep = true;
        self.evict_due = true;
        self.changed();
    }

    /// The object (a workload or a pod) needs a look at the next reconcile.
    fn mark(&mut self, key: &ObjectKey) {
        self.reindex(key);
        self.marked.insert(key.clone());
        self.changed();
    }

    /// What the next reconcile looks at: `None` for everything, else the marked objects
    /// and the owners of marked pods.
    fn focus(&self) -> Option<BTreeSet<ObjectKey>> {
        if self.sweep {
            return None;
        }
        let mut keys = self.marked.clone();
        for k in &self.marked {
            if let Some(owner) = self
                .objects
                .get(k)
                .and_then(|e| e.pod.as_ref())
                .and_then(|p| p.owner.clone())
            {
                keys.insert(owner);
            }
        }
        Some(keys)
    }

    /// Gives the object a new resourceVersion.
    fn touch(&mut self, key: &ObjectKey) {
        self.resource_version += 1;
        let rv = self.resource_version.to_string();
        if let Some(meta) = self
            .objects
            .get_mut(key)
            .and_then(|e| e.object.get_mut("metadata"))
            .and_then(Value::as_object_mut)
        {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        self.changed();
    }

    /// True when [`SimState::reconcile`] has something to do at `now`.
    pub fn needs_reconcile(&self, now: DateTime<Utc>) -> bool {
        self.dirty || self.next_due.is_some_and(|due| due <= now)
    }

    /// Creates or updates the object of a manifest, reconciles, and answers the stored
    /// object. Status in the manifest is ignored: the sim (or the fault API) owns status.
    pub fn apply(&mut self, manifest: Value, now: DateTime<Utc>) -> Result<Value, RuntimeError> {
        let oref = ObjectRef::from_manifest(&manifest)?;
        let key = ObjectKey::from(&oref);
        let mut object = manifest;
        let Some(obj) = object.as_object_mut() else {
            return Err(RuntimeError::Invalid(
                "a manifest must be a JSON object".into(),
            ));
        };
        obj.remove("status");
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| RuntimeError::Invalid("metadata must be an object".into()))?;
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if oref.namespace.is_empty() {
            meta.remove("namespace");
        } else {
            meta.insert("namespace".into(), json!(oref.namespace));
        }
        let is_pod = key.group.is_empty() && key.kind == "Pod";
        match self.objects.get(&key) {
            Some(old) => {
                let old_obj = &old.object;
                let generation = old_obj
                    .lookup("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let generation = if spec_part(old_obj) == spec_part(&object) {
                    generation
                } else {
                    generation + 1
                };
                for k in ["uid", "creationTimestamp", "resourceVersion"] {
                    if let Some(v) = old_obj.lookup(&format!("/metadata/{k}")) {
                        object["metadata"][k] = v.clone();
                    }
                }
                object["metadata"]["generation"] = json!(generation);
                if let Some(status) = old_obj.get("status") {
                    object["status"] = status.clone();
                }
                if let (true, Some(node)) = (is_pod, old.pod.as_ref().and_then(|p| p.node.clone()))
                {
                    object["spec"]["nodeName"] = json!(node);
                }
                if object != *old_obj {
                    if let Some(e) = self.objects.get_mut(&key) {
                        e.object = object;
                    }
                    self.touch(&key);
                    self.mark(&key);
                }
            }
            None => {
                object["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                object["metadata"]["creationTimestamp"] = json!(Time::new(now).to_string());
                object["metadata"]["generation"] = json!(1);
                let pod = is_pod.then(|| {
                    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
                    self.seq += 1;
                    let mut p = PodSim::new(self.seq, pod_requests_skipping_unreadable(&spec), now);
                    p.pinned_node = spec
                        .get("nodeName")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    p
                });
                self.objects.insert(
                    key.clone(),
                    Entry {
                        object,
                        status_override: None,
                        pod,
                    },
                );
                self.touch(&key);
                self.mark(&key);
            }
        }
        self.reconcile(now);
        self.objects
            .get(&key)
            .map(|e| e.object.clone())
            .ok_or_else(|| RuntimeError::NotFound(oref.to_string()))
    }

    /// The stored object.
    pub fn get(&self, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(key).map(|e| &e.object)
    }

    /// Deletes an object and the pods it owns; answers it as it was.
    pub fn delete(&mut self, key: &ObjectKey, now: DateTime<Utc>) -> Option<Value> {
        let entry = self.remove_object(key)?;
        let owned: Vec<ObjectKey> = self.pods.owned_by(key).cloned().collect();
        for k in owned {
            self.remove_object(&k);
        }
        self.sweep_all();
        self.reconcile(now);
        Some(entry.object)
    }

    /// Objects matching the filter, in key order.
    pub fn list(&self, filter: &ListFilter) -> Vec<Value> {
        let group = group_of(&filter.api_version);
        self.objects
            .iter()
            .filter(|(k, _)| filter.api_version.is_empty() || k.group == group)
            .filter(|(k, _)| filter.kind.is_empty() || k.kind == filter.kind)
            .filter(|(k, _)| filter.namespace.is_empty() || k.namespace == filter.namespace)
            .map(|(_, e)| e.object.clone())
            .collect()
    }

    /// Version, APIs, nodes and resources (always healthy: health faults live above).
    pub fn summary(&self) -> ClusterSummary {
        let mut apis: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (gv, plural, kind) in SERVED_APIS {
            apis.entry(gv.to_string())
                .or_default()
                .insert(plural.to_string(), kind.to_string());
        }
        for (gv, kind) in &self.extra_apis {
            apis.entry(gv.clone())
                .or_default()
                .insert(resource_plural(group_of(gv), kind), kind.clone());
        }
        for entry in self.objects.values() {
            if let Ok(r) = ObjectRef::from_manifest(&entry.object) {
                apis.entry(r.api_version.clone())
                    .or_default()
                    .insert(r.resource(), r.kind.clone());
            }
        }
        let api_enablements = apis
            .into_iter()
            .map(|(gv, resources)| ApiEnablement {
                group_version: gv,
                resources: resources
                    .into_iter()
                    .map(|(name, kind)| ApiResource { name, kind })
                    .collect(),
            })
            .collect();
        let allocatable =
            flotilla_api::quantity::sum_lists(self.nodes.iter().map(|n| &n.allocatable));
        let zero = |names: &[&str]| -> ResourceList {
            names
                .iter()
                .map(|n| (n.to_string(), Quantity::from_units(0)))
                .collect()
        };
        let mut allocated = zero(&["cpu", "memory", PODS]);
        let mut allocating = zero(&["cpu", "memory", PODS]);
        for pod in self.objects.values().filter_map(|e| e.pod.as_ref()) {
            if pod.finished() {
                continue;
            }
            let need = placement::with_pod_count(&pod.requests);
            if pod.node.is_some() {
                allocated = add_lists(&allocated, &need);
            } else {
                allocating = add_lists(&allocating, &need);
            }
        }
        let n = i32::try_from(self.nodes.len()).unwrap_or(i32::MAX);
        ClusterSummary {
            kubernetes_version: self.kubernetes_version.clone(),
            api_enablements,
            node_summary: NodeSummary {
                total_num: n,
                ready_num: n,
            },
            resource_summary: ResourceSummary {
                allocatable: pretty_list(allocatable),
                allocating: pretty_list(allocating),
                allocated: pretty_list(allocated),
                allocatable_modelings: Vec::new(),
            },
            healthy: true,
        }
    }

    /// Cordons (or uncordons) every node.
    pub fn cordon(&mut self, enabled: bool, now: DateTime<Utc>) {
        self.cordoned = enabled;
        for n in &mut self.nodes {
            n.unschedulable = enabled;
        }
        self.sweep_all();
        self.reconcile(now);
    }

    /// True when every node is cordoned.
    pub fn cordoned(&self) -> bool {
        self.cordoned
    }

    /// Deletes the matching pods; answers how many.
    pub fn delete_pods(
        &mut self,
        namespace: &str,
        label_selector: &str,
        now: DateTime<Utc>,
    ) -> Result<usize, RuntimeError> {
        let selector = LabelRequirements::parse(label_selector)
            .map_err(|e| RuntimeError::Invalid(format!("labelSelector: {e}")))?;
        let doomed: Vec<ObjectKey> = self
            .objects
            .iter()
            .filter(|(k, e)| {
                e.pod.is_some()
                    && (namespace.is_empty() || k.namespace == namespace)
                    && selector.matches(&labels_of(&e.object))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &doomed {
            self.remove_object(k);
        }
        self.sweep_all();
        self.reconcile(now);
        Ok(doomed.len())
    }

    /// Changes node count and per-node allocatable.
    pub fn set_capacity(&mut self, change: &CapacityChange, now: DateTime<Utc>) {
        let mut per_node = self
            .nodes
            .first()
            .map(|n| n.allocatable.clone())
            .unwrap_or_else(|| self.configured.allocatable.clone());
        for (name, q) in [
            ("cpu", &change.cpu),
            ("memory", &change.memory),
            (PODS, &change.pods),
        ] {
            if let Some(q) = q {
                per_node.insert(name.to_string(), q.clone());
            }
        }
        let shape = NodeShape {
            nodes: change.nodes.unwrap_or(self.nodes.len()),
            allocatable: per_node,
        };
        self.reshape(&shape);
        self.reconcile(now);
    }

    /// Merges `status` into the object's status override (`null` clears it).
    pub fn set_status(
        &mut self,
        key: &ObjectKey,
        status: Value,
        now: DateTime<Utc>,
    ) -> Result<Value, RuntimeError> {
        let entry = self.objects.get_mut(key).ok_or_else(|| {
            RuntimeError::NotFound(format!("{} {}/{}", key.kind, key.namespace, key.name))
        })?;
        if status.is_null() {
            entry.status_override = None;
        } else {
            let mut merged = entry.status_override.take().unwrap_or_else(|| json!({}));
            json_patch::merge(&mut merged, &status);
            entry.status_override = Some(merged);
        }
        let computed = entry.pod.is_some() || WorkloadKind::of(&key.group, &key.kind).is_some();
        if !computed {
            match entry.status_override.clone() {
                Some(s) => entry.object["status"] = s,
                None => {
                    if let Some(o) = entry.object.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        self.touch(key);
        self.sweep_all();
        self.reconcile(now);
        self.objects
            .get(key)
            .map(|e| e.object.clone())
            .ok_or_else(|| RuntimeError::NotFound(key.name.clone()))
    }

    /// The references of objects whose status is overridden.
    pub fn status_overrides(&self) -> Vec<ObjectRef> {
        self.objects
            .values()
            .filter(|e| e.status_override.is_some())
            .filter_map(|e| ObjectRef::from_manifest(&e.object).ok())
            .collect()
    }

    /// Brings the cluster to where it is at `now`: pods advance through their lifecycle,
    /// pods that no longer fit are evicted, workloads create and delete pods, pending pods are
    /// placed, and every computed status is refreshed.
    pub fn reconcile(&mut self, now: DateTime<Utc>) {
        self.advance_pods(now);
        if std::mem::take(&mut self.evict_due) {
            self.evict();
        }
        for _ in 0..8 {
            let mut changed = self.run_workloads(now);
            changed |= self.place_pending(now);
            changed |= self.advance_pods(now);
            if !changed {
                break;
            }
        }
        self.refresh_statuses(now);
        let objects = &self.objects;
        self.next_due = self.pods.next_due(|k| objects.get(k), self.timing());
        debug_assert_eq!(
            self.pods,
            PodIndex::build(&self.objects, &self.nodes, self.timing()),
            "the pod index drifted from the objects"
        );
        self.dirty = false;
        self.sweep = false;
        self.marked.clear();
    }

    fn advance_pods(&mut self, now: DateTime<Utc>) -> bool {
        let (startup, run) = (self.startup_delay, self.job_run);
        let mut moved = Vec::new();
        // Only unsettled pods advance by themselves.
        for k in self.pods.unsettled() {
            if let Some(p) = self.objects.get_mut(k).and_then(|e| e.pod.as_mut()) {
                if p.advance(now, startup, run) {
                    moved.push(k.clone());
                }
            }
        }
        for k in &moved {
            self.mark(k);
        }
        !moved.is_empty()
    }

    fn usage(&self) -> Vec<NodeUsage> {
        self.pods.usage(&self.nodes)
    }

    /// Deletes pods on nodes that are gone, and the newest pods of overcommitted nodes.
    fn evict(&mut self) {
        let known: BTreeSet<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let mut doomed: Vec<ObjectKey> = self
            .objects
            .iter()
            .filter(|(_, e)| {
                e.pod
                    .as_ref()
                    .and_then(|p| p.node.as_ref())
                    .is_some_and(|n| !known.contains(n))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for node in self.usage() {
            if !placement::overcommitted(&node) {
                continue;
            }
            let mut on_node: Vec<(u64, ObjectKey, ResourceList)> = self
                .objects
                .iter()
                .filter_map(|(k, e)| {
                    let p = e.pod.as_ref()?;
                    (p.node.as_deref() == Some(node.name.as_str()) && !p.finished())
                        .then(|| (p.seq, k.clone(), placement::with_pod_count(&p.requests)))
                })
                .collect();
            on_node.sort_by_key(|(seq, _, _)| std::cmp::Reverse(*seq));
            let mut usage = node.clone();
            for (_, k, need) in on_node {
                if !placement::overcommitted(&usage) {
                    break;
                }
                usage.used = flotilla_api::quantity::sub_lists(&usage.used, &need);
                doomed.push(k);
            }
        }
        if !doomed.is_empty() {
            for k in &doomed {
                self.remove_object(k);
            }
            self.sweep_all();
        }
    }

    /// The pods of every owner (of the owners in `focus`, when given).
    fn owned_pods(&self, focus: Option<&BTreeSet<ObjectKey>>) -> HashMap<ObjectKey, Vec<PodView>> {
        let mut index: HashMap<ObjectKey, Vec<PodView>> = HashMap::new();
        let pods: Box<dyn Iterator<Item = (&ObjectKey, &Entry)>> = match focus {
            None => Box::new(self.objects.iter()),
            Some(owners) => Box::new(
                owners
                    .iter()
                    .flat_map(|o| self.pods.owned_by(o))
                    .filter_map(|k| self.objects.get_key_value(k)),
            ),
        };
        for (k, e) in pods {
            let Some(p) = e.pod.as_ref() else { continue };
            let Some(owner) = p.owner.clone() else {
                continue;
            };
            index.entry(owner).or_default().push(PodView {
                name: k.name.clone(),
                revision: p.revision.clone(),
                ordinal: p.ordinal,
                pinned_node: p.pinned_node.clone(),
                node: p.node.clone(),
                phase: p.phase(),
                seq: p.seq,
                finished_at: p.finished_at,
            });
        }
        index
    }

    fn run_workloads(&mut self, now: DateTime<Utc>) -> bool {
        let focus = self.focus();
        let index = self.owned_pods(focus.as_ref());
        let node_names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let workloads: Vec<(ObjectKey, WorkloadKind)> = match &focus {
            None => self
                .objects
                .keys()
                .filter_map(|k| WorkloadKind::of(&k.group, &k.kind).map(|w| (k.clone(), w)))
                .collect(),
            Some(keys) => keys
                .iter()
                .filter(|k| self.objects.contains_key(*k))
                .filter_map(|k| WorkloadKind::of(&k.group, &k.kind).map(|w| (k.clone(), w)))
                .collect(),
        };
        let mut changed = false;
        for (key, kind) in workloads {
            let Some(workload) = self.objects.get(&key).map(|e| e.object.clone()) else {
                continue;
            };
            let revision = template_revision(&workload);
            let pods = index.get(&key).map(Vec::as_slice).unwrap_or_default();
            let changes = workloads::reconcile_pods(kind, &workload, &revision, pods, &node_names);
            for name in &changes.delete {
                let pod_key = ObjectKey {
                    group: String::new(),
                    kind: "Pod".into(),
                    namespace: key.namespace.clone(),
                    name: name.clone(),
                };
                if self.remove_object(&pod_key).is_some() {
                    self.mark(&key);
                    changed = true;
                }
            }
            for new in &changes.create {
                self.create_pod(&key, kind, &workload, &revision, new, now);
                self.mark(&key);
                changed = true;
            }
        }
        if changed {
            self.changed();
        }
        changed
    }

    fn create_pod(
        &mut self,
        owner: &ObjectKey,
        kind: WorkloadKind,
        workload: &Value,
        revision: &str,
        new: &NewPod,
        now: DateTime<Utc>,
    ) {
        let name = match &new.name {
            PodName::Fixed(n) => n.clone(),
            PodName::Generate(prefix) => loop {
                let candidate = format!("{prefix}{}", random_suffix());
                let taken = self.objects.contains_key(&ObjectKey {
                    group: String::new(),
                    kind: "Pod".into(),
                    namespace: owner.namespace.clone(),
                    name: candidate.clone(),
                });
                if !taken {
                    break candidate;
                }
            },
        };
        let template = workload
            .lookup("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
        let mut labels: Map<String, Value> = template
            .lookup("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let owner_uid = workload
            .lookup("/metadata/uid")
            .cloned()
            .unwrap_or(Value::Null);
        let generation = workload
            .lookup("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        match kind {
            WorkloadKind::Deployment => {
                labels.insert("pod-template-hash".into(), json!(revision));
            }
            WorkloadKind::StatefulSet => {
                labels.insert(
                    "controller-revision-hash".into(),
                    json!(format!("{}-{revision}", owner.name)),
                );
                labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(name));
                if let Some(i) = new.ordinal {
                    labels.insert("apps.kubernetes.io/pod-index".into(), json!(i.to_string()));
                }
            }
            WorkloadKind::DaemonSet => {
                labels.insert("controller-revision-hash".into(), json!(revision));
                labels.insert(
                    "pod-template-generation".into(),
                    json!(generation.to_string()),
                );
            }
            WorkloadKind::Job => {
                labels.insert("batch.kubernetes.io/job-name".into(), json!(owner.name));
                labels.insert("job-name".into(), json!(owner.name));
                labels.insert(
                    "batch.kubernetes.io/controller-uid".into(),
                    owner_uid.clone(),
                );
                labels.insert("controller-uid".into(), owner_uid.clone());
            }
            WorkloadKind::ReplicaSet => {}
        }
        let mut metadata = json!({
            "name": name,
            "namespace": owner.namespace,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": Time::new(now).to_string(),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": workload.get("apiVersion").cloned().unwrap_or(Value::Null),
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        });
        if let Some(a) = template.lookup("/metadata/annotations") {
            metadata["annotations"] = a.clone();
        }
        if let PodName::Generate(prefix) = &new.name {
            metadata["generateName"] = json!(prefix);
        }
        self.seq += 1;
        let mut sim = PodSim::new(self.seq, pod_requests_skipping_unreadable(&spec), now);
        sim.owner = Some(owner.clone());
        sim.revision = revision.to_string();
        sim.ordinal = new.ordinal;
        sim.pinned_node = new.pinned_node.clone();
        sim.runs_to_completion = kind == WorkloadKind::Job;
        let key = ObjectKey {
            group: String::new(),
            kind: "Pod".into(),
            namespace: owner.namespace.clone(),
            name,
        };
        self.objects.insert(
            key.clone(),
            Entry {
                object: json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
                status_override: None,
                pod: Some(sim),
            },
        );
        self.touch(&key);
        self.mark(&key);
    }

    fn place_pending(&mut self, now: DateTime<Utc>) -> bool {
        if self.pods.nothing_pending() {
            return false;
        }
        let before = self.usage();
        // Oldest first; only those after the ones a pass at this very usage refused.
        let after = self
            .refused
            .as_ref()
            .filter(|r| r.usage == before)
            .map(|r| r.seq);
        let pending: Vec<(u64, ObjectKey)> = self
            .pods
            .pending_after(after)
            .map(|(seq, k)| (seq, k.clone()))
            .collect();
        let Some(last) = pending.last().map(|(seq, _)| *seq) else {
            return false;
        };
        let mut usage = before.clone();
        let mut on_a_node = false;
        let mut placed = false;
        let mut moved = Vec::new();
        // Until a pod is placed the usage stays the same, so a pod asking what an earlier one
        // could not get fails alike (a full member holds many such pods).
        let mut refused: Vec<(ResourceList, Option<String>, String)> = Vec::new();
        for (_, key) in pending {
            let Some(entry) = self.objects.get_mut(&key) else {
                continue;
            };
            let Some(pod) = entry.pod.as_mut() else {
                continue;
            };
            let known = refused
                .iter()
                .find(|(r, pin, _)| *r == pod.requests && *pin == pod.pinned_node)
                .map(|(_, _, msg)| Placement::Unschedulable(msg.clone()));
            let placement = match known {
                Some(p) => p,
                None => {
                    let p = placement::place(&pod.requests, pod.pinned_node.as_deref(), &mut usage);
                    match &p {
                        Placement::Node(_) => refused.clear(),
                        Placement::Unschedulable(msg) => refused.push((
                            pod.requests.clone(),
                            pod.pinned_node.clone(),
                            msg.clone(),
                        )),
                    }
                    p
                }
            };
            match placement {
                Placement::Node(node) => {
                    pod.node = Some(node.clone());
                    pod.scheduled_at = Some(now);
                    pod.unschedulable = None;
                    entry.object["spec"]["nodeName"] = json!(node);
                    // A pod pinned to its node may overcommit it.
                    self.evict_due |= pod.pinned_node.is_some();
                    moved.push(key);
                    placed = true;
                    on_a_node = true;
                }
                Placement::Unschedulable(msg) => {
                    if pod.unschedulable.as_deref() != Some(msg.as_str()) {
                        pod.unschedulable = Some(msg);
                        moved.push(key);
                        placed = true;
                    }
                }
            }
        }
        for k in &moved {
            self.mark(k);
        }
        self.refused = (!on_a_node).then_some(RefusedThrough {
            usage: before,
            seq: last,
        });
        placed
    }

    fn refresh_statuses(&mut self, now: DateTime<Utc>) {
        let focus = self.focus();
        let index = self.owned_pods(focus.as_ref());
        let node_names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let host_ips: HashMap<String, String> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), host_ip(i)))
            .collect();
        let status_of = |key: &ObjectKey, entry: &Entry| -> Option<Value> {
            let computed = if let Some(pod) = entry.pod.as_ref() {
                let spec = entry.object.get("spec").unwrap_or(&Value::Null);
                let ip = pod
                    .node
                    .as_ref()
                    .and_then(|n| host_ips.get(n))
                    .map(String::as_str);
                pod_status(pod, spec, ip)
            } else {
                let kind = WorkloadKind::of(&key.group, &key.kind)?;
                let revision = template_revision(&entry.object);
                let pods = index.get(key).map(Vec::as_slice).unwrap_or_default();
                let prev = entry.object.get("status").unwrap_or(&Value::Null);
                workloads::workload_status(
                    kind,
                    &entry.object,
                    &revision,
                    pods,
                    &node_names,
                    prev,
                    now,
                )
            };
            let mut status = computed;
            if let Some(over) = &entry.status_override {
                json_patch::merge(&mut status, over);
            }
            (entry.object.get("status") != Some(&status)).then_some(status)
        };
        let updates: Vec<(ObjectKey, Value)> = match &focus {
            None => self
                .objects
                .iter()
                .filter_map(|(k, e)| status_of(k, e).map(|s| (k.clone(), s)))
                .collect(),
            Some(keys) => keys
                .iter()
                .filter_map(|k| status_of(k, self.objects.get(k)?).map(|s| (k.clone(), s)))
                .collect(),
        };
        for (k, status) in updates {
            if let Some(e) = self.objects.get_mut(&k) {
                e.object["status"] = status;
            }
            self.touch(&k);
        }
    }
}

/// The revision of a workload's pod template.
fn template_revision(workload: &Value) -> String {
    short_hash(workload.lookup("/spec/template").unwrap_or(&Value::Null))
}
