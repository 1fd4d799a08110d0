//! The scheduler's algorithms (docs/semantics.md §8): pure, synchronous functions that
//! decide where a ResourceBinding runs and with how many replicas each cluster. The scheduler
//! controller fetches the binding and a [`ClusterSnapshot`], asks [`needs_scheduling`] whether
//! to act, calls [`schedule`], writes the result (`spec.clusters`, the applied-placement
//! annotation, the observed affinity name) and the `Scheduled` condition from
//! [`condition_for`], and keeps the [`Explanation`] for users.
//!
//! The pipeline (§8.2) — each step in its own module:
//! 1. candidates: every cluster not being deleted ([`snapshot`]);
//! 2. [`filters`]: APIEnablement, TaintToleration, ClusterAffinity, SpreadConstraint,
//!    ClusterEviction, FailoverBlock; none left ⇒ [`ScheduleError::FitError`];
//! 3. [`scores`]: ClusterLocality + ClusterAffinity;
//! 4. [`estimator`]: available replicas per cluster;
//! 5. [`spread`]: selection under the spread constraints;
//! 6. [`division`]: replicas per selected cluster (Duplicated, static weight, dynamic weight,
//!    Aggregated, overflow tiers);
//!
//! with [`affinities`] trying ordered `clusterAffinities` terms (§8.6) and [`trigger`] deciding
//! when a binding is scheduled at all (§8.1).

pub mod affinities;
pub mod context;
pub mod decision;
pub mod division;
pub mod estimator;
pub mod explain;
pub mod filters;
pub mod scores;
pub mod snapshot;
pub mod spread;
pub mod trigger;

#[cfg(test)]
mod tests;

use flotilla_api::binding::{
    ResourceBindingSpec, ResourceBindingStatus, TargetCluster, REASON_NO_CLUSTER_FIT,
    REASON_SCHEDULER_ERROR, REASON_SUCCESS, REASON_UNSCHEDULABLE,
};
use flotilla_api::meta::{ConditionStatus, Time};
use flotilla_api::policy::{
    Placement, ReplicaDivisionPreference, ReplicaSchedulingType, SpreadByField,
};

use context::{AffinityTiers, BindingContext, CompiledAffinity};
use division::{DynamicInput, TieBreak};
use estimator::Estimator;
pub use explain::{ClusterExplanation, Explanation};
pub use filters::Rejection;
pub use snapshot::{ClusterInfo, ClusterSnapshot};
use spread::{Candidate, SelectionRules};
pub use trigger::{leaving_targets, needs_scheduling, ScheduleReason};

/// Message of the `Scheduled` condition on success.
pub const SUCCESS_MESSAGE: &str = "Binding has been scheduled successfully.";

/// Scheduler settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// `--enable-empty-workload-propagation`: selected clusters that got no replica stay in
    /// the result with 0.
    pub empty_workload_propagation: bool,
}

/// What [`schedule`] reads: the binding's spec (placement, replicas, replica requirements,
/// previous result, eviction tasks, reschedule trigger, resource uid) and status (observed
/// affinity name, last scheduled time), and the clusters.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleInput<'a> {
    /// `spec` of the ResourceBinding or ClusterResourceBinding.
    pub spec: &'a ResourceBindingSpec,
    /// Its `status`.
    pub status: &'a ResourceBindingStatus,
    /// Every member cluster, digested.
    pub clusters: &'a ClusterSnapshot,
    /// Settings.
    pub options: ScheduleOptions,
    /// Clusters application failover keeps out of this binding now (the workload just left
    /// them), each with the end of its block (`None`: while its eviction task exists).
    pub blocked: &'a [(String, Option<Time>)],
}

/// A successful scheduling decision.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleOutcome {
    /// The new `spec.clusters`, sorted by name.
    pub clusters: Vec<TargetCluster>,
    /// The `clusterAffinities` term now in use (`status.schedulerObservingAffinityName`);
    /// `None` when the placement has no `clusterAffinities` (leave the status as it is).
    pub affinity_name: Option<String>,
    /// Why.
    pub explanation: Explanation,
}

/// Why scheduling failed (§8.7).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// No cluster passed the filters: patch `spec.clusters` to empty, `Scheduled=False`
    /// `NoClusterFit`, do not retry until something changes.
    #[error("{message}")]
    FitError {
        /// `0/N clusters are available: …`.
        message: String,
        /// Every cluster's rejection.
        explanation: Box<Explanation>,
    },
    /// Not enough capacity: keep `spec.clusters`, `Scheduled=False` `Unschedulable`, retry
    /// when clusters change.
    #[error("{message}")]
    Unschedulable {
        /// `Clusters available replicas N are not enough to schedule.`
        message: String,
        /// The decision up to the division.
        explanation: Box<Explanation>,
    },
    /// Anything else (spread constraints unsatisfiable, no placement): keep `spec.clusters`,
    /// `Scheduled=False` `SchedulerError`, retry with backoff.
    #[error("{0}")]
    SchedulerError(String),
}

impl ScheduleError {
    /// The explanation, when the error carries one.
    pub fn explanation(&self) -> Option<&Explanation> {
        match self {
            ScheduleError::FitError { explanation, .. }
            | ScheduleError::Unschedulable { explanation, .. } => Some(explanation),
            ScheduleError::SchedulerError(_) => None,
        }
    }
}

/// The `Scheduled` condition for a result: status, reason and message.
pub fn condition_for(
    result: &Result<ScheduleOutcome, ScheduleError>,
) -> (ConditionStatus, &'static str, String) {
    match result {
        Ok(_) => (
            ConditionStatus::True,
            REASON_SUCCESS,
            SUCCESS_MESSAGE.to_string(),
        ),
        Err(e @ ScheduleError::FitError { .. }) => {
            (ConditionStatus::False, REASON_NO_CLUSTER_FIT, e.to_string())
        }
        Err(e @ ScheduleError::Unschedulable { .. }) => {
            (ConditionStatus::False, REASON_UNSCHEDULABLE, e.to_string())
        }
        Err(e @ ScheduleError::SchedulerError(_)) => (
            ConditionStatus::False,
            REASON_SCHEDULER_ERROR,
            e.to_string(),
        ),
    }
}

/// How replicas are assigned (§8.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every selected cluster runs all replicas (also `replicaScheduling` absent).
    Duplicated,
    /// Divided, as few clusters as capacity allows.
    Aggregated,
    /// Divided by static weights (or equally without `weightPreference`).
    StaticWeight,
    /// Divided by available replicas.
    DynamicWeight,
}

impl Strategy {
    /// The strategy a placement asks for. An unset division preference counts as Weighted
    /// (the policy webhook's default).
    pub fn of(placement: &Placement) -> Self {
        if placement.replica_scheduling_type() == ReplicaSchedulingType::Duplicated {
            return Strategy::Duplicated;
        }
        let rs = placement.replica_scheduling.as_ref();
        match rs.and_then(|r| r.replica_division_preference) {
            Some(ReplicaDivisionPreference::Aggregated) => Strategy::Aggregated,
            _ => {
                if rs
                    .and_then(|r| r.weight_preference.as_ref())
                    .is_some_and(|w| w.dynamic_weight.is_some())
                {
                    Strategy::DynamicWeight
                } else {
                    Strategy::StaticWeight
                }
            }
        }
    }

    /// Spread constraints are ignored: Divided+Weighted with no `weightPreference`, or with a
    /// non-empty `staticWeightList` and no `dynamicWeight`.
    pub fn ignores_spread(placement: &Placement) -> bool {
        if Self::of(placement) != Strategy::StaticWeight {
            return false;
        }
        match placement
            .replica_scheduling
            .as_ref()
            .and_then(|r| r.weight_preference.as_ref())
        {
            None => true,
            Some(w) => !w.static_weight_list.is_empty(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Strategy::Duplicated => "Duplicated",
            Strategy::Aggregated => "Divided, Aggregated",
            Strategy::StaticWeight => "Divided, Weighted by static weights",
            Strategy::DynamicWeight => "Divided, Weighted by available replicas",
        }
    }
}

/// A workload for replica assignment: replicas or replica requirements.
pub fn is_workload(spec: &ResourceBindingSpec) -> bool {
    spec.replicas > 0 || spec.replica_requirements.is_some()
}

/// `rescheduleTriggeredAt` is later than `lastScheduledTime` (both set).
pub fn reschedule_required(spec: &ResourceBindingSpec, status: &ResourceBindingStatus) -> bool {
    matches!(
        (spec.reschedule_triggered_at, status.last_scheduled_time),
        (Some(t), Some(l)) if t > l
    )
}

/// Whether the filters let `cluster` into the binding as a cluster it does not run on yet
/// (failback asks this of a recovered cluster before it moves anything back): `None` when the
/// cluster is unknown or the placement uses ordered `clusterAffinities` (whose term in force
/// only the scheduler moves). A cluster already in `spec.clusters` is judged with the
/// scheduler's leniency for current targets (taints, API enablement).
pub fn admits(input: &ScheduleInput<'_>, cluster: &str) -> Option<Result<(), Rejection>> {
    let placement = input.spec.placement.as_ref()?;
    if !placement.cluster_affinities.is_empty() {
        return None;
    }
    let snap = input.clusters;
    let info = snap.get(cluster)?;
    let affinity = match &placement.cluster_affinity {
        Some(a) => AffinityTiers::plain(a, snap),
        None => AffinityTiers::none(),
    };
    Some(filters::run_filters(
        &context(input, placement, affinity),
        info,
    ))
}

/// The filters' view of the binding: its spec and placement, the affinity in force, and the
/// clusters application failover blocks.
fn context<'a>(
    input: &ScheduleInput<'a>,
    placement: &'a Placement,
    affinity: AffinityTiers<'a>,
) -> BindingContext<'a> {
    let snap = input.clusters;
    let mut ctx = BindingContext::new(input.spec, placement, affinity, snap);
    ctx.blocked = input
        .blocked
        .iter()
        .filter_map(|(name, _)| snap.index_of(name))
        .collect();
    ctx
}

/// Schedules a binding: the new `spec.clusters`, the affinity term in use and the
/// explanation, or why it cannot be placed.
pub fn schedule(input: &ScheduleInput<'_>) -> Result<ScheduleOutcome, ScheduleError> {
    let Some(placement) = input.spec.placement.as_ref() else {
        return Err(ScheduleError::SchedulerError(
            "failed to get placement from binding".to_string(),
        ));
    };
    if !placement.cluster_affinities.is_empty() {
        return affinities::schedule_with_affinities(input, placement);
    }
    let affinity = match &placement.cluster_affinity {
        Some(a) => AffinityTiers::plain(a, input.clusters),
        None => AffinityTiers::none(),
    };
    let (clusters, explanation) = attempt(input, placement, affinity)?;
    Ok(ScheduleOutcome {
        clusters,
        affinity_name: None,
        explanation,
    })
}

/// One run of the pipeline with the given affinity in force.
pub(crate) fn attempt<'a>(
    input: &ScheduleInput<'a>,
    placement: &'a Placement,
    affinity: AffinityTiers<'a>,
) -> Result<(Vec<TargetCluster>, Explanation), ScheduleError> {
    let spec = input.spec;
    let snap = input.clusters;
    let ctx = context(input, placement, affinity);
    let estimator = Estimator::new(spec, snap);
    let overflow = ctx.affinity.has_overflow();
    let strategy = Strategy::of(placement);

    let mut explanation = Explanation::new(
        snap.names(),
        vec![format!(
            "strategy: {} ({} replica(s))",
            strategy.describe(),
            spec.replicas
        )],
    );
    // Evicted clusters are explained even when another filter rejects them first.
    for task in &spec.graceful_eviction_tasks {
        explanation.lines.push(format!(
            "being evicted from {} ({}, by {}): left out by ClusterEviction while the task exists",
            task.from_cluster, task.reason, task.producer
        ));
    }
    for (cluster, until) in input.blocked {
        let until = match until {
            Some(t) => t
                .as_datetime()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            None => "its eviction task is gone, then for the block period".to_string(),
        };
        explanation.lines.push(format!(
            "blocked: the workload failed over from {cluster}; left out by FailoverBlock until {until}"
        ));
    }
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for info in snap.clusters() {
        match filters::run_filters(&ctx, info) {
            Err(why) => explanation.push(ClusterExplanation::rejected(why)),
            Ok(()) => {
                let tier = if overflow {
                    ctx.affinity.tier_of(info).unwrap_or(0)
                } else {
                    0
                };
                let score = scores::total_score(&ctx, info);
                let allocatable = estimator.max_available(info);
                let available = allocatable.saturating_add(i64::from(ctx.assigned(info)));
                explanation.push(ClusterExplanation::feasible(
                    score,
                    available,
                    overflow.then_some(tier),
                ));
                candidates.push(Candidate {
                    info,
                    score,
                    allocatable,
                    available,
                    tier,
                });
            }
        }
    }
    if candidates.is_empty() {
        let message = explanation.fit_error_message();
        explanation
            .lines
            .push(format!("no cluster fits: {message}"));
        return Err(ScheduleError::FitError {
            message,
            explanation: Box::new(explanation),
        });
    }
    // The order is total (names are unique), so an unstable sort gives the stable result.
    candidates.sort_unstable_by(spread::candidate_order);

    let duplicated = strategy == Strategy::Duplicated;
    let rules = SelectionRules {
        constraints: &placement.spread_constraints,
        ignore_spread: Strategy::ignores_spread(placement),
        need_replicas: (!duplicated).then_some(i64::from(spec.replicas)),
        replicas: i64::from(spec.replicas),
        duplicated,
    };
    let picked = spread::select(&candidates, &rules, &mut explanation.lines)
        .map_err(|e| ScheduleError::SchedulerError(format!("failed to select clusters: {e}")))?;
    let mut selected: Vec<&Candidate<'_>> =
        picked.iter().filter_map(|&i| candidates.get(i)).collect();
    if duplicated {
        selected = replace_failed(spec, placement, selected, &mut explanation.lines);
    }
    for c in &selected {
        if let Some(e) = explanation.at_mut(c.info.index) {
            e.selected = true;
        }
    }
    if selected.is_empty() {
        return Err(ScheduleError::SchedulerError(
            "failed to assign replicas: no clusters available to schedule".to_string(),
        ));
    }

    let mut result: Vec<(&str, i64)> = if is_workload(spec) {
        let assigned = assign(
            input,
            placement,
            strategy,
            &selected,
            overflow,
            &mut explanation.lines,
        )
        .map_err(|available| {
            let message =
                format!("Clusters available replicas {available} are not enough to schedule.");
            ScheduleError::Unschedulable {
                message,
                explanation: Box::new(explanation.clone()),
            }
        })?;
        division::remove_zero(assigned)
    } else {
        explanation.lines.push(
            "not a workload: every selected cluster gets the resource, no replicas".to_string(),
        );
        selected.iter().map(|c| (&*c.info.name, 0)).collect()
    };
    if input.options.empty_workload_propagation {
        for c in &selected {
            if !result.iter().any(|(n, _)| *n == &*c.info.name) {
                result.push((&c.info.name, 0));
            }
        }
    }
    result.sort_by(|a, b| a.0.cmp(b.0));
    let clusters: Vec<TargetCluster> = result
        .iter()
        .map(|(n, r)| TargetCluster::new(n, i32::try_from(*r).unwrap_or(i32::MAX)))
        .collect();
    for t in &clusters {
        if let Some(e) = explanation.cluster_mut(&t.name) {
            e.replicas = Some(t.replicas);
        }
    }
    explanation.lines.push(format!(
        "result: {}",
        if clusters.is_empty() {
            "(no cluster)".to_string()
        } else {
            clusters
                .iter()
                .map(|t| format!("{}={}", t.name, t.replicas))
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    Ok((clusters, explanation))
}

/// Duplicated after an eviction (the failover guide): the clusters the
/// binding was evicted from (tasks whose `fromCluster` is no longer in `spec.clusters`) are
/// replaced only when at least as many new clusters were selected as failed; otherwise the
/// binding is left on its surviving clusters. A binding with no surviving cluster takes what
/// fits (leaving it nowhere would help no one). Tasks stay until the new placement is healthy,
/// so a task may belong to a cluster that was already replaced: with a cluster spread
/// constraint, no more clusters count as failed than `maxGroups` leaves free slots.
fn replace_failed<'c, 'a>(
    spec: &ResourceBindingSpec,
    placement: &Placement,
    selected: Vec<&'c Candidate<'a>>,
    trace: &mut Vec<String>,
) -> Vec<&'c Candidate<'a>> {
    let scheduled = |name: &str| spec.clusters.iter().any(|t| t.name == name);
    let mut failed: Vec<&str> = spec
        .graceful_eviction_tasks
        .iter()
        .map(|t| t.from_cluster.as_str())
        .filter(|n| !scheduled(n))
        .collect();
    failed.sort_unstable();
    failed.dedup();
    let slots = placement
        .spread_constraints
        .iter()
        .find(|c| c.spread_by_field == Some(SpreadByField::Cluster) && c.max_groups > 0)
        .map(|c| {
            usize::try_from(c.max_groups)
                .unwrap_or(usize::MAX)
                .saturating_sub(spec.clusters.len())
        });
    let to_replace = slots.map_or(failed.len(), |s| failed.len().min(s));
    if to_replace == 0 || spec.clusters.is_empty() {
        return selected;
    }
    let new = selected.iter().filter(|c| !scheduled(&c.info.name)).count();
    if new == 0 || new >= to_replace {
        return selected;
    }
    trace.push(format!(
        "Duplicated: {to_replace} evicted cluster(s) to replace ({}) but only {new} new candidate(s): no replacement, the binding stays on its surviving clusters",
        failed.join(", ")
    ));
    selected
        .into_iter()
        .filter(|c| scheduled(&c.info.name))
        .collect()
}

/// Assigns replicas to the selected clusters; `Err` carries the available replicas when
/// capacity is short.
fn assign<'a>(
    input: &ScheduleInput<'a>,
    placement: &'a Placement,
    strategy: Strategy,
    selected: &[&Candidate<'a>],
    overflow: bool,
    trace: &mut Vec<String>,
) -> Result<Vec<(&'a str, i64)>, i64> {
    let spec = input.spec;
    let replicas = i64::from(spec.replicas);
    let tie = TieBreak::from_uid(&spec.resource.uid);
    match strategy {
        Strategy::Duplicated => {
            let names: Vec<&'a str> = selected.iter().map(|c| &*c.info.name).collect();
            Ok(division::duplicate(&names, replicas, trace))
        }
        Strategy::StaticWeight => {
            let names: Vec<&'a str> = selected.iter().map(|c| &*c.info.name).collect();
            let rules: Option<Vec<(CompiledAffinity<'a>, i64)>> = placement
                .replica_scheduling
                .as_ref()
                .and_then(|r| r.weight_preference.as_ref())
                .map(|w| {
                    w.static_weight_list
                        .iter()
                        .map(|s| {
                            (
                                CompiledAffinity::new(&s.target_cluster, input.clusters),
                                s.weight,
                            )
                        })
                        .collect()
                });
            let weight_of = |i: usize| {
                let rules = rules.as_ref()?;
                let info = selected.get(i)?.info;
                Some(
                    rules
                        .iter()
                        .filter(|(a, _)| a.matches(info))
                        .map(|(_, w)| *w)
                        .fold(0, i64::max),
                )
            };
            let weights = division::static_weights(&names, weight_of, trace);
            Ok(division::divide_static(&weights, replicas, tie, trace))
        }
        Strategy::DynamicWeight | Strategy::Aggregated => {
            let fresh = reschedule_required(spec, input.status);
            let aggregated = strategy == Strategy::Aggregated;
            let previous: Vec<(&'a str, i64)> = spec
                .clusters
                .iter()
                .map(|t| (t.name.as_str(), i64::from(t.replicas)))
                .collect();
            if overflow {
                return assign_by_tiers(
                    selected, &previous, replicas, aggregated, fresh, tie, trace,
                );
            }
            let dynamic = DynamicInput {
                candidates: selected
                    .iter()
                    .map(|c| (&*c.info.name, c.allocatable))
                    .collect(),
                previous,
                replicas,
                aggregated,
                fresh,
                tie,
            };
            division::divide_dynamic(&dynamic, trace).map_err(|e| e.available)
        }
    }
}

/// Overflow affinities (v1.19): tiers in order; each tier gets
/// `min(remaining, Σ available in the tier)` through the dynamic strategy, so the primary
/// tier fills first and scale-down gives back from the last tier first; replicas left after
/// the last tier ⇒ not enough capacity.
fn assign_by_tiers<'a>(
    selected: &[&Candidate<'a>],
    previous: &[(&'a str, i64)],
    replicas: i64,
    aggregated: bool,
    fresh: bool,
    tie: TieBreak,
    trace: &mut Vec<String>,
) -> Result<Vec<(&'a str, i64)>, i64> {
    let mut tiers: Vec<u32> = selected.iter().map(|c| c.tier).collect();
    tiers.sort_unstable();
    tiers.dedup();
    let mut remaining = replicas;
    let mut total_available = 0i64;
    let mut out: Vec<(&'a str, i64)> = Vec::new();
    for tier in tiers {
        let members: Vec<&&Candidate<'a>> = selected.iter().filter(|c| c.tier == tier).collect();
        let capacity: i64 = members.iter().map(|c| c.available).sum();
        total_available = total_available.saturating_add(capacity);
        let want = remaining.min(capacity);
        trace.push(format!(
            "overflow tier {tier}: {} cluster(s), {capacity} available, {want} of {remaining} remaining replica(s)",
            members.len()
        ));
        let in_tier = |n: &str| members.iter().any(|c| &*c.info.name == n);
        let dynamic = DynamicInput {
            candidates: members
                .iter()
                .map(|c| (&*c.info.name, c.allocatable))
                .collect(),
            previous: previous
                .iter()
                .filter(|(n, _)| in_tier(n))
                .copied()
                .collect(),
            replicas: want,
            aggregated,
            fresh,
            tie,
        };
        let got = division::divide_dynamic(&dynamic, trace).map_err(|e| e.available)?;
        remaining -= division::sum(&got);
        out.extend(got);
    }
    if remaining > 0 {
        trace.push(format!(
            "{remaining} replica(s) left after the last overflow tier"
        ));
        return Err(total_available);
    }
    Ok(out)
}
