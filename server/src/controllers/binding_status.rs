//! Status aggregation (karmada-semantics.md §7, §12): the members' Work status becomes the
//! binding's `status.aggregatedStatus` — one item per cluster, sorted by name, with applied,
//! appliedMessage, the reflected status and its health (Healthy, Unhealthy, or Unknown when not
//! applied or not interpretable) — and the `FullyApplied` condition; the interpreter then folds
//! the items into the template's own status (e.g. a Deployment's summed readyReplicas).
//! Works being deleted are left out.

use super::binding_keys::{binding_key, decode, live_binding, owned_works, LiveBinding};
use super::binding_works::BindingController;
use super::interpretation::TemplateInterpreter;
use super::json_edit::set_path;
use super::runtime::{Action, ReconcileError, Reconciler};
use crate::api::registry::Registry;
use crate::clock::SharedClock;
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use flotilla_api::binding::{
    AggregatedStatusItem, ResourceBindingSpec, CONDITION_FULLY_APPLIED,
    REASON_FULLY_APPLIED_SUCCESS,
};
use flotilla_api::cluster::cluster_of_execution_namespace;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus};
use flotilla_api::work::{ResourceHealth, CONDITION_APPLIED};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The member object a manifest status stands for: the manifest with the reported status
/// (and, as members report no generation, the status's observedGeneration as generation).
pub fn observed_object(manifest: &Value, status: &Value) -> Value {
    let mut obj = manifest.clone();
    set_path(&mut obj, &["status"], status.clone());
    if let Some(g) = status.get("observedGeneration") {
        set_path(&mut obj, &["metadata", "generation"], g.clone());
    }
    obj
}

/// The aggregated status items of a binding's Works (sorted by cluster).
pub fn aggregate(
    works: &[Value],
    interpreter: &dyn TemplateInterpreter,
) -> Vec<AggregatedStatusItem> {
    let mut items: Vec<AggregatedStatusItem> = works
        .iter()
        .filter(|w| w.pointer("/metadata/deletionTimestamp").is_none())
        .filter_map(|w| {
            let ns = w.pointer("/metadata/namespace")?.as_str()?;
            let cluster = cluster_of_execution_namespace(ns)?.to_string();
            let applied = w
                .pointer("/status/conditions")
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
            let status = w.pointer("/status/manifestStatuses/0/status").cloned();
            let health = match (&status, w.pointer("/spec/workload/manifests/0")) {
                (Some(s), Some(m)) => interpreter.health(&observed_object(m, s)),
                _ => ResourceHealth::Unknown,
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

/// The controller.
pub struct BindingStatusController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    registry: Arc<Registry>,
    interpreter: Arc<dyn TemplateInterpreter>,
}

impl BindingStatusController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        registry: Arc<Registry>,
        interpreter: Arc<dyn TemplateInterpreter>,
    ) -> Self {
        Self {
            store,
            clock,
            registry,
            interpreter,
        }
    }

    /// Keys are the binding controller's (`rb|ns|name`, `crb|name`).
    pub fn keys(obj: &Value) -> Vec<String> {
        if obj.get("kind").and_then(Value::as_str) == Some("Work") {
            BindingController::work_key(obj)
        } else {
            binding_key(obj).into_iter().collect()
        }
    }
}

/// The binding status controller as the server runs it: bindings and every status change of their Works, a burst at a time (`status_coalesce`).
pub fn controller(
    ctx: &super::context::ControllerContext,
) -> Result<super::runtime::Controller, super::context::WiringError> {
    use super::runtime::{Controller, ControllerConfig, Source};
    let reconciler = BindingStatusController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.registry.clone(),
        ctx.interpreter.clone(),
    );
    let mut sources = super::binding_works::binding_sources();
    sources.push(Source::mapped(
        flotilla_api::kinds::well_known::works(),
        BindingController::work_key,
    ));
    let sources = sources
        .into_iter()
        .map(|s| s.coalesced(ctx.settings.status_coalesce))
        .collect();
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

#[async_trait]
impl Reconciler for BindingStatusController {
    fn name(&self) -> &'static str {
        "binding-status"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding {
            rt,
            object: binding,
        }) = live_binding(self.store.as_ref(), key).await?
        else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&binding["spec"], key)?;
        let works = owned_works(self.store.as_ref(), &binding).await?;
        let items = aggregate(&works, self.interpreter.as_ref());
        let now = self.clock.now();
        let mut conditions: Vec<Condition> = binding
            .pointer("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        set_condition(&mut conditions, fully_applied(&spec, &items), now);
        let mut updated = binding.clone();
        set_path(&mut updated, &["status", "aggregatedStatus"], json!(items));
        set_path(&mut updated, &["status", "conditions"], json!(conditions));
        if updated != binding {
            self.store.update_status(&rt, updated).await?;
        }
        // Fold into the template's status.
        let r = &spec.resource;
        let template_rt = self.registry.resolve_kind(&r.api_version, &r.kind);
        let tns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
        let template = match self.store.get(&template_rt, tns, &r.name).await {
            Ok(t) => t,
            Err(StoreError::NotFound { .. }) => return Ok(Action::Done),
            Err(e) => return Err(e.into()),
        };
        if let Some(status) = self.interpreter.aggregate_status(&template, &items) {
            if template.get("status") != Some(&status) {
                let mut t = template.clone();
                set_path(&mut t, &["status"], status);
                match self.store.update_status(&template_rt, t).await {
                    Ok(_) | Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::SpecReplicas;
    use serde_json::json;

    fn work(cluster: &str, applied: Option<bool>, ready: Option<i64>, deleting: bool) -> Value {
        let mut w = json!({"metadata": {"name": "w", "namespace": format!("karmada-es-{cluster}")},
            "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}}]}}});
        if let Some(a) = applied {
            w["status"]["conditions"] = json!([{"type": "Applied", "status": if a { "True" } else { "False" }, "message": if a { "ok" } else { "boom" }}]);
        }
        if let Some(r) = ready {
            w["status"]["manifestStatuses"] =
                json!([{"identifier": {}, "status": {"readyReplicas": r}}]);
        }
        if deleting {
            w["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        w
    }

    #[test]
    fn items_per_cluster_with_health() {
        let works = [
            work("m2", Some(true), Some(1), false),
            work("m1", Some(true), Some(2), false),
            work("m3", Some(false), None, false),
            work("m4", None, None, false),
            work("m5", Some(true), Some(2), true),
            work("m6", Some(true), None, false),
        ];
        let items = aggregate(&works, &SpecReplicas);
        let got: Vec<(&str, bool, Option<ResourceHealth>, &str)> = items
            .iter()
            .map(|i| {
                (
                    i.cluster_name.as_str(),
                    i.applied,
                    i.health,
                    i.applied_message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("m1", true, Some(ResourceHealth::Healthy), "ok"),
                ("m2", true, Some(ResourceHealth::Unhealthy), "ok"),
                ("m3", false, Some(ResourceHealth::Unknown), "boom"),
                ("m4", false, Some(ResourceHealth::Unknown), ""),
                ("m6", true, Some(ResourceHealth::Unknown), "ok"),
            ]
        );
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
    fn observed_objects_take_their_generation_from_the_status() {
        let o = observed_object(
            &json!({"metadata": {"name": "x"}, "spec": {"replicas": 1}}),
            &json!({"observedGeneration": 3, "readyReplicas": 1}),
        );
        assert_eq!(o["metadata"]["generation"], 3);
        assert_eq!(o["status"]["readyReplicas"], 1);
    }

    #[tokio::test]
    async fn a_malformed_binding_status_is_rebuilt_not_a_panic() {
        use crate::clock::SystemClock;
        use crate::store::{KvStore, StoreConfig};
        use flotilla_api::kinds::well_known;
        let clock: SharedClock = Arc::new(SystemClock);
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(clock.clone()));
        let controller = BindingStatusController::new(
            store.clone(),
            clock,
            Arc::new(Registry::new()),
            Arc::new(SpecReplicas),
        );
        let rt = well_known::resource_bindings();
        let names = ["broken-array", "broken-string", "good"];
        for name in names {
            store
                .create(
                    &rt,
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                              "namespace": "default", "name": "web"},
                                 "clusters": [{"name": "m1", "replicas": 1}]}}),
                )
                .await
                .unwrap();
        }
        // Stored around the API, as older data or a bug would have it.
        for (name, bad) in [("broken-array", json!([1])), ("broken-string", json!("x"))] {
            let mut b = store.get(&rt, Some("default"), name).await.unwrap();
            b["status"] = bad;
            store.update_status(&rt, b).await.unwrap();
        }
        for name in names {
            let key = format!("rb|default|{name}");
            assert_eq!(
                controller.reconcile(&key).await.unwrap(),
                Action::Done,
                "{name}"
            );
            let b = store.get(&rt, Some("default"), name).await.unwrap();
            assert_eq!(
                b["status"]["conditions"][0]["type"], CONDITION_FULLY_APPLIED,
                "{name}: {b}"
            );
            assert_eq!(
                b["status"]["conditions"][0]["status"], "False",
                "{name}: {b}"
            );
        }
    }

    #[test]
    fn observed_objects_of_malformed_manifests_do_not_panic() {
        let o = observed_object(&json!({"metadata": "x"}), &json!({"observedGeneration": 2}));
        assert_eq!(o["metadata"]["generation"], 2);
        let o = observed_object(&json!([1]), &json!({"readyReplicas": 1}));
        assert_eq!(o["status"]["readyReplicas"], 1);
    }
}
