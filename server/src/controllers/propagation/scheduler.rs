//! The scheduler controller: runs the pure [`crate::scheduler`] over a binding and the current
//! clusters whenever [`crate::scheduler::needs_scheduling`] says so (new binding, placement or
//! replicas changed, a target removed by eviction, reschedule requested, a target cluster
//! deleting), writes `spec.clusters` and the applied-placement annotation, and the `Scheduled`
//! condition, `schedulerObservedGeneration` and `lastScheduledTime` in status; each decision is an
//! Event on the binding and on its resource template, as Karmada's; what to write is decided by
//! the pure [`crate::scheduler::decision::decide`]. A change of a cluster (taints, labels, APIs,
//! deletion) reaches the bindings that name it at once through the cluster-to-bindings index,
//! and a cluster that can take new work (it joined, lost a taint) reaches the bindings open to
//! it ([`crate::controllers::propagation::cluster_joins`]); the periodic resync is a safety net.
//! A target whose Cluster is being deleted or gone leaves `spec.clusters` whatever the result
//! (docs/semantics.md §8.7). Bindings without a placement (attached
//! bindings of dependencies, see [`crate::controllers::propagation::dependencies_distributor`]) are
//! left alone.

use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::runtime::own_writes::OwnWrites;
use crate::controllers::shared::binding_keys::{decode, live_binding, LiveBinding};
use crate::controllers::shared::cluster_cache::ClusterCache;
use crate::controllers::shared::json_edit::set_path;
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::controllers::shared::template_ref::template_ref;
use crate::events::{EventRecorder, EventType};
use crate::scheduler::decision::{
    decide, Decision, DecisionInput, SpecWrite, StatusWrite, Step, EVENT_SCHEDULE_FAILED,
    EVENT_SCHEDULE_SUCCEEDED,
};
use crate::scheduler::{
    leaving_targets, needs_scheduling, schedule, ScheduleInput, ScheduleOptions,
};
use crate::store::Store;
use async_trait::async_trait;
use flotilla_api::binding::{ResourceBindingSpec, ResourceBindingStatus};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::policy::{APPLIED_PLACEMENT_ANNOTATION, DEFAULT_SCHEDULER_NAME};
use flotilla_support::clock::SharedClock;
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
    /// Its binding writes, whose watch events do not wake it again.
    own_writes: Arc<OwnWrites>,
}

impl SchedulerController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let results = registered_counter_vec(
            registry,
            "flotilla_scheduler_results_total",
            "Scheduling decisions by result (Success, NoClusterFit, Unschedulable, SchedulerError).",
            &["result"],
        )?;
        Ok(Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events,
            results,
            own_writes: Arc::new(OwnWrites::default()),
        })
    }

    /// The record of its own binding writes, which its binding sources skip.
    pub fn own_writes(&self) -> Arc<OwnWrites> {
        self.own_writes.clone()
    }
}

impl SchedulerController {
    /// Writes a decision: the placement and the status fields the scheduler owns in one write
    /// when either differs from `binding`, then the Event. The binding is copied once, and only
    /// when the decision writes something.
    async fn write(
        &self,
        rt: &flotilla_api::kinds::ResourceType,
        binding: &Arc<Value>,
        decision: &Decision,
    ) -> Result<(), ReconcileError> {
        let mut current = binding.clone();
        if decision.spec.is_some() || decision.status.is_some() {
            // The placement and the status that says the scheduler observed it go in one
            // write: the status names the generation the spec write leaves.
            let mut updated = Value::clone(binding);
            let spec_changed = decision
                .spec
                .as_ref()
                .is_some_and(|spec| set_spec(&mut updated, spec));
            if spec_changed {
                let generation = crate::store::generation_after_update(binding, &updated);
                set_path(&mut updated, &["metadata", "generation"], json!(generation));
            }
            let status_changed = decision
                .status
                .as_ref()
                .is_some_and(|status| set_status(&mut updated, status, self.clock.now()));
            if spec_changed || status_changed {
                self.own_writes.expect(rt, binding);
                let written = if spec_changed {
                    self.store.update_with_status(rt, updated).await
                } else {
                    self.store.update_status_shared(rt, updated).await
                };
                match written {
                    Ok(written) => {
                        self.own_writes.confirm(rt, &written);
                        current = written;
                    }
                    Err(e) => {
                        self.own_writes.cancel(rt, binding);
                        return Err(e.into());
                    }
                }
            }
        }
        if let Some(event) = &decision.event {
            let kind = if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.events
                .record(&current, kind, event.reason, &event.message)
                .await;
            // Karmada records its scheduling results on the template too (docs/semantics.md
            // §8); Flotilla's own reasons stay on the binding.
            let karmadas = [EVENT_SCHEDULE_SUCCEEDED, EVENT_SCHEDULE_FAILED];
            let template = template_ref(&current).filter(|_| karmadas.contains(&event.reason));
            if let Some(template) = template {
                self.events
                    .record(&template, kind, event.reason, &event.message)
                    .await;
            }
        }
        Ok(())
    }
}

/// Sets the decision's `spec.clusters` and applied-placement annotation on `binding`; whether
/// either changed.
fn set_spec(binding: &mut Value, spec: &SpecWrite) -> bool {
    let clusters = json!(spec.clusters);
    let mut changed = false;
    if binding.lookup("/spec/clusters") != Some(&clusters) {
        set_path(binding, &["spec", "clusters"], clusters);
        changed = true;
    }
    if let Some(placement) = &spec.applied_placement {
        let pointer = format!(
            "/metadata/annotations/{}",
            APPLIED_PLACEMENT_ANNOTATION.replace('/', "~1")
        );
        if binding.lookup(&pointer).and_then(Value::as_str) != Some(placement.as_str()) {
            set_path(
                binding,
                &["metadata", "annotations", APPLIED_PLACEMENT_ANNOTATION],
                json!(placement),
            );
            changed = true;
        }
    }
    changed
}

/// Sets the status fields the scheduler owns on `binding` as decided; whether its status
/// changed. Only the status is copied to tell.
fn set_status(
    binding: &mut Value,
    status: &StatusWrite,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let before = binding.get("status").cloned();
    apply_status(binding, status, now);
    binding.get("status") != before.as_ref()
}

/// `binding` with the status fields the scheduler owns set as decided;
/// `schedulerObservedGeneration` is the generation of `binding` itself (after the spec write).
#[cfg(test)]
fn with_status(binding: &Value, status: &StatusWrite, now: chrono::DateTime<chrono::Utc>) -> Value {
    let mut updated = binding.clone();
    apply_status(&mut updated, status, now);
    updated
}

/// Sets the status fields the scheduler owns on `binding` as decided (see [`with_status`]).
fn apply_status(updated: &mut Value, status: &StatusWrite, now: chrono::DateTime<chrono::Utc>) {
    set_path(updated, &["status", "conditions"], json!(status.conditions));
    if status.observe_generation {
        let generation = updated
            .lookup("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        set_path(
            updated,
            &["status", "schedulerObservedGeneration"],
            json!(generation),
        );
    }
    if let Some(time) = status.last_scheduled_time {
        set_path(updated, &["status", "lastScheduledTime"], json!(time));
    }
    // The placement that follows an eviction goes into its history entry in this write (also
    // on a routine pass: the entry may have been written after the pass that placed it).
    let placed = status.conditions.iter().any(|c| {
        c.type_ == flotilla_api::binding::CONDITION_SCHEDULED
            && c.status == flotilla_api::meta::ConditionStatus::True
    });
    if placed && status.observe_generation {
        let mut history = crate::controllers::failover::history::history_of(updated);
        let placement = crate::controllers::failover::history::placement_of(updated);
        let at = flotilla_api::meta::Time::new(now);
        // An eviction whose own history write was lost still gets its entry, from its task.
        let tasks: Vec<flotilla_api::binding::GracefulEvictionTask> = updated
            .lookup("/spec/gracefulEvictionTasks")
            .and_then(|t| serde::Deserialize::deserialize(t).ok())
            .unwrap_or_default();
        let opened = flotilla_api::history::backfill(
            &mut history,
            &tasks,
            flotilla_api::history::FAILOVER_HISTORY_LIMIT,
        );
        if flotilla_api::history::note_placement(&mut history, &placement, at) || opened {
            set_path(updated, &["status", "failoverHistory"], json!(history));
        }
    }
    if let Some(affinity) = &status.affinity_name {
        set_path(
            updated,
            &["status", "schedulerObservingAffinityName"],
            json!(affinity),
        );
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
        let generation = binding
            .lookup("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let applied = binding
            .lookup(&format!(
                "/metadata/annotations/{}",
                APPLIED_PLACEMENT_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(str::to_string);
        let spec: ResourceBindingSpec = match decode(&binding["spec"], key) {
            Ok(spec) => spec,
            // A spec the API would refuse (written before a validation rule existed, or past
            // the API): say so on the binding once and go on with the other bindings.
            Err(e) => {
                let error = e.to_string();
                let status: ResourceBindingStatus = binding
                    .get("status")
                    .cloned()
                    .and_then(|s| serde_json::from_value(s).ok())
                    .unwrap_or_default();
                let decision = decide(&DecisionInput {
                    step: Step::InvalidSpec { error: &error },
                    status: &status,
                    generation,
                    applied_placement: applied.as_deref(),
                    leaving: &[],
                    now: self.clock.now(),
                });
                if decision.event.is_some() {
                    tracing::warn!(binding = key, error, "binding spec cannot be decoded");
                }
                self.write(&rt, &binding, &decision).await?;
                return Ok(Action::Done);
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
        let clusters = self.clusters.get().await?;
        let snapshot = &clusters.snapshot;
        let reason = needs_scheduling(&spec, &status, applied.as_deref(), snapshot);
        let leaving = leaving_targets(&spec, snapshot);
        let blocked = crate::controllers::failover::application_failover::blocked_clusters(
            &binding,
            self.clock.now(),
        );
        let result = reason.map(|_| {
            schedule(&ScheduleInput {
                spec: &spec,
                status: &status,
                clusters: snapshot,
                options: ScheduleOptions::default(),
                blocked: &blocked,
            })
        });
        let step = match (reason, &result) {
            (Some(reason), Some(result)) => Step::Scheduled {
                spec: &spec,
                reason,
                result,
            },
            _ => Step::NotNeeded { spec: &spec },
        };
        let decision = decide(&DecisionInput {
            step,
            status: &status,
            generation,
            applied_placement: applied.as_deref(),
            leaving: &leaving,
            now: self.clock.now(),
        });
        if let Some(label) = decision.result {
            self.results.with_label_values(&[label]).inc();
        }
        if let Some(event) = &decision.event {
            let clusters = decision
                .spec
                .as_ref()
                .map(|s| {
                    s.clusters
                        .iter()
                        .map(|c| format!("{}:{}", c.name, c.replicas))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            tracing::info!(binding = key, reason = ?reason, result = decision.result, clusters = %clusters, message = %event.message, "scheduling decision");
        }
        self.write(&rt, &binding, &decision).await?;
        Ok(if decision.retry {
            Action::RequeueAfter(RETRY_UNSCHEDULABLE)
        } else {
            Action::Done
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;
    use flotilla_api::binding::CONDITION_SCHEDULED;
    use flotilla_api::kinds::well_known;

    /// The scheduler on `world`, its metrics in the world's registry.
    fn scheduler_on(world: &TestWorld) -> SchedulerController {
        SchedulerController::new(
            world.store.clone(),
            world.shared_clock.clone(),
            world.events(),
            &world.metrics,
        )
        .unwrap()
    }

    /// A history entry written after the pass that placed the binding (its write lost the race
    /// with the scheduler's) gets the placement on the next pass, even a routine one; a failed
    /// pass gives it none; an eviction task without an entry gets one.
    #[test]
    fn a_routine_pass_fills_the_placement_of_a_late_history_entry() {
        use chrono::TimeZone;
        use flotilla_api::meta::{Condition, ConditionStatus};
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 9).unwrap();
        let binding = json!({"metadata": {"generation": 4},
            "spec": {"clusters": [{"name": "member2", "replicas": 3}]},
            "status": {"lastScheduledTime": "2026-01-01T00:00:01Z", "failoverHistory": [
                {"reason": "ClusterFailover", "fromCluster": "member1",
                 "failoverTime": "2026-01-01T00:00:00Z"}]}});
        let write = |status| StatusWrite {
            conditions: vec![Condition::new(CONDITION_SCHEDULED, status, "Success", "")],
            observe_generation: true,
            last_scheduled_time: None,
            affinity_name: None,
        };
        let done = with_status(&binding, &write(ConditionStatus::True), now);
        let e = &done["status"]["failoverHistory"][0];
        assert_eq!(e["targetCluster"], json!(["member2"]), "{done}");
        assert_eq!(e["rescheduledTime"], "2026-01-01T00:00:09Z");
        assert_eq!(done["status"]["lastScheduledTime"], "2026-01-01T00:00:01Z");
        let failed = with_status(&binding, &write(ConditionStatus::False), now);
        assert!(failed["status"]["failoverHistory"][0]
            .get("targetCluster")
            .is_none());
        // An eviction whose history write was lost: its task opens the entry.
        let mut lost = binding.clone();
        lost["status"]["failoverHistory"] = json!([]);
        lost["spec"]["gracefulEvictionTasks"] = json!([{"fromCluster": "member1",
            "reason": "TaintUntolerated", "producer": "TaintManager", "replicas": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z"}]);
        let done = with_status(&lost, &write(ConditionStatus::True), now);
        let e = &done["status"]["failoverHistory"][0];
        assert_eq!(e["fromCluster"], "member1", "{done}");
        assert_eq!(e["failoverTime"], "2026-01-01T00:00:00Z");
        assert_eq!(e["targetCluster"], json!(["member2"]));
    }

    #[tokio::test]
    async fn a_binding_without_placement_is_not_scheduled() {
        let world = TestWorld::new();
        let store = world.store.clone();
        let scheduler = scheduler_on(&world);
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
        let events = world.stored_events().await;
        assert!(events.is_empty(), "{events:?}");
    }

    /// Cluster `m1` (Deployments enabled) and binding `default/web-deployment` (2 replicas,
    /// Duplicated onto `m1`), not yet scheduled; answers the binding kind.
    async fn one_cluster_one_binding(world: &TestWorld) -> flotilla_api::kinds::ResourceType {
        world
            .cluster(
                "m1",
                json!({"syncMode": "Pull"}),
                json!({"apiEnablements": [{"groupVersion": "apps/v1",
                    "resources": [{"name": "deployments", "kind": "Deployment"}]}]}),
            )
            .await;
        let rt = well_known::resource_bindings();
        world
            .store
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
        rt
    }

    /// The scheduler's own placement write does not wake it again (its binding sources skip
    /// it), while a later write by someone else does; a pass that writes nothing expects
    /// nothing.
    #[tokio::test]
    async fn its_own_placement_write_does_not_wake_it() {
        use crate::store::EventType as Watch;
        let world = TestWorld::new();
        let store = world.store.clone();
        let scheduler = scheduler_on(&world);
        let rt = one_cluster_one_binding(&world).await;
        let key = "rb|default|web-deployment";
        let own = scheduler.own_writes();
        scheduler.reconcile(key).await.unwrap();
        let placed = store
            .get(&rt, Some("default"), "web-deployment")
            .await
            .unwrap();
        assert_eq!(
            placed["spec"]["clusters"],
            json!([{"name": "m1", "replicas": 2}])
        );
        assert!(
            own.is_own(&rt, Watch::Modified, &placed),
            "its write is its own"
        );
        // Someone else's later write wakes it.
        let mut edited = Value::clone(&placed);
        edited["spec"]["replicas"] = json!(3);
        let edited = store.update(&rt, edited).await.unwrap();
        assert!(!own.is_own(&rt, Watch::Modified, &edited));
        // The pass it wakes for rewrites the placement (its own write again); then a pass
        // with nothing to write leaves no expectation behind.
        scheduler.reconcile(key).await.unwrap();
        let now = store
            .get(&rt, Some("default"), "web-deployment")
            .await
            .unwrap();
        assert_eq!(
            now["spec"]["clusters"],
            json!([{"name": "m1", "replicas": 3}])
        );
        assert!(own.is_own(&rt, Watch::Modified, &now));
        scheduler.reconcile(key).await.unwrap();
        let after = store
            .get(&rt, Some("default"), "web-deployment")
            .await
            .unwrap();
        assert_eq!(now, after, "nothing to write");
        assert_eq!(own.pending(), 0, "{own:?}");
    }

    #[tokio::test]
    async fn a_routine_pass_keeps_last_scheduled_time_so_a_manual_reschedule_is_seen() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let world = TestWorld::at(start);
        let (store, fake) = (world.store.clone(), world.clock.clone());
        let scheduler = scheduler_on(&world);
        let rt = one_cluster_one_binding(&world).await;
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
        let world = TestWorld::new();
        let store = world.store.clone();
        let scheduler = scheduler_on(&world);
        world
            .cluster(
                "m1",
                json!({"syncMode": "Pull"}),
                json!({"apiEnablements": [{"groupVersion": "v1",
                    "resources": [{"name": "configmaps", "kind": "ConfigMap"}]}]}),
            )
            .await;
        let rt = well_known::resource_bindings();
        let names = world
            .bindings_with_malformed_status(|name| {
                json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": name},
                       "placement": {"clusterAffinity": {"clusterNames": ["m1"]}}})
            })
            .await;
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
        let events = world.stored_events().await;
        let invalid: Vec<&str> = events
            .iter()
            .filter(|e| e["reason"] == "InvalidStatus")
            .filter_map(|e| e["involvedObject"]["name"].as_str())
            .collect();
        assert_eq!(invalid, ["broken-array", "broken-string"]);
    }

    #[tokio::test]
    async fn an_undecodable_binding_spec_gets_a_condition_and_one_event_and_the_others_go_on() {
        let world = TestWorld::new();
        let store = world.store.clone();
        let scheduler = scheduler_on(&world);
        world
            .cluster(
                "m1",
                json!({"syncMode": "Pull"}),
                json!({"apiEnablements": [{"groupVersion": "v1",
                    "resources": [{"name": "configmaps", "kind": "ConfigMap"}]}]}),
            )
            .await;
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
        let events = world.stored_events().await;
        let invalid = events
            .iter()
            .filter(|e| e["reason"] == "InvalidSpec")
            .map(|e| e["count"].as_i64().unwrap_or(1))
            .sum::<i64>();
        assert_eq!(invalid, 1, "one Event, not one per pass");
    }

    #[tokio::test]
    async fn the_last_copy_is_kept_with_its_task_until_a_cluster_fits() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let world = TestWorld::at(start);
        let (store, fake) = (world.store.clone(), world.clock.clone());
        let scheduler = scheduler_on(&world);
        let crt = well_known::clusters();
        let taint = |effect: &str| json!({"key": "cluster.karmada.io/not-ready", "effect": effect});
        for (name, taints) in [("m1", json!([])), ("m2", json!([taint("NoSchedule")]))] {
            world
                .cluster(
                    name,
                    json!({"syncMode": "Pull", "taints": taints}),
                    json!({"apiEnablements": [{"groupVersion": "apps/v1",
                        "resources": [{"name": "deployments", "kind": "Deployment"}]}]}),
                )
                .await;
        }
        let rt = well_known::resource_bindings();
        store
            .create(
                &rt,
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": "web-deployment", "namespace": "default"},
                    "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                             "replicas": 3,
                             "placement": {"clusterAffinity": {"clusterNames": ["m1", "m2"]},
                                           "replicaScheduling": {"replicaSchedulingType": "Divided",
                                                                 "replicaDivisionPreference": "Weighted"}}}}),
            )
            .await
            .unwrap();
        let key = "rb|default|web-deployment";
        let get = || async {
            store
                .get(&rt, Some("default"), "web-deployment")
                .await
                .unwrap()
        };
        let scheduled = |b: &Value| {
            (
                b["status"]["conditions"][0]["status"].clone(),
                b["status"]["conditions"][0]["reason"].clone(),
            )
        };
        assert_eq!(scheduler.reconcile(key).await.unwrap(), Action::Done);
        let b = get().await;
        assert_eq!(
            b["spec"]["clusters"],
            json!([{"name": "m1", "replicas": 3}])
        );
        assert_eq!(scheduled(&b), (json!("True"), json!("Success")));

        // m1 fails; the taint manager evicts the binding from it (m2 is still tainted).
        fake.advance(chrono::Duration::seconds(30));
        let mut m1 = store.get(&crt, None, "m1").await.unwrap();
        m1["spec"]["taints"] = json!([taint("NoSchedule"), taint("NoExecute")]);
        store.update(&crt, m1).await.unwrap();
        let mut b = get().await;
        let mut spec: ResourceBindingSpec = serde_json::from_value(b["spec"].clone()).unwrap();
        spec.graceful_evict_cluster(
            "m1",
            flotilla_api::binding::EvictionOptions {
                producer: "TaintManager".into(),
                reason: "TaintUntolerated".into(),
                ..Default::default()
            },
        );
        b["spec"] = serde_json::to_value(&spec).unwrap();
        store.update(&rt, b).await.unwrap();

        // No cluster fits: nothing is written over the binding's placement or its task, and the
        // condition says why, naming the cluster it is being evicted from. Twice: one Event.
        for _ in 0..2 {
            assert_eq!(
                scheduler.reconcile(key).await.unwrap(),
                Action::RequeueAfter(RETRY_UNSCHEDULABLE)
            );
        }
        let b = get().await;
        assert!(
            b["spec"]["clusters"].as_array().is_none_or(Vec::is_empty),
            "{b}"
        );
        assert_eq!(
            b["spec"]["gracefulEvictionTasks"][0]["fromCluster"], "m1",
            "{b}"
        );
        assert_eq!(scheduled(&b), (json!("False"), json!("NoClusterFit")));
        let message = b["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains("Evicting from m1 (TaintUntolerated): the eviction tasks are kept"),
            "{message}"
        );
        let events = world.stored_events().await;
        // One on the binding and, as Karmada's, one on its template.
        let failed: Vec<&Value> = events
            .iter()
            .filter(|e| e["reason"] == "ScheduleBindingFailed")
            .collect();
        let on_binding = failed
            .iter()
            .filter(|e| e["involvedObject"]["kind"] == "ResourceBinding")
            .count();
        assert_eq!(
            (on_binding, failed.len() - on_binding),
            (1, 1),
            "{failed:?}"
        );
        assert!(failed.iter().all(|e| e["message"] == message), "{failed:?}");

        // m2 recovers: the move completes, the task stays for the graceful eviction controller.
        fake.advance(chrono::Duration::seconds(30));
        let mut m2 = store.get(&crt, None, "m2").await.unwrap();
        m2["spec"]["taints"] = json!([]);
        store.update(&crt, m2).await.unwrap();
        assert_eq!(scheduler.reconcile(key).await.unwrap(), Action::Done);
        let b = get().await;
        assert_eq!(
            b["spec"]["clusters"],
            json!([{"name": "m2", "replicas": 3}])
        );
        assert_eq!(b["spec"]["gracefulEvictionTasks"][0]["fromCluster"], "m1");
        assert_eq!(scheduled(&b), (json!("True"), json!("Success")));
        assert_eq!(
            b["status"]["schedulerObservedGeneration"],
            b["metadata"]["generation"]
        );
        assert_eq!(b["status"]["lastScheduledTime"], "2026-01-01T00:01:00Z");
    }

    #[tokio::test]
    async fn one_decision_is_at_most_one_spec_write_and_one_status_write() {
        let world = TestWorld::new();
        let store = world.store.clone();
        let scheduler = scheduler_on(&world);
        world
            .cluster(
                "m1",
                json!({"syncMode": "Pull"}),
                json!({"apiEnablements": [{"groupVersion": "apps/v1",
                    "resources": [{"name": "deployments", "kind": "Deployment"}]}]}),
            )
            .await;
        let rt = well_known::resource_bindings();
        let created = store
            .create(
                &rt,
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": "web-deployment", "namespace": "default"},
                    "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                             "replicas": 2,
                             "placement": {"clusterAffinity": {"clusterNames": ["m1"]},
                                           "replicaScheduling": {"replicaSchedulingType": "Divided"}}}}),
            )
            .await
            .unwrap();
        let version = |b: &Value| {
            b["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let key = "rb|default|web-deployment";
        scheduler.reconcile(key).await.unwrap();
        let placed = store
            .get(&rt, Some("default"), "web-deployment")
            .await
            .unwrap();
        assert_eq!(
            placed["spec"]["clusters"],
            json!([{"name": "m1", "replicas": 2}])
        );
        // The Event is written after the two binding writes; its own resourceVersion is later.
        let writes = version(&placed) - version(&created);
        assert!(writes <= 2, "{writes} writes");
        // A second pass over an unchanged binding writes nothing.
        scheduler.reconcile(key).await.unwrap();
        let again = store
            .get(&rt, Some("default"), "web-deployment")
            .await
            .unwrap();
        assert_eq!(version(&again), version(&placed));
    }
}
