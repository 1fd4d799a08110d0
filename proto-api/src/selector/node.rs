//! Node-selector requirements (`corev1.NodeSelectorRequirement`): the expression type of
//! Karmada's cluster `fieldSelector`, matched against a map of field values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Operators of a node-selector requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeSelectorOperator {
    /// Value in the set.
    In,
    /// Absent, or value not in the set.
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
    /// Integer value greater than the single given value.
    Gt,
    /// Integer value less than the single given value.
    Lt,
}

/// One requirement: `key operator values`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// Field or label key.
    pub key: String,
    /// Comparison.
    pub operator: NodeSelectorOperator,
    /// Values; one integer for `Gt`/`Lt`, none for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// True when `fields` satisfy the requirement. Malformed requirements (wrong number of
    /// values, non-integer `Gt`/`Lt`) match nothing.
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        let value = fields.get(&self.key);
        let has = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            NodeSelectorOperator::In => !self.values.is_empty() && value.is_some_and(has),
            NodeSelectorOperator::NotIn => !self.values.is_empty() && value.is_none_or(|v| !has(v)),
            NodeSelectorOperator::Exists => self.values.is_empty() && value.is_some(),
            NodeSelectorOperator::DoesNotExist => self.values.is_empty() && value.is_none(),
            NodeSelectorOperator::Gt | NodeSelectorOperator::Lt => {
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let (Ok(bound), Some(Ok(v))) =
                    (bound.parse::<i64>(), value.map(|v| v.parse::<i64>()))
                else {
                    return false;
                };
                if self.operator == NodeSelectorOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeSelectorOperator::*;

    #[test]
    fn matching_table() {
        let fields: BTreeMap<String, String> = [("provider", "aws"), ("size", "5")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let req = |key: &str, operator, values: &[&str]| NodeSelectorRequirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let cases = [
            (req("provider", In, &["aws", "gcp"]), true),
            (req("provider", In, &["gcp"]), false),
            (req("region", In, &["eu"]), false),
            (req("provider", NotIn, &["gcp"]), true),
            (req("region", NotIn, &["eu"]), true),
            (req("provider", NotIn, &["aws"]), false),
            (req("provider", Exists, &[]), true),
            (req("region", DoesNotExist, &[]), true),
            (req("size", Gt, &["4"]), true),
            (req("size", Lt, &["4"]), false),
            (req("size", Gt, &["x"]), false),
            (req("provider", Gt, &["1"]), false),
            (req("provider", In, &[]), false),
        ];
        for (r, want) in cases {
            assert_eq!(r.matches(&fields), want, "{r:?}");
        }
    }
}
