//! Status aggregation (docs/semantics.md §7, §12), as pure functions: the members' Work
//! status becomes a binding's `status.aggregatedStatus` ([`aggregate`]: one item per cluster,
//! sorted by name, with applied, appliedMessage, the reflected status and its health) and the
//! `FullyApplied` condition ([`fully_applied`]). Works being deleted are left out. While a
//! member is not Ready its item keeps what it last reported but says health `Unknown`: a dead
//! copy never reads as healthy. The binding status controller writes what these decide, and
//! graceful eviction judges a new placement by the same items.

use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::json_edit::set_path;
use flotilla_api::binding::{
    AggregatedStatusItem, ResourceBindingSpec, CONDITION_FULLY_APPLIED,
    REASON_FULLY_APPLIED_SUCCESS,
};
use flotilla_api::cluster::cluster_of_execution_namespace;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::meta::{Condition, ConditionStatus};
use flotilla_api::work::{ResourceHealth, ASSIGNED_REPLICAS_ANNOTATION, CONDITION_APPLIED};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The member object a manifest status stands for: the manifest with the reported status and
/// the member object's own generation as the member reported it (`manifestStatuses[].generation`).
/// A status reported without one (a Work status written by hand) takes its observedGeneration
/// as the generation, so only then does a status read as having observed its spec.
pub fn observed_object(manifest: &Value, status: &Value, generation: Option<i64>) -> Value {
    let mut obj = manifest.clone();
    set_path(&mut obj, &["status"], status.clone());
    match generation {
        Some(g) => set_path(&mut obj, &["metadata", "generation"], json!(g)),
        None => {
            if let Some(g) = status.get("observedGeneration") {
                set_path(&mut obj, &["metadata", "generation"], g.clone());
            }
        }
    }
    obj
}

/// The aggregated status items of a binding's Works (sorted by cluster). `is_ready` answers
/// whether a cluster's Ready condition is True; the item of a cluster that is not says health
/// Unknown, whatever its Work last reported.
pub fn aggregate(
    works: &[impl std::borrow::Borrow<Value>],
    is_ready: &dyn Fn(&str) -> bool,
    assigned: &dyn Fn(&str) -> Option<i32>,
    interpreter: &dyn TemplateInterpreter,
) -> Vec<AggregatedStatusItem> {
    let mut items: Vec<AggregatedStatusItem> = works
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|w: &&Value| w.lookup("/metadata/deletionTimestamp").is_none())
        .filter_map(|w| {
            let ns = w.lookup("/metadata/namespace")?.as_str()?;
            let cluster = cluster_of_execution_namespace(ns)?.to_string();
            let applied = w
                .lookup("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == CONDITION_APPLIED));
            let is_applied = applied.is_some_and(|c| c["status"] == "True");
            let message = applied
                .and_then(|c| c["message"].as_str())
                .unwrap_or("")
                .to_string();
            if !is_applied {
                return Some(AggregatedStatusItem {
                    cluster_name: cluster,
                    status: None,
                    applied: false,
                    applied_message: message,
                    health: Some(ResourceHealth::Unknown),
                });
            }
            let reported = w.lookup("/status/manifestStatuses/0/status");
            let generation = w
                .lookup("/status/manifestStatuses/0/generation")
                .and_then(Value::as_i64);
            let observed = match (reported, w.lookup("/spec/workload/manifests/0")) {
                (Some(s), Some(m)) => Some(observed_object(m, s, generation)),
                _ => None,
            };
            // The item's status is the member object's status reflected through the
            // interpreter's rules (e.g. a Deployment's counters with its generations).
            let status = match &observed {
                Some(o) => interpreter.reflect_status(o),
                None => reported.cloned(),
            };
            // A Work written for another replica count than the binding now assigns has not
            // caught up with the placement: its health is no news of the placement's.
            let stale = w
                .lookup(&format!(
                    "/metadata/annotations/{}",
                    ASSIGNED_REPLICAS_ANNOTATION.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .and_then(|r| r.parse::<i32>().ok())
                .is_some_and(|r| assigned(&cluster).is_some_and(|a| a != r));
            let health = match &observed {
                // What a member that is not Ready last reported is no news of its health.
                _ if !is_ready(&cluster) => ResourceHealth::Unknown,
                _ if stale => ResourceHealth::Unknown,
                Some(o) => interpreter.health(o),
                None => ResourceHealth::Unknown,
            };
            Some(AggregatedStatusItem {
                cluster_name: cluster,
                status,
                applied: true,
                applied_message: message,
                health: Some(health),
            })
        })
        .collect();
    items.sort_by(|a, b| a.cluster_name.cmp(&b.cluster_name));
    items
}

/// The FullyApplied condition: every cluster the binding expects has an applied item.
pub fn fully_applied(spec: &ResourceBindingSpec, items: &[AggregatedStatusItem]) -> Condition {
    let expected = spec.existing_clusters();
    let seen: BTreeSet<&str> = items
        .iter()
        .filter(|i| i.applied)
        .map(|i| i.cluster_name.as_str())
        .collect();
    let all = !expected.is_empty()
        && expected.len() == items.len()
        && items
            .iter()
            .all(|i| i.applied && expected.contains(&i.cluster_name))
        && seen.len() == expected.len();
    if all {
        Condition::new(
            CONDITION_FULLY_APPLIED,
            ConditionStatus::True,
            REASON_FULLY_APPLIED_SUCCESS,
            "All works have been successfully applied",
        )
    } else {
        Condition::new(
            CONDITION_FULLY_APPLIED,
            ConditionStatus::False,
            "FullyAppliedFailed",
            "Some works are not applied yet",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::{work_of_web, SpecReplicas};

    #[test]
    fn items_per_cluster_with_health() {
        let works = [
            work_of_web("m2", Some(true), Some(1), false),
            work_of_web("m1", Some(true), Some(2), false),
            work_of_web("m3", Some(false), None, false),
            work_of_web("m4", None, None, false),
            work_of_web("m5", Some(true), Some(2), true),
            work_of_web("m6", Some(true), None, false),
            // Healthy as last reported, but the member is not Ready.
            work_of_web("m7", Some(true), Some(2), false),
            work_of_web("m8", Some(false), None, false),
        ];
        let ready = |c: &str| !matches!(c, "m7" | "m8");
        let items = aggregate(&works, &ready, &|_| None, &SpecReplicas);
        let got: Vec<(&str, bool, Option<ResourceHealth>, &str, bool)> = items
            .iter()
            .map(|i| {
                (
                    i.cluster_name.as_str(),
                    i.applied,
                    i.health,
                    i.applied_message.as_str(),
                    i.status.is_some(),
                )
            })
            .collect();
        use ResourceHealth::{Healthy, Unhealthy, Unknown};
        assert_eq!(
            got,
            [
                ("m1", true, Some(Healthy), "ok", true),
                ("m2", true, Some(Unhealthy), "ok", true),
                ("m3", false, Some(Unknown), "boom", false),
                ("m4", false, Some(Unknown), "", false),
                ("m6", true, Some(Unknown), "ok", false),
                // Not Ready: health Unknown, applied and the reported status kept.
                ("m7", true, Some(Unknown), "ok", true),
                ("m8", false, Some(Unknown), "boom", false),
            ]
        );
        assert_eq!(items[5].status, Some(json!({"readyReplicas": 2})));
    }

    #[test]
    fn health_is_judged_with_the_generation_the_member_reported() {
        let interpreter = crate::interpreter::Interpreter::new();
        let settled = |kind: &str| match kind {
            "DaemonSet" => {
                json!({"desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2})
            }
            _ => {
                json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2})
            }
        };
        let work = |kind: &str, generation: Option<i64>, observed: i64| {
            let mut status = settled(kind);
            status["observedGeneration"] = json!(observed);
            let mut entry = json!({"identifier": {}, "status": status});
            if let Some(g) = generation {
                entry["generation"] = json!(g);
            }
            let spec = if kind == "DaemonSet" {
                json!({})
            } else {
                json!({"replicas": 2})
            };
            json!({"metadata": {"name": "w", "namespace": "karmada-es-m1",
                                "annotations": {ASSIGNED_REPLICAS_ANNOTATION: "2"}},
                   "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": kind,
                            "metadata": {"name": "web", "namespace": "default",
                                         "annotations": {"resourcetemplate.karmada.io/generation": "7"}},
                            "spec": spec}]}},
                   "status": {"conditions": [{"type": "Applied", "status": "True"}],
                              "manifestStatuses": [entry]}})
        };
        use ResourceHealth::{Healthy, Unhealthy};
        for kind in ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"] {
            let table = [
                // generation 1, observedGeneration 2 (Karmada's case): Unhealthy.
                (Some(1), 2, Unhealthy),
                // The member object moved on to generation 3; its status still says 2.
                (Some(3), 2, Unhealthy),
                (Some(2), 2, Healthy),
                // A status written without the member's generation: observedGeneration stands in.
                (None, 2, Healthy),
            ];
            for (i, (generation, observed, want)) in table.into_iter().enumerate() {
                let items = aggregate(
                    &[work(kind, generation, observed)],
                    &|_| true,
                    &|_| Some(2),
                    &interpreter,
                );
                assert_eq!(items[0].health, Some(want), "{kind} row {i}");
            }
        }
        // The item's status is reflected: a Deployment's counters with both generations.
        let items = aggregate(
            &[work("Deployment", Some(2), 2)],
            &|_| true,
            &|_| Some(2),
            &interpreter,
        );
        let status = items[0].status.clone().unwrap_or_default();
        assert_eq!(status["generation"], 2, "{status}");
        assert_eq!(status["resourceTemplateGeneration"], 7, "{status}");
        assert_eq!(status["readyReplicas"], 2, "{status}");
    }

    #[test]
    fn fully_applied_needs_every_expected_cluster_applied() {
        let spec = |clusters: &[&str], tasks: &[(&str, &str)]| -> ResourceBindingSpec {
            serde_json::from_value(json!({
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "clusters": clusters.iter().map(|c| json!({"name": c, "replicas": 1})).collect::<Vec<_>>(),
                "gracefulEvictionTasks": tasks.iter().map(|(c, m)| json!({"fromCluster": c, "purgeMode": m, "reason": "r", "producer": "p"})).collect::<Vec<_>>(),
            }))
            .unwrap()
        };
        let item = |c: &str, applied: bool| AggregatedStatusItem {
            cluster_name: c.into(),
            status: None,
            applied,
            applied_message: String::new(),
            health: None,
        };
        let table = [
            (spec(&[], &[]), vec![], ConditionStatus::False),
            (
                spec(&["m1"], &[]),
                vec![item("m1", true)],
                ConditionStatus::True,
            ),
            (
                spec(&["m1", "m2"], &[]),
                vec![item("m1", true)],
                ConditionStatus::False,
            ),
            (
                spec(&["m1"], &[]),
                vec![item("m1", false)],
                ConditionStatus::False,
            ),
            // A graceful task's old cluster is expected too.
            (
                spec(&["m2"], &[("m1", "Graciously")]),
                vec![item("m2", true)],
                ConditionStatus::False,
            ),
            (
                spec(&["m2"], &[("m1", "Graciously")]),
                vec![item("m1", true), item("m2", true)],
                ConditionStatus::True,
            ),
            // An immediate one's is not.
            (
                spec(&["m2"], &[("m1", "Immediately")]),
                vec![item("m2", true)],
                ConditionStatus::True,
            ),
        ];
        for (i, (spec, items, want)) in table.into_iter().enumerate() {
            assert_eq!(fully_applied(&spec, &items).status, want, "row {i}");
        }
    }

    #[test]
    fn observed_objects_take_the_generation_the_member_reported() {
        let manifest = json!({"metadata": {"name": "x"}, "spec": {"replicas": 1}});
        let status = json!({"observedGeneration": 3, "readyReplicas": 1});
        let o = observed_object(&manifest, &status, Some(4));
        assert_eq!(o["metadata"]["generation"], 4);
        assert_eq!(o["status"]["readyReplicas"], 1);
        // A status written without the member's generation: its observedGeneration stands in.
        let o = observed_object(&manifest, &status, None);
        assert_eq!(o["metadata"]["generation"], 3);
    }

    #[test]
    fn observed_objects_of_malformed_manifests_do_not_panic() {
        let o = observed_object(
            &json!({"metadata": "x"}),
            &json!({"observedGeneration": 2}),
            None,
        );
        assert_eq!(o["metadata"]["generation"], 2);
        let o = observed_object(&json!([1]), &json!({"readyReplicas": 1}), Some(1));
        assert_eq!(o["status"]["readyReplicas"], 1);
    }
}
