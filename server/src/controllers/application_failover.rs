//! Application failover: moves a workload off a cluster where it has stayed Unhealthy for
//! `spec.failover.application.decisionConditions.tolerationSeconds` (karmada-semantics.md §11,
//! with Part 1's changes). Per binding and per cluster of its placement, the time the workload
//! first read Unhealthy in `status.aggregatedStatus` is kept; Healthy clears it, Unknown
//! neither clears it nor counts as recovery (Karmada #7431), and an eviction only happens on a
//! pass that reads Unhealthy. A due cluster is evicted through the one eviction path: an
//! eviction task (producer `resource-binding-application-failover-controller`, or the
//! `cluster-…` one for ClusterResourceBindings, reason `ApplicationFailure`) carrying the
//! policy's purge mode, grace period (graceful modes, default 600 s), `suppressDeletion`
//! (Never), `clustersBeforeFailover` and the state-preservation labels; the cluster leaves
//! `spec.clusters` and the ordinary scheduler places the workload elsewhere.
//!
//! Where the state lives: Karmada keeps the unhealthy timers in memory, so a restart of the
//! controller starts every timer again (and a crash-looping control plane never fails over).
//! Flotilla keeps them in the binding, in the annotation [`STATE_ANNOTATION`]: an annotation
//! because it bumps no generation (a timer starting does not make the scheduler look again),
//! no other controller owns it (the status is rebuilt by the scheduler and the status
//! controller), and `kubectl get -o yaml` shows it. The same annotation records the clusters
//! the application left (the scheduler keeps them out for a block period after their task is
//! gone: no ping-pong) and the failover streak that backs off repeated moves and bounds them.
//!
//! Everything here is a pure function of (binding, state, settings, now); the controller reads
//! the binding, calls [`decide`] and writes the result back with compare-and-swap.

use super::binding_keys::{decode, live_binding, status_or_default, LiveBinding};
use super::failover_metrics::{seconds_since, FailoverMetrics};
use super::json_edit::set_path;
use super::runtime::{Action, ReconcileError, Reconciler};
use super::taint_manager::preserved_state;
use crate::clock::SharedClock;
use crate::events::{EventRecorder, EventType};
use crate::store::Store;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::binding::{
    EvictionOptions, ResourceBindingSpec, ResourceBindingStatus,
    EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER, EVICTION_PRODUCER_RB_APPLICATION_FAILOVER,
    EVICTION_REASON_APPLICATION_FAILURE,
};
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::policy::{ApplicationFailoverBehavior, PurgeMode};
use flotilla_api::work::ResourceHealth;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The binding annotation holding application failover's durable state ([`FailoverState`]).
pub const STATE_ANNOTATION: &str = "applicationfailover.flotilla.io/state";
/// The binding condition set when application failover stops moving a workload.
pub const CONDITION_APPLICATION_FAILOVER: &str = "ApplicationFailover";
/// `tolerationSeconds` when the policy has none (Karmada's CRD default).
pub const DEFAULT_TOLERATION_SECONDS: i32 = 300;
/// `gracePeriodSeconds` of a graceful task when the policy has none (Karmada's webhook).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i32 = 600;

/// Application failover's settings, from the server's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationFailoverSettings {
    /// The `Failover` feature gate: off, nothing is evicted (timers are still kept).
    pub enabled: bool,
    /// `--application-failover-block-period`: how long a cluster the application left stays
    /// out of its placement after its eviction task is gone.
    pub block_period: Duration,
    /// `--application-failover-backoff`: the second failover of a streak waits this long
    /// after the first, the third twice as long, and so on.
    pub backoff: Duration,
    /// `--application-failover-max-backoff`: the cap of that wait.
    pub max_backoff: Duration,
    /// `--application-failover-max-moves`: failovers in one streak (without the workload
    /// turning Healthy in between); past it the workload stays where it is and the binding
    /// says so. 0 = unbounded.
    pub max_moves: u32,
}

impl Default for ApplicationFailoverSettings {
    /// A cluster that failed an application is left alone for half an hour (a node pool or
    /// quota problem is rarely fixed in minutes, and the default failover itself takes 5 min
    /// of toleration plus up to 10 min of grace); a second move in a row waits 5 min more (one
    /// default toleration), doubling up to an hour; three moves in a row without recovery
    /// mean the fault travels with the application, and moving it on does not help.
    fn default() -> Self {
        Self {
            enabled: true,
            block_period: Duration::from_secs(30 * 60),
            backoff: Duration::from_secs(5 * 60),
            max_backoff: Duration::from_secs(60 * 60),
            max_moves: 3,
        }
    }
}

/// Application failover's durable state, kept in the binding's [`STATE_ANNOTATION`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailoverState {
    /// Per cluster of the placement: since when the workload has read Unhealthy (kept through
    /// Unknown).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unhealthy_since: BTreeMap<String, Time>,
    /// Clusters the application left, blocked while their task exists and until
    /// `blockedUntil` after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<LeftCluster>,
    /// Failovers since the workload was last Healthy on its whole placement.
    #[serde(skip_serializing_if = "is_zero")]
    pub streak: u32,
    /// When the last failover happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<Time>,
    /// A due failover waits for the back-off until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<Time>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A cluster the application left.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeftCluster {
    /// The cluster.
    pub cluster: String,
    /// When it was evicted.
    pub evicted_at: Option<Time>,
    /// End of the block period; absent while the eviction task exists (blocked until it goes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_until: Option<Time>,
}

impl FailoverState {
    /// The state recorded on a binding (empty when absent or unreadable: a hand-edited
    /// annotation costs the timers, never a failover).
    pub fn of(binding: &Value) -> Self {
        binding
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(STATE_ANNOTATION))
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        *self == FailoverState::default()
    }

    /// Clusters the scheduler must keep out at `now`, with the end of their block (`None`:
    /// while the eviction task exists).
    pub fn blocked(&self, now: DateTime<Utc>) -> Vec<(String, Option<Time>)> {
        self.left
            .iter()
            .filter(|l| {
                l.blocked_until
                    .as_ref()
                    .is_none_or(|u| u.as_datetime() > now)
            })
            .map(|l| (l.cluster.clone(), l.blocked_until.clone()))
            .collect()
    }
}

/// The clusters a binding's application failover blocks at `now` (for the scheduler and
/// `explain`).
pub fn blocked_clusters(binding: &Value, now: DateTime<Utc>) -> Vec<(String, Option<Time>)> {
    FailoverState::of(binding).blocked(now)
}

/// The wait before the next failover of a streak of `streak` failovers.
pub fn backoff(streak: u32, settings: &ApplicationFailoverSettings) -> Duration {
    if streak == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(streak - 1).unwrap_or(u32::MAX);
    settings
        .backoff
        .checked_mul(factor)
        .unwrap_or(settings.max_backoff)
        .min(settings.max_backoff)
}

/// `now` rounded up to the second (timestamps keep seconds: a timer must never start early).
fn ceil_second(now: DateTime<Utc>) -> Time {
    let truncated = Time::new(now);
    if truncated.as_datetime() < now {
        Time::new(now + chrono::Duration::seconds(1))
    } else {
        truncated
    }
}

/// One cluster the application leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppEviction {
    /// The cluster.
    pub cluster: String,
    /// Since when the workload was Unhealthy there.
    pub unhealthy_since: Time,
    /// The task to add.
    pub task: EvictionOptions,
    /// State-preservation rules that could not be read (label, error): the move goes on
    /// without them and each is reported.
    pub state_errors: Vec<(String, String)>,
}

/// Application failover's decision for one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The state to record.
    pub state: FailoverState,
    /// Clusters to evict now.
    pub evictions: Vec<AppEviction>,
    /// Clusters due for eviction that stay because the streak reached `max_moves`.
    pub halted: Vec<String>,
    /// Clusters due for eviction that wait for the back-off, and until when.
    pub backing_off: Option<(Vec<String>, Time)>,
    /// The streak ended (the workload is Healthy on its whole placement).
    pub recovered: bool,
    /// When to look again.
    pub requeue_after: Option<Duration>,
}

impl Decision {
    fn requeue(&mut self, d: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(d, |r| r.min(d)));
    }
}

/// The health the binding's status reports for a cluster (absent = Unknown).
fn health_on(status: &ResourceBindingStatus, cluster: &str) -> ResourceHealth {
    status
        .aggregated_status
        .iter()
        .find(|i| i.cluster_name == cluster)
        .and_then(|i| i.health)
        .unwrap_or(ResourceHealth::Unknown)
}

/// The eviction task options for a cluster the application leaves.
fn task_options(
    app: &ApplicationFailoverBehavior,
    producer: &str,
    cluster: &str,
    since: &Time,
    toleration: i32,
    before: &[String],
    labels: BTreeMap<String, String>,
) -> EvictionOptions {
    let mode = app.purge_mode.unwrap_or(PurgeMode::Graciously);
    EvictionOptions {
        purge_mode: Some(mode),
        producer: producer.to_string(),
        reason: EVICTION_REASON_APPLICATION_FAILURE.into(),
        message: format!(
            "the workload on cluster {cluster} has been Unhealthy since {} (tolerationSeconds {toleration})",
            since.as_datetime().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        grace_period_seconds: mode
            .is_graceful()
            .then(|| app.grace_period_seconds.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)),
        suppress_deletion: mode.is_never().then_some(true),
        preserved_label_state: labels,
        clusters_before_failover: before.to_vec(),
    }
}

/// Decides, for one binding at `now`: the unhealthy timers, which clusters to evict, whether
/// the back-off or the move limit holds an eviction back, and when to look again.
/// `producer` names the controller in the tasks (RB or CRB spelling).
pub fn decide(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    previous: &FailoverState,
    settings: &ApplicationFailoverSettings,
    producer: &str,
    now: DateTime<Utc>,
) -> Decision {
    let mut d = Decision::default();
    let Some(app) = spec.failover.as_ref().and_then(|f| f.application.as_ref()) else {
        // No application failover (any more): nothing to keep.
        return d;
    };
    let mut state = previous.clone();
    state.backoff_until = None;

    // Clusters left: their block runs from the moment their task is gone.
    let block = chrono::Duration::from_std(settings.block_period).unwrap_or(chrono::Duration::MAX);
    for l in &mut state.left {
        if l.blocked_until.is_none() && !spec.is_evicting(&l.cluster) {
            l.blocked_until = Some(ceil_second(now + block));
        }
    }
    state.left.retain(|l| {
        l.blocked_until
            .as_ref()
            .is_none_or(|u| u.as_datetime() > now)
    });

    // Timers: Unhealthy starts (or keeps) one, Healthy ends it, Unknown keeps what is there.
    let mut timers = BTreeMap::new();
    for target in &spec.clusters {
        if spec.is_evicting(&target.name) {
            continue;
        }
        let kept = previous.unhealthy_since.get(&target.name).cloned();
        match health_on(status, &target.name) {
            ResourceHealth::Unhealthy => {
                timers.insert(
                    target.name.clone(),
                    kept.unwrap_or_else(|| ceil_second(now)),
                );
            }
            ResourceHealth::Unknown => {
                if let Some(since) = kept {
                    timers.insert(target.name.clone(), since);
                }
            }
            ResourceHealth::Healthy => {}
        }
    }
    state.unhealthy_since = timers;

    // The streak ends when the workload is Healthy on its whole placement and no move of ours
    // is still under way.
    let ours_pending = spec
        .graceful_eviction_tasks
        .iter()
        .any(|t| t.producer == producer);
    if state.streak > 0
        && !spec.clusters.is_empty()
        && !ours_pending
        && spec
            .clusters
            .iter()
            .all(|c| health_on(status, &c.name) == ResourceHealth::Healthy)
    {
        state.streak = 0;
        d.recovered = true;
    }

    // Which timers have run out, on a pass that reads Unhealthy.
    let toleration = app
        .decision_conditions
        .toleration_seconds
        .unwrap_or(DEFAULT_TOLERATION_SECONDS)
        .max(0);
    let tolerate = chrono::Duration::seconds(i64::from(toleration));
    let mut due: Vec<(String, Time)> = Vec::new();
    for (cluster, since) in &state.unhealthy_since {
        if health_on(status, cluster) != ResourceHealth::Unhealthy {
            continue;
        }
        let deadline = since.as_datetime() + tolerate;
        if now >= deadline {
            due.push((cluster.clone(), since.clone()));
        } else if let Ok(wait) = (deadline - now).to_std() {
            d.requeue(wait);
        }
    }

    if !due.is_empty() && settings.enabled {
        let gate = state
            .last_failover
            .as_ref()
            .map(|t| {
                t.as_datetime()
                    + chrono::Duration::from_std(backoff(state.streak, settings))
                        .unwrap_or(chrono::Duration::MAX)
            })
            .filter(|_| state.streak > 0);
        let names = || due.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>();
        if settings.max_moves > 0 && state.streak >= settings.max_moves {
            d.halted = names();
        } else if let Some(gate) = gate.filter(|g| now < *g) {
            state.backoff_until = Some(ceil_second(gate));
            d.backing_off = Some((names(), ceil_second(gate)));
            if let Ok(wait) = (gate - now).to_std() {
                d.requeue(wait);
            }
        } else {
            let before: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
            let rules = app.state_preservation.as_ref();
            for (cluster, since) in due {
                let (labels, state_errors) = preserved_state(rules, status, &cluster);
                d.evictions.push(AppEviction {
                    task: task_options(
                        app, producer, &cluster, &since, toleration, &before, labels,
                    ),
                    cluster: cluster.clone(),
                    unhealthy_since: since,
                    state_errors,
                });
                state.unhealthy_since.remove(&cluster);
                state.left.retain(|l| l.cluster != cluster);
                state.left.push(LeftCluster {
                    cluster,
                    evicted_at: Some(Time::new(now)),
                    blocked_until: None,
                });
            }
            state.streak = state.streak.saturating_add(1);
            state.last_failover = Some(Time::new(now));
        }
    }
    d.state = state;
    d
}

/// Writes the evictions of a decision into the binding's spec: each cluster leaves
/// `spec.clusters` and its task is added, stamped `now`.
pub fn apply(spec: &mut ResourceBindingSpec, decision: &Decision, now: DateTime<Utc>) {
    for e in &decision.evictions {
        spec.graceful_evict_cluster(&e.cluster, e.task.clone());
        if let Some(task) = spec
            .graceful_eviction_tasks
            .iter_mut()
            .find(|t| t.from_cluster == e.cluster && t.creation_timestamp.is_none())
        {
            task.creation_timestamp = Some(Time::new(now));
        }
    }
}

/// `binding` with `state` in its annotation (removed when empty).
fn with_state(binding: &Value, state: &FailoverState) -> Value {
    let mut updated = binding.clone();
    if state.is_empty() {
        if let Some(annotations) = updated
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(STATE_ANNOTATION);
        }
    } else {
        set_path(
            &mut updated,
            &["metadata", "annotations", STATE_ANNOTATION],
            Value::String(serde_json::to_string(state).unwrap_or_default()),
        );
    }
    updated
}

/// The application failover controller: one reconcile per binding (`rb|ns|name`,
/// `crb|name`), woken when its failover, placement, tasks, per-cluster health or state change;
/// it evicts what [`decide`] says and looks again when the earliest timer runs out.
pub struct ApplicationFailoverController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    events: EventRecorder,
    metrics: FailoverMetrics,
    settings: ApplicationFailoverSettings,
}

impl ApplicationFailoverController {
    /// An application failover controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        metrics: FailoverMetrics,
        settings: ApplicationFailoverSettings,
    ) -> Self {
        Self {
            store,
            clock,
            events: events.for_component("application-failover"),
            metrics,
            settings,
        }
    }
}

/// What of a binding application failover judges. Bindings without application failover and
/// without recorded state have one constant fingerprint, so they never wake it.
fn judged_fingerprint(binding: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let has_failover = binding.pointer("/spec/failover/application").is_some();
    let state = binding
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(STATE_ANNOTATION));
    if !has_failover && state.is_none() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    super::runtime::generation_fingerprint(binding).hash(&mut h);
    state.map(Value::to_string).hash(&mut h);
    if let Some(items) = binding
        .pointer("/status/aggregatedStatus")
        .and_then(Value::as_array)
    {
        for i in items {
            i.get("clusterName").map(Value::to_string).hash(&mut h);
            i.get("health").map(Value::to_string).hash(&mut h);
        }
    }
    h.finish()
}

/// Application failover as the server runs it.
pub fn controller(
    ctx: &super::context::ControllerContext,
) -> Result<super::runtime::Controller, super::context::WiringError> {
    use super::runtime::{Controller, ControllerConfig};
    let reconciler = ApplicationFailoverController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.clone(),
        ctx.failover_metrics.clone(),
        ctx.settings.application_failover.clone(),
    );
    let (_, sources) = super::fan_out::binding_sources_on_change_of(judged_fingerprint);
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

#[async_trait]
impl Reconciler for ApplicationFailoverController {
    fn name(&self) -> &'static str {
        "application-failover"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let span = tracing::debug_span!("application_failover", binding = key);
        let _guard = span.enter();
        let Some(LiveBinding { rt, object }) = live_binding(self.store.as_ref(), key).await? else {
            return Ok(Action::Done);
        };
        let mut spec: ResourceBindingSpec = decode(&object["spec"], key)?;
        let status = status_or_default(&object, key);
        let previous = FailoverState::of(&object);
        let producer = if key.starts_with("crb|") {
            EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER
        } else {
            EVICTION_PRODUCER_RB_APPLICATION_FAILOVER
        };
        let now = self.clock.now();
        let decision = decide(&spec, &status, &previous, &self.settings, producer, now);
        let mut updated = with_state(&object, &decision.state);
        if !decision.evictions.is_empty() {
            apply(&mut spec, &decision, now);
            set_path(
                &mut updated,
                &["spec", "clusters"],
                serde_json::to_value(&spec.clusters).unwrap_or_default(),
            );
            set_path(
                &mut updated,
                &["spec", "gracefulEvictionTasks"],
                serde_json::to_value(&spec.graceful_eviction_tasks).unwrap_or_default(),
            );
        }
        let mut current = object.clone();
        if updated != object {
            // A conflict retries the whole decision on the new binding.
            current = self.store.update(&rt, updated).await?;
        }
        self.report(&rt, current, key, &decision, &previous, now)
            .await?;
        Ok(decision
            .requeue_after
            .map_or(Action::Done, Action::RequeueAfter))
    }
}

impl ApplicationFailoverController {
    /// Events, metrics and the condition of a decision already written.
    async fn report(
        &self,
        rt: &flotilla_api::kinds::ResourceType,
        binding: Value,
        key: &str,
        decision: &Decision,
        previous: &FailoverState,
        now: DateTime<Utc>,
    ) -> Result<(), ReconcileError> {
        for (cluster, since) in &decision.state.unhealthy_since {
            if !previous.unhealthy_since.contains_key(cluster) {
                tracing::info!(binding = key, cluster = %cluster, "workload unhealthy, timer started");
                self.events
                    .record(
                        &binding,
                        EventType::Normal,
                        "ApplicationUnhealthy",
                        &format!(
                            "The workload on cluster {cluster} is Unhealthy since {}; it is moved if it stays so for tolerationSeconds",
                            since.as_datetime().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        ),
                    )
                    .await;
            }
        }
        for e in &decision.evictions {
            let producer = e.task.producer.as_str();
            tracing::info!(binding = key, cluster = %e.cluster, purge_mode = ?e.task.purge_mode, "application failover: evicted");
            self.metrics
                .evictions
                .with_label_values(&[producer, EVICTION_REASON_APPLICATION_FAILURE])
                .inc();
            self.metrics
                .unhealthy_to_eviction
                .with_label_values(&[producer])
                .observe(seconds_since(e.unhealthy_since.as_datetime(), now));
            let how = match e.task.purge_mode.unwrap_or(PurgeMode::Graciously) {
                m if m.is_immediate() => format!("purge mode {m}: the old copy goes first"),
                m if m.is_never() => format!(
                    "purge mode {m}: the old copy stays until suppressDeletion is set to false"
                ),
                m => format!(
                    "purge mode {m}: the old copy stays until the new placement is Healthy or {} s pass",
                    e.task.grace_period_seconds.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
                ),
            };
            self.events
                .record(
                    &binding,
                    EventType::Warning,
                    "EvictWorkloadFromCluster",
                    &format!(
                        "Application failover: evicted from cluster {}: {}; {how}; the cluster is not chosen again for {} after the old copy goes",
                        e.cluster,
                        e.task.message,
                        humantime::format_duration(self.settings.block_period)
                    ),
                )
                .await;
            for (label, error) in &e.state_errors {
                self.events
                    .record(
                        &binding,
                        EventType::Warning,
                        "StatePreservationFailed",
                        &format!(
                            "State for label {label} could not be read from cluster {}: {error}; the workload moves without it",
                            e.cluster
                        ),
                    )
                    .await;
            }
        }
        for l in &decision.state.left {
            let was = previous.left.iter().find(|p| p.cluster == l.cluster);
            if let (Some(until), Some(None)) =
                (&l.blocked_until, was.map(|p| p.blocked_until.as_ref()))
            {
                self.events
                    .record(
                        &binding,
                        EventType::Normal,
                        "FailoverBlockStarted",
                        &format!(
                            "Cluster {} is not chosen again for this workload until {}",
                            l.cluster,
                            until
                                .as_datetime()
                                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        ),
                    )
                    .await;
            }
        }
        if let Some((clusters, until)) = &decision.backing_off {
            if previous.backoff_until.as_ref() != Some(until) {
                self.metrics
                    .application_failovers_held
                    .with_label_values(&["Backoff"])
                    .inc();
                tracing::info!(binding = key, clusters = ?clusters, until = %until.as_datetime(), "application failover backing off");
                self.events
                    .record(
                        &binding,
                        EventType::Normal,
                        "ApplicationFailoverBackoff",
                        &format!(
                            "The workload is due to leave {} but moved {} time(s) in a row; the next move waits until {}",
                            clusters.join(", "),
                            decision.state.streak,
                            until.as_datetime().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        ),
                    )
                    .await;
            }
        }
        let mut conditions: Vec<Condition> = binding
            .pointer("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        let current =
            flotilla_api::meta::find_condition(&conditions, CONDITION_APPLICATION_FAILOVER)
                .map(|c| c.status);
        let wanted = if !decision.halted.is_empty() {
            Some(Condition::new(
                CONDITION_APPLICATION_FAILOVER,
                ConditionStatus::False,
                "FailoverLimitReached",
                &format!(
                    "The workload moved {} times in a row without turning Healthy; it stays on {} (Unhealthy) until it recovers or a user moves it",
                    decision.state.streak,
                    decision.halted.join(", ")
                ),
            ))
        } else if decision.recovered && current == Some(ConditionStatus::False) {
            Some(Condition::new(
                CONDITION_APPLICATION_FAILOVER,
                ConditionStatus::True,
                "ApplicationHealthy",
                "The workload is Healthy on its placement; application failover acts again",
            ))
        } else {
            None
        };
        if let Some(c) = wanted {
            let halted = c.status == ConditionStatus::False;
            let message = c.message.clone();
            if set_condition(&mut conditions, c, now) {
                let mut updated = binding.clone();
                set_path(
                    &mut updated,
                    &["status", "conditions"],
                    serde_json::to_value(&conditions).unwrap_or_default(),
                );
                let written = self.store.update_status(rt, updated).await?;
                let (kind, reason) = if halted {
                    self.metrics
                        .application_failovers_held
                        .with_label_values(&["FailoverLimitReached"])
                        .inc();
                    tracing::warn!(binding = key, "application failover limit reached");
                    (EventType::Warning, "ApplicationFailoverHalted")
                } else {
                    (EventType::Normal, "ApplicationFailoverResumed")
                };
                self.events.record(&written, kind, reason, &message).await;
            }
        }
        Ok(())
    }
}
