//! The failover dry-run (`FailoverSimulation`): what cluster and application failover
//! would do if the named clusters failed now (and the named workloads turned Unhealthy), as a
//! pure function of (clusters, bindings, request, settings, now) that changes nothing. The API
//! handler reads the store's snapshot, calls [`simulate`] and maps its errors.
//!
//! It runs the real path's own pure functions, step by step, on copies:
//! - a failed cluster is made as the cluster status controller would make it (pull members:
//!   Ready `Unknown` once `--cluster-monitor-grace-period` passes without a lease renewal, the
//!   failure taken to happen right after the last renewal; push members: Ready `False` once
//!   the probes have failed for `--cluster-failure-threshold`), and tainted by
//!   [`cluster_taints::desired_taints`] (NoSchedule at once, NoExecute after
//!   `--failover-eviction-timeout`) and by the ClusterTaintPolicies whose conditions then match
//!   ([`cluster_taint_policy::desired_taints`]);
//! - at every instant something can change — the failure, each taint, each deadline the
//!   controllers ask to be woken at — every binding goes through the taint manager
//!   ([`taint_manager::decide`] / [`taint_manager::apply`]), application failover
//!   ([`application_failover::decide`] / [`application_failover::apply`], the workloads named
//!   Unhealthy on their cluster from the failure on) and the scheduler
//!   ([`needs_scheduling`], [`schedule`], [`scheduler::decision::decide`]), in that order, until
//!   a pass changes nothing.
//!
//! Each eviction is reported with the time after the failure at which it happens (taints'
//! `tolerationSeconds`, application failover's `decisionConditions.tolerationSeconds`). With
//! `afterSeconds` the run stops there, and evictions due later are `pending` (up to a year
//! after the failure; later ones are not reported). Times are the
//! earliest the controllers can act (the status controller looks at pull members every
//! `--cluster-monitor-period`, so a real failure may be seen up to that much later).
//!
//! The partition brake: every eviction asks a brake of the dry-run's own ([`EvictionBrake`], built
//! from the server's flags and start, so its rule — [`fleet_view`], `admit_in` — and its token
//! buckets and reservations are the brake's own code), through the producers' own steps
//! ([`taint_manager::hold_evictions`], [`application_failover::settle`]), with the failed clusters
//! not Ready from the instant the timeline says. So the bindings go through time together: at each
//! instant the ones due are taken in key order (`crb|…` before `rb|ns|name`), each asking for its
//! clusters in `spec.clusters` order, taint manager first. That is the order the taint manager's
//! queue receives them from a cluster's fan-out (sorted by key), so the times at which a region
//! lets its failed clusters out (one per `1/rate` from the first due; all of a cluster's
//! bindings go once it is out) are exact, and which cluster goes first is exact with one worker
//! and approximate with several (the controllers run 16 workers: bindings of two clusters
//! reconciled at once may swap the clusters' turns), as it is between the taint manager and
//! application failover evicting at the same instant. A paced or startup-grace eviction happens later and says by how
//! much; a stopped one (FullDisruption, a rate of 0) does not happen while the stop lasts, and is
//! listed as held. The brake's buckets start full (evictions in progress when the dry-run is asked
//! are not counted).
//!
//! Not modelled: the graceful eviction controller removing tasks (the placement shown is the
//! one written right after the evictions, while old copies are kept as their purge mode says),
//! and members reporting new capacity after the moves.
//!
//! [`cluster_taints::desired_taints`]: crate::controllers::members::cluster_taints::desired_taints
//! [`taint_manager::hold_evictions`]: crate::controllers::failover::taint_manager::hold_evictions
//! [`application_failover::settle`]: crate::controllers::failover::application_failover::settle
//! [`cluster_taint_policy::desired_taints`]:
//! crate::controllers::members::cluster_taint_policy::desired_taints
//! [`application_failover::decide`]: crate::controllers::failover::application_failover::decide
//! [`application_failover::apply`]: crate::controllers::failover::application_failover::apply
//! [`scheduler::decision::decide`]: crate::scheduler::decision::decide

use crate::controllers::failover::application_failover::{self as app, FailoverState};
use crate::controllers::failover::brake::{
    fleet_view, EvictionBrake, Hold, HoldReason, Member, Pace, CLUSTERS, EVICTIONS,
};
use crate::controllers::failover::brake_reading::BrakeReading;
use crate::controllers::failover::taint_manager;
use crate::controllers::members::cluster_health::span;
use crate::controllers::members::cluster_taint_policy;
use crate::controllers::members::cluster_taints::desired_taints;
use crate::controllers::settings::ApplicationFailoverSettings;
use crate::controllers::settings::BrakeSettings;
use crate::controllers::settings::ControllerSettings;
use crate::controllers::settings::HealthConfig;
use crate::controllers::settings::TaintConfig;
use crate::controllers::settings::TaintManagerSettings;
use crate::controllers::shared::cluster_cache::Clusters;
use crate::scheduler::decision::{self, DecisionInput, Step};
use crate::scheduler::{
    condition_for, needs_scheduling, schedule, ClusterSnapshot, ScheduleInput, ScheduleOptions,
};
use chrono::{DateTime, Duration, Utc};
use flotilla_api::binding::{
    AggregatedStatusItem, ResourceBindingSpec, ResourceBindingStatus, TargetCluster,
    EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER, EVICTION_PRODUCER_RB_APPLICATION_FAILOVER,
    EVICTION_PRODUCER_TAINT_MANAGER, EVICTION_REASON_TAINT_UNTOLERATED,
};
use flotilla_api::cluster::{Cluster, SyncMode, TaintEffect, CONDITION_READY};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::policy::cluster_taint_policy::ClusterTaintPolicy;
use flotilla_api::policy::{PurgeMode, DEFAULT_SCHEDULER_NAME};
use flotilla_api::simulation::{
    BrakeForecast, ClusterTimeline, EvictionDelay, FailoverSimulationSpec,
    FailoverSimulationStatus, HeldEviction, OldCopy, PendingEviction, RegionForecast,
    RegionStateChange, ScheduledResult, SimulatedBinding, SimulatedEviction, SimulationSummary,
    SimulationTimeline, UnplaceableBinding, CLUSTER_RESOURCE_BINDING, RESOURCE_BINDING,
};
use flotilla_api::validation::{FieldError, Path, ValidationErrors};
use flotilla_api::work::ResourceHealth;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Steps one binding may take before the run stops (a held Immediately eviction asks to be
/// looked at again every 30 s for ever).
const MAX_STEPS: usize = 64;
/// How far the run looks: evictions more than a year after the failure are not reported (and
/// times stay far from the limits of date arithmetic).
const LOOK_AHEAD_MS: i64 = 366 * 24 * 3600 * 1000;
/// Passes of the taint manager, application failover and the scheduler at one instant before
/// the run moves on.
pub const MAX_PASSES: usize = 4;

/// The flags the answer depends on.
#[derive(Clone, Debug)]
pub struct SimulationSettings {
    /// `--cluster-monitor-grace-period` and `--cluster-failure-threshold`.
    pub health: HealthConfig,
    /// `--failover-eviction-timeout`, automatic NoExecute taints.
    pub taints: TaintConfig,
    /// The taint manager's switches.
    pub taint_manager: TaintManagerSettings,
    /// Application failover's settings.
    pub application_failover: ApplicationFailoverSettings,
    /// `--graceful-eviction-timeout`: the grace of a task whose policy sets none.
    pub graceful_eviction_timeout: std::time::Duration,
    /// The server's partition brake (`None`: the server runs none, nothing holds evictions).
    pub brake: Option<BrakeOf>,
}

/// What the dry-run needs of the server's partition brake: its flags and the server's start
/// (its startup grace counts from it). The dry-run runs a brake of its own with them, so the
/// rule and the buckets are the brake's own code.
#[derive(Clone, Debug)]
pub struct BrakeOf {
    /// The brake's flags.
    pub settings: BrakeSettings,
    /// When the server started.
    pub started: DateTime<Utc>,
}

impl SimulationSettings {
    /// The settings the server's controllers run with.
    pub fn of(settings: &ControllerSettings) -> Self {
        Self {
            health: settings.health,
            taints: settings.taints,
            taint_manager: settings.taint_manager.clone(),
            application_failover: settings.application_failover.clone(),
            graceful_eviction_timeout: settings.graceful_eviction_timeout,
            brake: None,
        }
    }

    /// These settings with the server's `brake`.
    pub fn with_brake(mut self, brake: &dyn BrakeReading) -> Self {
        self.brake = Some(BrakeOf {
            settings: brake.settings().clone(),
            started: brake.started(),
        });
        self
    }
}

impl Default for SimulationSettings {
    fn default() -> Self {
        Self::of(&ControllerSettings::default())
    }
}

/// One stored binding, as the simulation reads it.
#[derive(Clone, Debug)]
pub struct BindingInput {
    /// `ResourceBinding` or `ClusterResourceBinding`.
    pub kind: &'static str,
    /// Namespace (empty for ClusterResourceBindings).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec`.
    pub spec: ResourceBindingSpec,
    /// `status`.
    pub status: ResourceBindingStatus,
    /// `metadata.generation`.
    pub generation: i64,
    /// The applied-placement annotation.
    pub applied_placement: Option<String>,
    /// Application failover's state annotation.
    pub failover_state: FailoverState,
}

impl BindingInput {
    /// Reads a stored binding object (`None` when its spec does not decode: the controllers
    /// skip it too).
    pub fn from_object(kind: &'static str, object: &serde_json::Value) -> Option<Self> {
        let spec: ResourceBindingSpec = serde_json::from_value(object.get("spec")?.clone()).ok()?;
        let status: ResourceBindingStatus = object
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        let text = |p: &str| {
            object
                .lookup(p)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        Some(Self {
            kind,
            namespace: text("/metadata/namespace").unwrap_or_default(),
            name: text("/metadata/name").unwrap_or_default(),
            generation: object
                .lookup("/metadata/generation")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0),
            applied_placement: object
                .lookup("/metadata/annotations")
                .and_then(|a| a.get(flotilla_api::policy::APPLIED_PLACEMENT_ANNOTATION))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            failover_state: FailoverState::of(object),
            spec,
            status,
        })
    }

    fn is(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.kind == kind && self.namespace == namespace && self.name == name
    }
}

/// Why a request cannot be simulated (the API answers 422 naming the field).
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// A field is wrong or names something that does not exist.
    #[error("{0}")]
    Invalid(#[from] ValidationErrors),
}

/// What the cluster side looks like from one instant on.
struct Phase {
    /// Milliseconds after the failure.
    at_ms: i64,
    clusters: Clusters,
}

/// The clusters over time: the stored ones, then each change of a failed cluster.
struct World {
    phases: Vec<Arc<Phase>>,
    timeline: Vec<ClusterTimeline>,
}

fn ms(d: Duration) -> i64 {
    d.num_milliseconds()
}

/// Seconds after the failure, rounded up.
fn seconds(at_ms: i64) -> i64 {
    at_ms.div_euclid(1000) + i64::from(at_ms.rem_euclid(1000) != 0)
}

impl World {
    fn build(
        clusters: &BTreeMap<String, Cluster>,
        taint_policies: &[ClusterTaintPolicy],
        failed: &[String],
        settings: &SimulationSettings,
        failed_at: DateTime<Utc>,
    ) -> Self {
        // Per failed cluster: (offset, the cluster from then on).
        let mut changes: Vec<(String, i64, Cluster)> = Vec::new();
        let mut timeline = Vec::new();
        for name in failed {
            let Some(cluster) = clusters.get(name) else {
                continue;
            };
            let (steps, line) = fail(cluster, taint_policies, settings, failed_at);
            timeline.push(line);
            changes.extend(steps.into_iter().map(|(at, c)| (name.clone(), at, c)));
        }
        let mut times: BTreeSet<i64> = changes.iter().map(|(_, at, _)| *at).collect();
        times.insert(0);
        let phases = times
            .into_iter()
            .map(|at_ms| {
                let mut by_name = clusters.clone();
                for (name, at, c) in &changes {
                    if *at <= at_ms {
                        by_name.insert(name.clone(), c.clone());
                    }
                }
                let snapshot = ClusterSnapshot::new(by_name.values());
                Arc::new(Phase {
                    at_ms,
                    clusters: Clusters { by_name, snapshot },
                })
            })
            .collect();
        World { phases, timeline }
    }

    fn at(&self, at_ms: i64) -> Arc<Phase> {
        self.phases
            .iter()
            .rev()
            .find(|p| p.at_ms <= at_ms)
            .or(self.phases.first())
            .cloned()
            .unwrap_or_else(|| {
                Arc::new(Phase {
                    at_ms: 0,
                    clusters: Clusters::default(),
                })
            })
    }

    fn change_times(&self) -> impl Iterator<Item = i64> + '_ {
        self.phases.iter().map(|p| p.at_ms)
    }
}

/// One cluster failing at `failed_at`: its states over time (offset in ms, cluster) as the
/// status and taint controllers would write them, and its timeline for the answer.
fn fail(
    cluster: &Cluster,
    taint_policies: &[ClusterTaintPolicy],
    settings: &SimulationSettings,
    failed_at: DateTime<Utc>,
) -> (Vec<(i64, Cluster)>, ClusterTimeline) {
    // The cluster controller's taints, then the policies' (each keeps the other's).
    let taint = |c: &mut Cluster, lease: Option<DateTime<Utc>>, at: DateTime<Utc>| {
        let (taints, due) = desired_taints(c, lease, at, settings.taints);
        c.spec.taints = taints;
        if let Some(taints) = cluster_taint_policy::desired_taints(c, taint_policies, at) {
            c.spec.taints = taints;
        }
        due
    };
    let pull = cluster.spec.sync_mode == Some(SyncMode::Pull);
    let (detect, status, reason, message, lease) = if pull {
        (
            span(settings.health.grace.monitor),
            ConditionStatus::Unknown,
            "ClusterStatusUnknown",
            "Cluster status controller stopped posting cluster status.",
            Some(failed_at),
        )
    } else {
        (
            span(settings.health.thresholds.failure),
            ConditionStatus::False,
            "ClusterNotReachable",
            "cluster is not reachable",
            None,
        )
    };
    let mut states = Vec::new();
    let mut down = cluster.clone();
    let detected = failed_at + detect;
    set_condition(
        &mut down.status.conditions,
        Condition::new(CONDITION_READY, status, reason, message),
        detected,
    );
    let due = taint(&mut down, lease, detected);
    states.push((ms(detect), down.clone()));
    if let Some(due) = due {
        let at = detect + due;
        taint(&mut down, lease, failed_at + at);
        states.push((ms(at), down.clone()));
    }
    // The first state with a NoExecute taint the cluster did not have.
    let no_execute = states
        .iter()
        .find(|(_, c)| {
            c.spec.taints.iter().any(|t| {
                t.effect == TaintEffect::NoExecute
                    && !cluster.spec.taints.iter().any(|o| o.same_identity(t))
            })
        })
        .map(|(at, _)| seconds(*at));
    let line = ClusterTimeline {
        cluster: cluster.metadata.name.clone(),
        ready: status.as_str().to_string(),
        not_ready_after_seconds: seconds(ms(detect)),
        no_execute_after_seconds: no_execute,
        taints: down.spec.taints.iter().map(ToString::to_string).collect(),
    };
    (states, line)
}

/// Checks that every named cluster and binding exists.
fn check_names(
    spec: &FailoverSimulationSpec,
    clusters: &BTreeMap<String, Cluster>,
    bindings: &[BindingInput],
) -> Result<(), ValidationErrors> {
    let mut errs = Vec::new();
    let root = Path::new("spec");
    for (i, c) in spec.failed_clusters.iter().enumerate() {
        if !clusters.contains_key(c) {
            errs.push(FieldError::invalid(
                &root.child("failedClusters").index(i),
                c,
                format!("no cluster {c:?}"),
            ));
        }
    }
    for (i, a) in spec.unhealthy_applications.iter().enumerate() {
        let p = root.child("unhealthyApplications").index(i);
        let found = bindings
            .iter()
            .find(|b| b.is(a.binding_kind(), &a.namespace, &a.name));
        match found {
            None => errs.push(FieldError::invalid(
                &p.child("name"),
                &a.name,
                format!(
                    "no {} {:?}",
                    a.binding_kind(),
                    binding_ref(&a.namespace, &a.name)
                ),
            )),
            Some(b) if !b.spec.clusters.iter().any(|c| c.name == a.cluster) => {
                errs.push(FieldError::invalid(
                    &p.child("cluster"),
                    &a.cluster,
                    format!(
                        "{} {:?} is not placed on cluster {:?}",
                        a.binding_kind(),
                        binding_ref(&a.namespace, &a.name),
                        a.cluster
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    ValidationErrors::into_result(errs)
}

fn binding_ref(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Simulates the request at `now` over `clusters`, the ClusterTaintPolicies and `bindings`
/// (every ResourceBinding and ClusterResourceBinding) and answers the status.
///
/// The bindings go through time together, because the partition brake is shared: at each
/// instant the bindings due then are taken in the order of their keys (`crb|<name>` before
/// `rb|<namespace>|<name>`), the order the taint manager's queue gets them from a cluster's
/// fan-out (which lists a cluster's bindings sorted by key); each asks the brake (a brake of
/// the dry-run's own, with the server's flags and start) for its evictions in the order of its
/// `spec.clusters`, taint manager before application failover, as the controllers do.
pub fn simulate(
    spec: &FailoverSimulationSpec,
    clusters: &BTreeMap<String, Cluster>,
    taint_policies: &[ClusterTaintPolicy],
    bindings: &[BindingInput],
    settings: &SimulationSettings,
    now: DateTime<Utc>,
) -> Result<FailoverSimulationStatus, SimulationError> {
    flotilla_api::simulation::validate_spec(spec)?;
    check_names(spec, clusters, bindings)?;
    let failed_at = Time::new(now).as_datetime();
    let world = World::build(
        clusters,
        taint_policies,
        &spec.failed_clusters,
        settings,
        failed_at,
    );
    let horizon_ms = spec.after_seconds.map(|s| s.saturating_mul(1000));
    let brake = settings
        .brake
        .as_ref()
        .map(|b| EvictionBrake::new(b.settings.clone(), b.started, None));
    let mut runs: Vec<Run> = bindings
        .iter()
        .map(|b| {
            let unhealthy: Vec<String> = spec
                .unhealthy_applications
                .iter()
                .filter(|a| b.is(a.binding_kind(), &a.namespace, &a.name))
                .map(|a| a.cluster.clone())
                .collect();
            Run::new(b, &unhealthy, settings, failed_at)
        })
        .collect();
    run_all(&mut runs, &world, horizon_ms, brake.as_ref());

    let mut status = FailoverSimulationStatus {
        failed_at: Some(Time::new(failed_at)),
        timeline: SimulationTimeline {
            clusters: world.timeline.clone(),
        },
        ..Default::default()
    };
    let mut summary = SimulationSummary {
        bindings: bindings.len(),
        ..Default::default()
    };
    for run in runs {
        let Some(out) = run.finish(&spec.failed_clusters) else {
            continue;
        };
        summary.affected += 1;
        summary.evictions += out.binding.evictions.len();
        summary.pending += out.binding.pending.len();
        summary.held += out.binding.held.len();
        summary.delayed += out
            .binding
            .evictions
            .iter()
            .filter(|e| e.brake.is_some())
            .count()
            + out
                .binding
                .pending
                .iter()
                .filter(|e| e.brake.is_some())
                .count();
        if let Some(u) = out.unplaceable {
            summary.unplaceable += 1;
            status.unplaceable.push(u);
        }
        status.bindings.push(out.binding);
    }
    status.brake = forecast(&world, settings.brake.as_ref(), failed_at, &status.bindings);
    status.summary = summary;
    Ok(status)
}

/// Runs every binding through every instant: each instant something can change (the phases of
/// the world) and each one a controller asks to be woken at. At one instant the bindings due
/// are taken in key order, pass after pass (the taint manager, application failover and the
/// scheduler each) until no binding changes.
fn run_all(
    runs: &mut [Run],
    world: &World,
    horizon_ms: Option<i64>,
    brake: Option<&EvictionBrake>,
) {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| runs[*a].key.cmp(&runs[*b].key));
    let mut queue: BTreeSet<(i64, usize)> = world
        .change_times()
        .flat_map(|t| (0..order.len()).map(move |rank| (t, rank)))
        .collect();
    let mut steps = vec![0usize; runs.len()];
    let mut horizon_taken = false;
    while let Some(&(at_ms, _)) = queue.first() {
        let mut due = Vec::new();
        while let Some(&(t, rank)) = queue.first() {
            if t != at_ms {
                break;
            }
            queue.pop_first();
            if steps[rank] < MAX_STEPS {
                steps[rank] += 1;
                due.push(rank);
            }
        }
        if !horizon_taken && horizon_ms.is_some_and(|h| at_ms > h) {
            // The bindings as they stand at the horizon; the run goes on past it only to say
            // which evictions would come later.
            for run in runs.iter_mut() {
                run.at_horizon = Some(run.horizon());
            }
            horizon_taken = true;
        }
        let phase = world.at(at_ms);
        for _ in 0..MAX_PASSES {
            let mut changed = Vec::new();
            for &rank in &due {
                let Some(run) = order.get(rank).and_then(|&i| runs.get_mut(i)) else {
                    continue;
                };
                let (moved, wakes) = run.pass(&phase, at_ms, brake);
                for wake in wakes {
                    if wake <= LOOK_AHEAD_MS {
                        queue.insert((wake.max(at_ms + 1), rank));
                    }
                }
                if moved {
                    changed.push(rank);
                }
            }
            if changed.is_empty() {
                break;
            }
            due = changed;
        }
    }
}

/// The partition brake's part of the answer: each region's states from the failure on (the
/// brake's own [`fleet_view`] at each instant the clusters change and at the end of the
/// startup grace) and what it did to the evictions.
fn forecast(
    world: &World,
    brake: Option<&BrakeOf>,
    failed_at: DateTime<Utc>,
    bindings: &[SimulatedBinding],
) -> BrakeForecast {
    let Some(brake) = brake else {
        return BrakeForecast {
            message:
                "this server runs no partition brake (no controllers): nothing holds evictions back"
                    .into(),
            ..Default::default()
        };
    };
    let grace_until =
        brake.started + Duration::from_std(brake.settings.startup_grace).unwrap_or(Duration::MAX);
    let grace_ms = ms(grace_until - failed_at);
    let mut times: BTreeSet<i64> = world.change_times().collect();
    if grace_ms > 0 && grace_ms <= LOOK_AHEAD_MS {
        times.insert(grace_ms);
    }
    let mut regions: BTreeMap<String, RegionForecast> = BTreeMap::new();
    for at_ms in times {
        let phase = world.at(at_ms);
        let view = fleet_view(
            phase.clusters.by_name.values().map(|c| Member {
                region: &c.spec.region,
                ready: c.is_ready(),
            }),
            &brake.settings,
            brake.started,
            failed_at + Duration::milliseconds(at_ms),
        );
        for (name, v) in view.regions {
            let r = regions
                .entry(name.clone())
                .or_insert_with(|| RegionForecast {
                    region: name,
                    ..Default::default()
                });
            let rate = v.pace.describe(CLUSTERS);
            if r.states
                .last()
                .is_none_or(|l| l.state != v.state.as_str() || l.rate != rate)
            {
                r.states.push(RegionStateChange {
                    after_seconds: seconds(at_ms),
                    state: v.state.as_str().to_string(),
                    rate: rate.clone(),
                });
            }
            r.state = v.state.as_str().to_string();
            r.rate = rate;
            r.clusters_per_second = match v.pace {
                Pace::PerSecond(p) => Some(p),
                _ => None,
            };
            r.resource_eviction_rate = v.ceiling.map(|c| c.describe(EVICTIONS));
            r.clusters = v.counts.clusters;
            r.not_ready_clusters = v.counts.not_ready;
            r.message = v.reason;
        }
    }
    let stored = world.at(0);
    let region_of = |cluster: &str| EvictionBrake::region_of(&stored.clusters, cluster).to_string();
    let (mut total, mut delayed, mut held, mut longest) = (0, 0, 0, 0);
    for b in bindings {
        for e in &b.evictions {
            total += 1;
            let r = regions.entry(region_of(&e.cluster)).or_default();
            r.evictions += 1;
            if let Some(d) = &e.brake {
                r.delayed_evictions += 1;
                delayed += 1;
                longest = longest.max(d.delay_seconds);
            }
        }
        for h in b.held.iter().filter(|h| !h.region.is_empty()) {
            held += 1;
            regions.entry(h.region.clone()).or_default().held_evictions += 1;
        }
    }
    let mut message = if delayed == 0 && held == 0 {
        format!("the brake delays none of the {total} evictions and stops none")
    } else {
        format!(
            "the brake delays {delayed} of the {total} evictions (the longest by {longest} s) and stops {held}"
        )
    };
    if !brake.settings.rate_limit {
        message.push_str(
            "; pacing is off (--enable-eviction-rate-limit=false): only the startup grace and a fleet that looks cut off hold evictions back",
        );
    }
    BrakeForecast {
        pacing: brake.settings.rate_limit,
        startup_grace_until: (grace_ms > 0).then(|| Time::new(grace_until)),
        message,
        regions: regions
            .into_values()
            .filter(|r| !r.region.is_empty())
            .collect(),
    }
}

/// An eviction the brake is holding back, while it does.
#[derive(Clone, Debug)]
struct BrakeHold {
    /// When the controller first wanted it (ms after the failure).
    first_ms: i64,
    /// Why it waited, each reason once, in order.
    reasons: Vec<HoldReason>,
    /// The last answer.
    last: Hold,
    /// Who wanted it.
    producer: String,
}

/// The binding's key, as the controllers' queues name it (and the brake's tickets).
fn key_of(input: &BindingInput) -> String {
    if input.kind == CLUSTER_RESOURCE_BINDING {
        format!("crb|{}", input.name)
    } else {
        format!("rb|{}|{}", input.namespace, input.name)
    }
}

/// `d` in whole milliseconds, rounded up (a wake must never come before what it waits for).
fn ceil_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// One binding going through the controllers' decisions over time.
struct Run<'a> {
    input: &'a BindingInput,
    key: String,
    settings: &'a SimulationSettings,
    failed_at: DateTime<Utc>,
    spec: ResourceBindingSpec,
    status: ResourceBindingStatus,
    applied: Option<String>,
    state: FailoverState,
    producer: &'static str,
    evictions: Vec<SimulatedEviction>,
    held: Vec<HeldEviction>,
    /// Evictions the brake holds now, by cluster.
    holds: BTreeMap<String, BrakeHold>,
    scheduled: Option<Result<(), (&'static str, String)>>,
    at_horizon: Option<Horizon>,
}

struct RunOutcome {
    binding: SimulatedBinding,
    unplaceable: Option<UnplaceableBinding>,
}

impl<'a> Run<'a> {
    fn new(
        input: &'a BindingInput,
        unhealthy: &[String],
        settings: &'a SimulationSettings,
        failed_at: DateTime<Utc>,
    ) -> Self {
        let mut status = input.status.clone();
        for cluster in unhealthy {
            match status
                .aggregated_status
                .iter_mut()
                .find(|i| &i.cluster_name == cluster)
            {
                Some(item) => item.health = Some(ResourceHealth::Unhealthy),
                None => status.aggregated_status.push(AggregatedStatusItem {
                    cluster_name: cluster.clone(),
                    health: Some(ResourceHealth::Unhealthy),
                    ..Default::default()
                }),
            }
        }
        Run {
            input,
            key: key_of(input),
            settings,
            failed_at,
            spec: input.spec.clone(),
            status,
            applied: input.applied_placement.clone(),
            state: input.failover_state.clone(),
            producer: if input.kind == CLUSTER_RESOURCE_BINDING {
                EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER
            } else {
                EVICTION_PRODUCER_RB_APPLICATION_FAILOVER
            },
            evictions: Vec::new(),
            held: Vec::new(),
            holds: BTreeMap::new(),
            scheduled: None,
            at_horizon: None,
        }
    }

    /// The answer for the binding once every instant has run; `None` when it is not affected.
    fn finish(mut self, failed: &[String]) -> Option<RunOutcome> {
        let mut pending = Vec::new();
        let mut holds = std::mem::take(&mut self.holds);
        if let Some(h) = self.at_horizon.take() {
            pending = self
                .evictions
                .drain(h.evictions..)
                .map(|e| PendingEviction {
                    cluster: e.cluster,
                    producer: e.producer,
                    after_seconds: e.after_seconds,
                    brake: e.brake,
                })
                .collect();
            self.spec.clusters = h.clusters;
            self.spec.graceful_eviction_tasks = h.tasks;
            self.held = h.held;
            self.scheduled = h.scheduled;
            // Held at the horizon and not evicted after it: held.
            holds = h.holds;
            holds.retain(|c, _| !pending.iter().any(|p| &p.cluster == c));
        }
        self.held
            .extend(holds.into_iter().map(|(cluster, h)| HeldEviction {
                reason: h.last.reason.as_str().to_string(),
                producer: h.producer,
                region: h.last.region.clone(),
                message: h.last.event_message(&cluster),
                cluster,
            }));
        let before = &self.input.spec.clusters;
        let on_failed = before.iter().any(|c| failed.contains(&c.name));
        let unplaced = matches!(self.scheduled, Some(Err(_)));
        let affected = !self.evictions.is_empty()
            || !self.held.is_empty()
            || !pending.is_empty()
            || self.spec.clusters != *before
            || (unplaced && on_failed);
        if !affected {
            return None;
        }
        let scheduled = self.scheduled.as_ref().map(|r| match r {
            Ok(()) => ScheduledResult {
                result: flotilla_api::binding::REASON_SUCCESS.to_string(),
                message: crate::scheduler::SUCCESS_MESSAGE.to_string(),
            },
            Err((reason, message)) => ScheduledResult {
                result: reason.to_string(),
                message: message.clone(),
            },
        });
        let unplaceable = match &self.scheduled {
            Some(Err((reason, message))) => Some(UnplaceableBinding {
                kind: self.input.kind.to_string(),
                namespace: self.input.namespace.clone(),
                name: self.input.name.clone(),
                reason: reason.to_string(),
                message: message.clone(),
                keeps: self
                    .spec
                    .clusters
                    .iter()
                    .map(|c| c.name.clone())
                    .chain(
                        self.spec
                            .graceful_eviction_tasks
                            .iter()
                            .filter(|t| !t.effective_purge_mode().is_immediate())
                            .map(|t| t.from_cluster.clone()),
                    )
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            }),
            _ => None,
        };
        Some(RunOutcome {
            binding: SimulatedBinding {
                kind: self.input.kind.to_string(),
                namespace: self.input.namespace.clone(),
                name: self.input.name.clone(),
                clusters_before: before.clone(),
                clusters_after: self.spec.clusters.clone(),
                evictions: self.evictions,
                pending,
                held: self.held,
                scheduled,
            },
            unplaceable,
        })
    }

    /// Records what the brake held at `at_ms`; answers when to look again: when the brake
    /// says for the pacing and the startup grace; a stop of a disrupted fleet or a rate of 0
    /// only when the clusters change (its answer cannot change before, and the controllers'
    /// retries every 10 s in between find the same).
    fn note_holds(
        &mut self,
        held: &BTreeMap<String, Hold>,
        producer: &str,
        at_ms: i64,
    ) -> Vec<i64> {
        let mut wakes = Vec::new();
        for (cluster, hold) in held {
            let h = self
                .holds
                .entry(cluster.clone())
                .or_insert_with(|| BrakeHold {
                    first_ms: at_ms,
                    reasons: Vec::new(),
                    last: hold.clone(),
                    producer: producer.to_string(),
                });
            if !h.reasons.contains(&hold.reason) {
                h.reasons.push(hold.reason);
            }
            h.last = hold.clone();
            if !matches!(
                hold.reason,
                HoldReason::FullDisruption | HoldReason::RateZero
            ) {
                wakes.push(at_ms.saturating_add(ceil_ms(hold.wait)));
            }
        }
        wakes
    }

    /// How long the brake made the eviction from `cluster`, happening at `at_ms`, wait.
    fn delay_of(&mut self, cluster: &str, at_ms: i64) -> Option<EvictionDelay> {
        let h = self.holds.remove(cluster)?;
        Some(EvictionDelay {
            region: h.last.region,
            reasons: h.reasons.iter().map(|r| r.as_str().to_string()).collect(),
            due_after_seconds: seconds(h.first_ms),
            delay_seconds: seconds(at_ms) - seconds(h.first_ms),
        })
    }

    /// One pass at one instant: the taint manager, application failover and the scheduler.
    /// Returns whether the binding changed and the instants the controllers ask to be woken at.
    fn pass(
        &mut self,
        phase: &Phase,
        at_ms: i64,
        brake: Option<&EvictionBrake>,
    ) -> (bool, Vec<i64>) {
        let now = self.failed_at + Duration::milliseconds(at_ms);
        let mut wake = Vec::new();
        let later = |d: std::time::Duration| at_ms.saturating_add(ceil_ms(d));
        let mut changed = false;
        // The taint manager.
        let mut d = taint_manager::decide(
            &self.spec,
            &self.status,
            |n| {
                phase
                    .clusters
                    .by_name
                    .get(n)
                    .map(|c| c.spec.taints.as_slice())
            },
            &self.settings.taint_manager,
            now,
        );
        wake.extend(d.requeue_after.map(later));
        let held = taint_manager::hold_evictions(&mut d, brake, &phase.clusters, &self.key, now);
        wake.extend(self.note_holds(&held, EVICTION_PRODUCER_TAINT_MANAGER, at_ms));
        for e in &d.evictions {
            let fate_of_old_copy = match &e.task {
                Some(t) => old_copy(t.purge_mode, t.grace_period_seconds, self.settings),
                None => (None, fate("Deleted", None)),
            };
            self.record_eviction(
                &e.cluster,
                EVICTION_PRODUCER_TAINT_MANAGER.to_string(),
                EVICTION_REASON_TAINT_UNTOLERATED.to_string(),
                e.cause.message(&e.cluster),
                fate_of_old_copy,
                at_ms,
            );
        }
        if !d.evictions.is_empty() {
            taint_manager::apply(&mut self.spec, &d, now);
            changed = true;
        }
        // Application failover.
        if self
            .spec
            .failover
            .as_ref()
            .is_some_and(|f| f.application.is_some())
            || !self.state.is_empty()
        {
            let settings = &self.settings.application_failover;
            let d = app::decide(
                &self.spec,
                &self.status,
                &self.state,
                settings,
                self.producer,
                now,
                &app::Holds::NONE,
            );
            let mut requeue = d.requeue_after;
            let mut held = BTreeMap::new();
            let mut d = d;
            if !d.evictions.is_empty() {
                let look = app::Look {
                    key: &self.key,
                    spec: &self.spec,
                    status: &self.status,
                    previous: &self.state,
                    settings,
                    producer: self.producer,
                    now,
                };
                (d, held) = app::settle(&look, d, &phase.clusters, brake);
            }
            if held.is_empty() {
                // (Without holds the decision's own requeue; with them it also holds each
                // hold's wait, which note_holds answers for the ones that are not stops.)
                requeue = d.requeue_after;
            }
            wake.extend(requeue.map(later));
            wake.extend(self.note_holds(&held, self.producer, at_ms));
            self.held = held_by_application_failover(&d, self.producer);
            for e in &d.evictions {
                let fate_of_old_copy = old_copy(
                    e.task.purge_mode,
                    e.task.grace_period_seconds,
                    self.settings,
                );
                self.record_eviction(
                    &e.cluster,
                    e.task.producer.clone(),
                    e.task.reason.clone(),
                    e.task.message.clone(),
                    fate_of_old_copy,
                    at_ms,
                );
            }
            if !d.evictions.is_empty() {
                app::apply(&mut self.spec, &d, now);
                changed = true;
            }
            self.state = d.state;
        }
        // The scheduler.
        if self.schedule(&phase.clusters.snapshot, now) {
            changed = true;
        }
        (changed, wake)
    }

    /// Records the eviction of `cluster` at `at_ms` with the purge mode and old copy's fate
    /// [`old_copy`] gave it: the replicas it had there and how long the brake delayed it.
    fn record_eviction(
        &mut self,
        cluster: &str,
        producer: String,
        reason: String,
        message: String,
        (purge_mode, old_copy): (Option<String>, OldCopy),
        at_ms: i64,
    ) {
        let replicas = self.replicas_on(cluster);
        let brake = self.delay_of(cluster, at_ms);
        self.evictions.push(SimulatedEviction {
            cluster: cluster.to_string(),
            producer,
            reason,
            message,
            purge_mode,
            replicas,
            after_seconds: seconds(at_ms),
            old_copy,
            brake,
        });
    }

    fn replicas_on(&self, cluster: &str) -> i32 {
        self.spec
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .map_or(0, |c| c.replicas)
    }

    /// One look of the scheduler controller; true when `spec.clusters` changed.
    fn schedule(&mut self, snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> bool {
        let spec = &self.spec;
        if !spec.scheduler_name.is_empty() && spec.scheduler_name != DEFAULT_SCHEDULER_NAME {
            return false;
        }
        if spec.suspension.as_ref().and_then(|s| s.scheduling) == Some(true)
            || spec.placement.is_none()
        {
            return false;
        }
        let Some(reason) = needs_scheduling(spec, &self.status, self.applied.as_deref(), snapshot)
        else {
            return false;
        };
        let blocked = self.state.blocked(now);
        let leaving = crate::scheduler::leaving_targets(spec, snapshot);
        let result = schedule(&ScheduleInput {
            spec,
            status: &self.status,
            clusters: snapshot,
            options: ScheduleOptions::default(),
            blocked: &blocked,
        });
        let d = decision::decide(&DecisionInput {
            step: Step::Scheduled {
                spec,
                reason,
                result: &result,
            },
            status: &self.status,
            generation: self.input.generation,
            applied_placement: self.applied.as_deref(),
            leaving: &leaving,
            now,
        });
        self.scheduled = Some(match &result {
            Ok(_) => Ok(()),
            Err(_) => {
                let (_, reason, message) = condition_for(&result);
                Err((reason, condition_message(&d).unwrap_or(message)))
            }
        });
        let mut changed = false;
        if let Some(write) = d.spec {
            changed = write.clusters != self.spec.clusters;
            self.spec.clusters = write.clusters;
            if let Some(a) = write.applied_placement {
                self.applied = Some(a);
            }
        }
        if let Some(write) = d.status {
            self.status.conditions = write.conditions;
            if let Some(t) = write.last_scheduled_time {
                self.status.last_scheduled_time = Some(t);
            }
            if let Some(a) = write.affinity_name {
                self.status.scheduler_observed_affinity_name = a;
            }
        }
        changed
    }

    fn horizon(&self) -> Horizon {
        Horizon {
            evictions: self.evictions.len(),
            clusters: self.spec.clusters.clone(),
            tasks: self.spec.graceful_eviction_tasks.clone(),
            held: self.held.clone(),
            scheduled: self.scheduled.clone(),
            holds: self.holds.clone(),
        }
    }
}

/// What a run had reached at the horizon of the request.
struct Horizon {
    evictions: usize,
    clusters: Vec<TargetCluster>,
    tasks: Vec<flotilla_api::binding::GracefulEvictionTask>,
    held: Vec<HeldEviction>,
    scheduled: Option<Result<(), (&'static str, String)>>,
    holds: BTreeMap<String, BrakeHold>,
}

/// The `Scheduled` condition's message as the decision writes it (it names the clusters being
/// evicted from when the old copies are kept).
fn condition_message(d: &decision::Decision) -> Option<String> {
    d.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == flotilla_api::binding::CONDITION_SCHEDULED)
            .map(|c| c.message.clone())
    })
}

fn fate(fate: &str, grace: Option<i64>) -> OldCopy {
    OldCopy {
        fate: fate.to_string(),
        grace_period_seconds: grace,
    }
}

/// The purge mode as written and what becomes of the old copy.
fn old_copy(
    mode: Option<PurgeMode>,
    grace: Option<i32>,
    settings: &SimulationSettings,
) -> (Option<String>, OldCopy) {
    let mode = mode.unwrap_or(PurgeMode::Graciously);
    let copy = if mode.is_immediate() {
        fate("DeletedFirst", None)
    } else if mode.is_never() {
        fate("KeptUntilSuppressionLifted", None)
    } else {
        let default =
            i64::try_from(settings.graceful_eviction_timeout.as_secs()).unwrap_or(i64::MAX);
        fate("KeptUntilHealthy", Some(grace.map_or(default, i64::from)))
    };
    (Some(mode.as_str().to_string()), copy)
}

/// Application failover's held evictions (the brake's are told apart).
fn held_by_application_failover(d: &app::Decision, producer: &str) -> Vec<HeldEviction> {
    let mut out = Vec::new();
    let mut push = |clusters: &[String], reason: &str| {
        out.extend(clusters.iter().map(|c| HeldEviction {
            cluster: c.clone(),
            reason: reason.to_string(),
            producer: producer.to_string(),
            ..Default::default()
        }));
    };
    push(&d.halted, "MaxMoves");
    push(&d.no_target, "NoTarget");
    if let Some((clusters, _)) = &d.backing_off {
        push(clusters, "Backoff");
    }
    out
}

/// Sorts bindings as the answer lists them: kind, namespace, name.
pub fn sort_inputs(bindings: &mut [BindingInput]) {
    bindings.sort_by(|a, b| {
        (a.kind != RESOURCE_BINDING, &a.namespace, &a.name).cmp(&(
            b.kind != RESOURCE_BINDING,
            &b.namespace,
            &b.name,
        ))
    });
}

#[cfg(test)]
mod tests;
