//! Which clusters may run a binding at all (docs/semantics.md §8.2 step 2, §5): the filter
//! plugins, run in Karmada's registry order; a cluster is feasible when every filter passes,
//! and the first filter that fails names the reason. Clusters being deleted are not candidates
//! and never reach the filters.
//!
//! | filter | a cluster fails when |
//! |---|---|
//! | APIEnablement | it is not in `spec.clusters` and does not list the resource's API |
//! | TaintToleration | it is not in `spec.clusters` and has a NoSchedule or NoExecute taint the placement does not tolerate (PreferNoSchedule is ignored) |
//! | ClusterAffinity | it does not match `clusterAffinity`, or the observed `clusterAffinities` term and its overflow tiers |
//! | SpreadConstraint | a constraint spreads by region/provider/zone and the cluster has no such property |
//! | ClusterEviction | a graceful eviction task of the binding has it as `fromCluster` (whoever evicted: taint manager or application failover) |
//! | FailoverBlock | it is not in `spec.clusters` and application failover moved the workload off it: while its task exists and for the block period after (Flotilla's ping-pong guard) |

use std::fmt;

use flotilla_api::cluster::{Taint, TaintEffect};
use flotilla_api::policy::SpreadByField;
use flotilla_api::taint_toleration::first_untolerated;

use super::context::BindingContext;
use super::snapshot::ClusterInfo;

/// Why a cluster is not a candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// `metadata.deletionTimestamp` is set: not a candidate.
    Deleting,
    /// APIEnablement: the resource's API is not listed.
    ApiNotEnabled,
    /// TaintToleration: this taint is not tolerated.
    UntoleratedTaint(Box<Taint>),
    /// ClusterAffinity: the affinity in force does not match.
    AffinityMismatch,
    /// SpreadConstraint: the cluster lacks the property a constraint spreads by.
    MissingSpreadProperty(SpreadByField),
    /// ClusterEviction: the binding is being evicted from the cluster.
    Evicting,
    /// FailoverBlock: the workload failed over from the cluster a short while ago.
    Blocked,
}

impl Rejection {
    /// The filter (plugin) that rejected the cluster.
    pub fn filter(&self) -> &'static str {
        match self {
            Rejection::Deleting => "Deleting",
            Rejection::ApiNotEnabled => ApiEnablement.name(),
            Rejection::UntoleratedTaint(_) => TaintToleration.name(),
            Rejection::AffinityMismatch => ClusterAffinityFilter.name(),
            Rejection::MissingSpreadProperty(_) => SpreadConstraintFilter.name(),
            Rejection::Evicting => ClusterEviction.name(),
            Rejection::Blocked => FailoverBlock.name(),
        }
    }

    /// True for rejections by a filter (not for deleting clusters).
    pub fn is_filter(&self) -> bool {
        !matches!(self, Rejection::Deleting)
    }
}

/// A taint as Kubernetes prints it: `key=value:Effect`, or `key:Effect` without a value.
struct TaintText<'a>(&'a Taint);

impl fmt::Display for TaintText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        if t.value.is_empty() {
            write!(f, "{}:{}", t.key, t.effect)
        } else {
            write!(f, "{}={}:{}", t.key, t.value, t.effect)
        }
    }
}

impl fmt::Display for Rejection {
    /// Karmada's reason text, as it appears in the FitError message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Deleting => f.write_str("cluster(s) is being deleted"),
            Rejection::ApiNotEnabled => f.write_str("cluster(s) did not have the API resource"),
            Rejection::UntoleratedTaint(t) => {
                write!(f, "cluster(s) had untolerated taint {{{}}}", TaintText(t))
            }
            Rejection::AffinityMismatch => {
                f.write_str("cluster(s) did not match the placement cluster affinity constraint")
            }
            Rejection::MissingSpreadProperty(field) => {
                write!(f, "cluster(s) didn't have {} property", field.as_str())
            }
            Rejection::Evicting => f.write_str("cluster(s) is in the process of eviction"),
            Rejection::Blocked => {
                f.write_str("cluster(s) recently failed this application (failover block period)")
            }
        }
    }
}

/// A filter plugin.
pub trait Filter: Sync {
    /// Plugin name, as Karmada's registry spells it.
    fn name(&self) -> &'static str;
    /// `Ok` when the cluster passes.
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection>;
}

/// APIEnablement: the cluster serves the resource's API, or already runs the binding.
pub struct ApiEnablement;

impl Filter for ApiEnablement {
    fn name(&self) -> &'static str {
        "APIEnablement"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        if binding.is_scheduled(cluster) || cluster.serves(binding.api) {
            Ok(())
        } else {
            Err(Rejection::ApiNotEnabled)
        }
    }
}

/// TaintToleration: NoSchedule and NoExecute taints must be tolerated by
/// `placement.clusterTolerations`, unless the cluster already runs the binding (the taint
/// manager evicts from there, not the scheduler).
pub struct TaintToleration;

const FILTERED_EFFECTS: [TaintEffect; 2] = [TaintEffect::NoSchedule, TaintEffect::NoExecute];

impl Filter for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        if cluster.taints.is_empty() || binding.is_scheduled(cluster) {
            return Ok(());
        }
        match first_untolerated(
            &cluster.taints,
            &binding.placement.cluster_tolerations,
            &FILTERED_EFFECTS,
        ) {
            Some(t) => Err(Rejection::UntoleratedTaint(Box::new(t.clone()))),
            None => Ok(()),
        }
    }
}

/// ClusterAffinity: the cluster matches the affinity in force (any tier).
pub struct ClusterAffinityFilter;

impl Filter for ClusterAffinityFilter {
    fn name(&self) -> &'static str {
        "ClusterAffinity"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        match binding.affinity.tier_of(cluster) {
            Some(_) => Ok(()),
            None => Err(Rejection::AffinityMismatch),
        }
    }
}

/// SpreadConstraint: the cluster has every property a constraint spreads by.
pub struct SpreadConstraintFilter;

impl Filter for SpreadConstraintFilter {
    fn name(&self) -> &'static str {
        "SpreadConstraint"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        for field in &binding.spread_fields {
            let missing = match field {
                SpreadByField::Provider => cluster.provider.is_empty(),
                SpreadByField::Region => cluster.region.is_empty(),
                SpreadByField::Zone => cluster.zones.is_empty(),
                SpreadByField::Cluster => false,
            };
            if missing {
                return Err(Rejection::MissingSpreadProperty(*field));
            }
        }
        Ok(())
    }
}

/// ClusterEviction: the binding is not being evicted from the cluster.
pub struct ClusterEviction;

impl Filter for ClusterEviction {
    fn name(&self) -> &'static str {
        "ClusterEviction"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        if binding.is_evicting(cluster) {
            Err(Rejection::Evicting)
        } else {
            Ok(())
        }
    }
}

/// FailoverBlock: application failover did not just move the workload off the cluster. A
/// cluster the binding runs on now is never rejected (the block keeps out, it does not evict).
pub struct FailoverBlock;

impl Filter for FailoverBlock {
    fn name(&self) -> &'static str {
        "FailoverBlock"
    }
    fn filter(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
        if binding.is_blocked(cluster) && !binding.is_scheduled(cluster) {
            Err(Rejection::Blocked)
        } else {
            Ok(())
        }
    }
}

/// The filters, in the order they run.
pub const FILTERS: [&dyn Filter; 6] = [
    &ApiEnablement,
    &TaintToleration,
    &ClusterAffinityFilter,
    &SpreadConstraintFilter,
    &ClusterEviction,
    &FailoverBlock,
];

/// Runs every filter; the first rejection wins. Deleting clusters are rejected up front.
pub fn run_filters(binding: &BindingContext<'_>, cluster: &ClusterInfo) -> Result<(), Rejection> {
    if cluster.deleting {
        return Err(Rejection::Deleting);
    }
    FILTERS.iter().try_for_each(|f| f.filter(binding, cluster))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::context::AffinityTiers;
    use crate::scheduler::snapshot::ClusterSnapshot;
    use crate::scheduler::tests::deployments_served;
    use flotilla_api::binding::{
        GracefulEvictionTask, ObjectReference, ResourceBindingSpec, TargetCluster,
    };
    use flotilla_api::cluster::{Cluster, ClusterSpec, TAINT_CLUSTER_NOT_READY};
    use flotilla_api::meta::Time;
    use flotilla_api::policy::{
        ClusterAffinity, ClusterAffinityTerm, OverflowClusterAffinity, Placement, SpreadConstraint,
        Toleration, TolerationOperator,
    };

    fn cluster(name: &str) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                region: "eu".into(),
                ..Default::default()
            },
        );
        c.status.api_enablements = deployments_served();
        c
    }

    fn spec(placement: Placement) -> ResourceBindingSpec {
        ResourceBindingSpec {
            resource: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "nginx".into(),
                ..Default::default()
            },
            replicas: 2,
            placement: Some(placement),
            ..Default::default()
        }
    }

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
            time_added: None,
        }
    }

    /// Runs the filters for one cluster; `Ok` or the filter name and reason text.
    fn verdict(c: &Cluster, s: &ResourceBindingSpec) -> Result<(), (String, String)> {
        let snap = ClusterSnapshot::new([c]);
        let placement = s.placement.as_ref().unwrap();
        let affinity = match (
            &placement.cluster_affinity,
            placement.cluster_affinities.first(),
        ) {
            (Some(a), _) => AffinityTiers::plain(a, &snap),
            (None, Some(t)) => AffinityTiers::term(t, true, &snap),
            (None, None) => AffinityTiers::none(),
        };
        let ctx = BindingContext::new(s, placement, affinity, &snap);
        run_filters(&ctx, &snap.clusters()[0]).map_err(|r| (r.filter().to_string(), r.to_string()))
    }

    type FilterRow<'a> = (
        &'a str,
        Cluster,
        ResourceBindingSpec,
        Option<(&'a str, &'a str)>,
    );

    #[test]
    fn filter_table() {
        let tolerate_not_ready = Placement {
            cluster_tolerations: vec![Toleration::exists(
                TAINT_CLUSTER_NOT_READY,
                Some(TaintEffect::NoExecute),
                Some(300),
            )],
            ..Default::default()
        };
        let with = |f: &dyn Fn(&mut Cluster)| {
            let mut c = cluster("member1");
            f(&mut c);
            c
        };
        let scheduled = |mut s: ResourceBindingSpec| {
            s.clusters.push(TargetCluster::new("member1", 2));
            s
        };
        let names = |v: &[&str]| Placement {
            cluster_affinity: Some(ClusterAffinity {
                cluster_names: v.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let no_execute = |c: &mut Cluster| {
            c.spec.taints = vec![taint(TAINT_CLUSTER_NOT_READY, "", TaintEffect::NoExecute)]
        };
        let rows: Vec<FilterRow> = vec![
            (
                "plain cluster passes",
                cluster("member1"),
                spec(Placement::default()),
                None,
            ),
            (
                "API not listed",
                with(&|c| c.status.api_enablements.clear()),
                spec(Placement::default()),
                Some(("APIEnablement", "cluster(s) did not have the API resource")),
            ),
            (
                "API not listed but already scheduled",
                with(&|c| c.status.api_enablements.clear()),
                scheduled(spec(Placement::default())),
                None,
            ),
            (
                "untolerated NoExecute",
                with(&no_execute),
                spec(Placement::default()),
                Some((
                    "TaintToleration",
                    "cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoExecute}",
                )),
            ),
            (
                "untolerated NoSchedule with value",
                with(&|c| c.spec.taints = vec![taint("dedicated", "gpu", TaintEffect::NoSchedule)]),
                spec(Placement::default()),
                Some((
                    "TaintToleration",
                    "cluster(s) had untolerated taint {dedicated=gpu:NoSchedule}",
                )),
            ),
            (
                "PreferNoSchedule ignored",
                with(&|c| c.spec.taints = vec![taint("x", "", TaintEffect::PreferNoSchedule)]),
                spec(Placement::default()),
                None,
            ),
            (
                "tolerated NoExecute",
                with(&no_execute),
                spec(tolerate_not_ready.clone()),
                None,
            ),
            (
                "tolerated NoExecute, untolerated NoSchedule",
                with(&|c| {
                    no_execute(c);
                    c.spec
                        .taints
                        .push(taint(TAINT_CLUSTER_NOT_READY, "", TaintEffect::NoSchedule));
                }),
                spec(tolerate_not_ready.clone()),
                Some((
                    "TaintToleration",
                    "cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}",
                )),
            ),
            (
                "Equal operator needs the value",
                with(&|c| c.spec.taints = vec![taint("dedicated", "gpu", TaintEffect::NoSchedule)]),
                spec(Placement {
                    cluster_tolerations: vec![Toleration {
                        key: "dedicated".into(),
                        operator: Some(TolerationOperator::Equal),
                        value: "gpu".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                None,
            ),
            (
                "tainted but already scheduled",
                with(&no_execute),
                scheduled(spec(Placement::default())),
                None,
            ),
            (
                "affinity match",
                cluster("member1"),
                spec(names(&["member1"])),
                None,
            ),
            (
                "affinity mismatch",
                cluster("member1"),
                spec(names(&["member2"])),
                Some((
                    "ClusterAffinity",
                    "cluster(s) did not match the placement cluster affinity constraint",
                )),
            ),
            (
                "affinity mismatch even when scheduled",
                cluster("member1"),
                scheduled(spec(names(&["member2"]))),
                Some((
                    "ClusterAffinity",
                    "cluster(s) did not match the placement cluster affinity constraint",
                )),
            ),
            (
                "clusterAffinities overflow tier matches",
                cluster("member1"),
                spec(Placement {
                    cluster_affinities: vec![ClusterAffinityTerm {
                        affinity_name: "primary".into(),
                        cluster_names: vec!["member2".into()],
                        overflow_affinities: vec![OverflowClusterAffinity {
                            affinity_name: "burst".into(),
                            cluster_names: vec!["member1".into()],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                None,
            ),
            (
                "spread by region, region set",
                cluster("member1"),
                spec(Placement {
                    spread_constraints: vec![SpreadConstraint {
                        spread_by_field: Some(SpreadByField::Region),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                None,
            ),
            (
                "spread by zone, no zones",
                cluster("member1"),
                spec(Placement {
                    spread_constraints: vec![SpreadConstraint {
                        spread_by_field: Some(SpreadByField::Zone),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                Some(("SpreadConstraint", "cluster(s) didn't have zone property")),
            ),
            (
                "spread by provider, no provider",
                cluster("member1"),
                spec(Placement {
                    spread_constraints: vec![SpreadConstraint {
                        spread_by_field: Some(SpreadByField::Provider),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                Some((
                    "SpreadConstraint",
                    "cluster(s) didn't have provider property",
                )),
            ),
            (
                "being evicted",
                cluster("member1"),
                {
                    let mut s = spec(Placement::default());
                    s.graceful_eviction_tasks.push(GracefulEvictionTask {
                        from_cluster: "member1".into(),
                        reason: "TaintUntolerated".into(),
                        producer: "TaintManager".into(),
                        ..Default::default()
                    });
                    s
                },
                Some((
                    "ClusterEviction",
                    "cluster(s) is in the process of eviction",
                )),
            ),
            (
                "deleting",
                with(&|c| {
                    c.metadata.deletion_timestamp =
                        Some(Time::parse("2024-05-01T10:00:00Z").unwrap())
                }),
                spec(Placement::default()),
                Some(("Deleting", "cluster(s) is being deleted")),
            ),
        ];
        for (name, c, s, want) in rows {
            let want = want.map(|(f, r)| (f.to_string(), r.to_string()));
            assert_eq!(verdict(&c, &s), want.map_or(Ok(()), Err), "{name}");
        }
    }
}
