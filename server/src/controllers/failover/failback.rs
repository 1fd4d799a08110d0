//! Health-gated failback (a Flotilla extension, opt-in per policy with
//! `spec.failover.cluster.failback: {stabilizationSeconds}`): after a cluster failover, once the
//! cluster the workload left has been fit to return to (Ready, and let in by the scheduler's
//! filters) without a break for the stabilization window, the workload moves back to it through the
//! same graceful path as a failover — the returning copy is dispatched first, and every cluster
//! that gives replicas back keeps its copy as it was under an eviction task (reason `Failback`)
//! until the new placement is Healthy or the task's grace period ends
//! ([`crate::controllers::failover::graceful_eviction`]). Karmada never moves a workload back by
//! itself (karmada-io/karmada#7441 asks for this); without the field neither does Flotilla.
//!
//! Where the workload goes back to is the scheduler's decision, not a copy of an old list: the
//! failover's history entry says what the binding ran on before (`originalCluster`, and the
//! replicas the recovered cluster had), and [`decide`] asks [`crate::scheduler::schedule`] for
//! the placement with that as the binding's current one — so its locality score favours the
//! clusters the workload came from, a static weight gives the recovered cluster its share
//! back, and a dynamic division keeps the shares it had. A workload that would not get
//! replicas on the recovered cluster (the policy no longer selects it, a taint it does not
//! tolerate, an application failover block) stays where it is. One cluster moves back at a
//! time, and never while an eviction task is open: a failover in progress finishes first.
//!
//! Left out on purpose: placements with ordered `clusterAffinities` (their term in force is
//! the scheduler's to move; going back to an earlier term is a manual reschedule), and the
//! partition brake (a failback evicts nothing from a failing cluster).
//!
//! If the cluster it returned to is evicted again while the clusters it left still keep their
//! copies, the move is undone ([`abort`]): they get their replicas back.
//!
//! The decision is the pure [`decide`] (with [`fitness`], which says what the controller must
//! remember between passes); [`apply`] and [`apply_abort`] write it into the spec, and
//! [`move_back`] and [`undo`] make it the failover wing's one [`Outcome`]: the binding, its
//! history steps (a `Failback` entry per cluster giving replicas back, `failedBackTime` on the
//! failover undone; the entries of an undone move closed), an Event and, for a move, a metric.
//! The controller feeds them and hands the outcome to [`Effects::carry_out`], which writes it
//! in one write, as it does the taint manager's and application failover's evictions.

use crate::controllers::failover::effects::{Count, Effects, Note, Outcome};
use crate::controllers::failover::history::{self, HistoryStep};
use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::settings::TaintManagerSettings;
use crate::controllers::shared::binding_keys::{
    decode, live_binding, set_placement, status_or_default, LiveBinding,
};
use crate::controllers::shared::cluster_cache::{ClusterCache, Clusters};
use crate::events::{EventRecorder, EventType};
use crate::scheduler::{admits, schedule, ScheduleInput, ScheduleOptions};
use crate::store::Store;
use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use flotilla_api::binding::{
    GracefulEvictionTask, ResourceBindingSpec, ResourceBindingStatus, TargetCluster,
    EVICTION_PRODUCER_FAILBACK, EVICTION_REASON_FAILBACK,
};
use flotilla_api::history::{awaiting_failback, FailoverHistoryItem};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::meta::{ConditionStatus, Time};
use flotilla_api::policy::PurgeMode;
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Event reason of a move back.
pub const EVENT_FAILING_BACK: &str = "FailingBack";
/// Event reason of a recovered cluster the workload waits on (told once per recovery).
pub const EVENT_FAILBACK_PENDING: &str = "FailbackPending";
/// Event reason (and `oldCopyGoneReason`) of a move back undone because the cluster it
/// returned to was evicted again.
pub const EVENT_FAILBACK_ABORTED: &str = "FailbackAborted";

/// What [`decide`] reads.
#[derive(Clone, Copy)]
pub struct FailbackInput<'a> {
    /// The binding's spec.
    pub spec: &'a ResourceBindingSpec,
    /// Its status (the failover history).
    pub status: &'a ResourceBindingStatus,
    /// Whether the scheduler has seen the binding's current generation.
    pub scheduled: bool,
    /// Every cluster.
    pub clusters: &'a Clusters,
    /// Clusters application failover keeps out of this binding now.
    pub blocked: &'a [(String, Option<Time>)],
    /// Whether evictions leave a task (`--feature-gates GracefulEviction`): without, the
    /// clusters that give replicas back do so at once.
    pub graceful: bool,
    /// The purge mode of a policy that names none.
    pub default_purge_mode: PurgeMode,
    /// Since when the controller has seen a cluster fit to return to without a break (see
    /// [`fitness`]); `None`: not seen fit before now.
    pub fit_since: &'a dyn Fn(&str) -> Option<DateTime<Utc>>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// A move back to a recovered cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Return {
    /// The recovered cluster.
    pub cluster: String,
    /// Since when it has been fit to return to: the latest of its Ready transition, the
    /// failover, and the first time the controller saw it fit.
    pub stable_since: DateTime<Utc>,
    /// The stabilization window, in seconds.
    pub window_seconds: i64,
    /// The new `spec.clusters`.
    pub placement: Vec<TargetCluster>,
    /// Clusters of the current placement that give replicas back, with the replicas they
    /// have now.
    pub leaving: Vec<TargetCluster>,
    /// The eviction tasks that keep their copies meanwhile (empty without graceful
    /// eviction, and for a cluster that only shrinks under an immediate purge mode).
    pub tasks: Vec<GracefulEvictionTask>,
}

/// What failback does for one binding now.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing to move back: not asked for, no finished cluster failover to undo, or no way
    /// back now.
    Stay,
    /// A recovered cluster has not been fit for the whole window yet: look again at `until`.
    Wait {
        /// The recovered cluster.
        cluster: String,
        /// Since when it has been stable.
        stable_since: DateTime<Utc>,
        /// When the window ends.
        until: DateTime<Utc>,
    },
    /// Move back.
    Return(Box<Return>),
    /// A move back went wrong: the cluster it returned to was evicted again while the
    /// clusters it left still keep their copies. Undo it: those clusters get their replicas
    /// back and their `Failback` tasks go.
    Abort(Abort),
}

/// The undoing of a move back.
#[derive(Clone, Debug, PartialEq)]
pub struct Abort {
    /// The new `spec.clusters`.
    pub placement: Vec<TargetCluster>,
    /// The clusters whose `Failback` tasks go.
    pub released: Vec<String>,
    /// The eviction that interrupted the move (`<cluster> (<reason>)`).
    pub because: String,
}

/// Since when a cluster the workload failed over from has been Ready (the `Ready` condition's
/// last transition, whole seconds), when it is Ready and not being deleted.
pub fn ready_since(clusters: &Clusters, cluster: &str) -> Option<DateTime<Utc>> {
    let cluster = clusters.by_name.get(cluster)?;
    if cluster.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ready = cluster.ready_condition()?;
    if ready.status != ConditionStatus::True {
        return None;
    }
    Some(
        ready
            .last_transition_time
            .map_or(DateTime::<Utc>::MIN_UTC, |t| t.as_datetime()),
    )
}

/// Whether the binding could return to `cluster` now: it is Ready, not being deleted, and the
/// scheduler's filters let it in as a new cluster (taints, affinity, API enablement, an
/// application failover block).
fn fit_now(input: &FailbackInput<'_>, cluster: &str) -> bool {
    ready_since(input.clusters, cluster).is_some()
        && matches!(admits(&current(input), cluster), Some(Ok(())))
}

fn current<'a>(input: &FailbackInput<'a>) -> ScheduleInput<'a> {
    ScheduleInput {
        spec: input.spec,
        status: input.status,
        clusters: &input.clusters.snapshot,
        options: ScheduleOptions::default(),
        blocked: input.blocked,
    }
}

/// The clusters a failback binding may return to, each with whether it is fit now. The
/// controller keeps, per binding and cluster, since when it has seen one fit without a break
/// (a cluster evicted by a taint while it stayed Ready turns fit when the taint goes; so does
/// one whose taint flaps while Ready does not), and [`decide`] counts the window from the
/// latest of that, the Ready transition and the failover. That memory is not stored: after a
/// server restart every window starts again, which only delays a failback.
pub fn fitness(input: &FailbackInput<'_>) -> Vec<(String, bool)> {
    let asks = input
        .spec
        .failover
        .as_ref()
        .and_then(|f| f.failback())
        .is_some();
    if !asks {
        return Vec::new();
    }
    awaiting_failback(&input.status.failover_history)
        .into_iter()
        .filter(|e| !input.spec.targets(&e.from_cluster))
        .map(|e| (e.from_cluster.clone(), fit_now(input, &e.from_cluster)))
        .collect()
}

/// The placement the binding had before `entry`'s failover, which the scheduler starts from:
/// as the entry recorded it (`originalPlacement`, each cluster with its replicas); for an entry
/// without it (opened from a task alone), the recovered cluster with the replicas it had and
/// every other cluster of `originalCluster` the binding still runs on with the replicas it has
/// now.
pub fn placement_before(
    spec: &ResourceBindingSpec,
    entry: &FailoverHistoryItem,
) -> Vec<TargetCluster> {
    let mut out: Vec<TargetCluster> = if entry.original_placement.is_empty() {
        let mut names: Vec<&str> = entry.original_cluster.iter().map(String::as_str).collect();
        if !names.contains(&entry.from_cluster.as_str()) {
            names.push(&entry.from_cluster);
        }
        names
            .into_iter()
            .filter_map(|name| {
                if name == entry.from_cluster {
                    Some(TargetCluster {
                        name: name.to_string(),
                        replicas: entry.replicas,
                        ..TargetCluster::default()
                    })
                } else {
                    spec.clusters.iter().find(|c| c.name == name).cloned()
                }
            })
            .collect()
    } else {
        entry.original_placement.clone()
    };
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Decides whether the binding moves back to a cluster it failed over from, now.
pub fn decide(input: &FailbackInput<'_>) -> Decision {
    let spec = input.spec;
    if let Some(abort) = abort(spec) {
        return Decision::Abort(abort);
    }
    let Some(failback) = spec.failover.as_ref().and_then(|f| f.failback()) else {
        return Decision::Stay;
    };
    let Some(placement) = spec.placement.as_ref() else {
        return Decision::Stay;
    };
    if !placement.cluster_affinities.is_empty()
        || !spec.graceful_eviction_tasks.is_empty()
        || !input.scheduled
    {
        return Decision::Stay;
    }
    let window_seconds = i64::from(failback.stabilization_seconds().max(0));
    let window = chrono::Duration::seconds(window_seconds);
    let mut wait: Option<(String, DateTime<Utc>, DateTime<Utc>)> = None;
    for entry in awaiting_failback(&input.status.failover_history) {
        let name = entry.from_cluster.as_str();
        if spec.targets(name) {
            continue;
        }
        if !fit_now(input, name) {
            continue;
        }
        let since = [
            ready_since(input.clusters, name),
            entry.failover_time.map(|t| t.as_datetime()),
            Some((input.fit_since)(name).unwrap_or(input.now)),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(input.now);
        let until = since + window;
        if input.now < until {
            if wait.as_ref().is_none_or(|(_, _, u)| until < *u) {
                wait = Some((name.to_string(), since, until));
            }
            continue;
        }
        let mut home = spec.clone();
        home.clusters = placement_before(spec, entry);
        let Ok(outcome) = schedule(&ScheduleInput {
            spec: &home,
            ..current(input)
        }) else {
            continue;
        };
        let workload = spec.replicas > 0 || spec.replica_requirements.is_some();
        let returns = outcome
            .clusters
            .iter()
            .any(|c| c.name == name && (c.replicas > 0 || !workload));
        if !returns || same_placement(&outcome.clusters, &spec.clusters) {
            continue;
        }
        let leaving = leaving(&spec.clusters, &outcome.clusters, workload);
        let tasks = tasks_for(spec, &leaving, &outcome.clusters, input);
        return Decision::Return(Box::new(Return {
            cluster: name.to_string(),
            stable_since: since,
            window_seconds,
            placement: outcome.clusters,
            leaving,
            tasks,
        }));
    }
    match wait {
        Some((cluster, stable_since, until)) => Decision::Wait {
            cluster,
            stable_since,
            until,
        },
        None => Decision::Stay,
    }
}

/// A move back to undo: the binding has `Failback` tasks and another eviction besides (the
/// cluster it returned to failed again). The clusters it left get back the replicas their
/// tasks kept (a cluster that only shrank keeps the larger count).
pub fn abort(spec: &ResourceBindingSpec) -> Option<Abort> {
    let (failback, other): (Vec<&GracefulEvictionTask>, Vec<&GracefulEvictionTask>) = spec
        .graceful_eviction_tasks
        .iter()
        .partition(|t| t.reason == EVICTION_REASON_FAILBACK);
    let interrupting = other.first()?;
    if failback.is_empty() {
        return None;
    }
    let mut placement = spec.clusters.clone();
    for t in &failback {
        let replicas = t.replicas.unwrap_or(0);
        match placement.iter_mut().find(|c| c.name == t.from_cluster) {
            Some(c) => c.replicas = c.replicas.max(replicas),
            None => placement.push(TargetCluster {
                name: t.from_cluster.clone(),
                replicas,
                ..TargetCluster::default()
            }),
        }
    }
    placement.sort_by(|a, b| a.name.cmp(&b.name));
    Some(Abort {
        placement,
        released: failback.iter().map(|t| t.from_cluster.clone()).collect(),
        because: format!("{} ({})", interrupting.from_cluster, interrupting.reason),
    })
}

/// Writes an abort into the spec.
pub fn apply_abort(spec: &mut ResourceBindingSpec, abort: &Abort) {
    spec.clusters = abort.placement.clone();
    spec.graceful_eviction_tasks
        .retain(|t| t.reason != EVICTION_REASON_FAILBACK);
}

fn same_placement(a: &[TargetCluster], b: &[TargetCluster]) -> bool {
    let key = |v: &[TargetCluster]| -> BTreeSet<(String, i32)> {
        v.iter().map(|c| (c.name.clone(), c.replicas)).collect()
    };
    key(a) == key(b)
}

/// Clusters of `now` that have fewer replicas (or none) in `next`, with their replicas now.
/// A binding that is no workload leaves only the clusters it drops.
fn leaving(now: &[TargetCluster], next: &[TargetCluster], workload: bool) -> Vec<TargetCluster> {
    now.iter()
        .filter(|c| match next.iter().find(|n| n.name == c.name) {
            None => true,
            Some(n) => workload && n.replicas < c.replicas,
        })
        .cloned()
        .collect()
}

/// The eviction tasks of a move: one per leaving cluster, in the policy's cluster purge mode
/// and grace period. A cluster that only shrinks gets none under an immediate purge mode (it
/// has no old copy to remove first: it is scaled down at once).
fn tasks_for(
    spec: &ResourceBindingSpec,
    leaving: &[TargetCluster],
    next: &[TargetCluster],
    input: &FailbackInput<'_>,
) -> Vec<GracefulEvictionTask> {
    if !input.graceful {
        return Vec::new();
    }
    let cluster_failover = spec.failover.as_ref().and_then(|f| f.cluster.as_ref());
    let purge_mode = cluster_failover
        .and_then(|c| c.purge_mode)
        .unwrap_or(input.default_purge_mode);
    let before: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
    let placed = describe(next);
    leaving
        .iter()
        .filter(|c| !(purge_mode.is_immediate() && next.iter().any(|n| n.name == c.name)))
        .map(|c| GracefulEvictionTask {
            from_cluster: c.name.clone(),
            purge_mode: Some(purge_mode),
            replicas: (c.replicas > 0).then_some(c.replicas),
            reason: EVICTION_REASON_FAILBACK.into(),
            message: format!("failback: the workload moves back to {placed}"),
            producer: EVICTION_PRODUCER_FAILBACK.into(),
            grace_period_seconds: cluster_failover
                .and_then(|c| c.grace_period_seconds)
                .filter(|_| purge_mode.is_graceful()),
            suppress_deletion: purge_mode.is_never().then_some(true),
            clusters_before_failover: before.clone(),
            creation_timestamp: Some(Time::new(input.now)),
            ..GracefulEvictionTask::default()
        })
        .collect()
}

/// `name:replicas, …` of a placement.
fn describe(placement: &[TargetCluster]) -> String {
    placement
        .iter()
        .map(|c| format!("{}:{}", c.name, c.replicas))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes a move into the spec: the new placement and the tasks.
pub fn apply(spec: &mut ResourceBindingSpec, ret: &Return) {
    spec.clusters = ret.placement.clone();
    spec.graceful_eviction_tasks
        .extend(ret.tasks.iter().cloned());
}

/// The Event message of a move.
pub fn message(ret: &Return) -> String {
    let since = ret.stable_since.to_rfc3339_opts(SecondsFormat::Secs, true);
    let mut msg = format!(
        "Moving back to cluster {}: Ready since {since}, longer than the failback stabilization window ({}s); new placement {}",
        ret.cluster,
        ret.window_seconds,
        describe(&ret.placement)
    );
    for c in &ret.leaving {
        match ret.tasks.iter().find(|t| t.from_cluster == c.name) {
            Some(t) => msg.push_str(&format!(
                "; {} keeps its copy ({} replica(s)) until the new placement is Healthy (purge mode {})",
                c.name,
                c.replicas,
                t.effective_purge_mode()
            )),
            None => msg.push_str(&format!("; {} gives its replicas back at once", c.name)),
        }
    }
    msg
}

/// The clusters a failback binding waits on: those its unfinished cluster failovers came
/// from (so that their Ready changes wake it), besides its targets and task sources. A binding
/// without failback names none.
pub fn clusters_to_watch(binding: &Value) -> BTreeSet<String> {
    if !concerns_failback(binding) {
        return BTreeSet::new();
    }
    let mut names = crate::controllers::shared::fan_out::clusters_named(binding);
    names.extend(
        awaiting_failback(&history::history_of(binding))
            .into_iter()
            .map(|h| h.from_cluster.clone()),
    );
    names
}

/// Whether failback has anything to do with a binding, read without decoding it: its policy
/// asks for failback, or a move back (a `Failback` task) is under way.
pub fn concerns_failback(binding: &Value) -> bool {
    binding
        .lookup("/spec/failover/cluster/failback")
        .is_some_and(|f| !f.is_null())
        || binding
            .lookup("/spec/gracefulEvictionTasks")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t["reason"] == EVICTION_REASON_FAILBACK))
}

/// What of a binding failback judges: its spec (generation), deletion, its history and
/// whether the scheduler has caught up — the last two only for a binding failback concerns
/// (every binding passes through this on each of its events).
pub fn binding_fingerprint(binding: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let generation = crate::controllers::runtime::controller::generation_fingerprint(binding);
    if !concerns_failback(binding) {
        return generation;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut h);
    binding
        .lookup("/status/failoverHistory")
        .map(Value::to_string)
        .hash(&mut h);
    binding
        .lookup("/status/schedulerObservedGeneration")
        .and_then(Value::as_i64)
        .hash(&mut h);
    h.finish()
}

/// The reconciler.
pub struct FailbackController {
    store: Arc<dyn Store>,
    clusters: ClusterCache,
    clock: SharedClock,
    events: EventRecorder,
    metrics: FailoverMetrics,
    graceful: bool,
    default_purge_mode: PurgeMode,
    /// The recovery each binding was last told it waits on (one Event per recovery).
    told: Mutex<HashMap<String, (String, DateTime<Utc>)>>,
    /// Per binding, since when each cluster it may return to has been seen fit (see
    /// [`fitness`]).
    fit: Mutex<HashMap<String, HashMap<String, DateTime<Utc>>>>,
}

impl FailbackController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        metrics: FailoverMetrics,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events,
            metrics,
            graceful: true,
            default_purge_mode: PurgeMode::Graciously,
            told: Mutex::default(),
            fit: Mutex::default(),
        }
    }

    /// Takes the taint manager's graceful-eviction switch and default purge mode: the clusters
    /// that give replicas back keep their copies as an eviction would.
    pub fn with_eviction_settings(mut self, settings: &TaintManagerSettings) -> Self {
        self.graceful = settings.graceful_eviction;
        self.default_purge_mode = settings.default_purge_mode;
        self
    }

    async fn tell_pending(
        &self,
        key: &str,
        binding: &Value,
        cluster: &str,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) {
        let recovery = (cluster.to_string(), since);
        if self.told.lock().insert(key.to_string(), recovery.clone()) == Some(recovery) {
            return;
        }
        let message = format!(
            "Cluster {cluster} has been Ready since {}: the workload moves back at {} if it stays Ready",
            since.to_rfc3339_opts(SecondsFormat::Secs, true),
            until.to_rfc3339_opts(SecondsFormat::Secs, true)
        );
        self.events
            .record(binding, EventType::Normal, EVENT_FAILBACK_PENDING, &message)
            .await;
    }
}

#[async_trait]
impl Reconciler for FailbackController {
    fn name(&self) -> &'static str {
        "failback"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding { rt, object }) = live_binding(self.store.as_ref(), key).await? else {
            self.forget(key);
            return Ok(Action::Done);
        };
        if !concerns_failback(&object) {
            self.forget(key);
            return Ok(Action::Done);
        }
        let spec: ResourceBindingSpec = decode(&object["spec"], key)?;
        let status = status_or_default(&object, key);
        let clusters = self.clusters.get().await?;
        let now = self.clock.now();
        let blocked =
            crate::controllers::failover::application_failover::blocked_clusters(&object, now);
        let scheduled = object
            .lookup("/metadata/generation")
            .and_then(Value::as_i64)
            == Some(status.scheduler_observed_generation);
        let seen = self.fit.lock().get(key).cloned().unwrap_or_default();
        let (decision, remembered) = {
            let fit_since = |c: &str| seen.get(c).copied();
            let mut input = FailbackInput {
                spec: &spec,
                status: &status,
                scheduled,
                clusters: &clusters,
                blocked: &blocked,
                graceful: self.graceful,
                default_purge_mode: self.default_purge_mode,
                fit_since: &fit_since,
                now,
            };
            // Remember since when each cluster has been fit; one seen unfit starts again.
            let remembered: HashMap<String, DateTime<Utc>> = fitness(&input)
                .into_iter()
                .filter(|(_, fit)| *fit)
                .map(|(c, _)| {
                    let since = seen.get(&c).copied().unwrap_or(now);
                    (c, since)
                })
                .collect();
            let fit_since = |c: &str| remembered.get(c).copied();
            input.fit_since = &fit_since;
            (decide(&input), remembered.clone())
        };
        self.fit.lock().insert(key.to_string(), remembered);
        match decision {
            Decision::Stay => Ok(Action::Done),
            Decision::Wait {
                cluster,
                stable_since,
                until,
            } => {
                self.tell_pending(key, &object, &cluster, stable_since, until)
                    .await;
                let after = (until - now).to_std().unwrap_or_default();
                Ok(Action::RequeueAfter(
                    after.max(std::time::Duration::from_millis(100)),
                ))
            }
            Decision::Return(ret) => {
                // The move and its history in one write; a conflict retries the whole
                // decision on the new binding.
                let outcome = move_back(&object, spec, &ret, now);
                self.effects()
                    .carry_out(key, &rt, &object, outcome, now)
                    .await?;
                self.forget(key);
                Ok(Action::Done)
            }
            Decision::Abort(abort) => {
                // The undoing and the end of its history entries in one write; a conflict
                // retries the whole decision on the new binding.
                let outcome = undo(&object, spec, &abort, now);
                self.effects()
                    .carry_out(key, &rt, &object, outcome, now)
                    .await?;
                Ok(Action::Done)
            }
        }
    }
}

impl FailbackController {
    fn forget(&self, key: &str) {
        self.told.lock().remove(key);
        self.fit.lock().remove(key);
    }

    fn effects(&self) -> Effects<'_> {
        Effects {
            store: self.store.as_ref(),
            events: &self.events,
            metrics: &self.metrics,
        }
    }
}

/// What the controller writes and tells for a move back (the one effect path,
/// [`Effects::carry_out`]): the binding as read (`read`, whose spec is `spec`) with the move
/// applied ([`apply`]); in its history, the recovered cluster's failover failed back and a
/// `Failback` entry per cluster giving replicas back; the `FailingBack` Event and the
/// `flotilla_failbacks_total` metric.
pub fn move_back(
    read: &Value,
    mut spec: ResourceBindingSpec,
    ret: &Return,
    now: DateTime<Utc>,
) -> Outcome {
    let before = spec.clusters.clone();
    apply(&mut spec, ret);
    let at = Time::new(now);
    let targets: Vec<String> = ret.placement.iter().map(|c| c.name.clone()).collect();
    let mut binding = read.clone();
    set_placement(&mut binding, &spec);
    let mut history = vec![HistoryStep::FailedBack {
        cluster: ret.cluster.clone(),
        at,
    }];
    history.extend(ret.leaving.iter().map(|c| {
        HistoryStep::Open(Box::new(history_entry(
            &spec, ret, c, &before, &targets, at,
        )))
    }));
    let told = Note::event(EventType::Normal, EVENT_FAILING_BACK, message(ret))
        .counting(Count::Failback(ret.cluster.clone()))
        .logged(false, "failing back", ret.cluster.clone());
    Outcome {
        binding,
        history,
        evicted: Vec::new(),
        notes: vec![told],
    }
}

/// What the controller writes and tells to undo a move back: the binding as read (`read`,
/// whose spec is `spec`) with the undoing applied ([`apply_abort`]); the history entries of
/// the released `Failback` tasks closed; a Warning `FailbackAborted` Event.
pub fn undo(
    read: &Value,
    mut spec: ResourceBindingSpec,
    abort: &Abort,
    now: DateTime<Utc>,
) -> Outcome {
    apply_abort(&mut spec, abort);
    let at = Time::new(now);
    let mut binding = read.clone();
    set_placement(&mut binding, &spec);
    let history = abort
        .released
        .iter()
        .map(|cluster| HistoryStep::TaskEnded {
            cluster: cluster.clone(),
            reason: EVENT_FAILBACK_ABORTED.to_string(),
            at,
        })
        .collect();
    let message = format!(
        "Failback interrupted: {} was evicted again while {} kept their copies; they get their replicas back (placement {})",
        abort.because,
        abort.released.join(", "),
        describe(&abort.placement)
    );
    let told = Note::event(EventType::Warning, EVENT_FAILBACK_ABORTED, message).logged(
        true,
        "failback aborted",
        abort.released.join(","),
    );
    Outcome {
        binding,
        history,
        evicted: Vec::new(),
        notes: vec![told],
    }
}

/// The history entry of one cluster giving replicas back in a move: a `Failback` entry from
/// that cluster to the new placement, open while its task keeps the old copy.
fn history_entry(
    spec: &ResourceBindingSpec,
    ret: &Return,
    leaving: &TargetCluster,
    before: &[TargetCluster],
    targets: &[String],
    at: Time,
) -> FailoverHistoryItem {
    let mut entry = match spec
        .graceful_eviction_tasks
        .iter()
        .find(|t| t.from_cluster == leaving.name && t.reason == EVICTION_REASON_FAILBACK)
    {
        Some(task) => FailoverHistoryItem::from_task(
            task,
            task.clusters_before_failover.clone(),
            at.as_datetime(),
        ),
        None => FailoverHistoryItem {
            reason: flotilla_api::history::FAILOVER_REASON_FAILBACK.into(),
            failover_time: Some(at),
            from_cluster: leaving.name.clone(),
            original_cluster: before.iter().map(|c| c.name.clone()).collect(),
            replicas: leaving.replicas,
            eviction_reason: EVICTION_REASON_FAILBACK.into(),
            producer: EVICTION_PRODUCER_FAILBACK.into(),
            old_copy_gone_time: Some(at),
            old_copy_gone_reason: flotilla_api::history::GONE_WITHOUT_TASK.into(),
            ..FailoverHistoryItem::default()
        },
    };
    entry.message = format!(
        "moved back to {} after it stayed Ready for {}s",
        ret.cluster, ret.window_seconds
    );
    entry.target_cluster = targets.to_vec();
    entry.rescheduled_time = Some(at);
    entry.original_placement = before.to_vec();
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::failover::testing::assert_placement;
    use crate::scheduler::ClusterSnapshot;
    use chrono::TimeZone;
    use flotilla_api::cluster::Cluster;
    use flotilla_api::history::{FAILOVER_REASON_APPLICATION, FAILOVER_REASON_CLUSTER};
    use serde_json::json;
    use std::collections::BTreeMap;

    const T0: i64 = 1_800_000_000;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(T0 + secs, 0).single().unwrap_or_default()
    }

    fn time(secs: i64) -> String {
        at(secs).to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// A cluster whose Ready condition is `ready` since `since`, with NoSchedule taints.
    fn cluster(name: &str, ready: &str, since: i64, taints: &[&str]) -> Cluster {
        let taints: Vec<Value> = taints
            .iter()
            .map(|k| json!({"key": k, "effect": "NoSchedule"}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"syncMode": "Pull", "taints": taints},
            "status": {
                "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                "resourceSummary": {"allocatable": {"pods": "100", "cpu": "100"}},
                "conditions": [{"type": "Ready", "status": ready, "reason": "r",
                                "message": "", "lastTransitionTime": time(since)}]}}))
        .unwrap()
    }

    fn fleet(m1: Cluster) -> Clusters {
        let mut by_name = BTreeMap::new();
        for c in [
            m1,
            cluster("m2", "True", -1000, &[]),
            cluster("m3", "True", -1000, &[]),
        ] {
            by_name.insert(c.metadata.name.clone(), c);
        }
        let snapshot = ClusterSnapshot::new(by_name.values());
        Clusters { by_name, snapshot }
    }

    /// The benchmark's shape: 2 replicas Divided by static weight naming m1 alone, so while
    /// m1 is out they divide 1:1 over m2 and m3; m1 failed over at 0 and the task ended.
    fn divided(window: Option<i64>) -> (ResourceBindingSpec, ResourceBindingStatus) {
        let mut failover = json!({"cluster": {"purgeMode": "Graciously"}});
        if let Some(w) = window {
            failover["cluster"]["failback"] = json!({"stabilizationSeconds": w});
        }
        let spec = serde_json::from_value(json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "app"},
            "replicas": 2,
            "placement": {
                "clusterAffinity": {"clusterNames": ["m1", "m2", "m3"]},
                "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [{"targetCluster": {"clusterNames": ["m1"]}, "weight": 1}]}}},
            "clusters": [{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}],
            "failover": failover}))
        .unwrap();
        let status = serde_json::from_value(json!({
            "schedulerObservedGeneration": 3,
            "failoverHistory": [{"reason": FAILOVER_REASON_CLUSTER, "failoverTime": time(0), "fromCluster": "m1",
                "originalCluster": ["m1"], "targetCluster": ["m2", "m3"], "replicas": 2,
                "oldCopyGoneTime": time(20), "oldCopyGoneReason": "EvictionTaskDoneHealthy"}]}))
        .unwrap();
        (spec, status)
    }

    fn input<'a>(
        spec: &'a ResourceBindingSpec,
        status: &'a ResourceBindingStatus,
        clusters: &'a Clusters,
        now: i64,
    ) -> FailbackInput<'a> {
        FailbackInput {
            spec,
            status,
            scheduled: true,
            clusters,
            blocked: &[],
            graceful: true,
            default_purge_mode: PurgeMode::Graciously,
            fit_since: &|_| Some(at(-10_000)),
            now: at(now),
        }
    }

    fn verdict(d: &Decision) -> String {
        match d {
            Decision::Stay => "stay".into(),
            Decision::Wait { cluster, until, .. } => {
                format!("wait {cluster} until {}", until.timestamp() - T0)
            }
            Decision::Return(r) => format!("return to {} as {}", r.cluster, describe(&r.placement)),
            Decision::Abort(a) => format!("abort to {}", describe(&a.placement)),
        }
    }

    /// Failback timing, flapping included: the window counts from the latest of m1's last
    /// turn to Ready, the failover, and the first time the controller saw m1 fit to return
    /// to (taints gone) since it last saw it unfit — so every flap starts it again.
    #[test]
    #[rustfmt::skip]
    #[allow(clippy::type_complexity)]
    fn failback_timing_table() {
        let back = "return to m1 as m1:2";
        const LONG_AGO: Option<i64> = Some(-10_000);
        // (case, m1's Ready status, since when, taints, window, seen fit since, now, verdict)
        let cases: Vec<(&str, &str, i64, Vec<&str>, Option<i64>, Option<i64>, i64, &str)> = vec![
            ("no failback asked", "True", 100, vec![], None, LONG_AGO, 1000, "stay"),
            ("m1 still down", "Unknown", 5, vec![], Some(60), LONG_AGO, 1000, "stay"),
            ("Ready, inside the window", "True", 100, vec![], Some(60), LONG_AGO, 130, "wait m1 until 160"),
            ("Ready, one second before its end", "True", 100, vec![], Some(60), LONG_AGO, 159, "wait m1 until 160"),
            ("Ready for the whole window", "True", 100, vec![], Some(60), LONG_AGO, 160, back),
            ("flap: Ready at 100, NotReady at 150", "False", 150, vec![], Some(60), LONG_AGO, 170, "stay"),
            ("flap: Ready again at 180, the window starts again", "True", 180, vec![], Some(60), LONG_AGO, 200, "wait m1 until 240"),
            ("flap: 60 s after the last recovery", "True", 180, vec![], Some(60), LONG_AGO, 240, back),
            ("Ready all along, the evicting taint just went: seen fit now", "True", -500, vec![], Some(60), None, 30, "wait m1 until 90"),
            ("Ready all along, fit since 100 (taint removed)", "True", -500, vec![], Some(60), Some(100), 130, "wait m1 until 160"),
            ("Ready all along, fit for the whole window", "True", -500, vec![], Some(60), Some(100), 160, back),
            ("never before the failover itself", "True", -500, vec![], Some(60), Some(-300), 30, "wait m1 until 60"),
            ("window 0: at once", "True", 100, vec![], Some(0), None, 100, back),
            ("an untolerated NoSchedule taint keeps it out (no wait)", "True", 100, vec!["maintenance"], Some(60), LONG_AGO, 1000, "stay"),
        ];
        for (case, ready, since, taints, window, fit, now, want) in cases {
            let clusters = fleet(cluster("m1", ready, since, &taints));
            let (spec, status) = divided(window);
            let fit_since = |_: &str| fit.map(at);
            let mut i = input(&spec, &status, &clusters, now);
            i.fit_since = &fit_since;
            assert_eq!(verdict(&decide(&i)), want, "{case}");
            let fit_now: Vec<bool> = fitness(&i).into_iter().map(|(_, f)| f).collect();
            let want_fit = window.is_some() && ready == "True" && taints.is_empty();
            assert_eq!(fit_now, if window.is_some() { vec![want_fit] } else { vec![] }, "{case}");
        }
        // No window named: the default, 300 s.
        let clusters = fleet(cluster("m1", "True", 100, &[]));
        let (mut spec, status) = divided(None);
        spec.failover = serde_json::from_value(json!({"cluster": {"failback": {}}})).unwrap();
        for (now, want) in [(399, "wait m1 until 400"), (400, back)] {
            assert_eq!(verdict(&decide(&input(&spec, &status, &clusters, now))), want);
        }
    }

    /// An edit of the binding (its spec, its status, whether it is scheduled).
    type Edit = Box<dyn Fn(&mut ResourceBindingSpec, &mut ResourceBindingStatus, &mut bool)>;

    #[test]
    fn nothing_moves_back_while_the_binding_is_busy_or_the_failover_is_not_one_to_undo() {
        let clusters = fleet(cluster("m1", "True", 100, &[]));
        let (spec, status) = divided(Some(60));
        assert!(matches!(
            decide(&input(&spec, &status, &clusters, 1000)),
            Decision::Return(_)
        ));
        let rows: Vec<(&str, Edit)> = vec![
            (
                "an eviction task is open",
                Box::new(|s, _, _| {
                    s.graceful_eviction_tasks.push(GracefulEvictionTask {
                        from_cluster: "m2".into(),
                        reason: "TaintUntolerated".into(),
                        producer: "TaintManager".into(),
                        ..GracefulEvictionTask::default()
                    })
                }),
            ),
            (
                "the scheduler has not seen the spec",
                Box::new(|_, _, scheduled| *scheduled = false),
            ),
            (
                "the failover's old copy is not gone yet",
                Box::new(|_, st, _| st.failover_history[0].old_copy_gone_time = None),
            ),
            (
                "it was failed back already",
                Box::new(|_, st, _| {
                    st.failover_history[0].failed_back_time = Some(Time::new(at(50)))
                }),
            ),
            (
                "an application failover is not undone",
                Box::new(|_, st, _| {
                    st.failover_history[0].reason = FAILOVER_REASON_APPLICATION.into()
                }),
            ),
            (
                "m1 runs it already",
                Box::new(|s, _, _| {
                    s.clusters.push(TargetCluster {
                        name: "m1".into(),
                        replicas: 1,
                        ..TargetCluster::default()
                    })
                }),
            ),
            (
                "the policy no longer selects m1",
                Box::new(|s, _, _| {
                    if let Some(a) = s
                        .placement
                        .as_mut()
                        .and_then(|p| p.cluster_affinity.as_mut())
                    {
                        a.cluster_names.retain(|n| n != "m1");
                    }
                }),
            ),
        ];
        for (case, edit) in rows {
            let (mut spec, mut status) = divided(Some(60));
            let mut scheduled = true;
            edit(&mut spec, &mut status, &mut scheduled);
            let mut i = input(&spec, &status, &clusters, 1000);
            i.scheduled = scheduled;
            assert_eq!(verdict(&decide(&i)), "stay", "{case}");
        }
        // Application failover blocks m1 for this binding.
        let blocked = [("m1".to_string(), None)];
        let mut i = input(&spec, &status, &clusters, 1000);
        i.blocked = &blocked;
        assert_eq!(verdict(&decide(&i)), "stay");
    }

    #[test]
    fn the_clusters_giving_replicas_back_keep_their_copies_under_failback_tasks() {
        let clusters = fleet(cluster("m1", "True", 100, &[]));
        let (spec, status) = divided(Some(60));
        let Decision::Return(ret) = decide(&input(&spec, &status, &clusters, 1000)) else {
            panic!("expected a return");
        };
        assert_eq!(describe(&ret.leaving), "m2:1, m3:1");
        assert_eq!(ret.tasks.len(), 2);
        for t in &ret.tasks {
            assert_eq!(t.reason, EVICTION_REASON_FAILBACK);
            assert_eq!(t.producer, EVICTION_PRODUCER_FAILBACK);
            assert_eq!(t.effective_purge_mode(), PurgeMode::Graciously);
            assert_eq!(t.replicas, Some(1));
            assert_eq!(t.clusters_before_failover, ["m2", "m3"]);
            assert_eq!(t.creation_timestamp, Some(Time::new(at(1000))));
        }
        let mut written = spec.clone();
        apply(&mut written, &ret);
        assert_eq!(describe(&written.clusters), "m1:2");
        assert_eq!(written.graceful_eviction_tasks.len(), 2);
        let msg = message(&ret);
        assert!(
            msg.contains("Moving back to cluster m1") && msg.contains("(60s)"),
            "{msg}"
        );
        assert!(msg.contains("m2 keeps its copy (1 replica(s))"), "{msg}");

        // Without graceful eviction they give their replicas back at once.
        let mut i = input(&spec, &status, &clusters, 1000);
        i.graceful = false;
        let Decision::Return(ret) = decide(&i) else {
            panic!("expected a return");
        };
        assert!(ret.tasks.is_empty());
        assert!(message(&ret).contains("m2 gives its replicas back at once"));
    }

    /// A Duplicated workload spread to one cluster: it went from m1 to m2 and comes back to
    /// m1 (the locality score favours where it came from); under Immediately the task removes
    /// m2's copy first.
    #[test]
    fn a_duplicated_single_cluster_workload_returns_to_where_it_came_from() {
        let clusters = fleet(cluster("m1", "True", 100, &[]));
        for (mode, want_mode) in [
            ("Graciously", PurgeMode::Graciously),
            ("Immediately", PurgeMode::Immediately),
        ] {
            let spec: ResourceBindingSpec = serde_json::from_value(json!({
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "app"},
                "replicas": 3,
                "placement": {
                    "clusterAffinity": {"clusterNames": ["m1", "m2", "m3"]},
                    "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}],
                    "replicaScheduling": {"replicaSchedulingType": "Duplicated"}},
                "clusters": [{"name": "m2", "replicas": 3}],
                "failover": {"cluster": {"purgeMode": mode, "failback": {"stabilizationSeconds": 30}}}}))
            .unwrap();
            let status: ResourceBindingStatus = serde_json::from_value(json!({
                "schedulerObservedGeneration": 1,
                "failoverHistory": [{"reason": FAILOVER_REASON_CLUSTER, "failoverTime": time(0), "fromCluster": "m1",
                    "originalCluster": ["m1"], "replicas": 3, "oldCopyGoneTime": time(1)}]}))
            .unwrap();
            let Decision::Return(ret) = decide(&input(&spec, &status, &clusters, 1000)) else {
                panic!("{mode}: expected a return");
            };
            assert_eq!(describe(&ret.placement), "m1:3", "{mode}");
            assert_eq!(describe(&ret.leaving), "m2:3", "{mode}");
            assert_eq!(ret.tasks.len(), 1, "{mode}");
            assert_eq!(ret.tasks[0].effective_purge_mode(), want_mode);
        }
    }

    #[test]
    fn a_move_back_interrupted_by_a_new_eviction_is_undone() {
        let task = |from: &str, reason: &str, replicas: i32| GracefulEvictionTask {
            from_cluster: from.into(),
            reason: reason.into(),
            producer: "p".into(),
            replicas: Some(replicas),
            ..GracefulEvictionTask::default()
        };
        let target = |name: &str, replicas: i32| TargetCluster {
            name: name.into(),
            replicas,
            ..TargetCluster::default()
        };
        // (case, clusters, tasks, the placement after the abort, released)
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            &str,
            Vec<TargetCluster>,
            Vec<GracefulEvictionTask>,
            Option<&str>,
        )> = vec![
            (
                "a move back in progress is left alone",
                vec![target("m1", 2)],
                vec![task("m2", "Failback", 1), task("m3", "Failback", 1)],
                None,
            ),
            (
                "no failback task: nothing to undo",
                vec![target("m2", 2)],
                vec![task("m1", "TaintUntolerated", 2)],
                None,
            ),
            (
                "divided: m1 evicted again, m2 and m3 get their replicas back",
                vec![],
                vec![
                    task("m2", "Failback", 1),
                    task("m3", "Failback", 1),
                    task("m1", "TaintUntolerated", 2),
                ],
                Some("m2:1, m3:1"),
            ),
            (
                "a cluster that only shrank keeps the larger count",
                vec![target("m2", 2)],
                vec![
                    task("m2", "Failback", 3),
                    task("m1", "ApplicationFailure", 1),
                ],
                Some("m2:3"),
            ),
        ];
        for (case, clusters, tasks, want) in rows {
            let (mut spec, _) = divided(Some(60));
            spec.clusters = clusters;
            spec.graceful_eviction_tasks = tasks;
            let got = abort(&spec);
            assert_eq!(
                got.as_ref().map(|a| describe(&a.placement)).as_deref(),
                want,
                "{case}"
            );
            if let Some(a) = got {
                apply_abort(&mut spec, &a);
                assert!(
                    spec.graceful_eviction_tasks
                        .iter()
                        .all(|t| t.reason != "Failback"),
                    "{case}"
                );
                assert_eq!(
                    spec.graceful_eviction_tasks.len(),
                    1,
                    "{case}: the new eviction stays"
                );
            }
        }
    }

    /// What the controller hands to the one effect path for a move back and for its undoing:
    /// the placement written, the history steps in order, and the Event with its metric.
    #[test]
    fn the_move_back_and_its_undoing_as_outcomes() {
        let clusters = fleet(cluster("m1", "True", 100, &[]));
        let (spec, status) = divided(Some(60));
        let read = json!({"metadata": {"name": "app-deployment", "namespace": "default", "generation": 3},
            "spec": serde_json::to_value(&spec).unwrap()});
        // (graceful eviction, the entries of m2 and m3 still open)
        for (graceful, open) in [(true, true), (false, false)] {
            let mut i = input(&spec, &status, &clusters, 1000);
            i.graceful = graceful;
            let Decision::Return(ret) = decide(&i) else {
                panic!("expected a return");
            };
            let o = move_back(&read, spec.clone(), &ret, at(1000));
            assert_placement(
                &o.binding,
                json!([{"name": "m1", "replicas": 2}]),
                if graceful { 2 } else { 0 },
                "failed back",
            );
            let [HistoryStep::FailedBack { cluster, at: when }, HistoryStep::Open(m2), HistoryStep::Open(m3)] =
                o.history.as_slice()
            else {
                panic!(
                    "failed back, then an entry per cluster leaving: {:?}",
                    o.history
                );
            };
            assert_eq!((cluster.as_str(), *when), ("m1", Time::new(at(1000))));
            for (entry, name) in [(m2, "m2"), (m3, "m3")] {
                assert_eq!(entry.from_cluster, name);
                assert_eq!(entry.reason, "Failback");
                assert_eq!(entry.target_cluster, ["m1"]);
                assert_eq!(
                    entry.message,
                    "moved back to m1 after it stayed Ready for 60s"
                );
                assert_eq!(entry.is_open(), open, "graceful {graceful}");
            }
            assert!(o.evicted.is_empty());
            let [told] = o.notes.as_slice() else {
                panic!("one Event: {:?}", o.notes);
            };
            assert_eq!(
                (told.kind, told.reason, &told.message),
                (EventType::Normal, EVENT_FAILING_BACK, &message(&ret))
            );
            assert_eq!(told.count, Some(Count::Failback("m1".into())));
        }

        // The cluster it returned to is evicted again: m2 and m3 get their replicas back and
        // the entries of their Failback tasks close.
        let mut moved = spec.clone();
        moved.clusters = Vec::new();
        moved.graceful_eviction_tasks = ["m2", "m3"]
            .iter()
            .map(|c| GracefulEvictionTask {
                from_cluster: c.to_string(),
                reason: EVICTION_REASON_FAILBACK.into(),
                replicas: Some(1),
                ..GracefulEvictionTask::default()
            })
            .chain([GracefulEvictionTask {
                from_cluster: "m1".into(),
                reason: "TaintUntolerated".into(),
                replicas: Some(2),
                ..GracefulEvictionTask::default()
            }])
            .collect();
        let Decision::Abort(a) = decide(&input(&moved, &status, &clusters, 2000)) else {
            panic!("expected an abort");
        };
        let o = undo(&read, moved, &a, at(2000));
        assert_eq!(
            o.binding["spec"]["clusters"],
            json!([{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}])
        );
        assert_eq!(
            o.binding["spec"]["gracefulEvictionTasks"][0]["fromCluster"],
            "m1"
        );
        let ended: Vec<(&str, &str)> = o
            .history
            .iter()
            .map(|step| match step {
                HistoryStep::TaskEnded {
                    cluster,
                    reason,
                    at: when,
                } => {
                    assert_eq!(*when, Time::new(at(2000)));
                    (cluster.as_str(), reason.as_str())
                }
                other => panic!("only task ends: {other:?}"),
            })
            .collect();
        assert_eq!(
            ended,
            [
                ("m2", EVENT_FAILBACK_ABORTED),
                ("m3", EVENT_FAILBACK_ABORTED)
            ]
        );
        let [told] = o.notes.as_slice() else {
            panic!("one Event: {:?}", o.notes);
        };
        assert_eq!(
            (told.kind, told.reason),
            (EventType::Warning, EVENT_FAILBACK_ABORTED)
        );
        assert!(
            told.message
                .starts_with("Failback interrupted: m1 (TaintUntolerated) was evicted again"),
            "{}",
            told.message
        );
        assert_eq!(told.count, None);
        assert!(told.log.as_ref().is_some_and(|l| l.warn));
    }

    /// A cluster of a random fleet: Ready long ago, `pods` free, a NoExecute taint if asked.
    fn sized(name: &str, pods: i64, no_execute: bool) -> Cluster {
        let mut c = cluster(name, "True", -10_000, &[]);
        c.status.resource_summary = serde_json::from_value(
            json!({"allocatable": {"pods": pods.to_string(), "cpu": "100"}}),
        )
        .unwrap();
        if no_execute {
            c.spec.taints = serde_json::from_value(
                json!([{"key": "cluster.karmada.io/unreachable", "effect": "NoExecute"}]),
            )
            .unwrap();
        }
        c
    }

    fn clusters_of(pods: &[i64], tainted: Option<&str>) -> Clusters {
        let by_name: BTreeMap<String, Cluster> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let name = format!("m{}", i + 1);
                let c = sized(&name, *p, tainted == Some(name.as_str()));
                (name, c)
            })
            .collect();
        let snapshot = ClusterSnapshot::new(by_name.values());
        Clusters { by_name, snapshot }
    }

    fn replicas_on(placement: &[TargetCluster], name: &str) -> i32 {
        placement
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.replicas)
    }

    proptest::proptest! {
        /// On random fleets and placements: a cluster fails over and recovers; the failback
        /// returns replicas to it, keeps the replica count the placement asks for, leaves no
        /// cluster with fewer replicas without a task keeping its copy, and restores exactly
        /// the placement before the failover — from the entry's `originalPlacement`, or,
        /// for an entry without it (opened from a task), for Duplicated and static weights,
        /// whose scheduling does not depend on where replicas run now (a dynamic division
        /// may then keep the workload where it is).
        #[test]
        fn failback_restores_the_placement_and_never_drops_a_copy_without_a_task(
            pods in proptest::collection::vec(3i64..20, 3..6),
            replicas in 1i32..7,
            kind in 0u8..4,
            weights in proptest::collection::vec(1i64..4, 6),
            pick in 0usize..6,
            recorded in proptest::bool::ANY,
        ) {
            let names: Vec<String> = (1..=pods.len()).map(|i| format!("m{i}")).collect();
            let scheduling = match kind {
                0 => json!({"replicaSchedulingType": "Duplicated"}),
                1 => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": names.iter().zip(&weights).map(|(n, w)|
                        json!({"targetCluster": {"clusterNames": [n]}, "weight": w})).collect::<Vec<_>>()}}),
                2 => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"dynamicWeight": "AvailableReplicas"}}),
                _ => json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Aggregated"}),
            };
            let mut placement = json!({"clusterAffinity": {"clusterNames": names}, "replicaScheduling": scheduling});
            if kind == 0 {
                placement["spreadConstraints"] = json!([{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}]);
            }
            let mut spec: ResourceBindingSpec = serde_json::from_value(json!({
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "app"},
                "replicas": replicas, "placement": placement,
                "failover": {"cluster": {"failback": {"stabilizationSeconds": 60}}}})).unwrap();
            let mut status = ResourceBindingStatus::default();
            let healthy = clusters_of(&pods, None);
            let run = |spec: &ResourceBindingSpec, status: &ResourceBindingStatus, clusters: &Clusters| {
                schedule(&ScheduleInput { spec, status, clusters: &clusters.snapshot,
                    options: ScheduleOptions::default(), blocked: &[] })
            };
            // The first placement; then its `pick`-th cluster fails and the scheduler places again.
            let Ok(first) = run(&spec, &status, &healthy) else { return Ok(()); };
            let before = first.clusters;
            let failed = before[pick % before.len()].clone();
            spec.clusters = before.iter().filter(|c| c.name != failed.name).cloned().collect();
            let broken = clusters_of(&pods, Some(failed.name.as_str()));
            let Ok(after) = run(&spec, &status, &broken) else { return Ok(()); };
            spec.clusters = after.clusters.clone();
            status.failover_history = vec![FailoverHistoryItem {
                reason: FAILOVER_REASON_CLUSTER.into(),
                failover_time: Some(Time::new(at(0))),
                from_cluster: failed.name.clone(),
                original_cluster: before.iter().map(|c| c.name.clone()).collect(),
                original_placement: if recorded { before.clone() } else { Vec::new() },
                replicas: failed.replicas,
                old_copy_gone_time: Some(Time::new(at(10))),
                ..FailoverHistoryItem::default()
            }];
            // The cluster recovers and stays fit past the window.
            let decision = decide(&input(&spec, &status, &healthy, 1000));
            if after.clusters.iter().any(|c| c.name == failed.name) {
                proptest::prop_assert_eq!(verdict(&decision), "stay");
                return Ok(());
            }
            let exact = recorded || kind <= 1;
            if !exact && decision == Decision::Stay {
                return Ok(());
            }
            let Decision::Return(ret) = decision else {
                return Err(proptest::test_runner::TestCaseError::fail(format!(
                    "no failback from {} to {} (before {})", describe(&after.clusters), failed.name, describe(&before))));
            };
            proptest::prop_assert!(replicas_on(&ret.placement, &failed.name) > 0, "{ret:?}");
            if kind == 0 {
                proptest::prop_assert!(ret.placement.iter().all(|c| c.replicas == replicas), "{ret:?}");
            } else {
                proptest::prop_assert_eq!(ret.placement.iter().map(|c| c.replicas).sum::<i32>(), replicas);
            }
            if exact {
                proptest::prop_assert_eq!(describe(&ret.placement), describe(&before));
            }
            for c in &after.clusters {
                if replicas_on(&ret.placement, &c.name) < c.replicas {
                    let task = ret.tasks.iter().find(|t| t.from_cluster == c.name);
                    proptest::prop_assert!(task.is_some_and(|t| t.replicas == Some(c.replicas)),
                        "{} gives replicas back without a task keeping its copy: {ret:?}", c.name);
                }
            }
            // Written, the spec asks the scheduler for nothing more and failback is done.
            let mut written = spec.clone();
            apply(&mut written, &ret);
            proptest::prop_assert_eq!(verdict(&decide(&input(&written, &status, &healthy, 1001))), "stay");
        }
    }

    #[test]
    fn only_failback_bindings_watch_the_clusters_they_left() {
        let mut b = json!({"metadata": {"namespace": "default", "name": "a"},
            "spec": {"clusters": [{"name": "m2"}]},
            "status": {"failoverHistory": [{"reason": FAILOVER_REASON_CLUSTER, "fromCluster": "m1",
                                            "failoverTime": time(0), "oldCopyGoneTime": time(1)}]}});
        assert!(clusters_to_watch(&b).is_empty());
        // Without failback, a history change does not wake the controller.
        let quiet = binding_fingerprint(&b);
        b["status"]["failoverHistory"][0]["message"] = json!("changed");
        assert_eq!(quiet, binding_fingerprint(&b));
        // A move back under way concerns it even once the policy dropped failback.
        b["spec"]["gracefulEvictionTasks"] = json!([{"fromCluster": "m2", "reason": "Failback"}]);
        assert!(concerns_failback(&b));
        b["spec"]["gracefulEvictionTasks"] = json!([]);
        assert!(!concerns_failback(&b));
        b["spec"]["failover"] = json!({"cluster": {"failback": {"stabilizationSeconds": 5}}});
        assert_eq!(
            clusters_to_watch(&b).into_iter().collect::<Vec<_>>(),
            ["m1", "m2"]
        );
        let before = binding_fingerprint(&b);
        b["status"]["failoverHistory"][0]["failedBackTime"] = json!(time(9));
        assert_ne!(before, binding_fingerprint(&b));
        assert_eq!(
            clusters_to_watch(&b).into_iter().collect::<Vec<_>>(),
            ["m2"]
        );
    }
}
