//! What one binding asks of the scheduler, resolved once per scheduling attempt so the filters
//! and scores run per cluster without re-reading the binding: the previous result and the
//! clusters being evicted as sorted lookups, the cluster affinity in force compiled (label
//! selectors parsed once), the interned API of the resource, and the spread fields that need
//! a cluster property.

use std::collections::BTreeMap;

use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::policy::{
    ClusterAffinity, ClusterAffinityTerm, FieldSelector, Placement, SpreadByField,
};
use flotilla_api::selector::{
    LabelRequirements, LabelSelector, NodeSelectorOperator, NodeSelectorRequirement,
};

use super::snapshot::{ClusterInfo, ClusterSnapshot};

/// A label selector compiled once.
#[derive(Clone, Debug)]
enum LabelMatch {
    /// No selector: every cluster.
    Any,
    /// An invalid selector: no cluster (as Karmada's `ClusterMatches`).
    Never,
    /// The parsed requirements.
    Requirements(LabelRequirements),
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
    ) -> Self {
        let labels = match label_selector {
            None => LabelMatch::Any,
            Some(sel) => match sel.to_requirements() {
                Ok(r) => LabelMatch::Requirements(r),
                Err(_) => LabelMatch::Never,
            },
        };
        CompiledAffinity {
            labels,
            fields: field_selector.map_or(&[], |f| f.match_expressions.as_slice()),
            names,
            exclude,
        }
    }

    /// Compiles a `clusterAffinity` (or a static-weight target).
    pub fn new(affinity: &'a ClusterAffinity) -> Self {
        Self::compile(
            affinity.label_selector.as_ref(),
            affinity.field_selector.as_ref(),
            &affinity.cluster_names,
            &affinity.exclude,
        )
    }

    /// Compiles the inline affinity of a `clusterAffinities` term.
    pub fn of_term(term: &'a ClusterAffinityTerm) -> Self {
        Self::compile(
            term.label_selector.as_ref(),
            term.field_selector.as_ref(),
            &term.cluster_names,
            &term.exclude,
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
            LabelMatch::Requirements(r) => r.matches(&cluster.labels),
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
    pub fn plain(affinity: &'a ClusterAffinity) -> Self {
        AffinityTiers {
            tiers: vec![CompiledAffinity::new(affinity)],
        }
    }

    /// A `clusterAffinities` term, with its overflow tiers when `with_overflow`.
    pub fn term(term: &'a ClusterAffinityTerm, with_overflow: bool) -> Self {
        let mut tiers = vec![CompiledAffinity::of_term(term)];
        if with_overflow {
            tiers.extend(term.overflow_affinities.iter().map(|o| {
                CompiledAffinity::compile(
                    o.label_selector.as_ref(),
                    o.field_selector.as_ref(),
                    &o.cluster_names,
                    &o.exclude,
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
    /// `spec.clusters` as name → replicas.
    pub scheduled: BTreeMap<&'a str, i32>,
    /// `fromCluster` of every graceful eviction task.
    pub evicting: Vec<&'a str>,
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
        let mut scheduled = BTreeMap::new();
        for c in &spec.clusters {
            *scheduled.entry(c.name.as_str()).or_insert(0) += c.replicas;
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
                .map(|t| t.from_cluster.as_str())
                .collect(),
            affinity,
            api: snapshot.api_id(&spec.resource.api_version, &spec.resource.kind),
            spread_fields,
        }
    }

    /// True when `spec.clusters` names the cluster.
    pub fn is_scheduled(&self, name: &str) -> bool {
        self.scheduled.contains_key(name)
    }

    /// Replicas the previous result gave the cluster (0 when none).
    pub fn assigned(&self, name: &str) -> i32 {
        self.scheduled.get(name).copied().unwrap_or(0)
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
            let compiled = CompiledAffinity::new(&a);
            prop_assert_eq!(compiled.matches(&snap.clusters()[0]), cluster_matches(&c, &a));
        }
    }
}
