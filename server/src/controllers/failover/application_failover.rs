//! Application failover: moves a workload off a cluster where it has stayed Unhealthy for
//! `spec.failover.application.decisionConditions.tolerationSeconds` (docs/semantics.md §11,
//! with Part 1's changes). Per binding and per cluster of its placement, the time the workload
//! first read Unhealthy in `status.aggregatedStatus` is kept; Healthy clears it, Unknown
//! neither clears it nor counts as recovery (karmada-io/karmada#7431), and an eviction only
//! happens on a pass that reads Unhealthy. A due cluster is evicted through the one eviction
//! path: an eviction task (producer `resource-binding-application-failover-controller`, or the
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
//! Everything here is a pure function of (binding, state, settings, now): [`decide`] (and
//! [`settle`], which finds the [`Holds`] on it, the partition brake's among them, and decides
//! again with them) says what to do, [`report`] which Events it
//! tells and whether the `ApplicationFailover` condition changes, [`outcome`] what is written.
//! The controller only reads the binding, calls them and hands the outcome (the condition
//! included) to the failover wing's one effect path ([`Effects::carry_out`]: one write with
//! compare-and-swap, then the Events). Before a due eviction it reads each due cluster's Work
//! again from the store itself: the aggregated status may be older than the member's latest
//! report (the leader's cache after a pause), and a report that no longer says Unhealthy is
//! decided on instead (held as `NewerReport`).

use crate::controllers::failover::brake::{hold_back, report_stops, Cause, EvictionBrake, Hold};
use crate::controllers::failover::effects::{evict, Count, Effects, Evicted, Note, Outcome, Since};
use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::failover::state_preservation::{preserve, Preservation};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::settings::ApplicationFailoverSettings;
use crate::controllers::shared::aggregation::aggregate;
use crate::controllers::shared::binding_keys::{
    decode, live_binding, owned_works, status_or_default, LiveBinding,
};
use crate::controllers::shared::cluster_cache::{ClusterCache, Clusters};
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::json_edit::set_path;
use crate::events::{EventRecorder, EventType};
use crate::scheduler::ClusterSnapshot;
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::binding::{
    EvictionOptions, ResourceBindingSpec, ResourceBindingStatus,
    EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER, EVICTION_PRODUCER_RB_APPLICATION_FAILOVER,
    EVICTION_REASON_APPLICATION_FAILURE,
};
use flotilla_api::cluster::execution_namespace;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::policy::{ApplicationFailoverBehavior, PurgeMode};
use flotilla_api::work::ResourceHealth;
use flotilla_support::clock::SharedClock;
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
/// How soon a held Immediately/Directly eviction (no other cluster fits) is tried again.
pub const NO_TARGET_RETRY: Duration = Duration::from_secs(30);

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
    /// A due Immediately/Directly failover has been held since then: no other cluster fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_target_since: Option<Time>,
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
            .lookup("/metadata/annotations")
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
            .map(|l| (l.cluster.clone(), l.blocked_until))
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
    /// What the policy's state-preservation rules gave (`None` without rules); rules that
    /// could not be read do not hold the move back, and are reported.
    pub preservation: Option<Preservation>,
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
    /// Clusters due for an Immediately/Directly eviction that is held because no other
    /// cluster could take the workload (the only copy would go with nothing in its place).
    pub no_target: Vec<String>,
    /// Clusters due for eviction that the partition brake holds for now.
    pub braked: Vec<String>,
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

/// What holds a due eviction back besides the policy's own rules, found by [`settle`] after a
/// first [`decide`] and given to the second. [`Holds::NONE`] is the first look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// No other cluster can take the workload now: an Immediately/Directly eviction would
    /// delete the only copy with nothing to replace it, so it is held ([`Decision::no_target`])
    /// and looked at again after [`NO_TARGET_RETRY`]. (Graceful and Never evictions keep the
    /// old copy while nothing fits, so they go ahead and the scheduler says why the binding has
    /// no new cluster.)
    pub no_other_cluster: bool,
    /// The clusters whose evictions the partition brake holds, and how long to wait: they stay
    /// due (their timers run on), are listed in [`Decision::braked`], and the binding is looked
    /// at again when the brake says; they count for neither the streak nor the block.
    pub braked: BTreeMap<String, Duration>,
}

impl Holds {
    /// Nothing held: the first look, before [`settle`] asked.
    pub const NONE: Holds = Holds {
        no_other_cluster: false,
        braked: BTreeMap::new(),
    };
}

/// Decides, for one binding at `now`: the unhealthy timers, which clusters to evict, whether
/// the back-off, the move limit or `holds` hold an eviction back, and when to look again.
/// `producer` names the controller in the tasks (RB or CRB spelling).
pub fn decide(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    previous: &FailoverState,
    settings: &ApplicationFailoverSettings,
    producer: &str,
    now: DateTime<Utc>,
    holds: &Holds,
) -> Decision {
    let mut d = Decision::default();
    let Some(app) = spec.failover.as_ref().and_then(|f| f.application.as_ref()) else {
        // No application failover (any more): nothing to keep.
        return d;
    };
    let mut state = previous.clone();
    state.backoff_until = None;
    state.no_target_since = None;

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
            due.push((cluster.clone(), *since));
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
        let immediate = app.purge_mode.is_some_and(|m| m.is_immediate());
        if settings.max_moves > 0 && state.streak >= settings.max_moves {
            d.halted = names();
        } else if immediate && holds.no_other_cluster {
            d.no_target = names();
            state.no_target_since = previous.no_target_since.or(Some(Time::new(now)));
            d.requeue(NO_TARGET_RETRY);
        } else if let Some(gate) = gate.filter(|g| now < *g) {
            state.backoff_until = Some(ceil_second(gate));
            d.backing_off = Some((names(), ceil_second(gate)));
            if let Ok(wait) = (gate - now).to_std() {
                d.requeue(wait);
            }
        } else {
            let before: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
            let rules = app.state_preservation.as_ref();
            let (braked, due): (Vec<_>, Vec<_>) = due
                .into_iter()
                .partition(|(c, _)| holds.braked.contains_key(c));
            for (cluster, _) in braked {
                if let Some(wait) = holds.braked.get(&cluster) {
                    d.requeue(*wait);
                }
                d.braked.push(cluster);
            }
            let moved = !due.is_empty();
            for (cluster, since) in due {
                let preservation = preserve(rules, status, &cluster);
                let labels = preservation
                    .as_ref()
                    .map(|p| p.labels.clone())
                    .unwrap_or_default();
                d.evictions.push(AppEviction {
                    task: task_options(
                        app, producer, &cluster, &since, toleration, &before, labels,
                    ),
                    cluster: cluster.clone(),
                    unhealthy_since: since,
                    preservation,
                });
                state.unhealthy_since.remove(&cluster);
                state.left.retain(|l| l.cluster != cluster);
                state.left.push(LeftCluster {
                    cluster,
                    evicted_at: Some(Time::new(now)),
                    blocked_until: None,
                });
            }
            if moved {
                state.streak = state.streak.saturating_add(1);
                state.last_failover = Some(Time::new(now));
            }
        }
    }
    d.state = state;
    d
}

/// Writes the evictions of a decision into the binding's spec: each cluster leaves
/// `spec.clusters` and its task is added, stamped `now`.
pub fn apply(spec: &mut ResourceBindingSpec, decision: &Decision, now: DateTime<Utc>) {
    for e in &decision.evictions {
        evict(spec, &e.cluster, e.task.clone(), now);
    }
}

/// Whether the scheduler would find a cluster for the binding once `decision`'s evictions are
/// applied, the evicted and blocked clusters left out: the check before an
/// Immediately/Directly eviction (the only copy must not go with nothing in its place). The
/// controller asks it on the cached clusters, the failover dry-run on the simulated ones.
pub fn another_cluster_fits(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    decision: &Decision,
    snapshot: &ClusterSnapshot,
    now: DateTime<Utc>,
) -> bool {
    let mut after = spec.clone();
    apply(&mut after, decision, now);
    let blocked = decision.state.blocked(now);
    let result = crate::scheduler::schedule(&crate::scheduler::ScheduleInput {
        spec: &after,
        status,
        clusters: snapshot,
        options: crate::scheduler::ScheduleOptions::default(),
        blocked: &blocked,
    });
    result.is_ok_and(|o| !o.clusters.is_empty())
}

/// What [`settle`] decides on.
pub struct Look<'a> {
    /// The binding's key (`rb|ns|name`, `crb|name`): the brake's tickets name it.
    pub key: &'a str,
    /// The binding's spec.
    pub spec: &'a ResourceBindingSpec,
    /// Its status.
    pub status: &'a ResourceBindingStatus,
    /// The state recorded in it.
    pub previous: &'a FailoverState,
    /// The controller's settings.
    pub settings: &'a ApplicationFailoverSettings,
    /// The producer the tasks name.
    pub producer: &'a str,
    /// Now.
    pub now: DateTime<Utc>,
}

/// The rest of a decision once [`decide`] found evictions, as the controller makes it (the
/// failover dry-run makes it the same way): an Immediately/Directly eviction with no other
/// cluster to go to is held ([`another_cluster_fits`]), then the partition brake is asked for
/// each remaining eviction; each hold found decides again with it ([`Holds`]). Answers the
/// decision and the brake's holds.
pub fn settle(
    look: &Look<'_>,
    decision: Decision,
    clusters: &Clusters,
    brake: Option<&EvictionBrake>,
) -> (Decision, BTreeMap<String, Hold>) {
    let again = |holds: &Holds| {
        decide(
            look.spec,
            look.status,
            look.previous,
            look.settings,
            look.producer,
            look.now,
            holds,
        )
    };
    let mut decision = decision;
    let mut holds = Holds::NONE;
    if decision
        .evictions
        .iter()
        .any(|e| e.task.purge_mode.is_some_and(|m| m.is_immediate()))
        && !another_cluster_fits(
            look.spec,
            look.status,
            &decision,
            &clusters.snapshot,
            look.now,
        )
    {
        holds.no_other_cluster = true;
        decision = again(&holds);
    }
    // The partition brake: the evictions it holds are decided again as held (nothing of
    // them is written; the binding is looked at again when the brake says).
    let held = hold_back(
        brake,
        clusters,
        look.key,
        Cause::ApplicationFailure,
        decision.evictions.iter().map(|e| e.cluster.as_str()),
        look.now,
    );
    if !held.is_empty() {
        holds.braked = held.iter().map(|(c, h)| (c.clone(), h.wait)).collect();
        decision = again(&holds);
    }
    (decision, held)
}

/// What a decision tells besides its evictions, decided without I/O.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The Events to record once the decision is written, in order, each with its metric and
    /// log line: timers started, blocks started, an Immediately eviction held for want of
    /// another cluster, a back-off.
    pub notes: Vec<Note>,
    /// The change of the [`CONDITION_APPLICATION_FAILOVER`] condition: the binding's
    /// conditions with it set, and the Event that tells it (`None`: it does not change, and
    /// needs no write). [`outcome`] writes it with the rest of the decision.
    pub condition: Option<(Vec<Condition>, Note)>,
}

/// The Events and the condition of `decision`, taken on a binding whose recorded state was
/// `previous` and whose conditions are `conditions`, at `now`. Each Event is told once: a timer
/// when it starts, a block when it starts (the task is gone), a held Immediately eviction when
/// the hold starts, a back-off when its end changes, the condition when it changes.
pub fn report(
    decision: &Decision,
    previous: &FailoverState,
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> Report {
    let stamp = |t: &Time| {
        t.as_datetime()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let mut notes = Vec::new();
    for (cluster, since) in &decision.state.unhealthy_since {
        if !previous.unhealthy_since.contains_key(cluster) {
            notes.push(
                Note::event(
                    EventType::Normal,
                    "ApplicationUnhealthy",
                    format!(
                        "The workload on cluster {cluster} is Unhealthy since {}; it is moved if it stays so for tolerationSeconds",
                        stamp(since)
                    ),
                )
                .logged(false, "workload unhealthy, timer started", cluster.clone()),
            );
        }
    }
    for l in &decision.state.left {
        let was = previous.left.iter().find(|p| p.cluster == l.cluster);
        if let (Some(until), Some(None)) = (&l.blocked_until, was.map(|p| p.blocked_until.as_ref()))
        {
            notes.push(Note::event(
                EventType::Normal,
                "FailoverBlockStarted",
                format!(
                    "Cluster {} is not chosen again for this workload until {}",
                    l.cluster,
                    stamp(until)
                ),
            ));
        }
    }
    if !decision.no_target.is_empty() && previous.no_target_since.is_none() {
        notes.push(
            Note::event(
                EventType::Warning,
                "ApplicationFailoverHeld",
                format!(
                    "The workload is due to leave {}, but no other cluster can take it and purge mode Immediately would delete the only copy; it stays until another cluster fits",
                    decision.no_target.join(", ")
                ),
            )
            .counting(Count::ApplicationFailoverHeld("NoTarget"))
            .logged(
                true,
                "application failover held: no other cluster fits",
                decision.no_target.join(", "),
            ),
        );
    }
    if let Some((clusters, until)) = &decision.backing_off {
        if previous.backoff_until.as_ref() != Some(until) {
            notes.push(
                Note::event(
                    EventType::Normal,
                    "ApplicationFailoverBackoff",
                    format!(
                        "The workload is due to leave {} but moved {} time(s) in a row; the next move waits until {}",
                        clusters.join(", "),
                        decision.state.streak,
                        stamp(until)
                    ),
                )
                .counting(Count::ApplicationFailoverHeld("Backoff"))
                .logged(false, "application failover backing off", clusters.join(", ")),
            );
        }
    }
    Report {
        notes,
        condition: condition(decision, conditions, now),
    }
}

/// The [`CONDITION_APPLICATION_FAILOVER`] condition's change, if any: `False` when the move
/// limit holds the workload, back to `True` when it recovered.
fn condition(
    decision: &Decision,
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> Option<(Vec<Condition>, Note)> {
    let current = flotilla_api::meta::find_condition(conditions, CONDITION_APPLICATION_FAILOVER)
        .map(|c| c.status);
    let (wanted, told) = if !decision.halted.is_empty() {
        let message = format!(
            "The workload moved {} times in a row without turning Healthy; it stays on {} (Unhealthy) until it recovers or a user moves it",
            decision.state.streak,
            decision.halted.join(", ")
        );
        let told = Note::event(
            EventType::Warning,
            "ApplicationFailoverHalted",
            message.clone(),
        )
        .counting(Count::ApplicationFailoverHeld("FailoverLimitReached"))
        .logged(
            true,
            "application failover limit reached",
            decision.halted.join(", "),
        );
        let wanted = Condition::new(
            CONDITION_APPLICATION_FAILOVER,
            ConditionStatus::False,
            "FailoverLimitReached",
            &message,
        );
        (wanted, told)
    } else if decision.recovered && current == Some(ConditionStatus::False) {
        let message = "The workload is Healthy on its placement; application failover acts again";
        let told = Note::event(
            EventType::Normal,
            "ApplicationFailoverResumed",
            message.to_string(),
        );
        let wanted = Condition::new(
            CONDITION_APPLICATION_FAILOVER,
            ConditionStatus::True,
            "ApplicationHealthy",
            message,
        );
        (wanted, told)
    } else {
        return None;
    };
    let mut conditions = conditions.to_vec();
    set_condition(&mut conditions, wanted, now).then_some((conditions, told))
}

/// The binding's conditions as stored (none when absent or unreadable).
fn conditions_of(binding: &Value) -> Vec<Condition> {
    binding
        .lookup("/status/conditions")
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default()
}

/// What the controller writes and tells for `decision` (the one effect path,
/// [`Effects::carry_out`]): the binding as read (`read`, whose spec is `spec`) with
/// the decision's state in its annotation, the conditions of its `report` when they changed,
/// and its evictions applied ([`apply`]); each eviction's history entry and how each is
/// reported; the report's Events, the condition's last. It writes nothing when it equals
/// `read` ([`Outcome::writes`]).
pub fn outcome(
    read: &Value,
    mut spec: ResourceBindingSpec,
    decision: &Decision,
    report: Report,
    settings: &ApplicationFailoverSettings,
    now: DateTime<Utc>,
) -> Outcome {
    let mut binding = with_state(read, &decision.state);
    let Report {
        mut notes,
        condition,
    } = report;
    if let Some((conditions, told)) = condition {
        set_path(
            &mut binding,
            &["status", "conditions"],
            serde_json::to_value(&conditions).unwrap_or_default(),
        );
        notes.push(told);
    }
    if decision.evictions.is_empty() {
        return Outcome::of(binding, notes);
    }
    apply(&mut spec, decision, now);
    let evicted = decision
        .evictions
        .iter()
        .map(|e| evicted(e, settings))
        .collect();
    Outcome::evicting(read, binding, &spec, evicted, notes, now)
}

/// How one eviction is reported: its Event says why, what becomes of the old copy and how long
/// the cluster stays blocked; the first Unhealthy report starts its latency.
fn evicted(e: &AppEviction, settings: &ApplicationFailoverSettings) -> Evicted {
    let how =
        match e.task.purge_mode.unwrap_or(PurgeMode::Graciously) {
            m if m.is_immediate() => format!("purge mode {m}: the old copy goes first"),
            m if m.is_never() => {
                format!("purge mode {m}: the old copy stays until suppressDeletion is set to false")
            }
            m => format!(
            "purge mode {m}: the old copy stays until the new placement is Healthy or {} s pass",
            e.task.grace_period_seconds.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
        ),
        };
    Evicted {
        cluster: e.cluster.clone(),
        producer: e.task.producer.clone(),
        reason: EVICTION_REASON_APPLICATION_FAILURE,
        cause: e.task.message.clone(),
        event: format!(
            "Application failover: evicted from cluster {}: {}; {how}; the cluster is not chosen again for {} after the old copy goes",
            e.cluster,
            e.task.message,
            humantime::format_duration(settings.block_period)
        ),
        purge_mode: e.task.purge_mode,
        since: Some(Since::Unhealthy(e.unhealthy_since.as_datetime())),
        preservation: e.preservation.clone(),
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
    clusters: ClusterCache,
    clock: SharedClock,
    events: EventRecorder,
    metrics: FailoverMetrics,
    settings: ApplicationFailoverSettings,
    brake: Option<EvictionBrake>,
    /// Reads a member's report of health when a due eviction is checked against it.
    interpreter: Arc<dyn TemplateInterpreter>,
}

impl ApplicationFailoverController {
    /// An application failover controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        metrics: FailoverMetrics,
        settings: ApplicationFailoverSettings,
        interpreter: Arc<dyn TemplateInterpreter>,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events: events.for_component("application-failover"),
            metrics,
            settings,
            brake: None,
            interpreter,
        }
    }

    /// Every eviction asks `brake` first (without one, nothing holds evictions back).
    pub fn with_brake(mut self, brake: EvictionBrake) -> Self {
        self.brake = Some(brake);
        self
    }
}

impl ApplicationFailoverController {
    /// Logs and counts the due evictions a newer report holds.
    fn count_newer_reports(&self, key: &str, newer: &[(String, ResourceHealth)]) {
        for (cluster, health) in newer {
            tracing::info!(binding = key, cluster = %cluster, health = ?health,
                "application failover not due: the member's latest report is not Unhealthy");
            self.metrics
                .application_failovers_held
                .with_label_values(&["NewerReport"])
                .inc();
        }
    }

    /// The health each of the `due` clusters' Works reports when read again from the store
    /// itself ([`Store::get_fresh`]), for those where it no longer reads Unhealthy. The
    /// aggregated status a decision judges is built by the status controller from the
    /// leader's cache, which after a pause may still hold a report the member has since
    /// replaced through another server, while the clock moved on: an eviction goes ahead only
    /// when no newer report contradicts it. The binding's Works are found in the cache (they
    /// were written long before their member reported on them); one not found contradicts
    /// nothing.
    async fn newer_reports(
        &self,
        key: &str,
        binding: &Value,
        spec: &ResourceBindingSpec,
        due: &[&str],
        clusters: &Clusters,
    ) -> Result<Vec<(String, ResourceHealth)>, ReconcileError> {
        let works = well_known::works();
        let mut newer = Vec::new();
        let owned = owned_works(self.store.as_ref(), binding).await?;
        for cluster in due {
            let namespace = execution_namespace(cluster);
            let mut fresh = Vec::new();
            for work in owned
                .iter()
                .filter(|w| w["metadata"]["namespace"] == namespace)
            {
                let name = work["metadata"]["name"].as_str().unwrap_or_default();
                match self.store.get_fresh(&works, Some(&namespace), name).await {
                    Ok(work) => fresh.push(work),
                    Err(StoreError::NotFound { .. }) => {}
                    Err(error) => return Err(error.into()),
                }
            }
            if fresh.is_empty() {
                continue;
            }
            let items = aggregate(
                &fresh,
                &|c: &str| clusters.is_ready(c),
                &|c: &str| spec.workload_replicas_on(c),
                self.interpreter.as_ref(),
            );
            let health = items
                .iter()
                .find(|i| i.cluster_name == *cluster)
                .and_then(|i| i.health)
                .unwrap_or(ResourceHealth::Unknown);
            if health != ResourceHealth::Unhealthy {
                tracing::debug!(
                    binding = key,
                    cluster,
                    "a newer report than the aggregated status"
                );
                newer.push(((*cluster).to_string(), health));
            }
        }
        Ok(newer)
    }
}

/// `status` with each named cluster's aggregated health replaced.
fn with_health(
    mut status: ResourceBindingStatus,
    health: &[(String, ResourceHealth)],
) -> ResourceBindingStatus {
    for item in &mut status.aggregated_status {
        if let Some((_, h)) = health.iter().find(|(c, _)| *c == item.cluster_name) {
            item.health = Some(*h);
        }
    }
    status
}

/// What of a binding application failover judges. Bindings without application failover and
/// without recorded state have one constant fingerprint, so they never wake it.
pub fn judged_fingerprint(binding: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let has_failover = binding.lookup("/spec/failover/application").is_some();
    let state = binding
        .lookup("/metadata/annotations")
        .and_then(|a| a.get(STATE_ANNOTATION));
    if !has_failover && state.is_none() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::controllers::runtime::controller::generation_fingerprint(binding).hash(&mut h);
    state.map(Value::to_string).hash(&mut h);
    crate::controllers::shared::fan_out::hash_cluster_health(binding, &mut h);
    h.finish()
}

#[async_trait]
impl Reconciler for ApplicationFailoverController {
    fn name(&self) -> &'static str {
        "application-failover"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding { rt, object }) = live_binding(self.store.as_ref(), key).await? else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&object["spec"], key)?;
        let mut status = status_or_default(&object, key);
        let previous = FailoverState::of(&object);
        let producer = if key.starts_with("crb|") {
            EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER
        } else {
            EVICTION_PRODUCER_RB_APPLICATION_FAILOVER
        };
        let now = self.clock.now();
        let judge = |status: &ResourceBindingStatus| {
            decide(
                &spec,
                status,
                &previous,
                &self.settings,
                producer,
                now,
                &Holds::NONE,
            )
        };
        let mut decision = judge(&status);
        let mut held = BTreeMap::new();
        if !decision.evictions.is_empty() {
            let clusters = self.clusters.get().await?;
            let due: Vec<&str> = decision
                .evictions
                .iter()
                .map(|e| e.cluster.as_str())
                .collect();
            let newer = self
                .newer_reports(key, &object, &spec, &due, &clusters)
                .await?;
            if !newer.is_empty() {
                self.count_newer_reports(key, &newer);
                // Decided again, and settled below, on what the member reports now.
                status = with_health(status, &newer);
                decision = judge(&status);
            }
        }
        if !decision.evictions.is_empty() {
            let clusters = self.clusters.get().await?;
            let look = Look {
                key,
                spec: &spec,
                status: &status,
                previous: &previous,
                settings: &self.settings,
                producer,
                now,
            };
            (decision, held) = settle(&look, decision, &clusters, self.brake.as_ref());
        }
        let report = report(&decision, &previous, &conditions_of(&object), now);
        let outcome = outcome(&object, spec, &decision, report, &self.settings, now);
        let effects = Effects {
            store: self.store.as_ref(),
            events: &self.events,
            metrics: &self.metrics,
        };
        let current = if outcome.writes(&object) {
            // The eviction (or the new state, or the condition) and its history entries in one
            // write; a conflict retries the whole decision on the new binding.
            effects.carry_out(key, &rt, &object, outcome, now).await?
        } else {
            effects.tell(key, &object, &outcome.notes).await;
            object.clone()
        };
        report_stops(self.brake.as_ref(), &self.events, &current, key, &held).await;
        Ok(decision
            .requeue_after
            .map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests;
