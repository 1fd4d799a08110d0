//! The scheduler controller: runs the pure [`crate::scheduler`] over a binding and the current
//! clusters whenever [`crate::scheduler::needs_scheduling`] says so (new binding, placement or
//! replicas changed, a target removed by eviction, reschedule requested, a target cluster
//! deleting), writes `spec.clusters` and the applied-placement annotation, and the `Scheduled`
//! condition, `schedulerObservedGeneration` and `lastScheduledTime` in status; each decision
//! is an Event on the binding. Bindings are looked at again on a short resync so that cluster
//! changes (new members, taints) reach bindings that could not be placed. Bindings without a
//! placement (attached bindings of dependencies, see [`super::dependencies_distributor`]) are
//! left alone.

use super::binding_keys::{decode, live_binding, LiveBinding};
use super::cluster_cache::ClusterCache;
use super::json_edit::set_path;
use super::runtime::{Action, ReconcileError, Reconciler};
use crate::clock::SharedClock;
use crate::events::{EventRecorder, EventType};
use crate::scheduler::trigger::ScheduleReason;
use crate::scheduler::{
    condition_for, needs_scheduling, schedule, ScheduleError, ScheduleInput, ScheduleOptions,
};
use crate::store::Store;
use async_trait::async_trait;
use flotilla_api::binding::{
    ResourceBindingSpec, ResourceBindingStatus, CONDITION_SCHEDULED, REASON_SUCCESS,
};
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::policy::{APPLIED_PLACEMENT_ANNOTATION, DEFAULT_SCHEDULER_NAME};
use prometheus::IntCounterVec;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// How soon a binding that could not be placed is tried again.
pub const RETRY_UNSCHEDULABLE: Duration = Duration::from_secs(5);

/// The controller.
pub struct SchedulerController {
    store: Arc<dyn Store>,
    clusters: ClusterCache,
    clock: SharedClock,
    events: EventRecorder,
    results: IntCounterVec,
}

impl SchedulerController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let results = IntCounterVec::new(
            prometheus::Opts::new("flotilla_scheduler_results_total", "Scheduling decisions by result (Success, NoClusterFit, Unschedulable, SchedulerError)."),
            &["result"],
        )?;
        registry.register(Box::new(results.clone()))?;
        Ok(Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events,
            results,
        })
    }
}

/// The scheduler as the server runs it: bindings (their spec), and the bindings of a Cluster when the Cluster changes, through the cluster → bindings index; a short resync for bindings no cluster fits yet.
pub fn controller(
    ctx: &super::context::ControllerContext,
) -> Result<super::runtime::Controller, super::context::WiringError> {
    use super::runtime::{Controller, ControllerConfig};
    let reconciler = SchedulerController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.for_component("default-scheduler"),
        &ctx.metrics,
    )
    .map_err(super::context::WiringError::metrics("scheduler"))?;
    let (_, sources) = super::fan_out::binding_sources_with_cluster_fan_out();
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.scheduler_resync),
    ))
}

impl SchedulerController {
    /// Marks a binding whose spec cannot be decoded: `Scheduled=False/InvalidSpec` and one
    /// Warning Event per distinct error; the binding is not retried until it changes.
    async fn report_invalid_spec(
        &self,
        rt: &flotilla_api::kinds::ResourceType,
        binding: &Value,
        key: &str,
        error: &str,
    ) -> Result<Action, ReconcileError> {
        let message = format!("The binding's spec cannot be decoded: {error}");
        let mut conditions: Vec<Condition> = binding
            .pointer("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        let already = conditions.iter().any(|c| {
            c.type_ == CONDITION_SCHEDULED && c.reason == "InvalidSpec" && c.message == message
        });
        if already {
            return Ok(Action::Done);
        }
        tracing::warn!(binding = key, error, "binding spec cannot be decoded");
        self.events
            .record(binding, EventType::Warning, "InvalidSpec", &message)
            .await;
        set_condition(
            &mut conditions,
            Condition::new(
                CONDITION_SCHEDULED,
                ConditionStatus::False,
                "InvalidSpec",
                &message,
            ),
            self.clock.now(),
        );
        let mut updated = binding.clone();
        set_path(&mut updated, &["status", "conditions"], json!(conditions));
        self.store.update_status(rt, updated).await?;
        Ok(Action::Done)
    }
}

#[async_trait]
impl Reconciler for SchedulerController {
    fn name(&self) -> &'static str {
        "scheduler"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding {
            rt,
            object: binding,
        }) = live_binding(self.store.as_ref(), key).await?
        else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = match decode(&binding["spec"], key) {
            Ok(spec) => spec,
            // A spec the API would refuse (written before a validation rule existed, or past
            // the API): say so on the binding once and go on with the other bindings.
            Err(e) => {
                return self
                    .report_invalid_spec(&rt, &binding, key, &e.to_string())
                    .await
            }
        };
        let status = match binding.get("status") {
            None | Some(Value::Null) => ResourceBindingStatus::default(),
            Some(s) => match decode::<ResourceBindingStatus>(s, key) {
                Ok(status) => status,
                // The scheduler owns this status: it starts again from an empty one and its
                // writes below replace the malformed one.
                Err(e) => {
                    tracing::warn!(binding = key, error = %e, "binding status cannot be decoded; scheduling from an empty status");
                    self.events
                        .record(
                            &binding,
                            EventType::Warning,
                            "InvalidStatus",
                            &format!("The binding's status cannot be decoded and is rebuilt: {e}"),
                        )
                        .await;
                    ResourceBindingStatus::default()
                }
            },
        };
        if !spec.scheduler_name.is_empty() && spec.scheduler_name != DEFAULT_SCHEDULER_NAME {
            return Ok(Action::Done);
        }
        if spec.suspension.as_ref().and_then(|s| s.scheduling) == Some(true) {
            return Ok(Action::Done);
        }
        // A binding without placement is an attached binding (created by the dependencies
        // distributor for a ConfigMap, Secret, ... a workload needs): it goes where
        // `spec.requiredBy` says and is never scheduled, as Karmada's scheduler filters out
        // bindings no policy claims.
        if spec.placement.is_none() {
            return Ok(Action::Done);
        }
        let generation = binding
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let clusters = self.clusters.get().await?;
        let snapshot = &clusters.snapshot;
        let applied = binding
            .pointer(&format!(
                "/metadata/annotations/{}",
                APPLIED_PLACEMENT_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(reason) = needs_scheduling(&spec, &status, applied.as_deref(), snapshot) else {
            // The spec write and the status write of a decision are two steps; if the second
            // was lost to a conflict, the decision stands and its condition is written now.
            let placed = applied.is_some() && !spec.clusters.is_empty();
            let unrecorded = !status
                .conditions
                .iter()
                .any(|c| c.type_ == CONDITION_SCHEDULED);
            if status.scheduler_observed_generation != generation || (placed && unrecorded) {
                let mut updated = binding.clone();
                set_path(
                    &mut updated,
                    &["status", "schedulerObservedGeneration"],
                    json!(generation),
                );
                if placed && unrecorded {
                    let mut conditions = status.conditions.clone();
                    let success = Condition::new(
                        CONDITION_SCHEDULED,
                        ConditionStatus::True,
                        REASON_SUCCESS,
                        "Binding has been scheduled successfully.",
                    );
                    set_condition(&mut conditions, success, self.clock.now());
                    set_path(&mut updated, &["status", "conditions"], json!(conditions));
                }
                self.store.update_status(&rt, updated).await?;
            }
            return Ok(Action::Done);
        };
        let result = schedule(&ScheduleInput {
            spec: &spec,
            status: &status,
            clusters: snapshot,
            options: ScheduleOptions::default(),
        });
        let (cond_status, cond_reason, message) = condition_for(&result);
        self.results.with_label_values(&[cond_reason]).inc();
        let now = self.clock.now();
        // spec.clusters: the result, empty on a FitError, unchanged otherwise.
        let new_clusters = match &result {
            Ok(outcome) => Some(json!(outcome.clusters)),
            Err(ScheduleError::FitError { .. }) => Some(json!([])),
            Err(_) => None,
        };
        let mut current = binding.clone();
        if let Some(clusters) = new_clusters {
            let mut updated = binding.clone();
            set_path(&mut updated, &["spec", "clusters"], clusters);
            if result.is_ok() {
                let placement = serde_json::to_string(&spec.placement).unwrap_or_default();
                set_path(
                    &mut updated,
                    &["metadata", "annotations", APPLIED_PLACEMENT_ANNOTATION],
                    json!(placement),
                );
            }
            if updated != binding {
                current = self.store.update(&rt, updated).await?;
            }
        }
        let new_generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(generation);
        let previous = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_SCHEDULED)
            .map(|c| (c.status, c.reason.clone(), c.message.clone()));
        let decision_changed = current != binding
            || previous != Some((cond_status, cond_reason.to_string(), message.clone()));
        let mut conditions = status.conditions.clone();
        set_condition(
            &mut conditions,
            Condition::new(CONDITION_SCHEDULED, cond_status, cond_reason, &message),
            now,
        );
        let mut updated = current.clone();
        set_path(&mut updated, &["status", "conditions"], json!(conditions));
        set_path(
            &mut updated,
            &["status", "schedulerObservedGeneration"],
            json!(new_generation),
        );
        if let Ok(outcome) = &result {
            // A routine pass over a Duplicated or non-workload binding that changes nothing
            // leaves lastScheduledTime alone: rewriting it would swallow a manual reschedule
            // (`rescheduleTriggeredAt` must be later than it) requested in the same second.
            let routine = reason == ScheduleReason::AlwaysScheduled && current == binding;
            if !routine || status.last_scheduled_time.is_none() {
                set_path(
                    &mut updated,
                    &["status", "lastScheduledTime"],
                    json!(Time::new(now)),
                );
            }
            if let Some(affinity) = &outcome.affinity_name {
                set_path(
                    &mut updated,
                    &["status", "schedulerObservingAffinityName"],
                    json!(affinity),
                );
            }
        }
        if updated != current {
            self.store.update_status(&rt, updated).await?;
        }
        let targets = match &result {
            Ok(o) => o
                .clusters
                .iter()
                .map(|c| format!("{}:{}", c.name, c.replicas))
                .collect::<Vec<_>>()
                .join(", "),
            Err(_) => String::new(),
        };
        // One Event per decision, not per retry.
        match &result {
            Ok(_) => {
                if decision_changed {
                    tracing::info!(binding = key, reason = ?reason, clusters = %targets, "scheduled");
                    self.events
                        .record(
                            &current,
                            EventType::Normal,
                            "ScheduleBindingSucceed",
                            &format!(
                                "Binding has been scheduled successfully ({reason:?}): {targets}"
                            ),
                        )
                        .await;
                }
                Ok(Action::Done)
            }
            Err(_) => {
                if decision_changed {
                    tracing::info!(binding = key, error = %message, "scheduling failed");
                    self.events
                        .record(
                            &current,
                            EventType::Warning,
                            "ScheduleBindingFailed",
                            &message,
                        )
                        .await;
                }
                Ok(Action::RequeueAfter(RETRY_UNSCHEDULABLE))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::store::ListOptions;
    use crate::store::{KvStore, StoreConfig};
    use flotilla_api::kinds::well_known;

    #[tokio::test]
    async fn a_binding_without_placement_is_not_scheduled() {
        let clock: crate::clock::SharedClock = Arc::new(SystemClock);
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(clock.clone()));
        let registry = prometheus::Registry::new();
        let events = EventRecorder::new(store.clone(), clock.clone(), "test", &registry).unwrap();
        let scheduler = SchedulerController::new(store.clone(), clock, events, &registry).unwrap();
        let attached = json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "cfg-configmap", "namespace": "default", "uid": "u"},
            "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cfg"},
                     "requiredBy": [{"namespace": "default", "name": "web-deployment", "clusters": [{"name": "m1"}]}]}});
        let rt = well_known::resource_bindings();
        let before = store.create(&rt, attached).await.unwrap();
        assert_eq!(
            scheduler
                .reconcile("rb|default|cfg-configmap")
                .await
                .unwrap(),
            Action::Done
        );
        let after = store
            .get(&rt, Some("default"), "cfg-configmap")
            .await
            .unwrap();
        assert_eq!(after, before, "no clusters, no condition, no error");
        let events = store
            .list(&well_known::events(), None, &ListOptions::default())
            .await
            .unwrap();
        assert!(events.items.is_empty(), "{:?}", events.items);
    }

    #[tokio::test]
    async fn a_routine_pass_keeps_last_scheduled_time_so_a_manual_reschedule_is_seen() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let fake = Arc::new(crate::clock::FakeClock::new(start));
        let clock: crate::clock::SharedClock = fake.clone();
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(clock.clone()));
        let registry = prometheus::Registry::new();
        let events = EventRecorder::new(store.clone(), clock.clone(), "test", &registry).unwrap();
        let scheduler = SchedulerController::new(store.clone(), clock, events, &registry).unwrap();
        store
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "m1"}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        let mut m1 = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        m1["status"] = json!({"apiEnablements": [{"groupVersion": "apps/v1",
            "resources": [{"name": "deployments", "kind": "Deployment"}]}]});
        store
            .update_status(&well_known::clusters(), m1)
            .await
            .unwrap();
        let rt = well_known::resource_bindings();
        store
            .create(
                &rt,
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": "web-deployment", "namespace": "default"},
                    "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                             "replicas": 2,
                             "placement": {"clusterAffinity": {"clusterNames": ["m1"]},
                                           "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}}}),
            )
            .await
            .unwrap();
        let key = "rb|default|web-deployment";
        let last = |b: &Value| b["status"]["lastScheduledTime"].as_str().map(String::from);
        let get = || async {
            store
                .get(&rt, Some("default"), "web-deployment")
                .await
                .unwrap()
        };
        scheduler.reconcile(key).await.unwrap();
        let first = get().await;
        assert_eq!(
            first["spec"]["clusters"],
            json!([{"name": "m1", "replicas": 2}])
        );
        assert_eq!(last(&first).as_deref(), Some("2026-01-01T00:00:00Z"));
        // A resync 10 s later decides the same: the time of the last real decision stays.
        fake.advance(chrono::Duration::seconds(10));
        scheduler.reconcile(key).await.unwrap();
        assert_eq!(last(&get().await).as_deref(), Some("2026-01-01T00:00:00Z"));
        // A manual reschedule stamped now is later than that, so it is honoured and recorded.
        let mut b = get().await;
        b["spec"]["rescheduleTriggeredAt"] = json!("2026-01-01T00:00:10Z");
        store.update(&rt, b).await.unwrap();
        scheduler.reconcile(key).await.unwrap();
        assert_eq!(last(&get().await).as_deref(), Some("2026-01-01T00:00:10Z"));
    }

    #[tokio::test]
    async fn a_malformed_binding_status_is_rebuilt_with_an_event_not_a_panic() {
        let clock: crate::clock::SharedClock = Arc::new(SystemClock);
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(clock.clone()));
        let registry = prometheus::Registry::new();
        let events = EventRecorder::new(store.clone(), clock.clone(), "test", &registry).unwrap();
        let scheduler = SchedulerController::new(store.clone(), clock, events, &registry).unwrap();
        let clusters = well_known::clusters();
        store
            .create(
                &clusters,
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "m1"}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        let mut m1 = store.get(&clusters, None, "m1").await.unwrap();
        m1["status"] = json!({"apiEnablements": [{"groupVersion": "v1",
            "resources": [{"name": "configmaps", "kind": "ConfigMap"}]}]});
        store.update_status(&clusters, m1).await.unwrap();
        let rt = well_known::resource_bindings();
        let names = ["broken-array", "broken-string", "good"];
        for name in names {
            store
                .create(
                    &rt,
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": name},
                                 "placement": {"clusterAffinity": {"clusterNames": ["m1"]}}}}),
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
            scheduler
                .reconcile(&format!("rb|default|{name}"))
                .await
                .unwrap();
            let b = store.get(&rt, Some("default"), name).await.unwrap();
            assert_eq!(
                b["spec"]["clusters"],
                json!([{"name": "m1"}]),
                "{name}: {b}"
            );
            assert_eq!(
                b["status"]["conditions"][0]["type"], CONDITION_SCHEDULED,
                "{name}: {b}"
            );
            assert_eq!(
                b["status"]["schedulerObservedGeneration"],
                b["metadata"]["generation"]
            );
        }
        let events = store
            .list(&well_known::events(), None, &ListOptions::default())
            .await
            .unwrap();
        let invalid: Vec<&str> = events
            .items
            .iter()
            .filter(|e| e["reason"] == "InvalidStatus")
            .filter_map(|e| e["involvedObject"]["name"].as_str())
            .collect();
        assert_eq!(invalid, ["broken-array", "broken-string"]);
    }

    #[tokio::test]
    async fn an_undecodable_binding_spec_gets_a_condition_and_one_event_and_the_others_go_on() {
        let clock: crate::clock::SharedClock = Arc::new(SystemClock);
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(clock.clone()));
        let registry = prometheus::Registry::new();
        let events = EventRecorder::new(store.clone(), clock.clone(), "test", &registry).unwrap();
        let scheduler = SchedulerController::new(store.clone(), clock, events, &registry).unwrap();
        store
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "m1"}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        let mut m1 = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        m1["status"] = json!({"apiEnablements": [{"groupVersion": "v1",
            "resources": [{"name": "configmaps", "kind": "ConfigMap"}]}]});
        store
            .update_status(&well_known::clusters(), m1)
            .await
            .unwrap();
        let rt = well_known::resource_bindings();
        for (name, placement) in [
            ("broken", json!({"clusterAffinity": {"clusterNames": "m1"}})),
            ("good", json!({"clusterAffinity": {"clusterNames": ["m1"]}})),
        ] {
            // Stored around the API, as older data or a bug would have it.
            store
                .create(
                    &rt,
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": name},
                                 "placement": placement}}),
                )
                .await
                .unwrap();
        }
        for _ in 0..3 {
            for name in ["broken", "good"] {
                let action = scheduler.reconcile(&format!("rb|default|{name}")).await;
                assert!(matches!(action, Ok(Action::Done)), "{name}: {action:?}");
            }
        }
        let broken = store.get(&rt, Some("default"), "broken").await.unwrap();
        assert_eq!(
            broken["status"]["conditions"][0]["reason"], "InvalidSpec",
            "{broken}"
        );
        assert_eq!(broken["status"]["conditions"][0]["status"], "False");
        let good = store.get(&rt, Some("default"), "good").await.unwrap();
        assert_eq!(good["spec"]["clusters"], json!([{"name": "m1"}]));
        let events = store
            .list(&well_known::events(), None, &ListOptions::default())
            .await
            .unwrap();
        let invalid = events
            .items
            .iter()
            .filter(|e| e["reason"] == "InvalidSpec")
            .map(|e| e["count"].as_i64().unwrap_or(1))
            .sum::<i64>();
        assert_eq!(invalid, 1, "one Event, not one per pass");
    }
}
