//! Where a pod goes: first-fit placement of its resource request (read from its spec by
//! [`flotilla_api::pod_requests`], the way the Kubernetes scheduler reads it) onto the nodes
//! that are schedulable and have room. Pure functions of (pod, nodes); the sim calls them on
//! every tick for pending pods.

use std::collections::BTreeMap;

use flotilla_api::quantity::{add_lists, Quantity, ResourceList};

/// Resource name of the pod count.
pub const PODS: &str = "pods";

/// A node as placement sees it: what it offers, whether it takes new pods, what is used.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeUsage {
    /// Node name.
    pub name: String,
    /// Allocatable resources (`pods` included).
    pub allocatable: ResourceList,
    /// Cordoned: takes no new pods unless they are pinned to it.
    pub unschedulable: bool,
    /// Requests of the unfinished pods on it, `pods` counting them.
    pub used: ResourceList,
}

/// Why a pod was not placed on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Misfit {
    Unschedulable,
    NotPinned,
    Insufficient,
}

/// Outcome of [`place`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Placed on this node (its usage was updated).
    Node(String),
    /// Nowhere fits; the message reads like the scheduler's.
    Unschedulable(String),
}

/// The request with the pod itself counted as one `pods`.
pub fn with_pod_count(request: &ResourceList) -> ResourceList {
    let mut r = request.clone();
    r.insert(PODS.to_string(), Quantity::from_units(1));
    r
}

/// Places a pod requesting `request` on the first node (in order) that is schedulable and has
/// room, or on `pinned` only (schedulable or not) when given, and adds the request to that
/// node's usage.
pub fn place(request: &ResourceList, pinned: Option<&str>, nodes: &mut [NodeUsage]) -> Placement {
    let need = with_pod_count(request);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for node in nodes.iter_mut() {
        let misfit = match pinned {
            Some(p) if p != node.name => Some((Misfit::NotPinned, Vec::new())),
            None if node.unschedulable => Some((Misfit::Unschedulable, Vec::new())),
            _ => {
                let short = insufficient(&need, node);
                (!short.is_empty()).then_some((Misfit::Insufficient, short))
            }
        };
        match misfit {
            None => {
                node.used = add_lists(&node.used, &need);
                return Placement::Node(node.name.clone());
            }
            Some((Misfit::Unschedulable, _)) => {
                *reasons
                    .entry("node(s) were unschedulable".into())
                    .or_default() += 1
            }
            Some((Misfit::NotPinned, _)) => {
                *reasons
                    .entry("node(s) didn't match Pod's node affinity/selector".into())
                    .or_default() += 1
            }
            Some((Misfit::Insufficient, short)) => {
                for r in short {
                    let reason = if r == PODS {
                        "Too many pods".to_string()
                    } else {
                        format!("Insufficient {r}")
                    };
                    *reasons.entry(reason).or_default() += 1;
                }
            }
        }
    }
    let detail: Vec<String> = reasons
        .iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    let mut message = format!("0/{} nodes are available", nodes.len());
    if !detail.is_empty() {
        message.push_str(": ");
        message.push_str(&detail.join(", "));
    }
    message.push('.');
    Placement::Unschedulable(message)
}

/// The resources of `need` that do not fit in the node's free room.
fn insufficient(need: &ResourceList, node: &NodeUsage) -> Vec<String> {
    need.iter()
        .filter(|(_, q)| q.milli_value() > 0)
        .filter(|(name, q)| {
            let used = node.used.get(*name).map_or(0, Quantity::milli_value);
            let alloc = node.allocatable.get(*name).map_or(0, Quantity::milli_value);
            used.saturating_add(q.milli_value()) > alloc
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// True when the node's usage exceeds what it offers (after a capacity cut).
pub fn overcommitted(node: &NodeUsage) -> bool {
    node.used.iter().any(|(name, q)| {
        q.milli_value() > node.allocatable.get(name).map_or(0, Quantity::milli_value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::pod_requests::pod_requests_skipping_unreadable as pod_requests;
    use serde_json::json;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    fn node(name: &str, cpu: &str, mem: &str, pods: &str, unschedulable: bool) -> NodeUsage {
        NodeUsage {
            name: name.into(),
            allocatable: list(&[("cpu", cpu), ("memory", mem), ("pods", pods)]),
            unschedulable,
            used: ResourceList::new(),
        }
    }

    #[test]
    fn requests_are_read_like_the_scheduler() {
        let cases = [
            (json!({"containers": [{"name": "a"}]}), list(&[])),
            (
                json!({"containers": [
                    {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"resources": {"requests": {"cpu": 1}}}]}),
                list(&[("cpu", "1250m"), ("memory", "64Mi")]),
            ),
            (
                json!({"containers": [{"resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                                                     "requests": {"memory": "512Mi"}}}]}),
                list(&[("cpu", "2"), ("memory", "512Mi")]),
            ),
            (
                json!({"containers": [{"resources": {"requests": {"cpu": "100m"}}}],
                       "initContainers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}),
                list(&[("cpu", "500m"), ("memory", "1Gi")]),
            ),
            (json!({"containers": "nonsense"}), list(&[])),
        ];
        for (spec, want) in cases {
            assert_eq!(pod_requests(&spec), want, "{spec}");
        }
    }

    #[test]
    fn first_fit_by_requests() {
        struct Case {
            name: &'static str,
            nodes: Vec<NodeUsage>,
            pods: Vec<(ResourceList, Option<&'static str>)>,
            want: Vec<Result<&'static str, &'static str>>,
        }
        let cpu = |c: &str| list(&[("cpu", c)]);
        let cases = vec![
            Case {
                name: "fills the first node, then the next",
                nodes: vec![node("n0", "2", "4Gi", "110", false), node("n1", "2", "4Gi", "110", false)],
                pods: vec![(cpu("1500m"), None), (cpu("1"), None), (cpu("500m"), None)],
                want: vec![Ok("n0"), Ok("n1"), Ok("n0")],
            },
            Case {
                name: "too big for any node",
                nodes: vec![node("n0", "2", "4Gi", "110", false), node("n1", "2", "4Gi", "110", false)],
                pods: vec![(cpu("3"), None)],
                want: vec![Err("0/2 nodes are available: 2 Insufficient cpu.")],
            },
            Case {
                name: "cordoned nodes take nothing",
                nodes: vec![node("n0", "2", "4Gi", "110", true), node("n1", "2", "4Gi", "110", true)],
                pods: vec![(cpu("1"), None)],
                want: vec![Err("0/2 nodes are available: 2 node(s) were unschedulable.")],
            },
            Case {
                name: "pinned pods ignore cordon but not capacity",
                nodes: vec![node("n0", "2", "4Gi", "110", true), node("n1", "1", "4Gi", "110", true)],
                pods: vec![(cpu("1"), Some("n1")), (cpu("1"), Some("n1"))],
                want: vec![
                    Ok("n1"),
                    Err("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."),
                ],
            },
            Case {
                name: "pod count limits",
                nodes: vec![node("n0", "8", "4Gi", "1", false)],
                pods: vec![(list(&[]), None), (list(&[]), None)],
                want: vec![Ok("n0"), Err("0/1 nodes are available: 1 Too many pods.")],
            },
            Case {
                name: "memory and a resource nodes lack",
                nodes: vec![node("n0", "8", "1Gi", "110", false)],
                pods: vec![(list(&[("memory", "2Gi")]), None), (list(&[("nvidia.com/gpu", "1")]), None)],
                want: vec![
                    Err("0/1 nodes are available: 1 Insufficient memory."),
                    Err("0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
                ],
            },
        ];
        for case in cases {
            let mut nodes = case.nodes;
            let got: Vec<_> = case
                .pods
                .iter()
                .map(|(req, pinned)| match place(req, *pinned, &mut nodes) {
                    Placement::Node(n) => Ok(n),
                    Placement::Unschedulable(m) => Err(m),
                })
                .collect();
            let want: Vec<_> = case
                .want
                .iter()
                .map(|w| w.map(str::to_string).map_err(str::to_string))
                .collect();
            assert_eq!(got, want, "{}", case.name);
        }
    }

    #[test]
    fn overcommit_is_seen() {
        let mut n = node("n0", "1", "1Gi", "110", false);
        assert!(!overcommitted(&n));
        n.used = list(&[("cpu", "1"), ("pods", "1")]);
        assert!(!overcommitted(&n));
        n.used = list(&[("cpu", "1001m")]);
        assert!(overcommitted(&n));
    }
}
