//! What the member's nodes offer and its pods use, as Karmada's cluster status controller
//! counts them (`getNodeSummary`, `getResourceSummary`):
//!
//! - nodes: total, and ready by their `Ready` condition;
//! - allocatable: Σ `node.status.allocatable`;
//! - allocated: Σ requests of the pods bound to a node (`spec.nodeName`) that have not
//!   finished (phase neither `Succeeded` nor `Failed`), plus their count as `pods`;
//! - allocating: Σ requests of the pods not bound yet, plus their count as `pods`.
//!
//! A pod's requests are read as the scheduler reads them
//! ([`flotilla_api::pod_requests`]: containers, init and sidecar containers, overhead). The node and pod caches
//! keep only what these functions read ([`trim_node`], [`trim_pod`]), so a member with many
//! pods costs little memory.

use flotilla_api::cluster::{NodeSummary, ResourceSummary};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::quantity::{add_lists, sum_lists, Quantity, ResourceList};
use serde_json::{Map, Value};

use flotilla_api::pod_requests::pod_requests_skipping_unreadable;

use crate::sim::placement::{with_pod_count, PODS};

/// Total and ready nodes.
pub fn node_summary<'a>(nodes: impl IntoIterator<Item = &'a Value>) -> NodeSummary {
    let (mut total, mut ready) = (0i32, 0i32);
    for node in nodes {
        total = total.saturating_add(1);
        if node_ready(node) {
            ready = ready.saturating_add(1);
        }
    }
    NodeSummary {
        total_num: total,
        ready_num: ready,
    }
}

/// Whether a node's `Ready` condition is `True`.
pub fn node_ready(node: &Value) -> bool {
    node.lookup("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Allocatable, allocated and allocating resources of these nodes and pods.
pub fn resource_summary<'a>(
    nodes: impl IntoIterator<Item = &'a Value>,
    pods: impl IntoIterator<Item = &'a Value>,
) -> ResourceSummary {
    let allocatable: Vec<ResourceList> = nodes.into_iter().map(allocatable_of).collect();
    let zero = || -> ResourceList {
        ["cpu", "memory", PODS]
            .into_iter()
            .map(|n| (n.to_string(), Quantity::from_units(0)))
            .collect()
    };
    let (mut allocated, mut allocating) = (zero(), zero());
    for pod in pods {
        let phase = pod.lookup("/status/phase").and_then(Value::as_str);
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let need = with_pod_count(&pod_requests_skipping_unreadable(
            pod.get("spec").unwrap_or(&Value::Null),
        ));
        let bound = pod
            .lookup("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if bound {
            allocated = add_lists(&allocated, &need);
        } else {
            allocating = add_lists(&allocating, &need);
        }
    }
    ResourceSummary {
        allocatable: crate::sim::state::pretty_list(sum_lists(&allocatable)),
        allocating: crate::sim::state::pretty_list(allocating),
        allocated: crate::sim::state::pretty_list(allocated),
        allocatable_modelings: Vec::new(),
    }
}

fn allocatable_of(node: &Value) -> ResourceList {
    node.lookup("/status/allocatable")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| quantity(v).map(|q| (k.clone(), q)))
                .collect()
        })
        .unwrap_or_default()
}

fn quantity(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

/// What the node cache keeps of a node's fields besides metadata: `status.allocatable` and
/// `status.conditions`.
pub fn trim_node(data: &mut Value) {
    keep(data, &[("status", &["allocatable", "conditions"])]);
}

/// What the pod cache keeps of a pod's fields besides metadata: the containers' and init
/// containers' resources, the init containers' restart policies, `spec.overhead`,
/// `spec.nodeName`, `status.phase`.
pub fn trim_pod(data: &mut Value) {
    keep(
        data,
        &[
            (
                "spec",
                &["containers", "initContainers", "nodeName", "overhead"],
            ),
            ("status", &["phase"]),
        ],
    );
    // An init container's restart policy says whether it is a sidecar (counted beside the
    // app containers).
    for (list, fields) in [
        ("containers", &["resources"][..]),
        ("initContainers", &["resources", "restartPolicy"][..]),
    ] {
        if let Some(Value::Array(cs)) = data.get_mut("spec").and_then(|s| s.get_mut(list)) {
            for c in cs.iter_mut() {
                keep_fields(c, fields);
            }
        }
    }
}

/// Keeps only the named top-level objects and, inside each, the named fields.
fn keep(data: &mut Value, wanted: &[(&str, &[&str])]) {
    let Some(root) = data.as_object_mut() else {
        return;
    };
    root.retain(|k, _| wanted.iter().any(|(w, _)| w == k));
    for (name, fields) in wanted {
        if let Some(v) = root.get_mut(*name) {
            keep_fields(v, fields);
        }
    }
}

fn keep_fields(v: &mut Value, fields: &[&str]) {
    match v.as_object_mut() {
        Some(m) => m.retain(|k, _| fields.contains(&k.as_str())),
        None => *v = Value::Object(Map::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: Option<&str>, allocatable: Value) -> Value {
        let conditions = match ready {
            Some(s) => {
                json!([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": s}])
            }
            None => json!([]),
        };
        json!({"metadata": {"name": "n"}, "status": {"allocatable": allocatable, "conditions": conditions}})
    }

    fn pod(node: Option<&str>, phase: &str, cpu: &str, memory: &str) -> Value {
        let mut spec = json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        json!({"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}})
    }

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap_or_default()))
            .collect()
    }

    #[test]
    fn nodes_are_counted_by_their_ready_condition() {
        let table = [
            (vec![], (0, 0)),
            (vec![node(Some("True"), json!({}))], (1, 1)),
            (
                vec![
                    node(Some("True"), json!({})),
                    node(Some("False"), json!({})),
                    node(Some("Unknown"), json!({})),
                    node(None, json!({})),
                    json!({"metadata": {"name": "bare"}}),
                ],
                (5, 1),
            ),
        ];
        for (i, (nodes, (total, ready))) in table.into_iter().enumerate() {
            let got = node_summary(&nodes);
            assert_eq!((got.total_num, got.ready_num), (total, ready), "row {i}");
        }
    }

    #[test]
    fn resources_are_summed_as_karmada_does() {
        let nodes = vec![
            node(
                Some("True"),
                json!({"cpu": "4", "memory": "16Gi", "pods": "110"}),
            ),
            // A NotReady node still counts towards allocatable, as in Karmada.
            node(
                Some("False"),
                json!({"cpu": "3500m", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "1"}),
            ),
        ];
        let table = [
            (
                "no pods",
                vec![],
                list(&[("cpu", "0"), ("memory", "0"), ("pods", "0")]),
                list(&[("cpu", "0"), ("memory", "0"), ("pods", "0")]),
            ),
            (
                "bound, pending, finished",
                vec![
                    pod(Some("n1"), "Running", "500m", "1Gi"),
                    pod(Some("n2"), "Pending", "250m", "512Mi"),
                    pod(Some("n1"), "Succeeded", "8", "64Gi"),
                    pod(Some("n1"), "Failed", "8", "64Gi"),
                    pod(None, "Pending", "1", "2Gi"),
                    pod(Some(""), "Pending", "100m", "0"),
                ],
                list(&[("cpu", "750m"), ("memory", "1536Mi"), ("pods", "2")]),
                list(&[("cpu", "1100m"), ("memory", "2Gi"), ("pods", "2")]),
            ),
        ];
        for (what, pods, allocated, allocating) in table {
            let got = resource_summary(&nodes, &pods);
            assert_eq!(
                got.allocatable,
                list(&[
                    ("cpu", "7500m"),
                    ("memory", "24Gi"),
                    ("pods", "220"),
                    ("nvidia.com/gpu", "1")
                ]),
                "{what}"
            );
            assert_eq!(got.allocated, allocated, "{what}");
            assert_eq!(got.allocating, allocating, "{what}");
        }
        // Memory reads with a binary suffix, as the sim reports it.
        let got = resource_summary(&nodes, &[]);
        assert_eq!(got.allocatable["memory"].as_str(), "24Gi");
    }

    #[test]
    fn caches_keep_only_what_is_summed() {
        let mut p = json!({
            "spec": {"nodeName": "n1", "serviceAccountName": "sa", "volumes": [{"name": "v"}],
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}],
                    "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": []},
        });
        trim_pod(&mut p);
        assert_eq!(
            p,
            json!({"spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Running"}})
        );
        let mut n = json!({"spec": {"podCIDR": "x"}, "status": {"allocatable": {"cpu": "1"},
            "capacity": {"cpu": "2"}, "images": [1, 2, 3], "conditions": []}});
        trim_node(&mut n);
        assert_eq!(
            n,
            json!({"status": {"allocatable": {"cpu": "1"}, "conditions": []}})
        );
    }
}
