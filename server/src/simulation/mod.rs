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
use crate::controllers::failover::taint_manager;
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
    pub fn with_brake(mut self, brake: &EvictionBrake) -> Self {
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
            settings.health.grace.monitor,
            ConditionStatus::Unknown,
            "ClusterStatusUnknown",
            "Cluster status controller stopped posting cluster status.",
            Some(failed_at),
        )
    } else {
        (
            settings.health.thresholds.failure,
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
            let replicas = self.replicas_on(&e.cluster);
            let (purge_mode, old_copy) = match &e.task {
                Some(t) => old_copy(t.purge_mode, t.grace_period_seconds, self.settings),
                None => (None, fate("Deleted", None)),
            };
            let brake = self.delay_of(&e.cluster, at_ms);
            self.evictions.push(SimulatedEviction {
                cluster: e.cluster.clone(),
                producer: EVICTION_PRODUCER_TAINT_MANAGER.to_string(),
                reason: EVICTION_REASON_TAINT_UNTOLERATED.to_string(),
                message: e.cause.message(&e.cluster),
                purge_mode,
                replicas,
                after_seconds: seconds(at_ms),
                old_copy,
                brake,
            });
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
                let replicas = self.replicas_on(&e.cluster);
                let (purge_mode, old_copy) = old_copy(
                    e.task.purge_mode,
                    e.task.grace_period_seconds,
                    self.settings,
                );
                let brake = self.delay_of(&e.cluster, at_ms);
                self.evictions.push(SimulatedEviction {
                    cluster: e.cluster.clone(),
                    producer: e.task.producer.clone(),
                    reason: e.task.reason.clone(),
                    message: e.task.message.clone(),
                    purge_mode,
                    replicas,
                    after_seconds: seconds(at_ms),
                    old_copy,
                    brake,
                });
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
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn at0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// A Ready member serving Deployments, pull or push, with room for `pods` pods.
    fn cluster(name: &str, pull: bool, pods: i64) -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"syncMode": if pull { "Pull" } else { "Push" }},
            "status": {
                "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                "resourceSummary": {"allocatable": {"pods": pods.to_string(), "cpu": "100"}},
                "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                                "message": "", "lastTransitionTime": "2026-03-01T00:00:00Z"}]
            }
        }))
        .unwrap()
    }

    fn fleet(clusters: &[Cluster]) -> BTreeMap<String, Cluster> {
        clusters
            .iter()
            .map(|c| (c.metadata.name.clone(), c.clone()))
            .collect()
    }

    /// A placed ResourceBinding `default/<name>-deployment`.
    fn binding(
        name: &str,
        replicas: i32,
        placement: Value,
        clusters: Value,
        failover: Value,
    ) -> BindingInput {
        let mut spec = json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": name},
            "replicas": replicas,
            "placement": placement,
            "clusters": clusters,
        });
        if !failover.is_null() {
            spec["failover"] = failover;
        }
        let object = json!({
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": format!("{name}-deployment"), "namespace": "default", "generation": 1,
                         "annotations": {flotilla_api::policy::APPLIED_PLACEMENT_ANNOTATION: placement.to_string()}},
            "spec": spec,
            "status": {"schedulerObservedGeneration": 1, "lastScheduledTime": "2026-03-01T00:00:00Z",
                       "conditions": [{"type": "Scheduled", "status": "True", "reason": "Success",
                                       "message": crate::scheduler::SUCCESS_MESSAGE,
                                       "lastTransitionTime": "2026-03-01T00:00:00Z"}]}
        });
        BindingInput::from_object(RESOURCE_BINDING, &object).unwrap()
    }

    fn unreachable_for(seconds: Option<i64>) -> Value {
        match seconds {
            Some(s) => json!([{"key": "cluster.karmada.io/unreachable", "operator": "Exists",
                               "effect": "NoExecute", "tolerationSeconds": s}]),
            None => {
                json!([{"key": "cluster.karmada.io/unreachable", "operator": "Exists", "effect": "NoExecute"}])
            }
        }
    }

    fn divided(names: &[&str], tolerations: Value) -> Value {
        json!({"clusterAffinity": {"clusterNames": names}, "clusterTolerations": tolerations,
               "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                                     "weightPreference": {"staticWeightList": [
                                         {"targetCluster": {"clusterNames": ["m1"]}, "weight": 2},
                                         {"targetCluster": {"clusterNames": ["m2", "m3"]}, "weight": 1}]}}})
    }

    fn duplicated(names: &[&str], tolerations: Value) -> Value {
        json!({"clusterAffinity": {"clusterNames": names}, "clusterTolerations": tolerations,
               "replicaScheduling": {"replicaSchedulingType": "Duplicated"}})
    }

    fn request(failed: &[&str], after: Option<i64>) -> FailoverSimulationSpec {
        FailoverSimulationSpec {
            failed_clusters: failed.iter().map(|s| s.to_string()).collect(),
            after_seconds: after,
            ..Default::default()
        }
    }

    fn targets(v: &[TargetCluster]) -> Vec<(String, i32)> {
        v.iter().map(|c| (c.name.clone(), c.replicas)).collect()
    }

    fn pairs(v: &[(&str, i32)]) -> Vec<(String, i32)> {
        v.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    }

    /// One binding, one request: (evictions as (cluster, afterSeconds, fate), placement after,
    /// pending as (cluster, afterSeconds), unplaceable reason).
    #[allow(clippy::type_complexity)]
    fn run_one(
        clusters: &[Cluster],
        b: BindingInput,
        req: FailoverSimulationSpec,
    ) -> Option<(
        Vec<(String, i64, String)>,
        Vec<(String, i32)>,
        Vec<(String, i64)>,
        Option<String>,
    )> {
        let status = simulate(
            &req,
            &fleet(clusters),
            &[],
            &[b],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        assert_eq!(status.summary.bindings, 1);
        assert!(
            status.brake.regions.is_empty(),
            "no brake: {:?}",
            status.brake
        );
        let out = status.bindings.first()?;
        Some((
            out.evictions
                .iter()
                .map(|e| (e.cluster.clone(), e.after_seconds, e.old_copy.fate.clone()))
                .collect(),
            targets(&out.clusters_after),
            out.pending
                .iter()
                .map(|p| (p.cluster.clone(), p.after_seconds))
                .collect(),
            status.unplaceable.first().map(|u| u.reason.clone()),
        ))
    }

    #[test]
    fn cluster_failures_evict_and_reschedule_as_the_controllers_would() {
        let three = [
            cluster("m1", true, 100),
            cluster("m2", true, 100),
            cluster("m3", true, 100),
        ];
        let m123 = ["m1", "m2", "m3"];
        let kept = |c: &str, s: i64| (c.to_string(), s, "KeptUntilHealthy".to_string());
        // Defaults: pull members go Unknown after 40 s; NoExecute after 300 s (the eviction
        // timeout counts from the last lease renewal, taken as the moment of failure).
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, BindingInput, FailoverSimulationSpec, Option<(Vec<(String, i64, String)>, Vec<(String, i32)>, Vec<(String, i64)>, Option<String>)>)> = vec![
            (
                "divided: untolerated NoExecute evicts when it comes; m2 and m3 share m1's replicas",
                binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], None),
                Some((vec![kept("m1", 300)], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
            ),
            (
                "tolerationSeconds add to the taint's time",
                binding("web", 4, divided(&m123, unreachable_for(Some(60))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], None),
                Some((vec![kept("m1", 360)], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
            ),
            (
                "afterSeconds before the eviction: nothing moves yet, the eviction is pending",
                binding("web", 4, divided(&m123, unreachable_for(Some(60))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], Some(100)),
                Some((vec![], pairs(&[("m1", 2), ("m2", 1), ("m3", 1)]), vec![("m1".to_string(), 360)], None)),
            ),
            (
                "tolerated for ever: not affected",
                binding("web", 4, divided(&m123, unreachable_for(None)), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], None),
                None,
            ),
            (
                "tolerated for a century: nothing within the year the run looks at",
                binding("web", 4, divided(&m123, unreachable_for(Some(100 * 366 * 24 * 3600))), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], Some(i64::MAX)),
                None,
            ),
            (
                "not on the failed cluster: not affected",
                binding("web", 2, divided(&["m2", "m3"], json!([])), json!([{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), Value::Null),
                request(&["m1"], None),
                None,
            ),
            (
                "duplicated: the failed cluster leaves, the free one is added",
                binding("web", 3, duplicated(&m123, json!([])), json!([{"name": "m1", "replicas": 3}, {"name": "m2", "replicas": 3}, {"name": "m3", "replicas": 3}]), Value::Null),
                request(&["m1", "m2"], None),
                Some((vec![kept("m1", 300), kept("m2", 300)], pairs(&[("m3", 3)]), vec![], None)),
            ),
            (
                "purge mode Immediately: the old copy goes first",
                binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), json!({"cluster": {"purgeMode": "Immediately"}})),
                request(&["m1"], None),
                Some((vec![("m1".to_string(), 300, "DeletedFirst".to_string())], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
            ),
            (
                "purge mode Never: kept until suppression is lifted",
                binding("web", 4, divided(&m123, json!([])), json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]), json!({"cluster": {"purgeMode": "Never"}})),
                request(&["m1"], None),
                Some((vec![("m1".to_string(), 300, "KeptUntilSuppressionLifted".to_string())], pairs(&[("m2", 2), ("m3", 2)]), vec![], None)),
            ),
            (
                "no other cluster fits: the binding keeps its clusters and says why",
                binding("web", 2, divided(&["m1"], json!([])), json!([{"name": "m1", "replicas": 2}]), Value::Null),
                request(&["m1"], None),
                Some((vec![kept("m1", 300)], vec![], vec![], Some("NoClusterFit".to_string()))),
            ),
        ];
        for (name, b, req, want) in cases {
            assert_eq!(run_one(&three, b, req), want, "{name}");
        }
    }

    #[test]
    fn push_members_go_not_ready_after_the_failure_threshold() {
        let fleet_ = [cluster("m1", false, 100), cluster("m2", false, 100)];
        let b = binding(
            "web",
            2,
            divided(&["m1", "m2"], json!([])),
            json!([{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 1}]),
            Value::Null,
        );
        let status = simulate(
            &request(&["m1"], None),
            &fleet(&fleet_),
            &[],
            &[b],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        let line = &status.timeline.clusters[0];
        assert_eq!(
            (
                line.ready.as_str(),
                line.not_ready_after_seconds,
                line.no_execute_after_seconds
            ),
            ("False", 30, Some(330))
        );
        assert!(
            line.taints
                .iter()
                .any(|t| t.contains("not-ready") && t.contains("NoExecute")),
            "{line:?}"
        );
        assert_eq!(status.bindings[0].evictions[0].after_seconds, 330);
        assert_eq!(
            targets(&status.bindings[0].clusters_after),
            pairs(&[("m2", 2)])
        );
        assert_eq!(status.failed_at, Some(Time::new(at0())));
    }

    #[test]
    fn cluster_taint_policies_taint_the_failed_cluster_as_their_controller_would() {
        let three = [
            cluster("m1", true, 100),
            cluster("m2", true, 100),
            cluster("m3", true, 100),
        ];
        let policy: ClusterTaintPolicy = serde_json::from_value(json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
            "metadata": {"name": "down"},
            "spec": {"targetClusters": {"clusterNames": ["m1", "m2", "m3"]},
                     "addOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["Unknown", "False"]}],
                     "removeOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}],
                     "taints": [{"key": "example.com/down", "effect": "NoExecute"}]}
        }))
        .unwrap();
        let b = || {
            binding(
                "web",
                4,
                divided(&["m1", "m2", "m3"], json!([])),
                json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 1}]),
                Value::Null,
            )
        };
        // Automatic NoExecute taints off: only the policy's taint evicts, as soon as Ready
        // turns Unknown (40 s).
        let mut settings = SimulationSettings::default();
        settings.taints.automatic_no_execute = false;
        let status = simulate(
            &request(&["m1"], None),
            &fleet(&three),
            std::slice::from_ref(&policy),
            &[b()],
            &settings,
            at0(),
        )
        .unwrap();
        let line = &status.timeline.clusters[0];
        assert_eq!(line.no_execute_after_seconds, Some(40), "{line:?}");
        assert!(
            line.taints.iter().any(|t| t.contains("example.com/down")),
            "{line:?}"
        );
        assert_eq!(status.bindings[0].evictions[0].after_seconds, 40);
        assert_eq!(
            targets(&status.bindings[0].clusters_after),
            pairs(&[("m2", 2), ("m3", 2)])
        );
        // Without the policy nothing would evict.
        let status = simulate(
            &request(&["m1"], None),
            &fleet(&three),
            &[],
            &[b()],
            &settings,
            at0(),
        )
        .unwrap();
        assert_eq!(status.timeline.clusters[0].no_execute_after_seconds, None);
        assert!(status.bindings.is_empty(), "{:?}", status.bindings);
    }

    #[test]
    fn an_unhealthy_application_moves_after_its_toleration() {
        let three = [
            cluster("m1", true, 100),
            cluster("m2", true, 100),
            cluster("m3", true, 100),
        ];
        let b = binding(
            "web",
            2,
            duplicated(&["m1", "m2", "m3"], json!([])),
            json!([{"name": "m1", "replicas": 2}]),
            json!({"application": {"decisionConditions": {"tolerationSeconds": 120}, "purgeMode": "Graciously", "gracePeriodSeconds": 90}}),
        );
        let b = BindingInput {
            spec: ResourceBindingSpec {
                clusters: vec![TargetCluster::new("m1", 2)],
                ..b.spec.clone()
            },
            ..b
        };
        let mut req = request(&[], None);
        req.unhealthy_applications = vec![flotilla_api::simulation::UnhealthyApplication {
            kind: String::new(),
            namespace: "default".into(),
            name: "web-deployment".into(),
            cluster: "m1".into(),
        }];
        let status = simulate(
            &req,
            &fleet(&three),
            &[],
            &[b],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        let out = &status.bindings[0];
        assert_eq!(out.evictions.len(), 1, "{out:?}");
        let e = &out.evictions[0];
        assert_eq!(
            (e.cluster.as_str(), e.after_seconds, e.reason.as_str()),
            ("m1", 120, "ApplicationFailure")
        );
        assert_eq!(e.producer, EVICTION_PRODUCER_RB_APPLICATION_FAILOVER);
        assert_eq!(
            e.old_copy,
            OldCopy {
                fate: "KeptUntilHealthy".into(),
                grace_period_seconds: Some(90)
            }
        );
        // Duplicated: m1 is blocked while its task exists, the others take it.
        assert_eq!(targets(&out.clusters_after), pairs(&[("m2", 2), ("m3", 2)]));
        // Looking at 60 s: the timer still runs.
        req.after_seconds = Some(60);
        let b = binding(
            "web",
            2,
            duplicated(&["m1", "m2", "m3"], json!([])),
            json!([{"name": "m1", "replicas": 2}]),
            json!({"application": {"decisionConditions": {"tolerationSeconds": 120}}}),
        );
        let status = simulate(
            &req,
            &fleet(&three),
            &[],
            &[b],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        let p = &status.bindings[0].pending;
        assert_eq!(
            (p[0].cluster.as_str(), p[0].after_seconds),
            ("m1", 120),
            "{p:?}"
        );
    }

    #[test]
    fn held_moves_and_cluster_resource_bindings_are_reported() {
        let two = [cluster("m1", true, 100), cluster("m2", true, 100)];
        let app = |cluster: &str, kind: &str, namespace: &str, name: &str| {
            flotilla_api::simulation::UnhealthyApplication {
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
                cluster: cluster.into(),
            }
        };
        // Immediately, and no other cluster in the affinity: application failover holds the
        // move (the only copy would go with nothing in its place).
        let only_m1 = binding(
            "web",
            2,
            duplicated(&["m1"], json!([])),
            json!([{"name": "m1", "replicas": 2}]),
            json!({"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Immediately"}}),
        );
        let mut req = request(&[], Some(15));
        req.unhealthy_applications = vec![app("m1", "", "default", "web-deployment")];
        let status = simulate(
            &req,
            &fleet(&two),
            &[],
            &[only_m1],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        let out = &status.bindings[0];
        assert!(out.evictions.is_empty(), "{out:?}");
        assert_eq!(
            out.held,
            [HeldEviction {
                cluster: "m1".into(),
                reason: "NoTarget".into(),
                producer: EVICTION_PRODUCER_RB_APPLICATION_FAILOVER.into(),
                ..Default::default()
            }]
        );
        assert_eq!(targets(&out.clusters_after), pairs(&[("m1", 2)]));

        // A ClusterResourceBinding: its own producer, no namespace.
        let mut crb = binding(
            "web",
            2,
            duplicated(&["m1", "m2"], json!([])),
            json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 2}]),
            json!({"application": {"decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Never"}}),
        );
        crb.kind = CLUSTER_RESOURCE_BINDING;
        crb.namespace = String::new();
        crb.name = "web-cluster".into();
        let mut req = request(&[], None);
        req.unhealthy_applications = vec![app("m2", CLUSTER_RESOURCE_BINDING, "", "web-cluster")];
        let status = simulate(
            &req,
            &fleet(&two),
            &[],
            &[crb],
            &SimulationSettings::default(),
            at0(),
        )
        .unwrap();
        let out = &status.bindings[0];
        assert_eq!(
            (out.kind.as_str(), out.namespace.as_str()),
            (CLUSTER_RESOURCE_BINDING, "")
        );
        let e = &out.evictions[0];
        assert_eq!(e.producer, EVICTION_PRODUCER_CRB_APPLICATION_FAILOVER);
        assert_eq!((e.cluster.as_str(), e.after_seconds), ("m2", 10));
        assert_eq!(e.old_copy.fate, "KeptUntilSuppressionLifted");
        assert_eq!(targets(&out.clusters_after), pairs(&[("m1", 2)]));
    }

    #[test]
    fn names_that_do_not_exist_are_refused_by_field() {
        let three = [cluster("m1", true, 100), cluster("m2", true, 100)];
        let b = binding(
            "web",
            2,
            divided(&["m1", "m2"], json!([])),
            json!([{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 1}]),
            Value::Null,
        );
        let mut req = request(&["m1", "nope"], None);
        req.unhealthy_applications = vec![
            flotilla_api::simulation::UnhealthyApplication {
                kind: String::new(),
                namespace: "default".into(),
                name: "gone".into(),
                cluster: "m1".into(),
            },
            flotilla_api::simulation::UnhealthyApplication {
                kind: String::new(),
                namespace: "default".into(),
                name: "web-deployment".into(),
                cluster: "m9".into(),
            },
        ];
        let Err(SimulationError::Invalid(errors)) = simulate(
            &req,
            &fleet(&three),
            &[],
            &[b],
            &SimulationSettings::default(),
            at0(),
        ) else {
            panic!("refused");
        };
        let paths: Vec<&str> = errors.errors().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.failedClusters[1]",
                "spec.unhealthyApplications[0].name",
                "spec.unhealthyApplications[1].cluster"
            ]
        );
    }

    /// What the brake does to the evictions of one request: `fleet` as (cluster, region,
    /// failed), `n` bindings `b0`…, each Duplicated over the whole fleet and placed on every
    /// cluster (so each is evicted from every failed one, untolerated, 300 s after the
    /// failure), the brake's flags, the server started `started` seconds before the failure.
    /// Answers per binding (name, evictions as (cluster, afterSeconds, brake reasons,
    /// delaySeconds), held as (cluster, reason)) and the status.
    #[allow(clippy::type_complexity)]
    fn braked(
        fleet_spec: &[(&str, &str, bool)],
        n: usize,
        brake: BrakeSettings,
        started: i64,
        after: Option<i64>,
    ) -> (
        Vec<(
            String,
            Vec<(String, i64, Vec<String>, i64)>,
            Vec<(String, String)>,
        )>,
        FailoverSimulationStatus,
    ) {
        let clusters: Vec<Cluster> = fleet_spec
            .iter()
            .map(|&(name, region, _)| {
                let mut c = cluster(name, true, 100);
                c.spec.region = region.to_string();
                c
            })
            .collect();
        let names: Vec<&str> = fleet_spec.iter().map(|c| c.0).collect();
        let placed: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "replicas": 1}))
            .collect();
        // Listed in the answer's order, asked in key order: the same here.
        let bindings: Vec<BindingInput> = (0..n)
            .map(|i| {
                binding(
                    &format!("b{i}"),
                    1,
                    duplicated(&names, json!([])),
                    json!(placed),
                    Value::Null,
                )
            })
            .collect();
        let failed: Vec<&str> = fleet_spec.iter().filter(|c| c.2).map(|c| c.0).collect();
        let settings = SimulationSettings {
            brake: Some(BrakeOf {
                settings: brake,
                started: at0() - Duration::seconds(started),
            }),
            ..SimulationSettings::default()
        };
        let status = simulate(
            &request(&failed, after),
            &fleet(&clusters),
            &[],
            &bindings,
            &settings,
            at0(),
        )
        .unwrap();
        let per_binding = status
            .bindings
            .iter()
            .map(|b| {
                (
                    b.name.clone(),
                    b.evictions
                        .iter()
                        .map(|e| {
                            let (reasons, delay) = e
                                .brake
                                .as_ref()
                                .map(|d| (d.reasons.clone(), d.delay_seconds))
                                .unwrap_or_default();
                            (e.cluster.clone(), e.after_seconds, reasons, delay)
                        })
                        .collect(),
                    b.held
                        .iter()
                        .map(|h| (h.cluster.clone(), h.reason.clone()))
                        .collect(),
                )
            })
            .collect();
        (per_binding, status)
    }

    #[test]
    fn the_brake_delays_and_stops_evictions_as_the_servers_brake_would() {
        let long_ago = 3600;
        let rl = || vec!["RateLimited".to_string()];
        let ev = |c: &str, at: i64, reasons: Vec<String>, delay: i64| {
            (c.to_string(), at, reasons, delay)
        };
        let none = Vec::<String>::new;
        let one_of_four = [
            ("m1", "", true),
            ("m2", "", false),
            ("m3", "", false),
            ("m4", "", false),
        ];
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            Vec<(&str, &str, bool)>,
            usize,
            BrakeSettings,
            i64,
            Vec<Vec<(String, i64, Vec<String>, i64)>>,
            Vec<Vec<(String, String)>>,
        )> = vec![
            (
                "Normal: one failed cluster, let out at once: all its bindings go when due",
                one_of_four.to_vec(),
                3,
                BrakeSettings::default(),
                long_ago,
                vec![
                    vec![ev("m1", 300, none(), 0)],
                    vec![ev("m1", 300, none(), 0)],
                    vec![ev("m1", 300, none(), 0)],
                ],
                vec![vec![], vec![], vec![]],
            ),
            (
                "Normal: two failed clusters of a region, the second 10 s (0.1/s) after the first",
                vec![
                    ("m1", "", true),
                    ("m2", "", true),
                    ("m3", "", false),
                    ("m4", "", false),
                    ("m5", "", false),
                    ("m6", "", false),
                ],
                2,
                BrakeSettings::default(),
                long_ago,
                vec![
                    vec![ev("m1", 300, none(), 0), ev("m2", 310, rl(), 10)],
                    vec![ev("m1", 300, none(), 0), ev("m2", 310, rl(), 10)],
                ],
                vec![vec![], vec![]],
            ),
            (
                "pacing off: all at once",
                one_of_four.to_vec(),
                3,
                BrakeSettings {
                    rate_limit: false,
                    ..BrakeSettings::default()
                },
                long_ago,
                vec![
                    vec![ev("m1", 300, none(), 0)],
                    vec![ev("m1", 300, none(), 0)],
                    vec![ev("m1", 300, none(), 0)],
                ],
                vec![vec![], vec![], vec![]],
            ),
            (
                "startup grace: due at 300 s, the server started 10 s before the failure with a grace of 400 s: from 390 s on, the cluster and all its bindings",
                one_of_four.to_vec(),
                2,
                BrakeSettings {
                    startup_grace: std::time::Duration::from_secs(400),
                    ..BrakeSettings::default()
                },
                10,
                vec![
                    vec![ev("m1", 390, vec!["StartupGrace".into()], 90)],
                    vec![ev("m1", 390, vec!["StartupGrace".into()], 90)],
                ],
                vec![vec![], vec![]],
            ),
            (
                "a region over the threshold: its clusters let out at the secondary rate (0.01/s), each with all its bindings",
                vec![
                    ("a1", "a", true),
                    ("a2", "a", true),
                    ("a3", "a", true),
                    ("b1", "b", false),
                    ("b2", "b", false),
                    ("b3", "b", false),
                    ("b4", "b", false),
                ],
                2,
                BrakeSettings::default(),
                long_ago,
                vec![
                    vec![
                        ev("a1", 300, none(), 0),
                        ev("a2", 400, rl(), 100),
                        ev("a3", 500, rl(), 200),
                    ],
                    vec![
                        ev("a1", 300, none(), 0),
                        ev("a2", 400, rl(), 100),
                        ev("a3", 500, rl(), 200),
                    ],
                ],
                vec![vec![], vec![]],
            ),
            (
                "the whole fleet fails: nothing is evicted, every eviction is held by FullDisruption",
                vec![("m1", "a", true), ("m2", "b", true)],
                1,
                BrakeSettings::default(),
                long_ago,
                vec![vec![]],
                vec![vec![
                    ("m1".into(), "FullDisruption".into()),
                    ("m2".into(), "FullDisruption".into()),
                ]],
            ),
            (
                "a rate of 0: stopped (RateZero)",
                one_of_four.to_vec(),
                1,
                BrakeSettings {
                    cluster_rate: 0.0,
                    ..BrakeSettings::default()
                },
                long_ago,
                vec![vec![]],
                vec![vec![("m1".into(), "RateZero".into())]],
            ),
        ];
        for (case, fleet_spec, n, brake, started, evictions, held) in cases {
            let (got, status) = braked(&fleet_spec, n, brake, started, None);
            let want: Vec<_> = (0..n)
                .map(|i| {
                    (
                        format!("b{i}-deployment"),
                        evictions[i].clone(),
                        held[i].clone(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{case}: {:?}", status.brake);
            // A held eviction keeps its cluster; the scheduler places the others' replicas.
            for b in &status.bindings {
                for h in &b.held {
                    assert!(
                        b.clusters_after.iter().any(|c| c.name == h.cluster),
                        "{case}: {b:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_answer_tells_each_regions_state_and_what_the_brake_did() {
        // Region a loses all three clusters: PartialDisruption from 40 s (when they turn
        // Unknown), at 0.01 clusters/s.
        let fleet_spec = [
            ("a1", "a", true),
            ("a2", "a", true),
            ("a3", "a", true),
            ("b1", "b", false),
            ("b2", "b", false),
            ("b3", "b", false),
            ("b4", "b", false),
        ];
        let (_, status) = braked(&fleet_spec, 1, BrakeSettings::default(), 3600, None);
        let brake = &status.brake;
        assert!(brake.pacing);
        assert_eq!(brake.startup_grace_until, None);
        let regions: Vec<(&str, &str, &str, usize, usize, usize, usize)> = brake
            .regions
            .iter()
            .map(|r| {
                (
                    r.region.as_str(),
                    r.state.as_str(),
                    r.rate.as_str(),
                    r.clusters,
                    r.not_ready_clusters,
                    r.evictions,
                    r.delayed_evictions,
                )
            })
            .collect();
        assert_eq!(
            regions,
            [
                ("a", "PartialDisruption", "0.01 clusters/s", 3, 3, 3, 2),
                ("b", "Normal", "0.1 clusters/s", 4, 0, 0, 0)
            ]
        );
        let a = &brake.regions[0];
        assert_eq!(
            a.states
                .iter()
                .map(|s| (s.after_seconds, s.state.as_str()))
                .collect::<Vec<_>>(),
            [(0, "Normal"), (40, "PartialDisruption")]
        );
        assert_eq!(a.clusters_per_second, Some(0.01));
        assert_eq!(a.resource_eviction_rate, None);
        assert_eq!(
            a.message,
            "3 of 3 clusters of region a are not Ready (more than 55%)"
        );
        assert_eq!(
            brake.message,
            "the brake delays 2 of the 3 evictions (the longest by 200 s) and stops 0"
        );
        assert_eq!((status.summary.delayed, status.summary.held), (2, 0));

        // The whole fleet: held, and the Event the binding would get says why.
        let (_, status) = braked(
            &[("m1", "", true), ("m2", "", true)],
            1,
            BrakeSettings::default(),
            3600,
            None,
        );
        let held = &status.bindings[0].held[0];
        assert_eq!(held.producer, EVICTION_PRODUCER_TAINT_MANAGER);
        assert_eq!(held.region, "(none)");
        assert!(
            held.message
                .contains("all 2 clusters of the fleet are not Ready"),
            "{held:?}"
        );
        assert_eq!(
            status.bindings[0].clusters_after,
            status.bindings[0].clusters_before
        );
        assert_eq!(status.brake.regions[0].state, "FullDisruption");
        assert_eq!(status.brake.regions[0].held_evictions, 2);
        assert_eq!((status.summary.evictions, status.summary.held), (0, 2));

        // Pacing off and a startup grace still running: both said.
        let (_, status) = braked(
            &[("m1", "", true), ("m2", "", false), ("m3", "", false)],
            1,
            BrakeSettings {
                rate_limit: false,
                ..BrakeSettings::default()
            },
            10,
            None,
        );
        assert!(!status.brake.pacing);
        assert!(
            status.brake.message.contains("pacing is off"),
            "{}",
            status.brake.message
        );
        assert_eq!(
            status.brake.startup_grace_until,
            Some(Time::new(at0() + Duration::seconds(30)))
        );
        assert_eq!(
            status.brake.regions[0]
                .states
                .iter()
                .map(|s| (s.after_seconds, s.state.as_str(), s.rate.as_str()))
                .collect::<Vec<_>>(),
            [(0, "StartupGrace", "stopped"), (30, "Normal", "unlimited")]
        );
    }

    #[test]
    fn paced_evictions_past_the_horizon_are_pending_with_their_delay() {
        // Two failed clusters of six: m1 is let out when due (300 s), m2 10 s later, past the
        // horizon (301 s).
        let (_, status) = braked(
            &[
                ("m1", "", true),
                ("m2", "", true),
                ("m3", "", false),
                ("m4", "", false),
                ("m5", "", false),
                ("m6", "", false),
            ],
            3,
            BrakeSettings::default(),
            3600,
            Some(301),
        );
        let got: Vec<(usize, usize, Option<i64>, Option<i64>)> = status
            .bindings
            .iter()
            .map(|b| {
                (
                    b.evictions.len(),
                    b.pending.len(),
                    b.pending.first().map(|p| p.after_seconds),
                    b.pending
                        .first()
                        .and_then(|p| p.brake.as_ref())
                        .map(|d| d.delay_seconds),
                )
            })
            .collect();
        assert_eq!(got, [(1, 1, Some(310), Some(10)); 3]);
        // Not yet evicted at the horizon: they keep m2 then.
        assert!(status.bindings[1]
            .clusters_after
            .iter()
            .any(|c| c.name == "m2"));
    }
}
