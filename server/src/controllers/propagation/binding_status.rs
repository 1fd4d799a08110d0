//! Status aggregation (docs/semantics.md §7, §12): the members' Work status becomes the
//! binding's `status.aggregatedStatus` — one item per cluster, sorted by name, with applied,
//! appliedMessage, the reflected status and its health (Healthy, Unhealthy, or Unknown when not
//! applied or not interpretable) — and the `FullyApplied` condition; the interpreter then folds
//! the items into the template's own status (e.g. a Deployment's summed readyReplicas).
//! Works being deleted are left out. While a member is not Ready its item keeps what it last
//! reported (applied, status) but says health `Unknown`: a dead copy never reads as healthy,
//! so graceful eviction cannot count it as a healthy placement.
//!
//! With `failover.application`, it also says whether that failover can act at all: the condition
//! `ApplicationFailoverActive` and, when it turns False (no health rule for the kind,
//! karmada-io/karmada#7843), a Warning Event ([`crate::controllers::failover::preconditions`]).
//!
//! Besides the binding keys (`rb|…`, `crb|…`), the controller is woken by `cluster|<name>` when a
//! Cluster's Ready condition changes ([`BindingStatusController::cluster_source`]); that key
//! fans out, through the Works in the cluster's execution namespace, to the bindings placed
//! there, queued on the controller's own queue.

use crate::controllers::failover::preconditions::{
    application_failover_condition, warrants_event, CONDITION_APPLICATION_FAILOVER_ACTIVE,
    EVENT_APPLICATION_FAILOVER_INACTIVE,
};
use crate::controllers::propagation::binding_works::BindingWorksController;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler, Source};
use crate::controllers::runtime::queue::WorkQueue;
use crate::controllers::shared::aggregation::{aggregate, fully_applied};
use crate::controllers::shared::binding_keys::{
    binding_key, decode, live_binding, owned_works, LiveBinding,
};
use crate::controllers::shared::cluster_cache::ClusterCache;
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::json_edit::with_fields;
use crate::controllers::shared::template_ref::read_template;
use crate::events::{EventRecorder, EventType};
use crate::kinds::KindRegistry;
use crate::store::{status_write, ListOptions, Store, StoreError};
use async_trait::async_trait;
use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::cluster::execution_namespace;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{find_condition, remove_condition, set_condition, Condition};
use flotilla_support::clock::SharedClock;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Prefix of the keys that stand for a Cluster whose readiness changed.
const CLUSTER_KEY_PREFIX: &str = "cluster|";

/// The controller.
pub struct BindingStatusController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    registry: Arc<KindRegistry>,
    interpreter: Arc<dyn TemplateInterpreter>,
    clusters: ClusterCache,
    /// The queue the controller runs on (see [`Self::queue`]): a `cluster|…` key queues the
    /// keys of its bindings here.
    queue: WorkQueue,
    /// Where the Warning Event of an application failover that cannot act goes (none: not
    /// recorded, as in tests that do not look).
    events: Option<EventRecorder>,
}

impl BindingStatusController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        registry: Arc<KindRegistry>,
        interpreter: Arc<dyn TemplateInterpreter>,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            registry,
            interpreter,
            queue: WorkQueue::default(),
            events: None,
        }
    }

    /// Records Events (an application failover that cannot act) with `events`.
    pub fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = Some(events.for_component("binding-status"));
        self
    }

    /// The queue to run the controller on (`Controller::with_queue`), so that a
    /// `cluster|…` key can queue the bindings of that cluster.
    pub fn queue(&self) -> WorkQueue {
        self.queue.clone()
    }

    /// Wakes the controller when a Cluster's Ready condition changes (or the Cluster goes):
    /// key `cluster|<name>`.
    pub fn cluster_source() -> Source {
        Source::mapped(well_known::clusters(), |c| {
            c.lookup("/metadata/name")
                .and_then(Value::as_str)
                .map(|n| vec![format!("{CLUSTER_KEY_PREFIX}{n}")])
                .unwrap_or_default()
        })
        .on_change_of(crate::controllers::shared::fan_out::cluster_ready_fingerprint)
    }

    /// Queues the bindings with a Work on `cluster` (those with an item for it).
    async fn fan_out(&self, cluster: &str) -> Result<Action, ReconcileError> {
        let ns = execution_namespace(cluster);
        let works = self
            .store
            .list(&well_known::works(), Some(&ns), &ListOptions::default())
            .await?;
        let keys: BTreeSet<String> = works
            .items
            .iter()
            .flat_map(BindingWorksController::work_key)
            .collect();
        tracing::debug!(cluster, bindings = keys.len(), "cluster readiness changed");
        for key in keys {
            self.queue.add(key);
        }
        Ok(Action::Done)
    }

    /// Keys are the binding controller's (`rb|ns|name`, `crb|name`).
    pub fn keys(obj: &Value) -> Vec<String> {
        if obj.get("kind").and_then(Value::as_str) == Some("Work") {
            BindingWorksController::work_key(obj)
        } else {
            binding_key(obj).into_iter().collect()
        }
    }
}

#[async_trait]
impl Reconciler for BindingStatusController {
    fn name(&self) -> &'static str {
        "binding-status"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        if let Some(cluster) = key.strip_prefix(CLUSTER_KEY_PREFIX) {
            return self.fan_out(cluster).await;
        }
        let Some(LiveBinding {
            rt,
            object: binding,
        }) = live_binding(self.store.as_ref(), key).await?
        else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&binding["spec"], key)?;
        let works = owned_works(self.store.as_ref(), &binding).await?;
        let clusters = self.clusters.get().await?;
        let assigned = |c: &str| spec.workload_replicas_on(c);
        let items = aggregate(
            &works,
            &|c: &str| clusters.is_ready(c),
            &assigned,
            self.interpreter.as_ref(),
        );
        let now = self.clock.now();
        let mut conditions: Vec<Condition> = binding
            .lookup("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        set_condition(&mut conditions, fully_applied(&spec, &items), now);
        // No silent no-ops: can application failover act on this kind at all?
        let kind = json!({"apiVersion": spec.resource.api_version, "kind": spec.resource.kind});
        let failover =
            application_failover_condition(&spec, self.interpreter.has_health_rule(&kind));
        let warn = match &failover {
            Some(c) => {
                let warn = warrants_event(
                    find_condition(&conditions, CONDITION_APPLICATION_FAILOVER_ACTIVE),
                    c,
                )
                .then(|| c.message.clone());
                set_condition(&mut conditions, c.clone(), now);
                warn
            }
            None => {
                remove_condition(&mut conditions, CONDITION_APPLICATION_FAILOVER_ACTIVE);
                None
            }
        };
        // The new status, written (without a copy of the rest of the binding) when it moved.
        let status = with_fields(
            binding.get("status"),
            vec![
                ("aggregatedStatus", json!(items)),
                ("conditions", json!(conditions)),
            ],
        );
        if binding.get("status") != Some(&status) {
            self.store
                .update_status_shared(&rt, status_write(&binding, status))
                .await?;
        }
        if let Some(message) = warn {
            tracing::warn!(binding = key, %message, "application failover cannot act");
            if let Some(events) = &self.events {
                events
                    .record(
                        &binding,
                        EventType::Warning,
                        EVENT_APPLICATION_FAILOVER_INACTIVE,
                        &message,
                    )
                    .await;
            }
        }
        // Fold into the template's status.
        let (template_rt, template) =
            read_template(self.store.as_ref(), &self.registry, &spec.resource).await?;
        let Some(template) = template else {
            return Ok(Action::Done);
        };
        if let Some(status) = self.interpreter.aggregate_status(&template, &items) {
            if template.get("status") != Some(&status) {
                let t = status_write(&template, status);
                match self.store.update_status_shared(&template_rt, t).await {
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
    use crate::controllers::runtime::testing::{pull_cluster, SpecReplicas, TestWorld};
    use flotilla_api::binding::CONDITION_FULLY_APPLIED;
    use serde_json::json;

    /// Karmada's health cases for workloads mid-rollout, judged through the server's own
    /// interpreter with the generation the member reported: a status that has not observed the
    /// member object's generation is Unhealthy, whatever its counters say.
    #[test]
    fn readiness_fingerprint_follows_only_the_ready_status() {
        let cluster = |ready: Option<&str>, version: &str| {
            let mut c = json!({"metadata": {"name": "m1"},
                "status": {"kubernetesVersion": version, "conditions": []}});
            if let Some(r) = ready {
                c["status"]["conditions"] = json!([{"type": "Ready", "status": r,
                    "lastTransitionTime": version}]);
            }
            c
        };
        let base = crate::controllers::shared::fan_out::cluster_ready_fingerprint(&cluster(
            Some("True"),
            "a",
        ));
        assert_eq!(
            base,
            crate::controllers::shared::fan_out::cluster_ready_fingerprint(&cluster(
                Some("True"),
                "b"
            ))
        );
        for other in [Some("False"), Some("Unknown"), None] {
            assert_ne!(
                base,
                crate::controllers::shared::fan_out::cluster_ready_fingerprint(&cluster(
                    other, "a"
                )),
                "{other:?}"
            );
        }
        assert_eq!(
            BindingStatusController::cluster_source().keys.as_ref()(&cluster(None, "a")),
            ["cluster|m1"]
        );
    }

    /// The controller on `world`'s store, clock and kinds, reading health with `interpreter`.
    fn controller_in(
        world: &TestWorld,
        interpreter: Arc<dyn TemplateInterpreter>,
    ) -> BindingStatusController {
        BindingStatusController::new(
            world.store.clone(),
            world.shared_clock.clone(),
            world.ctx.registry.clone(),
            interpreter,
        )
    }

    /// A world whose clock stands at 2026-01-01T00:00:00Z.
    fn new_year_world() -> TestWorld {
        use chrono::TimeZone;
        TestWorld::at(chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap())
    }

    #[tokio::test]
    async fn a_malformed_binding_status_is_rebuilt_not_a_panic() {
        use flotilla_api::kinds::well_known;
        let world = TestWorld::new();
        let store = world.store.clone();
        let controller = controller_in(&world, Arc::new(SpecReplicas));
        let rt = well_known::resource_bindings();
        let names = world
            .bindings_with_malformed_status(|_| {
                json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "namespace": "default", "name": "web"},
                       "clusters": [{"name": "m1", "replicas": 1}]})
            })
            .await;
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

    #[tokio::test]
    async fn application_failover_on_a_kind_without_health_rule_is_a_condition_and_one_event() {
        use flotilla_api::kinds::well_known;
        let world = new_year_world();
        let store = world.store.clone();
        // As the server wires it: the real interpreter, the context's recorder.
        let controller =
            controller_in(&world, world.ctx.interpreter.clone()).with_events(world.events());
        let rt = well_known::resource_bindings();
        for (name, api_version, kind) in
            [("job", "batch/v1", "Job"), ("web", "apps/v1", "Deployment")]
        {
            store
                .create(
                    &rt,
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"resource": {"apiVersion": api_version, "kind": kind,
                                              "namespace": "default", "name": name},
                                 "propagateDeps": true,
                                 "failover": {"application": {"purgeMode": "Never"}},
                                 "clusters": [{"name": "m1", "replicas": 1}]}}),
                )
                .await
                .unwrap();
        }
        let condition = |b: &Value| {
            b["status"]["conditions"]
                .as_array()
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c["type"] == CONDITION_APPLICATION_FAILOVER_ACTIVE)
                })
                .map(|c| (c["status"].clone(), c["reason"].clone()))
        };
        // Twice: the second pass must not repeat the Event.
        for _ in 0..2 {
            controller.reconcile("rb|default|job").await.unwrap();
            controller.reconcile("rb|default|web").await.unwrap();
        }
        let job = store.get(&rt, Some("default"), "job").await.unwrap();
        assert_eq!(
            condition(&job),
            Some((json!("False"), json!("NoHealthRule"))),
            "{job}"
        );
        let web = store.get(&rt, Some("default"), "web").await.unwrap();
        assert_eq!(
            condition(&web),
            Some((json!("True"), json!("HealthRuleFound"))),
            "{web}"
        );
        let list = world.stored_events().await;
        let warnings: Vec<&Value> = list
            .iter()
            .filter(|e| e["reason"] == EVENT_APPLICATION_FAILOVER_INACTIVE)
            .collect();
        assert_eq!(warnings.len(), 1, "{list:?}");
        assert_eq!(warnings[0]["type"], "Warning");
        assert_eq!(warnings[0]["involvedObject"]["name"], "job");
        // Failover taken off the binding: the condition goes with it.
        let mut job = job;
        job["spec"]["failover"] = Value::Null;
        store.update(&rt, job).await.unwrap();
        controller.reconcile("rb|default|job").await.unwrap();
        let job = store.get(&rt, Some("default"), "job").await.unwrap();
        assert_eq!(condition(&job), None, "{job}");
    }

    /// Clusters m1 and m2 (both Ready) and binding `default/web` with a healthy Work on each.
    async fn ready_fixture() -> (Arc<dyn Store>, BindingStatusController) {
        use crate::controllers::propagation::binding_works::{
            BINDING_NAMESPACE_ANNOTATION, BINDING_NAME_ANNOTATION,
        };
        let world = new_year_world();
        let store = world.store.clone();
        let controller = controller_in(&world, Arc::new(SpecReplicas));
        for name in ["m1", "m2"] {
            store
                .create(&well_known::clusters(), pull_cluster(name))
                .await
                .unwrap();
            set_ready(&store, name, "True").await;
        }
        let binding = store
            .create(
                &well_known::resource_bindings(),
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                          "namespace": "default", "name": "web"},
                             "clusters": [{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 2}]}}),
            )
            .await
            .unwrap();
        for cluster in ["m1", "m2"] {
            let mut w = crate::controllers::runtime::testing::work_of_web(
                cluster,
                Some(true),
                Some(2),
                false,
            );
            w["apiVersion"] = json!("work.karmada.io/v1alpha1");
            w["kind"] = json!("Work");
            w["metadata"]["annotations"] = json!({BINDING_NAME_ANNOTATION: "web",
                BINDING_NAMESPACE_ANNOTATION: "default"});
            w["metadata"]["ownerReferences"] = json!([{"apiVersion": "work.karmada.io/v1alpha2",
                "kind": "ResourceBinding", "name": "web", "uid": binding["metadata"]["uid"]}]);
            let status = w["status"].take();
            let mut created = store.create(&well_known::works(), w).await.unwrap();
            created["status"] = status;
            store
                .update_status(&well_known::works(), created)
                .await
                .unwrap();
        }
        (store, controller)
    }

    async fn set_ready(store: &Arc<dyn Store>, cluster: &str, status: &str) {
        let rt = well_known::clusters();
        let mut c = store.get(&rt, None, cluster).await.unwrap();
        c["status"] = json!({"conditions": [{"type": "Ready", "status": status,
            "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        store.update_status(&rt, c).await.unwrap();
    }

    /// The binding's items as (cluster, health, applied, readyReplicas).
    async fn items_of_web(store: &Arc<dyn Store>) -> Vec<(String, String, bool, i64)> {
        let b = store
            .get(&well_known::resource_bindings(), Some("default"), "web")
            .await
            .unwrap();
        b["status"]["aggregatedStatus"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        (
                            i["clusterName"].as_str().unwrap_or("").to_string(),
                            i["health"].as_str().unwrap_or("").to_string(),
                            i["applied"].as_bool().unwrap_or(false),
                            i["status"]["readyReplicas"].as_i64().unwrap_or(-1),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn web_items(m1_health: &str) -> Vec<(String, String, bool, i64)> {
        vec![
            ("m1".to_string(), m1_health.to_string(), true, 2),
            ("m2".to_string(), "Healthy".to_string(), true, 2),
        ]
    }

    #[tokio::test]
    async fn a_member_that_stops_being_ready_turns_its_items_unknown() {
        let (store, controller) = ready_fixture().await;
        let clusters = well_known::clusters();
        let health = || items_of_web(&store);
        let both = web_items;
        let key = "rb|default|web";
        assert_eq!(controller.reconcile(key).await.unwrap(), Action::Done);
        assert_eq!(health().await, both("Healthy"));

        // m1 stops being Ready: its key fans out to the binding, whose m1 item turns Unknown.
        for (ready, want) in [
            ("Unknown", "Unknown"),
            ("False", "Unknown"),
            ("True", "Healthy"),
        ] {
            set_ready(&store, "m1", ready).await;
            assert_eq!(
                controller.reconcile("cluster|m1").await.unwrap(),
                Action::Done
            );
            assert_eq!(controller.queue.len(), 1, "{ready}: the binding is queued");
            let queued = controller.queue.next().await.unwrap();
            controller.queue.done(&queued);
            assert_eq!(queued, key);
            assert_eq!(controller.reconcile(&queued).await.unwrap(), Action::Done);
            assert_eq!(health().await, both(want), "Ready={ready}");
        }

        // A cluster with no Works queues nothing; a deleted cluster reads as not Ready.
        controller.reconcile("cluster|m9").await.unwrap();
        assert!(controller.queue.is_empty());
        store
            .delete(&clusters, None, "m1", &Default::default())
            .await
            .unwrap();
        controller.reconcile(key).await.unwrap();
        assert_eq!(health().await, both("Unknown"));
    }

    #[tokio::test]
    async fn the_cluster_source_alone_wakes_the_bindings_of_a_cluster() {
        use crate::controllers::runtime::controller::{spawn, Controller, ControllerConfig};
        use crate::testing::eventually;
        let (store, controller) = ready_fixture().await;
        let queue = controller.queue();
        // Only the Cluster source and no resync: the bindings are reached only by the fan-out.
        let mut config = ControllerConfig::new(vec![BindingStatusController::cluster_source()]);
        config.resync = std::time::Duration::from_secs(3600);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let handle = spawn(
            store.clone(),
            Controller::with_queue(Arc::new(controller), config, queue),
            None,
            stopped,
        );
        let wait = |want: Vec<(String, String, bool, i64)>, what: &'static str| {
            let store = store.clone();
            async move {
                eventually(what, std::time::Duration::from_secs(10), || async {
                    let got = items_of_web(&store).await;
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!("{got:?}"))
                    }
                })
                .await;
            }
        };
        wait(
            web_items("Healthy"),
            "the first aggregation (from the initial list)",
        )
        .await;
        set_ready(&store, "m1", "Unknown").await;
        wait(web_items("Unknown"), "m1's item to turn Unknown").await;
        set_ready(&store, "m1", "True").await;
        wait(web_items("Healthy"), "m1's item to be Healthy again").await;
        let _ = stop.send(true);
        drop(handle);
    }
}
