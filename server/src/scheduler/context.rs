//! What one binding asks of the scheduler, resolved once per scheduling attempt so the filters
//! and scores run per cluster without re-reading the binding: the previous result and the
//! clusters being evicted as sorted lookups, the cluster affinity in force compiled (label
//! selectors parsed once), the interned API of the resource, and the spread fields that need
//! a cluster property.

use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::policy::{
    ClusterAffinity, ClusterAffinityTerm, FieldSelector, Placement, SpreadByField,
};
use flotilla_api::selector::label::Operator;
use flotilla_api::selector::{LabelSelector, NodeSelectorOperator, NodeSelectorRequirement};

use super::snapshot::{ClusterInfo, ClusterSnapshot};

/// One label requirement over interned ids (unknown keys and values resolved to "absent").
#[derive(Clone, Debug)]
enum LabelTest {
    /// `=`, `==`, `in`: present with one of the values.
    In(Option<u32>, Vec<u32>),
    /// `!=`, `notin`: absent, or none of the values.
    NotIn(Option<u32>, Vec<u32>),
    /// Present.
    Exists(Option<u32>),
    /// Absent.
    DoesNotExist(Option<u32>),
}

impl LabelTest {
    fn matches(&self, cluster: &ClusterInfo) -> bool {
        let value = |key: &Option<u32>| key.and_then(|k| cluster.label(k));
        match self {
            LabelTest::In(k, values) => value(k).is_some_and(|v| values.contains(&v)),
            LabelTest::NotIn(k, values) => value(k).is_none_or(|v| !values.contains(&v)),
            LabelTest::Exists(k) => value(k).is_some(),
            LabelTest::DoesNotExist(k) => value(k).is_none(),
        }
    }
}

/// A label selector compiled once.
#[derive(Clone, Debug)]
enum LabelMatch {
    /// No selector: every cluster.
    Any,
    /// An invalid selector: no cluster (as Karmada's `ClusterMatches`).
    Never,
    /// The requirements, all of which must hold.
    Tests(Vec<LabelTest>),
}

impl LabelMatch {
    fn compile(selector: Option<&LabelSelector>, snapshot: &ClusterSnapshot) -> Self {
        let Some(sel) = selector else {
            return LabelMatch::Any;
        };
        let Ok(reqs) = sel.to_requirements() else {
            return LabelMatch::Never;
        };
        let tests = reqs
            .requirements()
            .iter()
            .map(|r| {
                let key = snapshot.label_key(r.key());
                let values = || {
                    r.values()
                        .iter()
                        .filter_map(|v| snapshot.label_value(v))
                        .collect::<Vec<u32>>()
                };
                match r.operator() {
                    Operator::Equals | Operator::In => LabelTest::In(key, values()),
                    Operator::NotEquals | Operator::NotIn => LabelTest::NotIn(key, values()),
                    Operator::Exists => LabelTest::Exists(key),
                    Operator::DoesNotExist => LabelTest::DoesNotExist(key),
                }
            })
            .collect();
        LabelMatch::Tests(tests)
    }
}

/// Karmada's `ClusterMatches`, compiled: exclusions, label selector, field selector (zones
/// against `spec.zones`, provider and region through a node selector) and names, all ANDed.
#[derive(Clone, Debug)]
pub struct CompiledAffinity<'a> {
    labels: LabelMatch,
    fields: &'a [NodeSelectorRequirement],
    names: &'a [String],
    exclude: &'a [String],
}

impl<'a> CompiledAffinity<'a> {
    fn compile(
        label_selector: Option<&LabelSelector>,
        field_selector: Option<&'a FieldSelector>,
        names: &'a [String],
        exclude: &'a [String],
        snapshot: &ClusterSnapshot,
    ) -> Self {
        CompiledAffinity {
            labels: LabelMatch::compile(label_selector, snapshot),
            fields: field_selector.map_or(&[], |f| f.match_expressions.as_slice()),
            names,
            exclude,
        }
    }

    /// Compiles a `clusterAffinity` (or a static-weight target) against the snapshot's
    /// label tables.
    pub fn new(affinity: &'a ClusterAffinity, snapshot: &ClusterSnapshot) -> Self {
        Self::compile(
            affinity.label_selector.as_ref(),
            affinity.field_selector.as_ref(),
            &affinity.cluster_names,
            &affinity.exclude,
            snapshot,
        )
    }

    /// Compiles the inline affinity of a `clusterAffinities` term.
    pub fn of_term(term: &'a ClusterAffinityTerm, snapshot: &ClusterSnapshot) -> Self {
        Self::compile(
            term.label_selector.as_ref(),
            term.field_selector.as_ref(),
            &term.cluster_names,
            &term.exclude,
            snapshot,
        )
    }

    /// True when the cluster satisfies the affinity.
    pub fn matches(&self, cluster: &ClusterInfo) -> bool {
        let name: &str = &cluster.name;
        if self.exclude.iter().any(|n| n == name) {
            return false;
        }
        let labels_ok = match &self.labels {
            LabelMatch::Any => true,
            LabelMatch::Never => false,
            LabelMatch::Tests(tests) => tests.iter().all(|t| t.matches(cluster)),
        };
        if !labels_ok {
            return false;
        }
        let fields_ok = self.fields.iter().all(|req| {
            if req.key == "zone" {
                zones_match(req, &cluster.zones)
            } else {
                req.matches(&cluster.fields)
            }
        });
        fields_ok && (self.names.is_empty() || self.names.iter().any(|n| n == name))
    }
}

fn zones_match(req: &NodeSelectorRequirement, zones: &[String]) -> bool {
    let overlap = || zones.iter().any(|z| req.values.contains(z));
    match req.operator {
        NodeSelectorOperator::In => !zones.is_empty() && overlap(),
        NodeSelectorOperator::NotIn => zones.is_empty() || !overlap(),
        NodeSelectorOperator::Exists => !zones.is_empty(),
        NodeSelectorOperator::DoesNotExist => zones.is_empty(),
        NodeSelectorOperator::Gt | NodeSelectorOperator::Lt => false,
    }
}

/// The affinity the ClusterAffinity filter applies: none, a plain `clusterAffinity`, or the
/// observed `clusterAffinities` term followed by its overflow tiers (workloads only).
#[derive(Clone, Debug, Default)]
pub struct AffinityTiers<'a> {
    tiers: Vec<CompiledAffinity<'a>>,
}

impl<'a> AffinityTiers<'a> {
    /// No affinity: every cluster passes.
    pub fn none() -> Self {
        AffinityTiers { tiers: Vec::new() }
    }

    /// A plain `clusterAffinity`.
    pub fn plain(affinity: &'a ClusterAffinity, snapshot: &ClusterSnapshot) -> Self {
        AffinityTiers {
            tiers: vec![CompiledAffinity::new(affinity, snapshot)],
        }
    }

    /// A `clusterAffinities` term, with its overflow tiers when `with_overflow`.
    pub fn term(
        term: &'a ClusterAffinityTerm,
        with_overflow: bool,
        snapshot: &ClusterSnapshot,
    ) -> Self {
        let mut tiers = vec![CompiledAffinity::of_term(term, snapshot)];
        if with_overflow {
            tiers.extend(term.overflow_affinities.iter().map(|o| {
                CompiledAffinity::compile(
                    o.label_selector.as_ref(),
                    o.field_selector.as_ref(),
                    &o.cluster_names,
                    &o.exclude,
                    snapshot,
                )
            }));
        }
        AffinityTiers { tiers }
    }

    /// The first tier the cluster matches (0 for the primary affinity, i for the i-th
    /// overflow tier); `Some(0)` for every cluster when there is no affinity.
    pub fn tier_of(&self, cluster: &ClusterInfo) -> Option<u32> {
        if self.tiers.is_empty() {
            return Some(0);
        }
        self.tiers
            .iter()
            .position(|t| t.matches(cluster))
            .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// True when overflow tiers are in use.
    pub fn has_overflow(&self) -> bool {
        self.tiers.len() > 1
    }
}

/// Everything the filters and scores need to know about the binding.
#[derive(Debug)]
pub struct BindingContext<'a> {
    /// The binding spec.
    pub spec: &'a ResourceBindingSpec,
    /// Its placement.
    pub placement: &'a Placement,
    /// `spec.clusters` as snapshot index → replicas (clusters not in the snapshot left out).
    pub scheduled: Vec<(usize, i32)>,
    /// Snapshot index of the `fromCluster` of every graceful eviction task.
    pub evicting: Vec<usize>,
    /// Snapshot index of every cluster application failover blocks for this binding.
    pub blocked: Vec<usize>,
    /// The affinity in force.
    pub affinity: AffinityTiers<'a>,
    /// The interned id of the resource's API (`None`: no cluster serves it).
    pub api: Option<u32>,
    /// Spread fields that need a non-empty cluster property.
    pub spread_fields: Vec<SpreadByField>,
}

impl<'a> BindingContext<'a> {
    /// Resolves the binding against the snapshot with the given affinity.
    pub fn new(
        spec: &'a ResourceBindingSpec,
        placement: &'a Placement,
        affinity: AffinityTiers<'a>,
        snapshot: &ClusterSnapshot,
    ) -> Self {
        let mut scheduled: Vec<(usize, i32)> = Vec::with_capacity(spec.clusters.len());
        for c in &spec.clusters {
            let Some(i) = snapshot.index_of(&c.name) else {
                continue;
            };
            match scheduled.iter_mut().find(|(j, _)| *j == i) {
                Some(entry) => entry.1 += c.replicas,
                None => scheduled.push((i, c.replicas)),
            }
        }
        let mut spread_fields: Vec<SpreadByField> = placement
            .spread_constraints
            .iter()
            .filter_map(|s| s.spread_by_field)
            .filter(|f| *f != SpreadByField::Cluster)
            .collect();
        spread_fields.sort();
        spread_fields.dedup();
        BindingContext {
            spec,
            placement,
            scheduled,
            evicting: spec
                .graceful_eviction_tasks
                .iter()
                .filter_map(|t| snapshot.index_of(&t.from_cluster))
                .collect(),
            blocked: Vec::new(),
            affinity,
            api: snapshot.api_id(&spec.resource.api_version, &spec.resource.kind),
            spread_fields,
        }
    }

    /// True when `spec.clusters` names the cluster.
    pub fn is_scheduled(&self, cluster: &ClusterInfo) -> bool {
        self.scheduled.iter().any(|(i, _)| *i == cluster.index)
    }

    /// Replicas the previous result gave the cluster (0 when none).
    pub fn assigned(&self, cluster: &ClusterInfo) -> i32 {
        self.scheduled
            .iter()
            .find(|(i, _)| *i == cluster.index)
            .map_or(0, |(_, r)| *r)
    }

    /// True when a graceful eviction task names the cluster.
    pub fn is_evicting(&self, cluster: &ClusterInfo) -> bool {
        self.evicting.contains(&cluster.index)
    }

    /// True when application failover keeps the cluster out of this binding.
    pub fn is_blocked(&self, cluster: &ClusterInfo) -> bool {
        self.blocked.contains(&cluster.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::affinity::cluster_matches;
    use flotilla_api::cluster::{Cluster, ClusterSpec};
    use flotilla_api::selector::LabelSelectorRequirement;
    use proptest::prelude::*;

    fn arb_cluster() -> impl Strategy<Value = Cluster> {
        (
            prop::sample::select(vec!["m1", "m2", "m3"]),
            prop::sample::select(vec!["", "aws", "gcp"]),
            prop::sample::select(vec!["", "eu", "us"]),
            prop::collection::vec(prop::sample::select(vec!["z1", "z2"]), 0..2),
            prop::sample::select(vec!["", "prod", "dev"]),
        )
            .prop_map(|(name, provider, region, zones, env)| {
                let mut c = Cluster::new(
                    name,
                    ClusterSpec {
                        provider: provider.into(),
                        region: region.into(),
                        zones: zones.into_iter().map(String::from).collect(),
                        ..Default::default()
                    },
                );
                if !env.is_empty() {
                    c.metadata.labels.insert("env".into(), env.into());
                }
                c
            })
    }

    fn arb_affinity() -> impl Strategy<Value = ClusterAffinity> {
        let ops = prop::sample::select(vec![
            NodeSelectorOperator::In,
            NodeSelectorOperator::NotIn,
            NodeSelectorOperator::Exists,
            NodeSelectorOperator::DoesNotExist,
            NodeSelectorOperator::Gt,
        ]);
        let req = (
            prop::sample::select(vec!["provider", "region", "zone", "other"]),
            ops,
            prop::collection::vec(prop::sample::select(vec!["aws", "eu", "z1", "1"]), 0..2),
        )
            .prop_map(|(key, operator, values)| NodeSelectorRequirement {
                key: key.into(),
                operator,
                values: values.into_iter().map(String::from).collect(),
            });
        (
            prop::option::of(prop::sample::select(vec!["prod", "dev", "bad value!"])),
            prop::option::of(prop::collection::vec(req, 0..3)),
            prop::collection::vec(prop::sample::select(vec!["m1", "m2"]), 0..2),
            prop::collection::vec(prop::sample::select(vec!["m2", "m3"]), 0..2),
        )
            .prop_map(|(env, fields, names, exclude)| ClusterAffinity {
                label_selector: env.map(|v| LabelSelector {
                    match_expressions: vec![LabelSelectorRequirement {
                        key: "env".into(),
                        operator: flotilla_api::selector::LabelSelectorOperator::In,
                        values: vec![v.into()],
                    }],
                    ..Default::default()
                }),
                field_selector: fields.map(|match_expressions| FieldSelector { match_expressions }),
                cluster_names: names.into_iter().map(String::from).collect(),
                exclude: exclude.into_iter().map(String::from).collect(),
            })
    }

    proptest! {
        /// The compiled affinity answers exactly as `flotilla_api::affinity::cluster_matches`.
        #[test]
        fn compiled_affinity_equals_cluster_matches(c in arb_cluster(), a in arb_affinity()) {
            let snap = ClusterSnapshot::new([&c]);
            let compiled = CompiledAffinity::new(&a, &snap);
            prop_assert_eq!(compiled.matches(&snap.clusters()[0]), cluster_matches(&c, &a));
        }
    }
}
