//! Writes a binding's failover history (`status.failoverHistory`, see
//! [`flotilla_api::history`]) for the controllers that decide a failover step. The taint
//! manager, application failover and graceful eviction write the binding's spec; the history
//! lives in its status, which a spec write keeps as stored. The evicting controllers put the
//! entries into their eviction's own write ([`stage_evictions`], one write of spec and status);
//! graceful eviction follows its spec write with a status write ([`update`]; a conflict
//! re-reads and tries again, as state preservation's condition does). The scheduler needs
//! none: it fills the new placement in its own write, and there opens the entry of an
//! eviction task that has none (a lost write).

use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::history::{
    failover_reason, record, FailoverHistoryItem, FAILOVER_HISTORY_LIMIT, GONE_WITHOUT_TASK,
};
use flotilla_api::kinds::ResourceType;
use flotilla_api::meta::Time;
use serde_json::Value;

use crate::controllers::shared::json_edit::set_path;

/// How many times a conflicting write is tried again on a fresh read.
const ATTEMPTS: usize = 3;

/// The binding's history as stored (empty when it has none or it does not decode).
pub fn history_of(binding: &Value) -> Vec<FailoverHistoryItem> {
    binding
        .pointer("/status/failoverHistory")
        .cloned()
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default()
}

/// `spec.clusters` names of the binding as it is.
pub fn placement_of(binding: &Value) -> Vec<String> {
    binding
        .pointer("/spec/clusters")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The placement the scheduler has chosen for this generation of the binding (its clusters
/// and `lastScheduledTime`), `None` while it has not seen the current generation.
pub fn scheduled_placement(binding: &Value) -> Option<(Vec<String>, Time)> {
    let generation = binding.pointer("/metadata/generation")?.as_i64()?;
    scheduled_placement_at(binding, generation)
}

/// As [`scheduled_placement`], for the binding at `generation` (the one a write of it leaves).
fn scheduled_placement_at(binding: &Value, generation: i64) -> Option<(Vec<String>, Time)> {
    let observed = binding
        .pointer("/status/schedulerObservedGeneration")
        .and_then(Value::as_i64)?;
    if observed != generation {
        return None;
    }
    let at: Time =
        serde_json::from_value(binding.pointer("/status/lastScheduledTime")?.clone()).ok()?;
    Some((placement_of(binding), at))
}

/// An eviction just written, as the history needs it.
#[derive(Clone, Debug)]
pub struct Evicted<'a> {
    /// The evicted cluster.
    pub cluster: &'a str,
    /// The eviction reason (`TaintUntolerated`, `ApplicationFailure`).
    pub reason: &'a str,
    /// The controller that evicted.
    pub producer: &'a str,
    /// Why, in words (used when no task carries it).
    pub message: String,
}

/// The entries for evictions written at `now`: `before` is the binding as read before the
/// write (its placement is the entries' `originalCluster` and `originalPlacement`), `after`
/// the spec written. An
/// eviction with a task copies the task; one without (graceful eviction off) removed the
/// cluster and its copy at once, so its entry is closed from the start.
pub fn entries_for(
    evicted: &[Evicted<'_>],
    before: &Value,
    after: &ResourceBindingSpec,
    now: DateTime<Utc>,
) -> Vec<FailoverHistoryItem> {
    let original = placement_of(before);
    let spec_before: ResourceBindingSpec = before
        .get("spec")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default();
    evicted
        .iter()
        .map(|e| {
            let mut entry = match after
                .graceful_eviction_tasks
                .iter()
                .find(|t| t.from_cluster == e.cluster)
            {
                Some(task) => FailoverHistoryItem::from_task(task, original.clone(), now),
                None => FailoverHistoryItem {
                    reason: failover_reason(e.reason).to_string(),
                    failover_time: Some(Time::new(now)),
                    from_cluster: e.cluster.to_string(),
                    original_cluster: original.clone(),
                    replicas: spec_before.workload_replicas_on(e.cluster).unwrap_or(0),
                    eviction_reason: e.reason.to_string(),
                    message: e.message.clone(),
                    producer: e.producer.to_string(),
                    old_copy_gone_time: Some(Time::new(now)),
                    old_copy_gone_reason: GONE_WITHOUT_TASK.to_string(),
                    ..FailoverHistoryItem::default()
                },
            };
            entry.original_placement = spec_before.clusters.clone();
            entry
        })
        .collect()
}

/// Adds `entries` to the history in the status of `updated` (the binding as read, `read`, with
/// the eviction applied to its spec), so that the eviction and its entries are one write
/// ([`Store::update_with_status`]): a reader never sees the one without the other, and a lost
/// write loses both (the controller decides again). An entry's new placement is filled when
/// the scheduler has already placed the generation this write leaves. Returns whether the
/// history changed.
pub fn stage_evictions(read: &Value, updated: &mut Value, entries: &[FailoverHistoryItem]) -> bool {
    if entries.is_empty() {
        return false;
    }
    let generation = crate::store::generation_after_update(read, updated);
    let scheduled = scheduled_placement_at(updated, generation);
    let mut history = history_of(updated);
    let mut changed = false;
    for e in entries {
        changed |= record(
            &mut history,
            e.clone(),
            scheduled.clone(),
            FAILOVER_HISTORY_LIMIT,
        );
    }
    if changed {
        set_path(
            updated,
            &["status", "failoverHistory"],
            serde_json::to_value(&history).unwrap_or_default(),
        );
    }
    changed
}

/// Applies `edit` to the history of `binding` (as last read or written) and writes the status
/// when it changed; on a conflict, re-reads and edits again. `edit` gets the binding as read
/// too and returns whether it changed the history. Returns the binding written, `None` when
/// nothing was (no change, or conflicts every time).
pub async fn update(
    store: &dyn Store,
    rt: &ResourceType,
    binding: &Value,
    edit: impl Fn(&mut Vec<FailoverHistoryItem>, &Value) -> bool,
) -> Result<Option<Value>, StoreError> {
    let mut current = std::borrow::Cow::Borrowed(binding);
    for attempt in 0..ATTEMPTS {
        let mut history = history_of(&current);
        if !edit(&mut history, &current) {
            return Ok(None);
        }
        // Only the status is written: no copy of the rest of the binding.
        let mut status = current
            .get("status")
            .cloned()
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
        set_path(
            &mut status,
            &["failoverHistory"],
            serde_json::to_value(&history).unwrap_or_default(),
        );
        match store
            .update_status(rt, crate::store::status_write(&current, status))
            .await
        {
            Ok(written) => return Ok(Some(written)),
            Err(StoreError::Conflict { .. }) if attempt + 1 < ATTEMPTS => {
                current = std::borrow::Cow::Owned(
                    crate::controllers::shared::binding_keys::reread(store, rt, &current).await?,
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_placement_counts_once_the_scheduler_saw_the_generation() {
        let b = |observed: i64| {
            json!({"metadata": {"generation": 3},
                "spec": {"clusters": [{"name": "m2", "replicas": 1}, {"name": "m3"}]},
                "status": {"schedulerObservedGeneration": observed,
                    "lastScheduledTime": "2023-11-14T22:13:20Z"}})
        };
        let (clusters, _) = scheduled_placement(&b(3)).unwrap();
        assert_eq!(clusters, vec!["m2", "m3"]);
        assert!(scheduled_placement(&b(2)).is_none());
        assert!(history_of(&b(3)).is_empty());
    }
}
