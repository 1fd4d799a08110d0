//! The cluster → bindings fan-out: which bindings a Cluster change concerns. A
//! [`ClusterBindingIndex`] is kept in memory from a controller's own bindings watch (a binding
//! names a cluster in `spec.clusters` or in a graceful eviction task's `fromCluster`), so a
//! Cluster event (taints, conditions, labels, deletion) queues exactly those bindings — an
//! index lookup, never a scan of the store. [`binding_sources_with_cluster_fan_out`] gives a
//! binding controller its binding sources plus the Cluster source that reads the index.

use crate::controllers::runtime::controller::{
    generation_fingerprint, object_key, Observer, Source,
};
use crate::controllers::shared::binding_keys::binding_key;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType};
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The clusters a binding names: its targets and the clusters its eviction tasks come from.
pub fn clusters_named(binding: &Value) -> BTreeSet<String> {
    let spec = binding.get("spec");
    let names = |list: &str, field: &str| -> Vec<String> {
        spec.and_then(|s| s.get(list))
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.get(field).and_then(Value::as_str))
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all: BTreeSet<String> = names("clusters", "name").into_iter().collect();
    all.extend(names("gracefulEvictionTasks", "fromCluster"));
    all
}

/// What of a Cluster its bindings care about: spec (taints included), labels, the status of
/// each condition, and deletion. Heartbeats and capacity reports leave it alone.
pub fn cluster_fingerprint(cluster: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_fields(cluster, &["/spec", "/metadata/labels"], &mut h);
    hash_deleting(cluster, &mut h);
    if let Some(conditions) = cluster
        .lookup("/status/conditions")
        .and_then(Value::as_array)
    {
        for c in conditions {
            c.get("type").and_then(Value::as_str).hash(&mut h);
            c.get("status").and_then(Value::as_str).hash(&mut h);
        }
    }
    h.finish()
}

/// What of a Cluster the scheduler places by: spec (taints included), labels, the APIs it
/// serves and deletion. Conditions are not read by any filter (a not-Ready cluster is kept out
/// by the taints it gets), so a Ready change alone schedules nothing.
pub fn cluster_placement_fingerprint(cluster: &Value) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_fields(
        cluster,
        &["/spec", "/metadata/labels", "/status/apiEnablements"],
        &mut h,
    );
    hash_deleting(cluster, &mut h);
    h.finish()
}

/// Feeds `h` each cluster's health in a binding's `status.aggregatedStatus` (and nothing else
/// of it): what the failover controllers judge of the status.
pub fn hash_cluster_health(binding: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    if let Some(items) = binding
        .lookup("/status/aggregatedStatus")
        .and_then(Value::as_array)
    {
        for i in items {
            i.get("clusterName").map(Value::to_string).hash(h);
            i.get("health").map(Value::to_string).hash(h);
        }
    }
}

/// A Cluster's Ready status, labels and deletion: what the controllers that judge health by
/// readiness (binding status, graceful eviction) read of it, and its labels, so an operator
/// can make them look again (`kubectl label cluster …`) without a taint or heartbeat waking
/// every binding of the cluster.
pub fn cluster_ready_fingerprint(cluster: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_fields(cluster, &["/metadata/labels"], &mut h);
    cluster
        .lookup("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == flotilla_api::cluster::CONDITION_READY)
        })
        .and_then(|c| c["status"].as_str())
        .hash(&mut h);
    hash_deleting(cluster, &mut h);
    h.finish()
}

/// Feeds `h` the JSON text at each of `pointers` in `cluster`, in order (an absent field too).
fn hash_fields(cluster: &Value, pointers: &[&str], h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    for pointer in pointers {
        cluster.lookup(pointer).map(Value::to_string).hash(h);
    }
}

/// Feeds `h` whether `cluster` is being deleted.
fn hash_deleting(cluster: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    cluster
        .lookup("/metadata/deletionTimestamp")
        .is_some()
        .hash(h);
}

#[derive(Default)]
struct Inner {
    by_cluster: HashMap<String, BTreeSet<String>>,
    by_binding: HashMap<String, BTreeSet<String>>,
}

impl Inner {
    fn remove(&mut self, key: &str) {
        for cluster in self.by_binding.remove(key).unwrap_or_default() {
            if let Some(keys) = self.by_cluster.get_mut(&cluster) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_cluster.remove(&cluster);
                }
            }
        }
    }

    /// Whether `key` is indexed under exactly `clusters` already (a binding none is
    /// indexed under none).
    fn holds(&self, key: &str, clusters: &BTreeSet<String>) -> bool {
        match self.by_binding.get(key) {
            Some(known) => known == clusters,
            None => clusters.is_empty(),
        }
    }

    fn set(&mut self, key: String, clusters: BTreeSet<String>) {
        if self.holds(&key, &clusters) {
            return;
        }
        self.remove(&key);
        if clusters.is_empty() {
            return;
        }
        for cluster in &clusters {
            self.by_cluster
                .entry(cluster.clone())
                .or_default()
                .insert(key.clone());
        }
        self.by_binding.insert(key, clusters);
    }
}

/// Cluster name → keys of the bindings that name it (binding keys as in
/// [`crate::controllers::shared::binding_keys::binding_key`]); by default a binding names
/// [`clusters_named`].
pub struct ClusterBindingIndex {
    inner: RwLock<Inner>,
    naming: fn(&Value) -> BTreeSet<String>,
}

impl Default for ClusterBindingIndex {
    fn default() -> Self {
        Self::naming(clusters_named)
    }
}

impl ClusterBindingIndex {
    /// An empty index where a binding names the clusters `naming` says (a controller that
    /// cares about other clusters of a binding than its targets, such as failback).
    pub fn naming(naming: fn(&Value) -> BTreeSet<String>) -> Self {
        Self {
            inner: RwLock::default(),
            naming,
        }
    }

    /// Records a binding as it is now (a binding being deleted still names its clusters).
    pub fn upsert(&self, binding: &Value) {
        if let Some(key) = binding_key(binding) {
            let clusters = (self.naming)(binding);
            // Most binding writes (status) leave its clusters as they were: no write lock.
            if self.inner.read().holds(&key, &clusters) {
                return;
            }
            self.inner.write().set(key, clusters);
        }
    }

    /// Forgets a binding.
    pub fn remove(&self, binding: &Value) {
        if let Some(key) = binding_key(binding) {
            self.inner.write().remove(&key);
        }
    }

    /// The bindings that name `cluster`, sorted.
    pub fn bindings_of(&self, cluster: &str) -> Vec<String> {
        self.inner
            .read()
            .by_cluster
            .get(cluster)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many bindings are indexed.
    pub fn len(&self) -> usize {
        self.inner.read().by_binding.len()
    }

    /// Whether no binding is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key prefix of a binding kind's keys.
fn prefix(resource: &ResourceType) -> &'static str {
    if resource.namespaced {
        "rb|"
    } else {
        "crb|"
    }
}

impl Observer for ClusterBindingIndex {
    fn observe(&self, deleted: bool, object: &Value) {
        if deleted {
            self.remove(object);
        } else {
            self.upsert(object);
        }
    }

    fn relisted(&self, resource: &ResourceType, objects: &[Value]) {
        let p = prefix(resource);
        let mut inner = self.inner.write();
        let stale: Vec<String> = inner
            .by_binding
            .keys()
            .filter(|k| k.starts_with(p))
            .cloned()
            .collect();
        for key in stale {
            inner.remove(&key);
        }
        for b in objects {
            if let Some(key) = binding_key(b) {
                inner.set(key, (self.naming)(b));
            }
        }
    }
}

/// A binding controller's sources: both binding kinds (queued when their generation,
/// deletion or finalizers change) and Clusters, each Cluster change queueing the bindings
/// that name the cluster, through a fresh index kept by those binding sources.
pub fn binding_sources_with_cluster_fan_out() -> (Arc<ClusterBindingIndex>, Vec<Source>) {
    binding_sources_on_change_of(generation_fingerprint)
}

/// As [`binding_sources_with_cluster_fan_out`], with bindings queued when `fingerprint` of
/// them changes (a controller that judges status as well as spec passes one that sees it).
pub fn binding_sources_on_change_of(
    fingerprint: fn(&Value) -> u64,
) -> (Arc<ClusterBindingIndex>, Vec<Source>) {
    binding_sources_judging(fingerprint, cluster_fingerprint)
}

/// As [`binding_sources_on_change_of`], with a Cluster's bindings queued only when
/// `cluster_fingerprint` of it changes (a controller that reads less of a Cluster).
pub fn binding_sources_judging(
    fingerprint: fn(&Value) -> u64,
    cluster_fingerprint: fn(&Value) -> u64,
) -> (Arc<ClusterBindingIndex>, Vec<Source>) {
    binding_sources_naming(fingerprint, cluster_fingerprint, clusters_named)
}

/// As [`binding_sources_judging`], with a Cluster change queueing the bindings that `naming`
/// says name it.
pub fn binding_sources_naming(
    fingerprint: fn(&Value) -> u64,
    cluster_fingerprint: fn(&Value) -> u64,
    naming: fn(&Value) -> BTreeSet<String>,
) -> (Arc<ClusterBindingIndex>, Vec<Source>) {
    let index = Arc::new(ClusterBindingIndex::naming(naming));
    let observer: Arc<dyn Observer> = index.clone();
    let binding = |rt: ResourceType| {
        Source::mapped(rt, |b| binding_key(b).into_iter().collect())
            .on_change_of(fingerprint)
            .observed_by(observer.clone())
    };
    let lookup = index.clone();
    let clusters = Source::mapped(well_known::clusters(), move |c| {
        object_key(c)
            .map(|name| lookup.bindings_of(&name))
            .unwrap_or_default()
    })
    .on_change_of(cluster_fingerprint);
    (
        index,
        vec![
            binding(well_known::resource_bindings()),
            binding(well_known::cluster_resource_bindings()),
            clusters,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_controller_is_woken_by_what_it_reads_of_a_cluster() {
        let ready = json!({"metadata": {"labels": {"a": "1"}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "resourceSummary": {"allocatable": {"cpu": "4"}}}});
        let mut unknown = ready.clone();
        unknown["status"]["conditions"][0]["status"] = json!("Unknown");
        let mut tainted = ready.clone();
        tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
        let mut busier = ready.clone();
        busier["status"]["resourceSummary"]["allocatable"]["cpu"] = json!("3");
        let mut apis = ready.clone();
        apis["status"]["apiEnablements"] = json!([{"groupVersion": "apps/v1"}]);
        let mut going = ready.clone();
        going["metadata"]["deletionTimestamp"] = json!("2026-11-25T00:00:00Z");

        let place = cluster_placement_fingerprint;
        assert_eq!(place(&ready), place(&unknown));
        assert_eq!(place(&ready), place(&busier));
        for changed in [&tainted, &apis, &going] {
            assert_ne!(place(&ready), place(changed));
        }
        let ready_fp = cluster_ready_fingerprint;
        assert_ne!(ready_fp(&ready), ready_fp(&unknown));
        assert_ne!(ready_fp(&ready), ready_fp(&going));
        for same in [&tainted, &busier, &apis] {
            assert_eq!(ready_fp(&ready), ready_fp(same));
        }
        let mut labelled = ready.clone();
        labelled["metadata"]["labels"]["poke"] = json!("1");
        assert_ne!(ready_fp(&ready), ready_fp(&labelled));
    }

    fn rb(name: &str, clusters: &[&str], evicted_from: &[&str]) -> Value {
        json!({"metadata": {"namespace": "default", "name": name},
               "spec": {"clusters": clusters.iter().map(|c| json!({"name": c, "replicas": 1})).collect::<Vec<_>>(),
                        "gracefulEvictionTasks": evicted_from.iter().map(|c| json!({"fromCluster": c})).collect::<Vec<_>>()}})
    }

    #[test]
    fn a_binding_names_its_targets_and_the_clusters_it_is_evicted_from() {
        let table = [
            (rb("a", &[], &[]), vec![]),
            (rb("a", &["m1", "m2"], &[]), vec!["m1", "m2"]),
            (rb("a", &["m2"], &["m1"]), vec!["m1", "m2"]),
            (rb("a", &["m1"], &["m1"]), vec!["m1"]),
            (
                json!({"spec": {"clusters": [{"replicas": 1}, {"name": ""}]}}),
                vec![],
            ),
        ];
        for (i, (binding, want)) in table.into_iter().enumerate() {
            let got: Vec<String> = clusters_named(&binding).into_iter().collect();
            assert_eq!(got, want, "row {i}");
        }
    }

    #[test]
    fn the_index_follows_bindings_as_they_move_and_go() {
        let index = ClusterBindingIndex::default();
        index.observe(false, &rb("a", &["m1", "m2"], &[]));
        index.observe(false, &rb("b", &["m2"], &[]));
        // A write that leaves its clusters (a status write) leaves the index.
        index.observe(false, &rb("b", &["m2"], &[]));
        assert_eq!(index.bindings_of("m1"), vec!["rb|default|a"]);
        assert_eq!(
            index.bindings_of("m2"),
            vec!["rb|default|a", "rb|default|b"]
        );
        // a is evicted from m1 and moves to m3: m1 still concerns it through the task.
        index.observe(false, &rb("a", &["m2", "m3"], &["m1"]));
        assert_eq!(index.bindings_of("m1"), vec!["rb|default|a"]);
        assert_eq!(index.bindings_of("m3"), vec!["rb|default|a"]);
        // The task goes.
        index.observe(false, &rb("a", &["m2", "m3"], &[]));
        assert!(index.bindings_of("m1").is_empty());
        index.observe(true, &rb("b", &["m2"], &[]));
        assert_eq!(index.bindings_of("m2"), vec!["rb|default|a"]);
        assert_eq!(index.len(), 1);
        // A relist of ResourceBindings replaces what was known of them (b is back, a gone)
        // and leaves ClusterResourceBindings alone.
        index.observe(
            false,
            &json!({"metadata": {"name": "c"}, "spec": {"clusters": [{"name": "m2"}]}}),
        );
        index.relisted(&well_known::resource_bindings(), &[rb("b", &["m2"], &[])]);
        assert_eq!(index.bindings_of("m2"), vec!["crb|c", "rb|default|b"]);
        assert!(index.bindings_of("m3").is_empty());
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn cluster_heartbeats_do_not_change_the_fingerprint_but_taints_and_readiness_do() {
        let base = json!({"metadata": {"name": "m1", "labels": {"a": "b"}},
            "spec": {"syncMode": "Pull"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]}});
        let mut heartbeat = base.clone();
        heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("t2");
        heartbeat["status"]["resourceSummary"] = json!({"allocatable": {"cpu": "4"}});
        let mut tainted = base.clone();
        tainted["spec"]["taints"] = json!([{"key": "k", "effect": "NoExecute"}]);
        let mut not_ready = base.clone();
        not_ready["status"]["conditions"][0]["status"] = json!("False");
        let mut relabelled = base.clone();
        relabelled["metadata"]["labels"]["a"] = json!("c");
        let f = cluster_fingerprint(&base);
        assert_eq!(cluster_fingerprint(&heartbeat), f);
        for changed in [tainted, not_ready, relabelled] {
            assert_ne!(cluster_fingerprint(&changed), f, "{changed}");
        }
    }
}
