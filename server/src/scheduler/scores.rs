//! How much a feasible cluster is preferred (docs/semantics.md §8.2 step 4): the score
//! plugins, summed. ClusterLocality gives 100 to a cluster the binding already runs on (so
//! rescheduling keeps it where it is); ClusterAffinity contributes 0. Scores order the
//! candidates before spread selection (§8.3).

use super::context::BindingContext;
use super::snapshot::ClusterInfo;

/// Karmada's maximum cluster score.
pub const MAX_CLUSTER_SCORE: i64 = 100;
/// Karmada's minimum cluster score.
pub const MIN_CLUSTER_SCORE: i64 = 0;

/// A score plugin.
pub trait Score: Sync {
    /// Plugin name, as Karmada's registry spells it.
    fn name(&self) -> &'static str;
    /// The cluster's score for the binding.
    fn score(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> i64;
}

/// ClusterLocality: 100 when the cluster is in a non-empty `spec.clusters`.
pub struct ClusterLocality;

impl Score for ClusterLocality {
    fn name(&self) -> &'static str {
        "ClusterLocality"
    }
    fn score(&self, binding: &BindingContext<'_>, cluster: &ClusterInfo) -> i64 {
        if binding.is_scheduled(cluster) {
            MAX_CLUSTER_SCORE
        } else {
            MIN_CLUSTER_SCORE
        }
    }
}

/// ClusterAffinity: always the minimum score (the filter does the work).
pub struct ClusterAffinityScore;

impl Score for ClusterAffinityScore {
    fn name(&self) -> &'static str {
        "ClusterAffinity"
    }
    fn score(&self, _: &BindingContext<'_>, _: &ClusterInfo) -> i64 {
        MIN_CLUSTER_SCORE
    }
}

/// The score plugins.
pub const SCORES: [&dyn Score; 2] = [&ClusterLocality, &ClusterAffinityScore];

/// The sum of every plugin's score.
pub fn total_score(binding: &BindingContext<'_>, cluster: &ClusterInfo) -> i64 {
    SCORES.iter().map(|s| s.score(binding, cluster)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::context::AffinityTiers;
    use crate::scheduler::snapshot::ClusterSnapshot;
    use flotilla_api::binding::{ResourceBindingSpec, TargetCluster};
    use flotilla_api::cluster::{Cluster, ClusterSpec};
    use flotilla_api::policy::Placement;

    #[test]
    fn locality_scores_current_clusters() {
        let a = Cluster::new("a", ClusterSpec::default());
        let b = Cluster::new("b", ClusterSpec::default());
        let snap = ClusterSnapshot::new([&a, &b]);
        let placement = Placement::default();
        let table: [(&[&str], [i64; 2]); 3] =
            [(&[], [0, 0]), (&["a"], [100, 0]), (&["a", "b"], [100, 100])];
        for (scheduled, want) in table {
            let spec = ResourceBindingSpec {
                clusters: scheduled.iter().map(|n| TargetCluster::new(n, 1)).collect(),
                ..Default::default()
            };
            let ctx = BindingContext::new(&spec, &placement, AffinityTiers::none(), &snap);
            let got = [
                total_score(&ctx, &snap.clusters()[0]),
                total_score(&ctx, &snap.clusters()[1]),
            ];
            assert_eq!(got, want, "{scheduled:?}");
        }
    }
}
