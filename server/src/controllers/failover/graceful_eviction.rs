//! Graceful eviction: decides when an eviction task ends, and with it the old copy. A task is
//! dropped when every cluster of the binding's new placement runs the workload Healthy (and is
//! Ready: a dead member's last report never counts), when its grace period
//! (`gracePeriodSeconds`, else `--graceful-eviction-timeout`) has passed, or when a user lifts
//! `suppressDeletion`. A task with `suppressDeletion: true` (purge mode Never) stays until then.
//! Only when a task goes does the old cluster's Work become an orphan for the binding
//! controller to delete (or, for a failback task whose cluster keeps a smaller share, is
//! rewritten to that share).
//!
//! Flotilla departs from Karmada on purpose in one place: a binding whose new placement is
//! empty (no feasible cluster was found) keeps its tasks whatever their age — dropping them
//! would delete the last copy (karmada-io/karmada#7455). The decision is a pure function of the
//! tasks, the placement, the aggregated status and `now`.

use crate::controllers::failover::history;
use crate::controllers::failover::metrics::{seconds_since, FailoverMetrics};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::shared::aggregation::aggregate;
use crate::controllers::shared::binding_keys::{
    decode, live_binding, owned_works, status_or_default, LiveBinding,
};
use crate::controllers::shared::cluster_cache::ClusterCache;
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::json_edit::set_path;
use crate::events::{EventRecorder, EventType};
use crate::store::Store;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::binding::{GracefulEvictionTask, ResourceBindingSpec};
use flotilla_api::history::{note_healthy, note_task_end, TaskEnd};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::meta::Time;
use flotilla_api::work::ResourceHealth;
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Every cluster of the new placement reports the workload Healthy.
    NewPlacementHealthy,
    /// The task's grace period passed.
    GracePeriodPassed,
    /// A user set `suppressDeletion: false`.
    SuppressionLifted,
}

impl DropReason {
    /// The Event reason for a task that ended so.
    pub fn event_reason(self) -> &'static str {
        match self {
            DropReason::NewPlacementHealthy => "EvictionTaskDoneHealthy",
            DropReason::GracePeriodPassed => "EvictionTaskTimedOut",
            DropReason::SuppressionLifted => "EvictionTaskReleased",
        }
    }
}

/// What happens to one task now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskFate {
    /// The task is new: stamp its creationTimestamp now and keep it.
    Stamp,
    /// Keep it; look again after this long (`None`: only a change will end it).
    Keep(Option<Duration>),
    /// Keep it because the new placement is empty: dropping it would lose the last copy.
    KeepLastCopy,
    /// Drop it; the old copy goes.
    Drop(DropReason),
}

/// The world a task is judged in.
#[derive(Clone, Copy)]
pub struct Assessment<'a> {
    /// The binding's spec (its `clusters` are the new placement).
    pub spec: &'a ResourceBindingSpec,
    /// The workload's health on a cluster, judged from its Work as it is now (not from the
    /// binding's aggregated status, which may predate the new placement).
    pub health: &'a dyn Fn(&str) -> Option<ResourceHealth>,
    /// Whether the scheduler has seen the binding's current generation.
    pub scheduled: bool,
    /// Whether a cluster is Ready now.
    pub ready: &'a dyn Fn(&str) -> bool,
    /// `--graceful-eviction-timeout`.
    pub default_timeout: Duration,
    /// Now.
    pub now: DateTime<Utc>,
}

impl Assessment<'_> {
    /// Whether every cluster of the new placement runs the workload Healthy on a Ready member.
    /// An empty placement is not healthy (Karmada counts it as healthy; that loses the copy).
    /// A cluster of the placement that is itself the source of a task (a failback shrinks the
    /// temporary cluster's share: its old copy stays as it was until the task ends) is not
    /// judged: it runs the old copy, not the new placement.
    pub fn new_placement_healthy(&self) -> bool {
        let mut judged = self
            .spec
            .clusters
            .iter()
            .filter(|c| !self.spec.is_evicting(&c.name))
            .peekable();
        judged.peek().is_some()
            && judged.all(|c| {
                (self.ready)(&c.name) && (self.health)(&c.name) == Some(ResourceHealth::Healthy)
            })
    }

    /// The fate of one task.
    pub fn task(&self, task: &GracefulEvictionTask) -> TaskFate {
        match task.suppress_deletion {
            Some(true) => return TaskFate::Keep(None),
            Some(false) => return TaskFate::Drop(DropReason::SuppressionLifted),
            None => {}
        }
        let Some(created) = task.creation_timestamp.as_ref().map(Time::as_datetime) else {
            return TaskFate::Stamp;
        };
        if self.spec.clusters.is_empty() {
            // Right after an eviction the placement is empty because the scheduler has not
            // looked yet: keep the task quietly (its write wakes this controller). Only an
            // empty placement the scheduler chose holds the last copy.
            return if self.scheduled {
                TaskFate::KeepLastCopy
            } else {
                TaskFate::Keep(None)
            };
        }
        if self.scheduled && self.new_placement_healthy() {
            return TaskFate::Drop(DropReason::NewPlacementHealthy);
        }
        let timeout = task
            .grace_period_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .unwrap_or(self.default_timeout);
        let deadline = created + chrono::Duration::from_std(timeout).unwrap_or_default();
        if self.now >= deadline {
            return TaskFate::Drop(DropReason::GracePeriodPassed);
        }
        TaskFate::Keep((deadline - self.now).to_std().ok())
    }
}

/// The history's side of an assessment: each dropped task closes its entry (with the drop's
/// Event reason and the placement), and a Healthy placement stamps the entries of the tasks
/// still kept. Returns whether the history changed.
pub fn edit_history(
    history: &mut [flotilla_api::history::FailoverHistoryItem],
    spec: &ResourceBindingSpec,
    outcome: &Outcome,
    healthy_now: bool,
    now: DateTime<Utc>,
) -> bool {
    let placement: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
    let at = Time::new(now);
    let mut changed = false;
    for (task, reason) in &outcome.dropped {
        let end = TaskEnd {
            from_cluster: &task.from_cluster,
            reason: reason.event_reason(),
            healthy: *reason == DropReason::NewPlacementHealthy,
        };
        changed |= note_task_end(history, end, &placement, at);
    }
    if healthy_now {
        let alive: Vec<&str> = outcome
            .kept
            .iter()
            .map(|t| t.from_cluster.as_str())
            .collect();
        changed |= note_healthy(history, &alive, at);
    }
    changed
}

/// The Event message of a task that ended: why, and for a timeout which one (the task's
/// `gracePeriodSeconds` or the server-wide `--graceful-eviction-timeout`).
pub fn drop_message(
    task: &GracefulEvictionTask,
    reason: DropReason,
    default_timeout: Duration,
) -> String {
    let why = match (reason, task.grace_period_seconds) {
        (DropReason::NewPlacementHealthy, _) => {
            "every cluster of the new placement is Healthy".to_string()
        }
        (DropReason::GracePeriodPassed, Some(s)) => {
            format!("its grace period passed (gracePeriodSeconds {s})")
        }
        (DropReason::GracePeriodPassed, None) => format!(
            "its grace period passed (--graceful-eviction-timeout {})",
            humantime::format_duration(default_timeout)
        ),
        (DropReason::SuppressionLifted, _) => "suppressDeletion was set to false".to_string(),
    };
    format!(
        "The eviction task for cluster {} ended because {why}; the old copy there is deleted",
        task.from_cluster
    )
}

/// The outcome for all tasks of a binding.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The tasks to keep, new ones stamped.
    pub kept: Vec<GracefulEvictionTask>,
    /// The tasks that end, with why.
    pub dropped: Vec<(GracefulEvictionTask, DropReason)>,
    /// Tasks kept only because the new placement is empty.
    pub holding_last_copy: Vec<String>,
    /// When to look again (the earliest grace period still running).
    pub requeue_after: Option<Duration>,
}

impl Outcome {
    /// Whether the task list changes.
    pub fn changed(&self, before: &[GracefulEvictionTask]) -> bool {
        self.kept.as_slice() != before
    }
}

/// Judges every task of a binding.
pub fn assess(tasks: &[GracefulEvictionTask], world: &Assessment<'_>) -> Outcome {
    let mut out = Outcome::default();
    let next = |d: Duration, out: &mut Outcome| {
        out.requeue_after = Some(out.requeue_after.map_or(d, |r| r.min(d)));
    };
    for task in tasks {
        match world.task(task) {
            TaskFate::Stamp => {
                let mut stamped = task.clone();
                stamped.creation_timestamp = Some(Time::new(world.now));
                // Judge it once stamped, so a task evicted into an already healthy placement
                // does not wait for another pass.
                let timeout = task
                    .grace_period_seconds
                    .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
                    .unwrap_or(world.default_timeout);
                next(timeout, &mut out);
                out.kept.push(stamped);
            }
            TaskFate::Keep(after) => {
                if let Some(d) = after {
                    next(d, &mut out);
                }
                out.kept.push(task.clone());
            }
            TaskFate::KeepLastCopy => {
                out.holding_last_copy.push(task.from_cluster.clone());
                out.kept.push(task.clone());
            }
            TaskFate::Drop(reason) => out.dropped.push((task.clone(), reason)),
        }
    }
    out
}

/// The graceful eviction controller: one reconcile per binding with eviction tasks; it stamps
/// new tasks, drops finished ones (an Event and a metric each) and looks again when the
/// earliest grace period ends.
pub struct GracefulEvictionController {
    store: Arc<dyn Store>,
    clusters: ClusterCache,
    clock: SharedClock,
    events: EventRecorder,
    metrics: FailoverMetrics,
    interpreter: Arc<dyn TemplateInterpreter>,
    default_timeout: Duration,
    /// Tasks per binding as of its last pass, for the pending-tasks gauge.
    pending: Mutex<HashMap<String, usize>>,
}

impl GracefulEvictionController {
    /// A graceful eviction controller with `--graceful-eviction-timeout` `default_timeout`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        metrics: FailoverMetrics,
        interpreter: Arc<dyn TemplateInterpreter>,
        default_timeout: Duration,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events: events.for_component("graceful-eviction"),
            metrics,
            interpreter,
            default_timeout,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The new placement runs Healthy while every task is kept: the entries of those tasks
    /// get `healthyTime` in a status write. A failed write loses only the stamp.
    async fn note_healthy(
        &self,
        rt: &flotilla_api::kinds::ResourceType,
        binding: &Value,
        spec: &ResourceBindingSpec,
        outcome: &Outcome,
        now: DateTime<Utc>,
    ) {
        let result = history::update(self.store.as_ref(), rt, binding, |history, _| {
            edit_history(history, spec, outcome, true, now)
        })
        .await;
        if let Err(err) = result {
            tracing::warn!(binding = %binding["metadata"]["name"], error = %err, "writing the failover history failed");
        }
    }

    fn count_pending(&self, key: &str, tasks: usize) {
        let mut pending = self.pending.lock();
        if tasks == 0 {
            pending.remove(key);
        } else {
            pending.insert(key.to_string(), tasks);
        }
        let total: usize = pending.values().sum();
        self.metrics
            .tasks_pending
            .set(i64::try_from(total).unwrap_or(i64::MAX));
    }
}

/// What of a binding the graceful eviction controller judges: its tasks, its placement, its
/// status (health per cluster) and its generation. A binding without tasks has one constant
/// fingerprint, so the status writes of every binding in the fleet do not wake this controller.
pub fn judged_fingerprint(binding: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let no_tasks = binding
        .lookup("/spec/gracefulEvictionTasks")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_tasks {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::controllers::runtime::controller::generation_fingerprint(binding).hash(&mut h);
    for pointer in ["/spec/gracefulEvictionTasks", "/spec/clusters"] {
        binding.lookup(pointer).map(Value::to_string).hash(&mut h);
    }
    // Of the status, only what a task is judged on: whether the scheduler has seen this
    // generation (an empty placement holds the last copy only once it has), and each
    // cluster's health.
    binding
        .lookup("/status/schedulerObservedGeneration")
        .and_then(Value::as_i64)
        .hash(&mut h);
    crate::controllers::shared::fan_out::hash_cluster_health(binding, &mut h);
    h.finish()
}

#[async_trait]
impl Reconciler for GracefulEvictionController {
    fn name(&self) -> &'static str {
        "graceful-eviction"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding { rt, object }) = live_binding(self.store.as_ref(), key).await? else {
            self.count_pending(key, 0);
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&object["spec"], key)?;
        if spec.graceful_eviction_tasks.is_empty() {
            self.count_pending(key, 0);
            return Ok(Action::Done);
        }
        let status = status_or_default(&object, key);
        let generation = object
            .lookup("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let clusters = self.clusters.get().await?;
        let scheduled = status.scheduler_observed_generation == generation;
        // Health is asked only of a scheduled placement whose clusters are all Ready: until
        // then the Works (and their manifests) are not read, so the passes that follow an
        // eviction (the taint manager's write, the scheduler's) stay cheap.
        let items = if scheduled
            && !spec.clusters.is_empty()
            && spec.clusters.iter().all(|c| clusters.is_ready(&c.name))
        {
            let works = owned_works(self.store.as_ref(), &object).await?;
            let assigned = |c: &str| spec.workload_replicas_on(c);
            aggregate(
                &works,
                &|c: &str| clusters.is_ready(c),
                &assigned,
                self.interpreter.as_ref(),
            )
        } else {
            Vec::new()
        };
        let now = self.clock.now();
        let (outcome, healthy_now) = {
            let ready = |name: &str| clusters.is_ready(name);
            let health = |name: &str| {
                items
                    .iter()
                    .find(|i| i.cluster_name == name)
                    .and_then(|i| i.health)
            };
            let world = Assessment {
                spec: &spec,
                health: &health,
                scheduled,
                ready: &ready,
                default_timeout: self.default_timeout,
                now,
            };
            (
                assess(&spec.graceful_eviction_tasks, &world),
                scheduled && world.new_placement_healthy(),
            )
        };
        // The tasks that end and their history entries in one write (a conflict retries the
        // whole assessment on the new binding); a Healthy placement alone only stamps the
        // entries, in a status write after the Events.
        let tasks_changed = outcome.changed(&spec.graceful_eviction_tasks);
        if tasks_changed {
            let mut updated = Value::clone(&object);
            set_path(
                &mut updated,
                &["spec", "gracefulEvictionTasks"],
                serde_json::to_value(&outcome.kept).unwrap_or_default(),
            );
            let mut history = history::history_of(&object);
            if edit_history(&mut history, &spec, &outcome, healthy_now, now) {
                set_path(
                    &mut updated,
                    &["status", "failoverHistory"],
                    serde_json::to_value(&history).unwrap_or_default(),
                );
            }
            self.store.update_with_status(&rt, updated).await?;
        }
        self.count_pending(key, outcome.kept.len());
        for (task, reason) in &outcome.dropped {
            let held = task
                .creation_timestamp
                .as_ref()
                .map(|c| seconds_since(c.as_datetime(), now));
            self.metrics
                .tasks_dropped
                .with_label_values(&[reason.event_reason()])
                .inc();
            if let (DropReason::NewPlacementHealthy, Some(secs)) = (reason, held) {
                self.metrics
                    .eviction_to_healthy
                    .with_label_values(&[task.producer.as_str()])
                    .observe(secs);
            }
            tracing::info!(binding = key, cluster = %task.from_cluster, reason = ?reason, "eviction task done");
            self.events
                .record(
                    &object,
                    EventType::Normal,
                    reason.event_reason(),
                    &drop_message(task, *reason, self.default_timeout),
                )
                .await;
        }
        for cluster in &outcome.holding_last_copy {
            self.events
                .record(
                    &object,
                    EventType::Warning,
                    "EvictionTaskHeld",
                    &format!(
                        "The eviction task for cluster {cluster} is kept: no other cluster could be chosen, and the copy there is the last one"
                    ),
                )
                .await;
        }
        if !tasks_changed && healthy_now {
            self.note_healthy(&rt, &object, &spec, &outcome, now).await;
        }
        Ok(outcome
            .requeue_after
            .map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::failover::testing::health_status;
    use chrono::TimeZone;
    use flotilla_api::binding::{ResourceBindingStatus, TargetCluster};

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .unwrap_or_default()
    }

    fn task(
        created: Option<i64>,
        grace: Option<i32>,
        suppress: Option<bool>,
    ) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: "member1".into(),
            reason: "TaintUntolerated".into(),
            producer: "TaintManager".into(),
            grace_period_seconds: grace,
            suppress_deletion: suppress,
            creation_timestamp: created.map(|s| Time::new(at(s))),
            ..Default::default()
        }
    }

    #[test]
    fn the_drop_message_names_the_timeout_that_ended_the_task() {
        let ten_min = Duration::from_secs(600);
        let cases = [
            (
                task(Some(0), Some(8), None),
                DropReason::GracePeriodPassed,
                "The eviction task for cluster member1 ended because its grace period passed \
                 (gracePeriodSeconds 8); the old copy there is deleted",
            ),
            (
                task(Some(0), None, None),
                DropReason::GracePeriodPassed,
                "The eviction task for cluster member1 ended because its grace period passed \
                 (--graceful-eviction-timeout 10m); the old copy there is deleted",
            ),
            (
                task(Some(0), Some(8), None),
                DropReason::NewPlacementHealthy,
                "The eviction task for cluster member1 ended because every cluster of the new \
                 placement is Healthy; the old copy there is deleted",
            ),
            (
                task(Some(0), None, Some(false)),
                DropReason::SuppressionLifted,
                "The eviction task for cluster member1 ended because suppressDeletion was set \
                 to false; the old copy there is deleted",
            ),
        ];
        for (task, reason, want) in cases {
            assert_eq!(drop_message(&task, reason, ten_min), want, "{reason:?}");
        }
    }

    #[test]
    fn task_fate_table() {
        use ResourceHealth::*;
        use TaskFate::*;
        let on_member2 = ResourceBindingSpec {
            clusters: vec![TargetCluster::new("member2", 3)],
            ..Default::default()
        };
        let nowhere = ResourceBindingSpec::default();
        let ten_min = Duration::from_secs(600);
        let all_ready = |_: &str| true;
        let member2_down = |c: &str| c != "member2";
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            &ResourceBindingSpec,
            ResourceBindingStatus,
            bool,
            &dyn Fn(&str) -> bool,
            GracefulEvictionTask,
            i64,
            TaskFate,
        )> = vec![
            (
                "new task",
                &on_member2,
                health_status(&[]),
                true,
                &all_ready,
                task(None, None, None),
                0,
                Stamp,
            ),
            (
                "healthy new placement",
                &on_member2,
                health_status(&[("member2", Healthy)]),
                true,
                &all_ready,
                task(Some(0), None, None),
                5,
                Drop(DropReason::NewPlacementHealthy),
            ),
            (
                "healthy but not scheduled yet",
                &on_member2,
                health_status(&[("member2", Healthy)]),
                false,
                &all_ready,
                task(Some(0), None, None),
                5,
                Keep(Some(Duration::from_secs(595))),
            ),
            (
                "healthy report of a member that is not Ready",
                &on_member2,
                health_status(&[("member2", Healthy)]),
                true,
                &member2_down,
                task(Some(0), None, None),
                5,
                Keep(Some(Duration::from_secs(595))),
            ),
            (
                "unhealthy, within the server timeout",
                &on_member2,
                health_status(&[("member2", Unhealthy)]),
                true,
                &all_ready,
                task(Some(0), None, None),
                599,
                Keep(Some(Duration::from_secs(1))),
            ),
            (
                "unhealthy, server timeout passed",
                &on_member2,
                health_status(&[("member2", Unhealthy)]),
                true,
                &all_ready,
                task(Some(0), None, None),
                600,
                Drop(DropReason::GracePeriodPassed),
            ),
            (
                "unknown, the task's own grace period passed",
                &on_member2,
                health_status(&[("member2", Unknown)]),
                true,
                &all_ready,
                task(Some(0), Some(100), None),
                100,
                Drop(DropReason::GracePeriodPassed),
            ),
            (
                "the task's own grace period runs",
                &on_member2,
                health_status(&[]),
                true,
                &all_ready,
                task(Some(0), Some(100), None),
                40,
                Keep(Some(Duration::from_secs(60))),
            ),
            (
                "suppressed: kept for ever",
                &on_member2,
                health_status(&[("member2", Healthy)]),
                true,
                &all_ready,
                task(Some(0), None, Some(true)),
                100_000,
                Keep(None),
            ),
            (
                "suppression lifted",
                &on_member2,
                health_status(&[]),
                true,
                &all_ready,
                task(Some(0), None, Some(false)),
                1,
                Drop(DropReason::SuppressionLifted),
            ),
            (
                "no new placement: the last copy stays past its deadline",
                &nowhere,
                health_status(&[]),
                true,
                &all_ready,
                task(Some(0), Some(10), None),
                100_000,
                KeepLastCopy,
            ),
            (
                "evicted, not yet rescheduled: kept, and no claim that nothing fits",
                &nowhere,
                health_status(&[]),
                false,
                &all_ready,
                task(Some(0), Some(10), None),
                100_000,
                Keep(None),
            ),
        ];
        for (what, spec, st, scheduled, ready, t, now, want) in cases {
            let health = |c: &str| {
                st.aggregated_status
                    .iter()
                    .find(|i| i.cluster_name == c)
                    .and_then(|i| i.health)
            };
            let world = Assessment {
                spec,
                health: &health,
                scheduled,
                ready,
                default_timeout: ten_min,
                now: at(now),
            };
            assert_eq!(world.task(&t), want, "{what}");
        }
    }

    #[test]
    fn assess_stamps_keeps_drops_and_requeues() {
        let spec = ResourceBindingSpec {
            clusters: vec![
                TargetCluster::new("member2", 3),
                TargetCluster::new("member3", 1),
            ],
            ..Default::default()
        };
        let st = health_status(&[
            ("member2", ResourceHealth::Healthy),
            ("member3", ResourceHealth::Unhealthy),
        ]);
        let mut fresh = task(None, Some(30), None);
        fresh.from_cluster = "member4".into();
        let mut old = task(Some(0), Some(100), None);
        old.from_cluster = "member5".into();
        let running = task(Some(0), None, None);
        let tasks = vec![running.clone(), fresh.clone(), old.clone()];
        let health_of = |st: &ResourceBindingStatus, c: &str| {
            st.aggregated_status
                .iter()
                .find(|i| i.cluster_name == c)
                .and_then(|i| i.health)
        };
        let health = |c: &str| health_of(&st, c);
        let world = Assessment {
            spec: &spec,
            health: &health,
            scheduled: true,
            ready: &|_| true,
            default_timeout: Duration::from_secs(600),
            now: at(200),
        };
        let out = assess(&tasks, &world);
        assert_eq!(out.dropped, vec![(old, DropReason::GracePeriodPassed)]);
        assert_eq!(out.kept.len(), 2);
        assert_eq!(out.kept[1].creation_timestamp, Some(Time::new(at(200))));
        assert_eq!(out.requeue_after, Some(Duration::from_secs(30)));
        assert!(out.changed(&tasks));
        // Once member3 turns Healthy every task goes.
        let healthy = health_status(&[
            ("member2", ResourceHealth::Healthy),
            ("member3", ResourceHealth::Healthy),
        ]);
        let health = |c: &str| health_of(&healthy, c);
        let world = Assessment {
            health: &health,
            ..world
        };
        let out = assess(&out.kept, &world);
        assert!(out.kept.is_empty());
        assert_eq!(out.dropped.len(), 2);
    }

    mod controller {
        use super::*;
        use crate::controllers::failover::testing::nginx_binding;
        use crate::controllers::runtime::testing::{SpecReplicas, TestWorld};
        use flotilla_api::kinds::well_known;
        use serde_json::json;

        const KEY: &str = "rb|default|nginx-deployment";

        #[tokio::test]
        async fn a_task_is_stamped_kept_until_healthy_then_dropped_with_an_event() {
            let world = TestWorld::at(at(0));
            let (store, clock) = (world.store.clone(), world.clock.clone());
            let metrics = world.ctx.failover_metrics.clone();
            world
                .cluster(
                    "member2",
                    json!({"syncMode": "Pull"}),
                    json!({"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                        "message": "", "lastTransitionTime": "2023-11-14T22:13:20Z"}]}),
                )
                .await;
            store
                .create(
                    &well_known::resource_bindings(),
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": "nginx-deployment", "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                                 "replicas": 3, "clusters": [{"name": "member2", "replicas": 3}],
                                 "gracefulEvictionTasks": [{"fromCluster": "member1", "reason": "TaintUntolerated",
                                     "producer": "TaintManager", "replicas": 1}]}}),
                )
                .await
                .unwrap();
            let ge = GracefulEvictionController::new(
                store.clone(),
                world.shared_clock.clone(),
                world.events(),
                metrics.clone(),
                Arc::new(SpecReplicas),
                Duration::from_secs(600),
            );
            // member2's Work, written for the 3 replicas now assigned, not yet reporting.
            let b = nginx_binding(&store).await;
            store
                .create(
                    &well_known::works(),
                    json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                        "metadata": {"name": "nginx", "namespace": "karmada-es-member2",
                            "annotations": {"flotilla.io/assigned-replicas": "3"},
                            "ownerReferences": [{"apiVersion": "work.karmada.io/v1alpha2",
                                "kind": "ResourceBinding", "name": "nginx-deployment",
                                "uid": b["metadata"]["uid"], "controller": true}]},
                        "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "nginx", "namespace": "default"}, "spec": {"replicas": 3}}]}}}),
                )
                .await
                .unwrap();
            // First sight: stamped, kept, look again at the timeout.
            let action = ge.reconcile(KEY).await.unwrap();
            assert!(
                matches!(action, Action::RequeueAfter(d) if d == Duration::from_secs(600)),
                "{action:?}"
            );
            let b = nginx_binding(&store).await;
            assert!(
                b["spec"]["gracefulEvictionTasks"][0]["creationTimestamp"].is_string(),
                "{b}"
            );
            assert_eq!(metrics.tasks_pending.get(), 1);
            // The scheduler has seen the generation and the binding's aggregated status says
            // Healthy, but the Work itself reports 2 of 3 ready: the task stays.
            let mut b = nginx_binding(&store).await;
            b["status"] = json!({"schedulerObservedGeneration": b["metadata"]["generation"],
                "aggregatedStatus": [{"clusterName": "member2", "applied": true, "health": "Healthy"}]});
            store
                .update_status(&well_known::resource_bindings(), b)
                .await
                .unwrap();
            let report = |ready: i64| {
                let store = store.clone();
                async move {
                    let mut w = store
                        .get(&well_known::works(), Some("karmada-es-member2"), "nginx")
                        .await
                        .unwrap();
                    w["status"] = json!({"conditions": [{"type": "Applied", "status": "True",
                        "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": "2023-11-14T22:13:20Z"}],
                        "manifestStatuses": [{"identifier": {"ordinal": 0}, "status": {"readyReplicas": ready}}]});
                    store.update_status(&well_known::works(), w).await.unwrap();
                }
            };
            report(2).await;
            clock.advance(chrono::Duration::seconds(10));
            assert!(matches!(
                ge.reconcile(KEY).await,
                Ok(Action::RequeueAfter(_))
            ));
            assert_eq!(metrics.tasks_pending.get(), 1);
            // A Work written for another replica count is not the new placement's copy.
            let set_assigned = |n: &'static str| {
                let store = store.clone();
                async move {
                    let mut w = store
                        .get(&well_known::works(), Some("karmada-es-member2"), "nginx")
                        .await
                        .unwrap();
                    w["metadata"]["annotations"]["flotilla.io/assigned-replicas"] = json!(n);
                    store.update(&well_known::works(), w).await.unwrap();
                }
            };
            set_assigned("2").await;
            report(3).await;
            assert!(matches!(
                ge.reconcile(KEY).await,
                Ok(Action::RequeueAfter(_))
            ));
            set_assigned("3").await;
            clock.advance(chrono::Duration::seconds(20));
            assert!(matches!(ge.reconcile(KEY).await, Ok(Action::Done)));
            let b = nginx_binding(&store).await;
            assert_eq!(b["spec"]["gracefulEvictionTasks"], json!([]), "{b}");
            assert_eq!(metrics.tasks_pending.get(), 0);
            assert_eq!(
                metrics
                    .tasks_dropped
                    .with_label_values(&["EvictionTaskDoneHealthy"])
                    .get(),
                1
            );
            assert!(world
                .stored_events()
                .await
                .iter()
                .any(|e| e["reason"] == "EvictionTaskDoneHealthy"));
        }
    }

    #[test]
    fn only_bindings_with_tasks_are_woken_by_their_status() {
        let quiet =
            serde_json::json!({"metadata": {"generation": 1}, "spec": {}, "status": {"a": 1}});
        let quiet_later =
            serde_json::json!({"metadata": {"generation": 2}, "spec": {}, "status": {"a": 2}});
        assert_eq!(judged_fingerprint(&quiet), judged_fingerprint(&quiet_later));
        let evicting = serde_json::json!({"metadata": {"generation": 1},
            "spec": {"gracefulEvictionTasks": [{"fromCluster": "m1"}]},
            "status": {"aggregatedStatus": [{"clusterName": "m2", "health": "Unknown",
                "status": {"readyReplicas": 0}}]}});
        let mut healthier = evicting.clone();
        healthier["status"]["aggregatedStatus"][0]["health"] = serde_json::json!("Healthy");
        assert_ne!(
            judged_fingerprint(&evicting),
            judged_fingerprint(&healthier)
        );
        // The scheduler catching up is news: an empty placement it chose holds the last copy.
        let mut seen = evicting.clone();
        seen["status"]["schedulerObservedGeneration"] = serde_json::json!(1);
        assert_ne!(judged_fingerprint(&evicting), judged_fingerprint(&seen));
        // What a task is not judged on (conditions, the reflected status) wakes nobody.
        let mut busier = evicting.clone();
        busier["status"]["aggregatedStatus"][0]["status"]["readyReplicas"] = serde_json::json!(1);
        busier["status"]["conditions"] = serde_json::json!([{"type": "Scheduled"}]);
        assert_eq!(judged_fingerprint(&evicting), judged_fingerprint(&busier));
        assert_ne!(judged_fingerprint(&evicting), judged_fingerprint(&quiet));
    }
}
