//! What the scheduler knows about the member clusters, digested once per cluster change so that
//! scheduling a binding never re-reads a `Cluster` object: names shared by reference count,
//! labels and placement fields as the affinity filter reads them, taints, the APIs each member
//! serves as interned ids, and the free resources of `status.resourceSummary` in milli-units
//! (docs/semantics.md §2, §8.2, §8.3).
//!
//! The scheduler controller keeps one [`ClusterSnapshot`] and rebuilds it when a cluster
//! changes; every [`super::schedule`] call borrows it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_api::cluster::{Cluster, Taint};
use flotilla_api::quantity::ResourceList;

/// The resource name Kubernetes counts pods under.
const PODS: &str = "pods";

/// One member cluster as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    /// Cluster name.
    pub name: Arc<str>,
    /// Position in the snapshot (name order).
    pub index: usize,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.provider`.
    pub provider: String,
    /// `spec.region`.
    pub region: String,
    /// `spec.zones`, or the deprecated `spec.zone` when `zones` is empty (as Karmada's
    /// mutation moves it).
    pub zones: Vec<String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `metadata.deletionTimestamp` is set: never a candidate.
    pub deleting: bool,
    /// `provider` and `region` as field-selector values (absent when empty).
    pub(crate) fields: BTreeMap<String, String>,
    /// The labels as interned (key, value) ids, sorted by key id.
    pub(crate) label_ids: Vec<(u32, u32)>,
    /// Interned ids of the (groupVersion, kind) pairs listed in `status.apiEnablements`, sorted.
    pub(crate) apis: Vec<u32>,
    /// Free resources; `None` when the cluster reports no `resourceSummary`.
    pub(crate) capacity: Option<Capacity>,
}

/// Free resources of a cluster, from `status.resourceSummary`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Capacity {
    /// `allocatable.pods − allocated.pods − allocating.pods` (whole pods, never negative).
    pub(crate) allowed_pods: i64,
    /// Per snapshot resource index: `allocatable − allocated − allocating` in milli-units, or
    /// `None` when the resource is not in `allocatable`.
    pub(crate) free_milli: Vec<Option<i64>>,
}

/// Every cluster, sorted by name, with the interning tables their digests refer to.
#[derive(Clone, Debug, Default)]
pub struct ClusterSnapshot {
    clusters: Vec<ClusterInfo>,
    names: Arc<[Arc<str>]>,
    by_name: HashMap<Arc<str>, usize>,
    apis: HashMap<(String, String), u32>,
    resources: HashMap<String, usize>,
    label_keys: HashMap<String, u32>,
    label_values: HashMap<String, u32>,
}

fn intern(table: &mut HashMap<String, u32>, s: &str) -> u32 {
    if let Some(id) = table.get(s) {
        return *id;
    }
    let id = u32::try_from(table.len()).unwrap_or(u32::MAX);
    table.insert(s.to_string(), id);
    id
}

/// Whole units of a milli-value, rounded up (Kubernetes' `Quantity.Value()`).
pub(crate) fn ceil_units<T: CeilUnits>(milli: T) -> T {
    milli.ceil_units()
}

/// Rounding a milli-value up to whole units.
pub(crate) trait CeilUnits: Copy {
    /// The value in whole units, rounded up.
    fn ceil_units(self) -> Self;
}

impl CeilUnits for i64 {
    fn ceil_units(self) -> i64 {
        // Exact: the units of any i64 milli-value fit an i64 again.
        i128::from(self).ceil_units() as i64
    }
}

impl CeilUnits for i128 {
    fn ceil_units(self) -> i128 {
        let q = self.div_euclid(1000);
        if self.rem_euclid(1000) == 0 {
            q
        } else {
            q + 1
        }
    }
}

fn milli_of(list: &ResourceList, name: &str) -> Option<i128> {
    list.get(name).map(|q| q.milli_value())
}

impl ClusterSnapshot {
    /// Digests `clusters` (in any order).
    pub fn new<'a>(clusters: impl IntoIterator<Item = &'a Cluster>) -> Self {
        let mut sorted: Vec<&Cluster> = clusters.into_iter().collect();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        sorted.dedup_by(|a, b| a.metadata.name == b.metadata.name);

        let mut apis: HashMap<(String, String), u32> = HashMap::new();
        let mut resources: HashMap<String, usize> = HashMap::new();
        for c in &sorted {
            for e in &c.status.api_enablements {
                for r in &e.resources {
                    let next = u32::try_from(apis.len()).unwrap_or(u32::MAX);
                    apis.entry((e.group_version.clone(), r.kind.clone()))
                        .or_insert(next);
                }
            }
            if let Some(rs) = &c.status.resource_summary {
                for name in rs.allocatable.keys() {
                    let next = resources.len();
                    resources.entry(name.clone()).or_insert(next);
                }
            }
        }

        let mut label_keys: HashMap<String, u32> = HashMap::new();
        let mut label_values: HashMap<String, u32> = HashMap::new();
        let mut infos = Vec::with_capacity(sorted.len());
        let mut by_name = HashMap::with_capacity(sorted.len());
        for c in sorted {
            let name: Arc<str> = Arc::from(c.metadata.name.as_str());
            let mut fields = BTreeMap::new();
            if !c.spec.provider.is_empty() {
                fields.insert("provider".to_string(), c.spec.provider.clone());
            }
            if !c.spec.region.is_empty() {
                fields.insert("region".to_string(), c.spec.region.clone());
            }
            let zones = if c.spec.zones.is_empty() && !c.spec.zone.is_empty() {
                vec![c.spec.zone.clone()]
            } else {
                c.spec.zones.clone()
            };
            let mut api_ids: Vec<u32> = c
                .status
                .api_enablements
                .iter()
                .flat_map(|e| {
                    e.resources.iter().filter_map(|r| {
                        apis.get(&(e.group_version.clone(), r.kind.clone()))
                            .copied()
                    })
                })
                .collect();
            api_ids.sort_unstable();
            api_ids.dedup();
            let capacity = c.status.resource_summary.as_ref().map(|rs| {
                let pods = |l: &ResourceList| milli_of(l, PODS).map_or(0, ceil_units);
                let allowed = pods(&rs.allocatable) - pods(&rs.allocated) - pods(&rs.allocating);
                let mut free_milli = vec![None; resources.len()];
                for (rname, idx) in &resources {
                    if let Some(total) = milli_of(&rs.allocatable, rname) {
                        let used = milli_of(&rs.allocated, rname).unwrap_or(0)
                            + milli_of(&rs.allocating, rname).unwrap_or(0);
                        if let Some(slot) = free_milli.get_mut(*idx) {
                            let free = total.saturating_sub(used);
                            *slot = Some(i64::try_from(free).unwrap_or(if free < 0 {
                                i64::MIN
                            } else {
                                i64::MAX
                            }));
                        }
                    }
                }
                Capacity {
                    allowed_pods: i64::try_from(allowed.max(0)).unwrap_or(i64::MAX),
                    free_milli,
                }
            });
            let mut label_ids: Vec<(u32, u32)> = c
                .metadata
                .labels
                .iter()
                .map(|(k, v)| (intern(&mut label_keys, k), intern(&mut label_values, v)))
                .collect();
            label_ids.sort_unstable();
            by_name.insert(name.clone(), infos.len());
            infos.push(ClusterInfo {
                index: infos.len(),
                name,
                labels: c.metadata.labels.clone(),
                provider: c.spec.provider.clone(),
                region: c.spec.region.clone(),
                zones,
                taints: c.spec.taints.clone(),
                deleting: c.metadata.deletion_timestamp.is_some(),
                fields,
                label_ids,
                apis: api_ids,
                capacity,
            });
        }
        ClusterSnapshot {
            names: infos.iter().map(|c| c.name.clone()).collect(),
            clusters: infos,
            by_name,
            apis,
            resources,
            label_keys,
            label_values,
        }
    }

    /// Every cluster, sorted by name.
    pub fn clusters(&self) -> &[ClusterInfo] {
        &self.clusters
    }

    /// Every cluster name, sorted, as one shared table.
    pub(crate) fn names(&self) -> Arc<[Arc<str>]> {
        self.names.clone()
    }

    /// The position of the cluster with this name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The cluster with this name.
    pub fn get(&self, name: &str) -> Option<&ClusterInfo> {
        self.by_name.get(name).and_then(|&i| self.clusters.get(i))
    }

    /// Number of clusters (deleting ones included).
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// True when there is no cluster.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }

    /// The interned id of an API, if any cluster serves it.
    pub(crate) fn api_id(&self, group_version: &str, kind: &str) -> Option<u32> {
        // The key is owned; bindings ask once per schedule, so the two small copies are fine.
        self.apis
            .get(&(group_version.to_string(), kind.to_string()))
            .copied()
    }

    /// The interned id of a label key, if any cluster has it.
    pub(crate) fn label_key(&self, key: &str) -> Option<u32> {
        self.label_keys.get(key).copied()
    }

    /// The interned id of a label value, if any cluster has it.
    pub(crate) fn label_value(&self, value: &str) -> Option<u32> {
        self.label_values.get(value).copied()
    }

    /// The index of a resource in [`Capacity::free_milli`], if any cluster has it allocatable.
    pub(crate) fn resource_index(&self, name: &str) -> Option<usize> {
        self.resources.get(name).copied()
    }
}

impl ClusterInfo {
    /// The interned value of the label with this interned key.
    pub(crate) fn label(&self, key: u32) -> Option<u32> {
        self.label_ids
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// True when `status.apiEnablements` lists the API with this interned id.
    pub(crate) fn serves(&self, api: Option<u32>) -> bool {
        api.is_some_and(|id| self.apis.binary_search(&id).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::tests::{deployments_served, resource_list as list};
    use flotilla_api::cluster::{ClusterSpec, ResourceSummary};
    use flotilla_api::meta::Time;

    #[test]
    fn digests_clusters() {
        let mut a = Cluster::new(
            "b",
            ClusterSpec {
                provider: "aws".into(),
                zone: "z1".into(),
                ..Default::default()
            },
        );
        a.status.api_enablements = deployments_served();
        a.status.resource_summary = Some(ResourceSummary {
            allocatable: list(&[("cpu", "4"), ("pods", "110")]),
            allocated: list(&[("cpu", "1500m"), ("pods", "10")]),
            allocating: list(&[("pods", "100")]),
            ..Default::default()
        });
        let mut b = Cluster::new("a", ClusterSpec::default());
        b.metadata.deletion_timestamp = Some(Time::parse("2024-05-01T10:00:00Z").unwrap());
        let snap = ClusterSnapshot::new([&a, &b, &a]);
        assert_eq!(snap.len(), 2);
        assert_eq!(&*snap.clusters()[0].name, "a");
        assert!(snap.clusters()[0].deleting);
        assert!(snap.clusters()[0].capacity.is_none());
        let info = snap.get("b").unwrap();
        assert_eq!(info.zones, vec!["z1".to_string()]);
        assert_eq!(info.fields.get("provider").map(String::as_str), Some("aws"));
        assert!(info.serves(snap.api_id("apps/v1", "Deployment")));
        assert!(!info.serves(snap.api_id("apps/v1", "StatefulSet")));
        let cap = info.capacity.as_ref().unwrap();
        assert_eq!(cap.allowed_pods, 0);
        let cpu = snap.resource_index("cpu").unwrap();
        assert_eq!(cap.free_milli[cpu], Some(2500));
        assert_eq!(snap.resource_index("memory"), None);
    }
}
