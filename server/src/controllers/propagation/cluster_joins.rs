//! The cluster → bindings fan-out for a Cluster that can take new work (docs/semantics.md
//! §8.1): a member that joins, loses a `NoSchedule`/`NoExecute` taint (as it does when it turns
//! Ready again), gains an API or is relabelled or moved (affinities) reaches at once the
//! bindings that could use it — Duplicated and non-workload bindings, and Divided ones that
//! are not satisfied (fewer replicas placed than wanted, or a failed `Scheduled`) — instead of
//! waiting for the scheduler's periodic pass. A satisfied Divided binding is not woken: as in
//! Karmada, a new cluster does not move replicas that are placed.
//!
//! Two pure functions decide: [`opens`] (does this Cluster change make room for new work?)
//! and [`open_to`] (could this binding use a new cluster, and which?). Two in-memory indexes
//! feed on the scheduler's own watches: [`JoinTracker`] remembers each Cluster's
//! [`ClusterView`] and marks the clusters whose last change opened them; [`OpenBindings`]
//! keeps the bindings [`open_to`] accepts. [`scheduler_sources`] puts them beside the
//! [`crate::controllers::shared::fan_out`] index of the bindings that name a cluster. A heartbeat or a status report
//! changes nothing either of them reads, so it wakes nothing.

use crate::controllers::propagation::detector::labels_of;
use crate::controllers::runtime::controller::{
    generation_fingerprint, object_key, Observer, Source,
};
use crate::controllers::runtime::own_writes::OwnWrites;
use crate::controllers::shared::binding_keys::binding_key;
use crate::controllers::shared::fan_out::{
    cluster_placement_fingerprint, clusters_named, ClusterBindingIndex,
};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What of a Cluster decides whether it can take new work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// It is being deleted.
    pub deleting: bool,
    /// Its `NoSchedule` and `NoExecute` taints, as `key=value:effect`.
    pub hard_taints: BTreeSet<String>,
    /// The kinds it serves, as `groupVersion/Kind`.
    pub apis: BTreeSet<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Provider, region and zones (what spread constraints and affinities read).
    pub place: String,
}

/// The [`ClusterView`] of a stored Cluster.
pub fn view(cluster: &Value) -> ClusterView {
    let str_at = |v: &Value, p: &str| {
        v.lookup(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let hard_taints = cluster
        .lookup("/spec/taints")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter(|t| t["effect"] == "NoSchedule" || t["effect"] == "NoExecute")
                .map(|t| {
                    format!(
                        "{}={}:{}",
                        str_at(t, "/key"),
                        str_at(t, "/value"),
                        str_at(t, "/effect")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let apis = cluster
        .lookup("/status/apiEnablements")
        .and_then(Value::as_array)
        .map(|groups| {
            groups
                .iter()
                .flat_map(|g| {
                    let gv = str_at(g, "/groupVersion");
                    g.get("resources")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(move |r| format!("{gv}/{}", str_at(r, "/kind")))
                })
                .collect()
        })
        .unwrap_or_default();
    let labels = labels_of(cluster);
    let place = [
        "/spec/provider",
        "/spec/region",
        "/spec/zone",
        "/spec/zones",
    ]
    .iter()
    .map(|p| cluster.lookup(p).map(Value::to_string).unwrap_or_default())
    .collect::<Vec<_>>()
    .join("|");
    ClusterView {
        deleting: cluster.lookup("/metadata/deletionTimestamp").is_some(),
        hard_taints,
        apis,
        labels,
        place,
    }
}

/// Whether a Cluster that was `before` (`None`: it did not exist) and is `after` may now take
/// work it could not take before: it joined, lost a `NoSchedule`/`NoExecute` taint, serves a
/// kind it did not, or was relabelled or moved (an affinity or spread constraint may match it
/// now). A cluster being deleted never does; a change that only takes away (a new taint, a
/// lost API) does not.
pub fn opens(before: Option<&ClusterView>, after: &ClusterView) -> bool {
    if after.deleting {
        return false;
    }
    let Some(before) = before else {
        return true;
    };
    before.deleting
        || !before.hard_taints.is_subset(&after.hard_taints)
        || !after.apis.is_subset(&before.apis)
        || before.labels != after.labels
        || before.place != after.place
}

/// Which new clusters a binding could use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Openness {
    /// Any cluster its placement lets in.
    Any,
    /// Only these (its `clusterAffinity.clusterNames`).
    Named(BTreeSet<String>),
}

impl Openness {
    fn admits(&self, cluster: &str) -> bool {
        match self {
            Openness::Any => true,
            Openness::Named(names) => names.contains(cluster),
        }
    }
}

/// Whether a binding could use a cluster it does not run on yet, and which (`None`: it could
/// not): it must be the default scheduler's, not suspended, not being deleted, with a
/// placement; then Duplicated and non-workload bindings always can, and Divided ones only
/// while they are not satisfied (the replicas placed fall short of `spec.replicas`, or the
/// last scheduling failed). Mirrors `needs_scheduling`'s triggers 2 and 4 (§8.1).
pub fn open_to(binding: &Value) -> Option<Openness> {
    if binding.lookup("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let spec = binding.get("spec")?;
    let placement = spec.get("placement").filter(|p| p.is_object())?;
    let scheduler = spec
        .get("schedulerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !scheduler.is_empty() && scheduler != flotilla_api::policy::DEFAULT_SCHEDULER_NAME {
        return None;
    }
    if spec.lookup("/suspension/scheduling") == Some(&Value::Bool(true)) {
        return None;
    }
    let replicas = spec.get("replicas").and_then(Value::as_i64).unwrap_or(0);
    let workload = replicas != 0
        || spec
            .get("replicaRequirements")
            .is_some_and(|r| !r.is_null())
        || spec
            .get("components")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
    let divided = placement
        .lookup("/replicaScheduling/replicaSchedulingType")
        .and_then(Value::as_str)
        == Some("Divided");
    let open = if !workload || !divided {
        true
    } else {
        let placed: i64 = spec
            .get("clusters")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("replicas").and_then(Value::as_i64))
                    .sum()
            })
            .unwrap_or(0);
        let failed = binding
            .lookup("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Scheduled" && c["status"] == "False")
            });
        placed < replicas || failed
    };
    if !open {
        return None;
    }
    let names: BTreeSet<String> = placement
        .lookup("/clusterAffinity/clusterNames")
        .and_then(Value::as_array)
        .map(|ns| {
            ns.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let ordered = placement
        .get("clusterAffinities")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    Some(if names.is_empty() || ordered {
        Openness::Any
    } else {
        Openness::Named(names)
    })
}

/// The bindings [`open_to`] accepts, kept from a binding watch.
#[derive(Default)]
pub struct OpenBindings {
    open: Mutex<HashMap<String, Openness>>,
}

impl OpenBindings {
    /// The keys of the bindings that could use `cluster`, sorted.
    pub fn open_to(&self, cluster: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .open
            .lock()
            .iter()
            .filter(|(_, o)| o.admits(cluster))
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    fn set(open: &mut HashMap<String, Openness>, binding: &Value) {
        if let Some(key) = binding_key(binding) {
            match open_to(binding) {
                Some(o) => {
                    open.insert(key, o);
                }
                None => {
                    open.remove(&key);
                }
            }
        }
    }
}

impl Observer for OpenBindings {
    fn observe(&self, deleted: bool, object: &Value) {
        let mut open = self.open.lock();
        if deleted {
            if let Some(key) = binding_key(object) {
                open.remove(&key);
            }
        } else {
            Self::set(&mut open, object);
        }
    }

    fn relisted(&self, resource: &ResourceType, objects: &[Value]) {
        let prefix = if resource.namespaced { "rb|" } else { "crb|" };
        let mut open = self.open.lock();
        open.retain(|k, _| !k.starts_with(prefix));
        for b in objects {
            Self::set(&mut open, b);
        }
    }
}

/// Each Cluster's last [`ClusterView`], and the clusters whose last change [`opens`] them
/// (taken by the key mapper that runs right after the change is observed).
#[derive(Default)]
pub struct JoinTracker {
    inner: Mutex<JoinState>,
}

#[derive(Default)]
struct JoinState {
    known: HashMap<String, ClusterView>,
    listed: bool,
    opened: HashSet<String>,
}

impl JoinTracker {
    /// Whether the last change of `cluster` opened it; forgets it.
    pub fn take_opened(&self, cluster: &str) -> bool {
        self.inner.lock().opened.remove(cluster)
    }

    fn saw(state: &mut JoinState, cluster: &Value) {
        let Some(name) = object_key(cluster) else {
            return;
        };
        let after = view(cluster);
        if opens(state.known.get(&name), &after) {
            state.opened.insert(name.clone());
        } else {
            state.opened.remove(&name);
        }
        state.known.insert(name, after);
    }
}

impl Observer for JoinTracker {
    fn observe(&self, deleted: bool, object: &Value) {
        let mut state = self.inner.lock();
        if deleted {
            if let Some(name) = object_key(object) {
                state.known.remove(&name);
                state.opened.remove(&name);
            }
        } else {
            Self::saw(&mut state, object);
        }
    }

    fn relisted(&self, _resource: &ResourceType, objects: &[Value]) {
        let mut state = self.inner.lock();
        let first = !state.listed;
        state.listed = true;
        let names: HashSet<String> = objects.iter().filter_map(object_key).collect();
        state.known.retain(|n, _| names.contains(n));
        for c in objects {
            if first {
                // The first list is the start: every binding is queued by its own list.
                if let Some(name) = object_key(c) {
                    state.known.insert(name, view(c));
                }
            } else {
                Self::saw(&mut state, c);
            }
        }
    }
}

/// Shows every object to both observers.
struct Both(Arc<dyn Observer>, Arc<dyn Observer>);

impl Observer for Both {
    fn observe(&self, deleted: bool, object: &Value) {
        self.0.observe(deleted, object);
        self.1.observe(deleted, object);
    }

    fn relisted(&self, resource: &ResourceType, objects: &[Value]) {
        self.0.relisted(resource, objects);
        self.1.relisted(resource, objects);
    }
}

/// The scheduler's sources: both binding kinds (by generation), and Clusters by what it
/// places by ([`cluster_placement_fingerprint`]); a Cluster change queues the bindings that
/// name it and, when it [`opens`] the cluster, the bindings [`open_to`] it. The scheduler's
/// own binding writes (`own_writes`) do not wake it again.
pub fn scheduler_sources(own_writes: Arc<OwnWrites>) -> Vec<Source> {
    let named = Arc::new(ClusterBindingIndex::naming(clusters_named));
    let open = Arc::new(OpenBindings::default());
    let joins = Arc::new(JoinTracker::default());
    let observer: Arc<dyn Observer> = Arc::new(Both(named.clone(), open.clone()));
    let binding = |rt: ResourceType| {
        Source::mapped(rt, |b| binding_key(b).into_iter().collect())
            .on_change_of(generation_fingerprint)
            .observed_by(observer.clone())
            .skipping_own(own_writes.clone())
    };
    let tracker = joins.clone();
    let clusters = Source::mapped(well_known::clusters(), move |c| {
        let Some(name) = object_key(c) else {
            return Vec::new();
        };
        let mut keys = named.bindings_of(&name);
        if tracker.take_opened(&name) {
            let opened = open.open_to(&name);
            tracing::debug!(cluster = %name, bindings = opened.len(), "cluster can take new work; waking the bindings open to it");
            keys.extend(opened);
            keys.sort();
            keys.dedup();
        }
        keys
    })
    .on_change_of(cluster_placement_fingerprint)
    .observed_by(joins);
    vec![
        binding(well_known::resource_bindings()),
        binding(well_known::cluster_resource_bindings()),
        clusters,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(taints: Value, apis: Value, labels: Value) -> Value {
        json!({"metadata": {"name": "m4", "labels": labels},
               "spec": {"syncMode": "Pull", "region": "eu", "taints": taints},
               "status": {"apiEnablements": apis,
                          "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]}})
    }

    #[test]
    fn which_cluster_changes_open_it_to_new_work() {
        let deployments = json!([{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}]);
        let not_ready = json!([{"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}]);
        let ready = cluster(json!([]), deployments.clone(), json!({"env": "prod"}));
        let mut heartbeat = ready.clone();
        heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("t2");
        heartbeat["status"]["resourceSummary"] = json!({"allocatable": {"pods": "10"}});
        let mut going = ready.clone();
        going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let mut moved = ready.clone();
        moved["spec"]["region"] = json!("us");
        let prefer = cluster(
            json!([{"key": "k", "effect": "PreferNoSchedule"}]),
            deployments.clone(),
            json!({"env": "prod"}),
        );
        let rows: Vec<(&str, Option<Value>, Value, bool)> = vec![
            ("joins", None, ready.clone(), true),
            ("joins being deleted", None, going.clone(), false),
            (
                "a heartbeat and a capacity report",
                Some(ready.clone()),
                heartbeat,
                false,
            ),
            (
                "loses its not-ready taint (turned Ready)",
                Some(cluster(
                    not_ready.clone(),
                    deployments.clone(),
                    json!({"env": "prod"}),
                )),
                ready.clone(),
                true,
            ),
            (
                "gets a not-ready taint",
                Some(ready.clone()),
                cluster(
                    not_ready.clone(),
                    deployments.clone(),
                    json!({"env": "prod"}),
                ),
                false,
            ),
            (
                "a PreferNoSchedule taint comes or goes",
                Some(ready.clone()),
                prefer.clone(),
                false,
            ),
            (
                "reports its APIs",
                Some(cluster(json!([]), json!([]), json!({"env": "prod"}))),
                ready.clone(),
                true,
            ),
            (
                "loses an API",
                Some(ready.clone()),
                cluster(json!([]), json!([]), json!({"env": "prod"})),
                false,
            ),
            (
                "relabelled",
                Some(ready.clone()),
                cluster(json!([]), deployments.clone(), json!({"env": "dev"})),
                true,
            ),
            ("moved to another region", Some(ready.clone()), moved, true),
            ("starts being deleted", Some(ready.clone()), going, false),
        ];
        for (name, before, after, want) in rows {
            let before = before.as_ref().map(view);
            assert_eq!(opens(before.as_ref(), &view(&after)), want, "{name}");
        }
    }

    fn binding(placement: Value, replicas: i64, clusters: Value, scheduled: &str) -> Value {
        json!({"metadata": {"namespace": "default", "name": "web"},
               "spec": {"replicas": replicas, "placement": placement, "clusters": clusters},
               "status": {"conditions": [{"type": "Scheduled", "status": scheduled}]}})
    }

    #[test]
    fn which_bindings_a_new_cluster_could_serve() {
        let dup = json!({"replicaScheduling": {"replicaSchedulingType": "Duplicated"}});
        let div = json!({"replicaScheduling": {"replicaSchedulingType": "Divided",
                         "replicaDivisionPreference": "Weighted"}});
        let named = json!({"clusterAffinity": {"clusterNames": ["m1", "m4"]},
                           "replicaScheduling": {"replicaSchedulingType": "Duplicated"}});
        let placed = json!([{"name": "m1", "replicas": 6}, {"name": "m2", "replicas": 4}]);
        let short = json!([{"name": "m1", "replicas": 6}]);
        let mut suspended = binding(dup.clone(), 2, placed.clone(), "True");
        suspended["spec"]["suspension"] = json!({"scheduling": true});
        let mut other = binding(dup.clone(), 2, placed.clone(), "True");
        other["spec"]["schedulerName"] = json!("my-scheduler");
        let mut deleting = binding(dup.clone(), 2, placed.clone(), "True");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let rows: Vec<(&str, Value, Option<Openness>)> = vec![
            (
                "Duplicated",
                binding(dup.clone(), 2, placed.clone(), "True"),
                Some(Openness::Any),
            ),
            (
                "Duplicated limited by name",
                binding(named, 2, placed.clone(), "True"),
                Some(Openness::Named(["m1".to_string(), "m4".to_string()].into())),
            ),
            (
                "no replicaScheduling (Duplicated)",
                binding(json!({}), 2, placed.clone(), "True"),
                Some(Openness::Any),
            ),
            (
                "a non-workload, Divided",
                binding(div.clone(), 0, json!([]), "True"),
                Some(Openness::Any),
            ),
            (
                "Divided, satisfied",
                binding(div.clone(), 10, placed.clone(), "True"),
                None,
            ),
            (
                "Divided, short of replicas",
                binding(div.clone(), 10, short, "False"),
                Some(Openness::Any),
            ),
            (
                "Divided, unplaced",
                binding(div.clone(), 10, json!([]), "False"),
                Some(Openness::Any),
            ),
            (
                "Divided, placed but failing",
                binding(div.clone(), 10, placed.clone(), "False"),
                Some(Openness::Any),
            ),
            (
                "no placement (an attached binding)",
                binding(Value::Null, 2, placed.clone(), "True"),
                None,
            ),
            ("suspended", suspended, None),
            ("another scheduler's", other, None),
            ("being deleted", deleting, None),
        ];
        for (name, b, want) in rows {
            assert_eq!(open_to(&b), want, "{name}");
        }
    }

    #[test]
    fn a_join_wakes_the_open_bindings_once_and_a_heartbeat_none() {
        let open = OpenBindings::default();
        let dup = json!({"replicaScheduling": {"replicaSchedulingType": "Duplicated"}});
        let div = json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}});
        open.observe(
            false,
            &binding(
                dup.clone(),
                2,
                json!([{"name": "m1", "replicas": 2}]),
                "True",
            ),
        );
        let mut satisfied = binding(div, 4, json!([{"name": "m1", "replicas": 4}]), "True");
        satisfied["metadata"]["name"] = json!("db");
        open.observe(false, &satisfied);
        assert_eq!(open.open_to("m4"), vec!["rb|default|web"]);

        let joins = JoinTracker::default();
        let mut m1 = cluster(json!([]), json!([]), json!({}));
        m1["metadata"]["name"] = json!("m1");
        joins.relisted(&well_known::clusters(), std::slice::from_ref(&m1));
        assert!(!joins.take_opened("m4"), "the first list opens nothing");
        let mut m4 = m1.clone();
        m4["metadata"]["name"] = json!("m4");
        joins.observe(false, &m4);
        assert!(joins.take_opened("m4"), "a join opens");
        assert!(!joins.take_opened("m4"), "once");
        let mut beat = m4.clone();
        beat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("t9");
        joins.observe(false, &beat);
        assert!(!joins.take_opened("m4"), "a heartbeat does not");
        // A relist after a dropped watch finds a cluster that joined meanwhile.
        let mut m5 = m1.clone();
        m5["metadata"]["name"] = json!("m5");
        joins.relisted(&well_known::clusters(), &[m1, beat, m5]);
        assert!(joins.take_opened("m5"));
        assert!(!joins.take_opened("m4"));
    }
}
