//! Ordered `clusterAffinities` (docs/semantics.md §8.6): which affinity term a binding uses.
//!
//! Scheduling starts at the term named by `status.schedulerObservingAffinityName` (the first
//! term when that is empty or unknown, or when a manual reschedule was triggered) and tries
//! the terms in order until one succeeds; it never goes back to an earlier, preferred term by
//! itself. When every remaining term fails, the first error is returned: a FitError means the
//! controller empties `spec.clusters` and keeps the old affinity name; any other error leaves
//! the binding as it is.

use flotilla_api::policy::Placement;

use super::context::AffinityTiers;
use super::{
    attempt, is_workload, reschedule_required, ScheduleError, ScheduleInput, ScheduleOutcome,
};

/// The index of the first term to try.
pub fn start_index(input: &ScheduleInput<'_>, placement: &Placement) -> usize {
    if reschedule_required(input.spec, input.status) {
        return 0;
    }
    let observed = &input.status.scheduler_observed_affinity_name;
    placement
        .cluster_affinities
        .iter()
        .position(|t| !observed.is_empty() && t.affinity_name == *observed)
        .unwrap_or(0)
}

/// Schedules with `placement.clusterAffinities`.
pub fn schedule_with_affinities(
    input: &ScheduleInput<'_>,
    placement: &Placement,
) -> Result<ScheduleOutcome, ScheduleError> {
    let start = start_index(input, placement);
    let with_overflow = is_workload(input.spec);
    let mut notes: Vec<String> = Vec::new();
    let mut first_error: Option<ScheduleError> = None;
    for (i, term) in placement.cluster_affinities.iter().enumerate().skip(start) {
        let tiers = AffinityTiers::term(term, with_overflow, input.clusters);
        match attempt(input, placement, tiers) {
            Ok((clusters, mut explanation)) => {
                notes.push(format!(
                    "clusterAffinities: term {:?} (#{}) scheduled",
                    term.affinity_name,
                    i + 1
                ));
                notes.append(&mut explanation.lines);
                explanation.lines = notes;
                return Ok(ScheduleOutcome {
                    clusters,
                    affinity_name: Some(term.affinity_name.clone()),
                    explanation,
                });
            }
            Err(e) => {
                notes.push(format!(
                    "clusterAffinities: term {:?} (#{}) failed: {e}",
                    term.affinity_name,
                    i + 1
                ));
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    let mut err = first_error.unwrap_or_else(|| {
        ScheduleError::SchedulerError("no clusterAffinities term to try".to_string())
    });
    if let ScheduleError::FitError { explanation, .. }
    | ScheduleError::Unschedulable { explanation, .. } = &mut err
    {
        explanation.lines.extend(notes);
    }
    Err(err)
}
