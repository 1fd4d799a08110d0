//! Whether a cluster satisfies a policy's cluster affinity (Karmada's `ClusterMatches`):
//! exclusions, the label selector over cluster labels, the field selector over provider,
//! region and zones, and the name list — all of which must hold.

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::policy::ClusterAffinity;
use crate::selector::{NodeSelectorOperator, NodeSelectorRequirement};

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

/// True when `cluster` satisfies `affinity`. An empty affinity matches every cluster; an
/// invalid label selector matches none.
pub fn cluster_matches(cluster: &Cluster, affinity: &ClusterAffinity) -> bool {
    let name = &cluster.metadata.name;
    if affinity.exclude.iter().any(|n| n == name) {
        return false;
    }
    if let Some(sel) = &affinity.label_selector {
        if !sel.matches(&cluster.metadata.labels) {
            return false;
        }
    }
    if let Some(fs) = &affinity.field_selector {
        let mut fields = BTreeMap::new();
        if !cluster.spec.provider.is_empty() {
            fields.insert("provider".to_string(), cluster.spec.provider.clone());
        }
        if !cluster.spec.region.is_empty() {
            fields.insert("region".to_string(), cluster.spec.region.clone());
        }
        let ok = fs.match_expressions.iter().all(|req| {
            if req.key == "zone" {
                zones_match(req, &cluster.spec.zones)
            } else {
                req.matches(&fields)
            }
        });
        if !ok {
            return false;
        }
    }
    affinity.cluster_names.is_empty() || affinity.cluster_names.iter().any(|n| n == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterSpec;
    use crate::policy::FieldSelector;
    use crate::selector::LabelSelector;

    fn cluster(name: &str, provider: &str, region: &str, zones: &[&str]) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                provider: provider.into(),
                region: region.into(),
                zones: zones.iter().map(|z| z.to_string()).collect(),
                ..Default::default()
            },
        );
        c.metadata.labels.insert("env".into(), "prod".into());
        c
    }

    fn fields(key: &str, op: NodeSelectorOperator, values: &[&str]) -> ClusterAffinity {
        ClusterAffinity {
            field_selector: Some(FieldSelector {
                match_expressions: vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: op,
                    values: values.iter().map(|v| v.to_string()).collect(),
                }],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cluster_matches_table() {
        use NodeSelectorOperator::*;
        let m1 = cluster("member1", "aws", "eu", &["eu-1a", "eu-1b"]);
        let bare = cluster("member2", "", "", &[]);
        let names = |v: &[&str]| ClusterAffinity {
            cluster_names: v.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let cases: Vec<(&str, &Cluster, ClusterAffinity, bool)> = vec![
            ("empty", &m1, ClusterAffinity::default(), true),
            ("names hit", &m1, names(&["member1", "x"]), true),
            ("names miss", &m1, names(&["x"]), false),
            (
                "excluded",
                &m1,
                ClusterAffinity {
                    exclude: vec!["member1".into()],
                    ..names(&["member1"])
                },
                false,
            ),
            (
                "labels",
                &m1,
                ClusterAffinity {
                    label_selector: Some(LabelSelector::from_labels([("env", "prod")])),
                    ..Default::default()
                },
                true,
            ),
            (
                "labels miss",
                &m1,
                ClusterAffinity {
                    label_selector: Some(LabelSelector::from_labels([("env", "dev")])),
                    ..Default::default()
                },
                false,
            ),
            ("provider in", &m1, fields("provider", In, &["aws"]), true),
            (
                "provider in miss",
                &m1,
                fields("provider", In, &["gcp"]),
                false,
            ),
            ("region notin", &m1, fields("region", NotIn, &["us"]), true),
            (
                "empty region notin",
                &bare,
                fields("region", NotIn, &["us"]),
                true,
            ),
            (
                "empty region in",
                &bare,
                fields("region", In, &["us"]),
                false,
            ),
            ("zone in", &m1, fields("zone", In, &["eu-1b", "x"]), true),
            ("zone in miss", &m1, fields("zone", In, &["x"]), false),
            (
                "zone in, no zones",
                &bare,
                fields("zone", In, &["x"]),
                false,
            ),
            ("zone notin", &m1, fields("zone", NotIn, &["eu-1a"]), false),
            (
                "zone notin, no zones",
                &bare,
                fields("zone", NotIn, &["x"]),
                true,
            ),
            ("zone exists", &m1, fields("zone", Exists, &[]), true),
            (
                "zone doesnotexist",
                &bare,
                fields("zone", DoesNotExist, &[]),
                true,
            ),
            ("zone gt", &m1, fields("zone", Gt, &["1"]), false),
            (
                "unknown key",
                &m1,
                fields("metadata.name", In, &["member1"]),
                false,
            ),
        ];
        for (name, c, aff, want) in cases {
            assert_eq!(cluster_matches(c, &aff), want, "{name}");
        }
    }
}
