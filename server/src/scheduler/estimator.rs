//! How many more replicas of a binding each cluster can take: Karmada's general estimator over
//! `status.resourceSummary` (docs/semantics.md §8.3).
//!
//! No summary ⇒ 0. Otherwise start from the pods the cluster still allows
//! (`allocatable − allocated − allocating`, never negative); without replica requirements that
//! is the answer; with them, each requested resource (request rounded up to whole units, zero
//! requests ignored) limits it to `free / request` (cpu in milli-units), a resource that is not
//! allocatable or has nothing free giving 0. A result of `i32::MAX` (nothing limits it) becomes
//! `spec.replicas`, and non-workloads (`spec.replicas == 0`) get `spec.replicas` everywhere.

use flotilla_api::binding::ResourceBindingSpec;

use super::snapshot::{ceil_units, ClusterInfo, ClusterSnapshot};

/// One positive resource request of a replica, resolved against the snapshot.
#[derive(Clone, Debug)]
struct Request {
    /// Index into the clusters' free-resource table; `None` when no cluster has it.
    index: Option<usize>,
    /// cpu is compared in milli-units, everything else in whole units.
    cpu: bool,
    /// The request in the unit it is compared in.
    amount: i64,
}

/// A binding's replica requirements, resolved once per schedule.
#[derive(Clone, Debug)]
pub struct Estimator {
    replicas: i32,
    workload: bool,
    has_requirements: bool,
    requests: Vec<Request>,
}

impl Estimator {
    /// Resolves `spec.replicaRequirements` against the snapshot's resource table.
    pub fn new(spec: &ResourceBindingSpec, snapshot: &ClusterSnapshot) -> Self {
        let requests = spec
            .replica_requirements
            .iter()
            .flat_map(|r| r.resource_request.iter())
            .filter_map(|(name, q)| {
                let units = ceil_units(q.milli_value());
                if units <= 0 {
                    return None;
                }
                let cpu = name == "cpu";
                let amount = if cpu { q.milli_value() } else { units };
                Some(Request {
                    index: snapshot.resource_index(name),
                    cpu,
                    amount: i64::try_from(amount).unwrap_or(i64::MAX),
                })
            })
            .collect();
        Estimator {
            replicas: spec.replicas,
            workload: spec.replicas != 0,
            has_requirements: spec.replica_requirements.is_some(),
            requests,
        }
    }

    /// The replicas `cluster` can still take.
    pub fn max_available(&self, cluster: &ClusterInfo) -> i64 {
        if !self.workload {
            return i64::from(self.replicas);
        }
        let raw = self.general(cluster);
        let clamped = raw.min(i64::from(i32::MAX));
        if clamped == i64::from(i32::MAX) {
            i64::from(self.replicas)
        } else {
            clamped
        }
    }

    fn general(&self, cluster: &ClusterInfo) -> i64 {
        let Some(cap) = &cluster.capacity else {
            return 0;
        };
        let mut max = cap.allowed_pods;
        if max <= 0 {
            return 0;
        }
        if !self.has_requirements {
            return max;
        }
        for req in &self.requests {
            let free = req
                .index
                .and_then(|i| cap.free_milli.get(i).copied().flatten());
            let Some(free_milli) = free else {
                return 0;
            };
            if ceil_units(free_milli) <= 0 {
                return 0;
            }
            let free = if req.cpu {
                free_milli
            } else {
                ceil_units(free_milli)
            };
            max = max.min(free / req.amount);
        }
        max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::tests::resource_list as list;
    use flotilla_api::binding::ReplicaRequirements;
    use flotilla_api::cluster::{Cluster, ClusterSpec, ResourceSummary};

    type Pairs<'a> = &'a [(&'a str, &'a str)];
    type EstimatorRow<'a> = (
        &'a str,
        i32,
        Option<Pairs<'a>>,
        Option<(Pairs<'a>, Pairs<'a>)>,
        i64,
    );

    #[test]
    fn estimator_table() {
        let alloc: Pairs = &[
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "110"),
            ("nvidia.com/gpu", "2"),
        ];
        let used: Pairs = &[("cpu", "1"), ("memory", "2Gi"), ("pods", "10")];
        let rows: &[EstimatorRow] = &[
            ("no summary", 3, None, None, 0),
            ("pods only", 3, None, Some((alloc, used)), 100),
            (
                "cpu in milli",
                3,
                Some(&[("cpu", "250m")]),
                Some((alloc, used)),
                12,
            ),
            (
                "cpu and memory",
                3,
                Some(&[("cpu", "500m"), ("memory", "1Gi")]),
                Some((alloc, used)),
                6,
            ),
            (
                "memory",
                3,
                Some(&[("memory", "2Gi")]),
                Some((alloc, used)),
                3,
            ),
            (
                "gpu",
                3,
                Some(&[("nvidia.com/gpu", "1")]),
                Some((alloc, used)),
                2,
            ),
            (
                "resource not allocatable",
                3,
                Some(&[("example.com/fpga", "1")]),
                Some((alloc, used)),
                0,
            ),
            (
                "zero request ignored",
                3,
                Some(&[("cpu", "0")]),
                Some((alloc, used)),
                100,
            ),
            (
                "pods exhausted",
                3,
                Some(&[("cpu", "1m")]),
                Some((alloc, &[("pods", "200")])),
                0,
            ),
            ("non-workload", 0, Some(&[("cpu", "1")]), None, 0),
            (
                "no resource left",
                3,
                Some(&[("cpu", "1")]),
                Some((&[("cpu", "1"), ("pods", "5")], &[("cpu", "1")])),
                0,
            ),
        ];
        for (name, replicas, request, summary, want) in rows {
            let mut c = Cluster::new("m", ClusterSpec::default());
            if let Some((a, u)) = summary {
                c.status.resource_summary = Some(ResourceSummary {
                    allocatable: list(a),
                    allocated: list(u),
                    ..Default::default()
                });
            }
            let snap = ClusterSnapshot::new([&c]);
            let spec = ResourceBindingSpec {
                replicas: *replicas,
                replica_requirements: request.map(|r| ReplicaRequirements {
                    resource_request: list(r),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let est = Estimator::new(&spec, &snap);
            assert_eq!(est.max_available(&snap.clusters()[0]), *want, "{name}");
        }
    }

    #[test]
    fn unlimited_becomes_spec_replicas() {
        let mut c = Cluster::new("m", ClusterSpec::default());
        c.status.resource_summary = Some(ResourceSummary {
            allocatable: list(&[("pods", "1e12")]),
            ..Default::default()
        });
        let snap = ClusterSnapshot::new([&c]);
        let spec = ResourceBindingSpec {
            replicas: 7,
            ..Default::default()
        };
        assert_eq!(
            Estimator::new(&spec, &snap).max_available(&snap.clusters()[0]),
            7
        );
    }
}
