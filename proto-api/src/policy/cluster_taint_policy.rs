//! `policy.karmada.io/v1alpha1` ClusterTaintPolicy (cluster-scoped): user-declared rules that
//! taint the clusters it targets when their status conditions match `addOnConditions` and
//! untaint them when they match `removeOnConditions` (docs/semantics.md §4.2). Also the one
//! question the controller asks of a cluster: do its conditions match a list of
//! [`MatchCondition`]s ([`conditions_match`]).

use serde::{Deserialize, Serialize};

use crate::cluster::{Taint, TaintEffect};
use crate::meta::{impl_object, Condition, ConditionStatus, ObjectMeta, Time};
use crate::policy::{ClusterAffinity, POLICY_API_VERSION};

/// Kind name of ClusterTaintPolicy.
pub const CLUSTER_TAINT_POLICY_KIND: &str = "ClusterTaintPolicy";

/// A cluster-scoped rule set: which clusters, on which conditions, which taints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterTaintPolicy {
    /// `policy.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `ClusterTaintPolicy`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata; `creationTimestamp` orders policies when several touch one cluster.
    pub metadata: ObjectMeta,
    /// The rules.
    pub spec: ClusterTaintPolicySpec,
}

impl_object!(
    ClusterTaintPolicy,
    POLICY_API_VERSION,
    CLUSTER_TAINT_POLICY_KIND
);

impl ClusterTaintPolicy {
    /// A policy with `apiVersion` and `kind` filled in.
    pub fn new(name: &str, spec: ClusterTaintPolicySpec) -> Self {
        ClusterTaintPolicy {
            api_version: POLICY_API_VERSION.to_string(),
            kind: CLUSTER_TAINT_POLICY_KIND.to_string(),
            metadata: ObjectMeta::named("", name),
            spec,
        }
    }
}

/// `spec` of a ClusterTaintPolicy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterTaintPolicySpec {
    /// The clusters the policy looks at; `None` = every cluster. A cluster that stops
    /// matching keeps its taints as they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_clusters: Option<ClusterAffinity>,
    /// All must match (ANDed) for the taints to be added; empty = never add.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add_on_conditions: Vec<MatchCondition>,
    /// All must match (ANDed) for the taints to be removed; empty = never remove. Evaluated
    /// after `addOnConditions`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove_on_conditions: Vec<MatchCondition>,
    /// The taints added or removed (at least one; (key, effect) pairs unique).
    pub taints: Vec<PolicyTaint>,
}

/// One condition test: the cluster's condition of type `conditionType` has (`In`) or has not
/// (`NotIn`) one of `statusValues`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    /// A `status.conditions[].type` of the Cluster (Ready, or any a third party reports).
    pub condition_type: String,
    /// In or NotIn.
    pub operator: MatchConditionOperator,
    /// Condition statuses (True, False, Unknown).
    pub status_values: Vec<ConditionStatus>,
}

/// Operator of a [`MatchCondition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatchConditionOperator {
    /// The condition's status is one of the values.
    In,
    /// The condition's status is none of the values.
    NotIn,
}

impl MatchCondition {
    /// Whether `conditions` satisfy this test. A condition type the cluster does not report
    /// matches neither `In` nor `NotIn`.
    pub fn matches(&self, conditions: &[Condition]) -> bool {
        let Some(c) = conditions.iter().find(|c| c.type_ == self.condition_type) else {
            return false;
        };
        let listed = self.status_values.contains(&c.status);
        match self.operator {
            MatchConditionOperator::In => listed,
            MatchConditionOperator::NotIn => !listed,
        }
    }
}

/// Whether every test of `tests` holds on `conditions`; an empty list never matches.
pub fn conditions_match(conditions: &[Condition], tests: &[MatchCondition]) -> bool {
    !tests.is_empty() && tests.iter().all(|t| t.matches(conditions))
}

/// A taint a policy manages (no `timeAdded`: that is stamped when it lands on a cluster).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTaint {
    /// Taint key.
    pub key: String,
    /// Effect: NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: TaintEffect,
    /// Taint value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
}

impl PolicyTaint {
    /// True when `taint` has this taint's key and effect.
    pub fn same_identity(&self, taint: &Taint) -> bool {
        self.key == taint.key && self.effect == taint.effect
    }

    /// The cluster taint this becomes when added at `now`.
    pub fn to_taint(&self, now: Time) -> Taint {
        Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: self.effect,
            time_added: Some(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_names_match_karmada() {
        let json = json!({
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "ClusterTaintPolicy",
            "metadata": {"name": "detect-not-ready"},
            "spec": {
                "targetClusters": {"clusterNames": ["member1"]},
                "addOnConditions": [{"conditionType": "Ready", "operator": "NotIn",
                                     "statusValues": ["True"]}],
                "removeOnConditions": [{"conditionType": "Ready", "operator": "In",
                                        "statusValues": ["True"]}],
                "taints": [{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"},
                           {"key": "example.com/x", "effect": "NoSchedule", "value": "v"}]
            }
        });
        let p: ClusterTaintPolicy = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            p.spec.add_on_conditions[0].operator,
            MatchConditionOperator::NotIn
        );
        assert_eq!(p.spec.taints[0].effect, TaintEffect::NoExecute);
        assert_eq!(serde_json::to_value(&p).unwrap(), json);
    }

    #[test]
    fn condition_tests() {
        use ConditionStatus::{False, True, Unknown};
        use MatchConditionOperator::{In, NotIn};
        let conds = vec![
            Condition::new("Ready", False, "r", ""),
            Condition::new("NetworkOK", True, "r", ""),
        ];
        let t = |ty: &str, op, values: &[ConditionStatus]| MatchCondition {
            condition_type: ty.into(),
            operator: op,
            status_values: values.to_vec(),
        };
        // (tests, want)
        let table = [
            (vec![t("Ready", In, &[False])], true),
            (vec![t("Ready", In, &[True, Unknown])], false),
            (vec![t("Ready", NotIn, &[True])], true),
            (vec![t("Ready", NotIn, &[False])], false),
            // An absent condition type matches neither In nor NotIn.
            (vec![t("DiskOK", In, &[False])], false),
            (vec![t("DiskOK", NotIn, &[True])], false),
            // ANDed.
            (
                vec![t("Ready", In, &[False]), t("NetworkOK", In, &[True])],
                true,
            ),
            (
                vec![t("Ready", In, &[False]), t("NetworkOK", In, &[False])],
                false,
            ),
            // Empty never matches.
            (vec![], false),
        ];
        for (i, (tests, want)) in table.into_iter().enumerate() {
            assert_eq!(conditions_match(&conds, &tests), want, "row {i}");
        }
    }
}
