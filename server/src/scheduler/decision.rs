//! What the scheduler controller writes after one look at a binding (docs/semantics.md
//! §8.1, §8.7, Part 1 "never delete the last healthy copy"): a pure function of what the
//! controller read (the binding's spec or why it cannot be decoded, its status and generation,
//! the applied-placement annotation, the result of [`super::schedule`] when
//! [`super::needs_scheduling`] asked for one) and `now`. The [`Decision`] says whether
//! `spec.clusters` and the annotation change, which status fields the scheduler owns take
//! which values, which Event to record and whether to look again soon. The controller only
//! reads, calls [`decide`], and writes the spec once and the status once when they differ.
//!
//! | step | spec | `Scheduled` condition | Event |
//! |---|---|---|---|
//! | spec cannot be decoded | – | False/InvalidSpec | Warning InvalidSpec, once per message |
//! | nothing to schedule | – | True/Success only if a placed binding has none yet | – |
//! | success | the result + annotation | True/Success | Normal ScheduleBindingSucceed when it changed |
//! | no cluster fits | empty, **unless** eviction tasks exist (kept) | False/NoClusterFit | Warning ScheduleBindingFailed when it changed |
//! | capacity short | – | False/Unschedulable | idem |
//! | other error | – | False/SchedulerError | idem |
//!
//! A placement that a failure keeps never keeps a cluster that is being deleted or gone
//! (`leaving`): it is dropped, so its deletion can finish, even when it was the last copy.
//!
//! A binding with eviction tasks is never emptied by a FitError (karmada-io/karmada#7455): its
//! current clusters and tasks stay, so the old copies stay, and the condition names the
//! clusters it is being evicted from. When a cluster fits again, the next pass moves it.

use chrono::{DateTime, Utc};
use flotilla_api::binding::{
    ResourceBindingSpec, ResourceBindingStatus, TargetCluster, CONDITION_SCHEDULED,
    REASON_NO_CLUSTER_FIT, REASON_SUCCESS,
};
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};

use super::{condition_for, ScheduleError, ScheduleOutcome, ScheduleReason, SUCCESS_MESSAGE};

/// Reason of the `Scheduled` condition (and Event) for a spec that cannot be decoded.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Event reason of a successful decision.
pub const EVENT_SCHEDULE_SUCCEEDED: &str = "ScheduleBindingSucceed";
/// Event reason of a failed decision.
pub const EVENT_SCHEDULE_FAILED: &str = "ScheduleBindingFailed";

/// What the controller found before deciding.
#[derive(Clone, Copy, Debug)]
pub enum Step<'a> {
    /// The spec cannot be decoded (`error` says why).
    InvalidSpec {
        /// The decoding error.
        error: &'a str,
    },
    /// [`super::needs_scheduling`] said no.
    NotNeeded {
        /// The binding's spec.
        spec: &'a ResourceBindingSpec,
    },
    /// The scheduler ran.
    Scheduled {
        /// The binding's spec.
        spec: &'a ResourceBindingSpec,
        /// Why it ran.
        reason: ScheduleReason,
        /// What it found.
        result: &'a Result<ScheduleOutcome, ScheduleError>,
    },
}

/// Everything [`decide`] reads.
#[derive(Clone, Copy, Debug)]
pub struct DecisionInput<'a> {
    /// What the controller found.
    pub step: Step<'a>,
    /// The binding's status (empty when it could not be decoded).
    pub status: &'a ResourceBindingStatus,
    /// `metadata.generation` as read.
    pub generation: i64,
    /// The `policy.karmada.io/applied-placement` annotation.
    pub applied_placement: Option<&'a str>,
    /// Targets whose Cluster is being deleted or gone ([`super::leaving_targets`]): they
    /// leave `spec.clusters` whatever the scheduler found (docs/semantics.md §8.7).
    pub leaving: &'a [String],
    /// The time of the decision.
    pub now: DateTime<Utc>,
}

/// The spec write: new `spec.clusters`, and the applied-placement annotation when the
/// scheduler succeeded.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecWrite {
    /// The new `spec.clusters`.
    pub clusters: Vec<TargetCluster>,
    /// The placement as JSON, for the annotation; `None` leaves the annotation alone.
    pub applied_placement: Option<String>,
}

/// The status fields the scheduler owns, as they should be after the decision.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    /// The whole `status.conditions` list with `Scheduled` set.
    pub conditions: Vec<Condition>,
    /// Set `schedulerObservedGeneration` to the generation of the binding as written (the spec
    /// write bumps it, so the controller reads it from the object it wrote).
    pub observe_generation: bool,
    /// New `lastScheduledTime`; `None` leaves it.
    pub last_scheduled_time: Option<Time>,
    /// New `schedulerObservingAffinityName`; `None` leaves it.
    pub affinity_name: Option<String>,
}

/// An Event to record on the binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionEvent {
    /// Warning (else Normal).
    pub warning: bool,
    /// Event reason.
    pub reason: &'static str,
    /// Event message.
    pub message: String,
}

/// What to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The spec write, or none.
    pub spec: Option<SpecWrite>,
    /// The status fields, or none (the controller writes only when they differ from the
    /// stored ones).
    pub status: Option<StatusWrite>,
    /// The Event, or none.
    pub event: Option<DecisionEvent>,
    /// The `Scheduled` reason when the scheduler ran (the metric label).
    pub result: Option<&'static str>,
    /// Look again soon (the binding could not be placed).
    pub retry: bool,
}

impl Decision {
    fn nothing() -> Self {
        Decision {
            spec: None,
            status: None,
            event: None,
            result: None,
            retry: false,
        }
    }
}

fn scheduled_condition(status: &ResourceBindingStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SCHEDULED)
}

fn with_condition(
    status: &ResourceBindingStatus,
    cond: ConditionStatus,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let mut conditions = status.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::new(CONDITION_SCHEDULED, cond, reason, message),
        now,
    );
    conditions
}

/// `member1 (TaintUntolerated), member3 (ApplicationFailure)`: the clusters the binding is
/// being evicted from, sorted by name.
pub fn evicting_from(spec: &ResourceBindingSpec) -> Option<String> {
    let mut tasks: Vec<(&str, &str)> = spec
        .graceful_eviction_tasks
        .iter()
        .map(|t| (t.from_cluster.as_str(), t.reason.as_str()))
        .collect();
    if tasks.is_empty() {
        return None;
    }
    tasks.sort_unstable();
    tasks.dedup_by_key(|t| t.0);
    Some(
        tasks
            .iter()
            .map(|(c, r)| {
                if r.is_empty() {
                    c.to_string()
                } else {
                    format!("{c} ({r})")
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Decides what the scheduler controller writes for one look at a binding.
pub fn decide(input: &DecisionInput<'_>) -> Decision {
    match input.step {
        Step::InvalidSpec { error } => decide_invalid_spec(input, error),
        Step::NotNeeded { spec } => decide_not_needed(input, spec),
        Step::Scheduled {
            spec,
            reason,
            result,
        } => decide_scheduled(input, spec, reason, result),
    }
}

/// `Scheduled=False/InvalidSpec` and one Warning Event per distinct error; nothing when the
/// condition already says so (the binding is not retried until it changes).
fn decide_invalid_spec(input: &DecisionInput<'_>, error: &str) -> Decision {
    let message = format!("The binding's spec cannot be decoded: {error}");
    let already = scheduled_condition(input.status)
        .is_some_and(|c| c.reason == REASON_INVALID_SPEC && c.message == message);
    if already {
        return Decision::nothing();
    }
    Decision {
        status: Some(StatusWrite {
            conditions: with_condition(
                input.status,
                ConditionStatus::False,
                REASON_INVALID_SPEC,
                &message,
                input.now,
            ),
            observe_generation: false,
            last_scheduled_time: None,
            affinity_name: None,
        }),
        event: Some(DecisionEvent {
            warning: true,
            reason: REASON_INVALID_SPEC,
            message,
        }),
        ..Decision::nothing()
    }
}

/// Nothing to schedule: record the generation as observed; a placed binding without a
/// `Scheduled` condition (its status write was lost after the spec write) gets Success now.
fn decide_not_needed(input: &DecisionInput<'_>, spec: &ResourceBindingSpec) -> Decision {
    let status = input.status;
    let placed = input.applied_placement.is_some() && !spec.clusters.is_empty();
    let unrecorded = scheduled_condition(status).is_none();
    let stale = status.scheduler_observed_generation != input.generation;
    let record_success = placed && unrecorded;
    if !(stale || record_success) {
        return Decision::nothing();
    }
    let conditions = if record_success {
        with_condition(
            status,
            ConditionStatus::True,
            REASON_SUCCESS,
            SUCCESS_MESSAGE,
            input.now,
        )
    } else {
        status.conditions.clone()
    };
    Decision {
        status: Some(StatusWrite {
            conditions,
            observe_generation: true,
            last_scheduled_time: None,
            affinity_name: None,
        }),
        ..Decision::nothing()
    }
}

fn targets(clusters: &[TargetCluster]) -> String {
    clusters
        .iter()
        .map(|c| format!("{}:{}", c.name, c.replicas))
        .collect::<Vec<_>>()
        .join(", ")
}

fn decide_scheduled(
    input: &DecisionInput<'_>,
    spec: &ResourceBindingSpec,
    reason: ScheduleReason,
    result: &Result<ScheduleOutcome, ScheduleError>,
) -> Decision {
    let status = input.status;
    let (cond_status, cond_reason, mut message) = condition_for(result);
    let evicting = evicting_from(spec);
    // spec.clusters: the result; empty on a FitError unless the binding is being evicted
    // (never lose the last copy); unchanged otherwise.
    // A deleted cluster leaves even a placement that is otherwise kept (a user deleting a
    // Cluster means it): its finalizer waits for that.
    let new_clusters = match result {
        Ok(outcome) => Some(outcome.clusters.clone()),
        Err(ScheduleError::FitError { .. }) if evicting.is_none() => Some(Vec::new()),
        Err(_)
            if spec
                .clusters
                .iter()
                .any(|c| input.leaving.contains(&c.name)) =>
        {
            Some(
                spec.clusters
                    .iter()
                    .filter(|c| !input.leaving.contains(&c.name))
                    .cloned()
                    .collect(),
            )
        }
        Err(_) => None,
    };
    if result.is_err() {
        if let Some(from) = &evicting {
            let kept = if cond_reason == REASON_NO_CLUSTER_FIT && spec.clusters.is_empty() {
                "the eviction tasks are kept"
            } else {
                "the current clusters and the eviction tasks are kept"
            };
            message = format!("{message} Evicting from {from}: {kept} until another cluster fits.");
        }
    }
    let applied = match result {
        Ok(_) => spec
            .placement
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok()),
        Err(_) => None,
    };
    let annotation_changes = applied
        .as_deref()
        .is_some_and(|a| Some(a) != input.applied_placement);
    let clusters_change = new_clusters.as_ref().is_some_and(|c| *c != spec.clusters);
    let spec_write = (clusters_change || annotation_changes).then(|| SpecWrite {
        clusters: new_clusters
            .clone()
            .unwrap_or_else(|| spec.clusters.clone()),
        applied_placement: applied,
    });

    let previous =
        scheduled_condition(status).map(|c| (c.status, c.reason.as_str(), c.message.as_str()));
    let decision_changed =
        spec_write.is_some() || previous != Some((cond_status, cond_reason, message.as_str()));

    let mut write = StatusWrite {
        conditions: with_condition(status, cond_status, cond_reason, &message, input.now),
        observe_generation: true,
        last_scheduled_time: None,
        affinity_name: None,
    };
    if let Ok(outcome) = result {
        // A routine pass over a Duplicated or non-workload binding that changes nothing
        // leaves lastScheduledTime alone: rewriting it would swallow a manual reschedule
        // (`rescheduleTriggeredAt` must be later than it) requested in the same second.
        let routine = reason == ScheduleReason::AlwaysScheduled && spec_write.is_none();
        if !routine || status.last_scheduled_time.is_none() {
            write.last_scheduled_time = Some(Time::new(input.now));
        }
        write.affinity_name = outcome.affinity_name.clone();
    }

    let event = decision_changed.then(|| match result {
        Ok(outcome) => {
            let mut message = format!(
                "Binding has been scheduled successfully ({reason:?}): {}",
                targets(&outcome.clusters)
            );
            if let Some(from) = &evicting {
                message.push_str(&format!("; evicting from {from}"));
            }
            DecisionEvent {
                warning: false,
                reason: EVENT_SCHEDULE_SUCCEEDED,
                message,
            }
        }
        Err(_) => DecisionEvent {
            warning: true,
            reason: EVENT_SCHEDULE_FAILED,
            message: message.clone(),
        },
    });
    Decision {
        spec: spec_write,
        status: Some(write),
        event,
        result: Some(cond_reason),
        retry: result.is_err(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::Explanation;
    use flotilla_api::binding::{
        GracefulEvictionTask, ObjectReference, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE,
    };
    use flotilla_api::policy::Placement;

    fn at(s: &str) -> DateTime<Utc> {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap()
    }

    fn spec(clusters: &[(&str, i32)], evicting: &[&str]) -> ResourceBindingSpec {
        ResourceBindingSpec {
            resource: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                name: "web".into(),
                ..Default::default()
            },
            replicas: 3,
            placement: Some(Placement::default()),
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster::new(n, *r))
                .collect(),
            graceful_eviction_tasks: evicting
                .iter()
                .map(|c| GracefulEvictionTask {
                    from_cluster: c.to_string(),
                    reason: "TaintUntolerated".into(),
                    producer: "TaintManager".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn applied() -> String {
        serde_json::to_string(&Placement::default()).unwrap()
    }

    fn ok(clusters: &[(&str, i32)]) -> Result<ScheduleOutcome, ScheduleError> {
        Ok(ScheduleOutcome {
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster::new(n, *r))
                .collect(),
            affinity_name: None,
            explanation: Explanation::default(),
        })
    }

    fn fit_error() -> Result<ScheduleOutcome, ScheduleError> {
        Err(ScheduleError::FitError {
            message:
                "0/2 clusters are available: 2 cluster(s) had untolerated taint {t:NoSchedule}."
                    .into(),
            explanation: Box::default(),
        })
    }

    fn unschedulable() -> Result<ScheduleOutcome, ScheduleError> {
        Err(ScheduleError::Unschedulable {
            message: "Clusters available replicas 1 are not enough to schedule.".into(),
            explanation: Box::default(),
        })
    }

    fn status_with(reason: &str, message: &str, observed: i64) -> ResourceBindingStatus {
        let cond = if reason == REASON_SUCCESS {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        ResourceBindingStatus {
            scheduler_observed_generation: observed,
            last_scheduled_time: Some(Time::new(at("2026-01-01T00:00:00Z"))),
            conditions: vec![Condition::new(CONDITION_SCHEDULED, cond, reason, message)],
            ..Default::default()
        }
    }

    /// What a row expects: spec clusters written (None = no spec write), condition reason
    /// (None = no status write), event reason, retry.
    type Want<'a> = (
        Option<Vec<(&'a str, i32)>>,
        Option<&'a str>,
        Option<&'a str>,
        bool,
    );

    /// name, step, status, generation, applied-placement annotation, expected.
    type Row<'a> = (
        &'a str,
        Step<'a>,
        &'a ResourceBindingStatus,
        i64,
        Option<&'a str>,
        Want<'a>,
    );

    fn summary(d: &Decision) -> Want<'_> {
        (
            d.spec.as_ref().map(|s| {
                s.clusters
                    .iter()
                    .map(|t| (t.name.as_str(), t.replicas))
                    .collect()
            }),
            d.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == CONDITION_SCHEDULED)
                    .map(|c| c.reason.as_str())
            }),
            d.event.as_ref().map(|e| e.reason),
            d.retry,
        )
    }

    #[test]
    fn decision_table() {
        let now = at("2026-01-01T00:10:00Z");
        let empty = ResourceBindingStatus::default();
        let placed = status_with(REASON_SUCCESS, SUCCESS_MESSAGE, 2);
        let applied = applied();
        let on_m1 = spec(&[("m1", 3)], &[]);
        let evicted_m1 = spec(&[], &["m1"]);
        let half_evicted = spec(&[("m2", 2)], &["m1"]);
        let success_ok = ok(&[("m1", 3)]);
        let moved = ok(&[("m2", 3)]);
        let fit = fit_error();
        let short = unschedulable();
        let other: Result<ScheduleOutcome, ScheduleError> = Err(ScheduleError::SchedulerError(
            "failed to select clusters: x".into(),
        ));
        let fit_message = match &fit {
            Err(e) => e.to_string(),
            Ok(_) => unreachable!(),
        };
        let already_failed = status_with(REASON_NO_CLUSTER_FIT, &fit_message, 2);
        let already_invalid = status_with(
            REASON_INVALID_SPEC,
            "The binding's spec cannot be decoded: bad",
            2,
        );
        let unrecorded = ResourceBindingStatus {
            scheduler_observed_generation: 2,
            ..Default::default()
        };
        let nowhere = spec(&[], &[]);
        fn sched<'a>(
            spec: &'a ResourceBindingSpec,
            reason: ScheduleReason,
            result: &'a Result<ScheduleOutcome, ScheduleError>,
        ) -> Step<'a> {
            Step::Scheduled {
                spec,
                reason,
                result,
            }
        }
        let rows: Vec<Row<'_>> = vec![
            (
                "first schedule: result, Success, Event",
                sched(&on_m1, ScheduleReason::PlacementChanged, &success_ok),
                &empty,
                1,
                None,
                (
                    Some(vec![("m1", 3)]),
                    Some(REASON_SUCCESS),
                    Some(EVENT_SCHEDULE_SUCCEEDED),
                    false,
                ),
            ),
            (
                "no change: status only (same values), no Event",
                sched(&on_m1, ScheduleReason::AlwaysScheduled, &success_ok),
                &placed,
                2,
                Some(&applied),
                (None, Some(REASON_SUCCESS), None, false),
            ),
            (
                "rescheduled after eviction: the new clusters, Event",
                sched(&half_evicted, ScheduleReason::ReplicasChanged, &moved),
                &placed,
                3,
                Some(&applied),
                (
                    Some(vec![("m2", 3)]),
                    Some(REASON_SUCCESS),
                    Some(EVENT_SCHEDULE_SUCCEEDED),
                    false,
                ),
            ),
            (
                "no cluster fits: spec emptied, NoClusterFit, Event, retry",
                sched(&on_m1, ScheduleReason::PlacementChanged, &fit),
                &placed,
                3,
                Some(&applied),
                (
                    Some(vec![]),
                    Some(REASON_NO_CLUSTER_FIT),
                    Some(EVENT_SCHEDULE_FAILED),
                    true,
                ),
            ),
            (
                "no cluster fits again: no spec write, no second Event",
                sched(&nowhere, ScheduleReason::PlacementChanged, &fit),
                &already_failed,
                2,
                Some(&applied),
                (None, Some(REASON_NO_CLUSTER_FIT), None, true),
            ),
            (
                "no cluster fits while evicting: the survivors are kept",
                sched(&half_evicted, ScheduleReason::ReplicasChanged, &fit),
                &placed,
                3,
                Some(&applied),
                (
                    None,
                    Some(REASON_NO_CLUSTER_FIT),
                    Some(EVENT_SCHEDULE_FAILED),
                    true,
                ),
            ),
            (
                "no cluster fits after the only cluster was evicted: nothing written over it",
                sched(&evicted_m1, ScheduleReason::ReplicasChanged, &fit),
                &placed,
                3,
                Some(&applied),
                (
                    None,
                    Some(REASON_NO_CLUSTER_FIT),
                    Some(EVENT_SCHEDULE_FAILED),
                    true,
                ),
            ),
            (
                "capacity short: Unschedulable, clusters kept",
                sched(&on_m1, ScheduleReason::ReplicasChanged, &short),
                &placed,
                2,
                Some(&applied),
                (
                    None,
                    Some(REASON_UNSCHEDULABLE),
                    Some(EVENT_SCHEDULE_FAILED),
                    true,
                ),
            ),
            (
                "other error: SchedulerError, clusters kept",
                sched(&on_m1, ScheduleReason::PlacementChanged, &other),
                &placed,
                2,
                Some(&applied),
                (
                    None,
                    Some(REASON_SCHEDULER_ERROR),
                    Some(EVENT_SCHEDULE_FAILED),
                    true,
                ),
            ),
            (
                "invalid spec: InvalidSpec and a Warning",
                Step::InvalidSpec { error: "bad" },
                &placed,
                2,
                Some(&applied),
                (
                    None,
                    Some(REASON_INVALID_SPEC),
                    Some(REASON_INVALID_SPEC),
                    false,
                ),
            ),
            (
                "invalid spec already reported: nothing",
                Step::InvalidSpec { error: "bad" },
                &already_invalid,
                2,
                Some(&applied),
                (None, None, None, false),
            ),
            (
                "not needed, generation observed: nothing",
                Step::NotNeeded { spec: &on_m1 },
                &placed,
                2,
                Some(&applied),
                (None, None, None, false),
            ),
            (
                "not needed, new generation: observed only",
                Step::NotNeeded { spec: &on_m1 },
                &placed,
                3,
                Some(&applied),
                (None, Some(REASON_SUCCESS), None, false),
            ),
            (
                "not needed, placed but the condition was lost: Success",
                Step::NotNeeded { spec: &on_m1 },
                &unrecorded,
                2,
                Some(&applied),
                (None, Some(REASON_SUCCESS), None, false),
            ),
        ];
        for (name, step, status, generation, annotation, want) in rows {
            let d = decide(&DecisionInput {
                step,
                status,
                generation,
                applied_placement: annotation,
                leaving: &[],
                now,
            });
            assert_eq!(summary(&d), want, "{name}: {d:?}");
        }
    }

    #[test]
    fn success_stamps_the_time_and_the_annotation_unless_routine() {
        let now = at("2026-01-01T00:10:00Z");
        let placed = status_with(REASON_SUCCESS, SUCCESS_MESSAGE, 2);
        let spec = spec(&[("m1", 3)], &[]);
        let result = ok(&[("m1", 3)]);
        let applied = applied();
        let decide_with = |reason, annotation| {
            decide(&DecisionInput {
                step: Step::Scheduled {
                    spec: &spec,
                    reason,
                    result: &result,
                },
                status: &placed,
                generation: 2,
                applied_placement: annotation,
                leaving: &[],
                now,
            })
        };
        // Routine: same result, same annotation: the time stays.
        let d = decide_with(ScheduleReason::AlwaysScheduled, Some(applied.as_str()));
        assert_eq!(d.spec, None);
        assert_eq!(d.status.as_ref().and_then(|s| s.last_scheduled_time), None);
        // A real decision is stamped, and the annotation is written when it differs.
        let d = decide_with(ScheduleReason::RescheduleTriggered, None);
        assert_eq!(
            d.spec.as_ref().and_then(|s| s.applied_placement.clone()),
            Some(applied.clone())
        );
        assert_eq!(
            d.status.as_ref().and_then(|s| s.last_scheduled_time),
            Some(Time::new(now))
        );
        let d = decide_with(ScheduleReason::RescheduleTriggered, Some(applied.as_str()));
        assert_eq!(d.spec, None, "same clusters, same annotation");
        assert_eq!(
            d.status.as_ref().and_then(|s| s.last_scheduled_time),
            Some(Time::new(now))
        );
    }

    #[test]
    fn a_failure_while_evicting_names_the_evicted_clusters() {
        let now = at("2026-01-01T00:10:00Z");
        let placed = status_with(REASON_SUCCESS, SUCCESS_MESSAGE, 2);
        let spec = spec(&[("m2", 2)], &["m3", "m1"]);
        let fit = fit_error();
        let d = decide(&DecisionInput {
            step: Step::Scheduled {
                spec: &spec,
                reason: ScheduleReason::ReplicasChanged,
                result: &fit,
            },
            status: &placed,
            generation: 3,
            applied_placement: Some(&applied()),
            leaving: &[],
            now,
        });
        assert_eq!(d.spec, None, "never lose the last copy");
        let cond = d
            .status
            .as_ref()
            .and_then(|s| s.conditions.first())
            .cloned()
            .unwrap();
        assert_eq!(cond.status, ConditionStatus::False);
        assert_eq!(
            cond.message,
            "0/2 clusters are available: 2 cluster(s) had untolerated taint {t:NoSchedule}. \
             Evicting from m1 (TaintUntolerated), m3 (TaintUntolerated): the current clusters \
             and the eviction tasks are kept until another cluster fits."
        );
        assert_eq!(d.event.map(|e| e.message), Some(cond.message));
    }

    #[test]
    fn a_deleted_cluster_leaves_even_a_placement_a_failure_keeps() {
        // (name, targets, eviction tasks, result, clusters leaving, spec.clusters written)
        type Row = (
            &'static str,
            &'static [(&'static str, i32)],
            &'static [&'static str],
            Result<ScheduleOutcome, ScheduleError>,
            &'static [&'static str],
            Option<&'static [(&'static str, i32)]>,
        );
        let rows: Vec<Row> = vec![
            (
                "capacity short: the survivors stay, the deleted cluster goes",
                &[("m1", 4), ("m2", 3), ("m3", 3)],
                &[],
                unschedulable(),
                &["m3"],
                Some(&[("m1", 4), ("m2", 3)]),
            ),
            (
                "capacity short, no cluster leaving: kept as it is",
                &[("m1", 4), ("m2", 3)],
                &[],
                unschedulable(),
                &[],
                None,
            ),
            (
                "no cluster fits while evicting: the deleted last copy goes anyway",
                &[("m3", 3)],
                &["m1"],
                fit_error(),
                &["m3"],
                Some(&[]),
            ),
            (
                "no cluster fits: emptied, as without a deletion",
                &[("m3", 3)],
                &[],
                fit_error(),
                &["m3"],
                Some(&[]),
            ),
            (
                "success: the result, which has no deleted cluster",
                &[("m1", 4), ("m3", 6)],
                &[],
                ok(&[("m1", 10)]),
                &["m3"],
                Some(&[("m1", 10)]),
            ),
        ];
        for (name, targets, evicting, result, leaving, want) in rows {
            let spec = spec(targets, evicting);
            let leaving: Vec<String> = leaving.iter().map(|c| c.to_string()).collect();
            let d = decide(&DecisionInput {
                step: Step::Scheduled {
                    spec: &spec,
                    reason: ScheduleReason::TargetClusterDeleting,
                    result: &result,
                },
                status: &status_with(REASON_SUCCESS, SUCCESS_MESSAGE, 2),
                generation: 3,
                applied_placement: Some(&applied()),
                leaving: &leaving,
                now: at("2026-01-01T00:10:00Z"),
            });
            let want: Option<Vec<TargetCluster>> =
                want.map(|w| w.iter().map(|(n, r)| TargetCluster::new(n, *r)).collect());
            assert_eq!(d.spec.map(|s| s.clusters), want, "{name}");
        }
    }

    #[test]
    fn success_after_eviction_says_so_in_the_event() {
        let spec = spec(&[("m2", 2)], &["m1"]);
        let result = ok(&[("m2", 3)]);
        let d = decide(&DecisionInput {
            step: Step::Scheduled {
                spec: &spec,
                reason: ScheduleReason::ReplicasChanged,
                result: &result,
            },
            status: &ResourceBindingStatus::default(),
            generation: 3,
            applied_placement: Some(&applied()),
            leaving: &[],
            now: at("2026-01-01T00:10:00Z"),
        });
        assert_eq!(
            d.event.map(|e| e.message).as_deref(),
            Some(
                "Binding has been scheduled successfully (ReplicasChanged): m2:3; \
                 evicting from m1 (TaintUntolerated)"
            )
        );
    }

    fn apply(
        spec: &mut ResourceBindingSpec,
        status: &mut ResourceBindingStatus,
        generation: &mut i64,
        annotation: &mut Option<String>,
        d: &Decision,
    ) {
        if let Some(w) = &d.spec {
            if w.clusters != spec.clusters {
                spec.clusters = w.clusters.clone();
                *generation += 1;
            }
            if let Some(a) = &w.applied_placement {
                *annotation = Some(a.clone());
            }
        }
        if let Some(w) = &d.status {
            status.conditions = w.conditions.clone();
            if w.observe_generation {
                status.scheduler_observed_generation = *generation;
            }
            if let Some(t) = w.last_scheduled_time {
                status.last_scheduled_time = Some(t);
            }
            if let Some(a) = &w.affinity_name {
                status.scheduler_observed_affinity_name = a.clone();
            }
        }
    }

    proptest::proptest! {
        /// Deciding again over what a decision wrote changes nothing and records no second
        /// Event; and a binding with eviction tasks is never emptied.
        #[test]
        fn a_decision_is_a_fixpoint_and_never_empties_an_evicting_binding(
            on in proptest::collection::vec(proptest::bool::ANY, 3),
            evicting in proptest::collection::vec(proptest::bool::ANY, 3),
            placed in proptest::collection::vec(proptest::bool::ANY, 3),
            kind in 0u8..4,
            annotated in proptest::bool::ANY,
        ) {
            let names = ["m1", "m2", "m3"];
            let current: Vec<(&str, i32)> = names.iter().zip(&on).filter(|(_, o)| **o).map(|(n, _)| (*n, 1)).collect();
            let evicted: Vec<&str> = names.iter().zip(&evicting).filter(|(n, e)| **e && !current.iter().any(|c| c.0 == **n)).map(|(n, _)| *n).collect();
            let mut spec = spec(&current, &evicted);
            let result = match kind {
                0 => ok(&names.iter().zip(&placed).filter(|(_, p)| **p).map(|(n, _)| (*n, 1)).collect::<Vec<_>>()),
                1 => fit_error(),
                2 => unschedulable(),
                _ => Err(ScheduleError::SchedulerError("x".into())),
            };
            let mut status = ResourceBindingStatus::default();
            let mut generation = 1;
            let mut annotation = annotated.then(applied);
            let now = at("2026-01-01T00:10:00Z");
            let reason = ScheduleReason::PlacementChanged;
            let first = decide(&DecisionInput {
                step: Step::Scheduled { spec: &spec, reason, result: &result },
                status: &status,
                generation,
                applied_placement: annotation.as_deref(),
                leaving: &[],
                now,
            });
            if !evicted.is_empty() && kind == 1 {
                proptest::prop_assert!(first.spec.is_none(), "{first:?}");
            }
            apply(&mut spec, &mut status, &mut generation, &mut annotation, &first);
            let second = decide(&DecisionInput {
                step: Step::Scheduled { spec: &spec, reason, result: &result },
                status: &status,
                generation,
                applied_placement: annotation.as_deref(),
                leaving: &[],
                now,
            });
            proptest::prop_assert_eq!(&second.spec, &None);
            proptest::prop_assert_eq!(&second.event, &None);
            proptest::prop_assert_eq!(second.status.map(|s| s.conditions), Some(status.conditions.clone()));
        }

        /// Whatever the scheduler found (its successes never name a cluster being deleted),
        /// the placement written or kept names no cluster that is leaving, and keeps every
        /// other cluster a failure keeps.
        #[test]
        fn a_leaving_cluster_is_never_kept(
            on in proptest::collection::vec(proptest::bool::ANY, 3),
            leaving in proptest::collection::vec(proptest::bool::ANY, 3),
            evicting in proptest::bool::ANY,
            placed in proptest::collection::vec(proptest::bool::ANY, 3),
            kind in 0u8..4,
        ) {
            let names = ["m1", "m2", "m3"];
            let current: Vec<(&str, i32)> = names.iter().zip(&on).filter(|(_, o)| **o).map(|(n, _)| (*n, 1)).collect();
            let gone: Vec<String> = names.iter().zip(&leaving).filter(|(_, l)| **l).map(|(n, _)| n.to_string()).collect();
            let spec = spec(&current, if evicting { &["m4"] } else { &[] });
            let result = match kind {
                0 => ok(&names.iter().zip(&placed).filter(|(n, p)| **p && !gone.contains(&n.to_string())).map(|(n, _)| (*n, 1)).collect::<Vec<_>>()),
                1 => fit_error(),
                2 => unschedulable(),
                _ => Err(ScheduleError::SchedulerError("x".into())),
            };
            let d = decide(&DecisionInput {
                step: Step::Scheduled { spec: &spec, reason: ScheduleReason::TargetClusterDeleting, result: &result },
                status: &ResourceBindingStatus::default(),
                generation: 1,
                applied_placement: Some(&applied()),
                leaving: &gone,
                now: at("2026-01-01T00:10:00Z"),
            });
            let after = d.spec.map_or(spec.clusters.clone(), |s| s.clusters);
            proptest::prop_assert!(after.iter().all(|c| !gone.contains(&c.name)), "{after:?}");
            if kind >= 2 || (kind == 1 && evicting) {
                let kept: Vec<&TargetCluster> = spec.clusters.iter().filter(|c| !gone.contains(&c.name)).collect();
                proptest::prop_assert_eq!(after.iter().collect::<Vec<_>>(), kept);
            }
        }
    }
}
