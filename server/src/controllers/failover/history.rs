//! Writes a binding's failover history (`status.failoverHistory`, see
//! [`flotilla_api::history`]) for the controllers that decide a failover step. The taint
//! manager, application failover, failback and graceful eviction write the binding's spec; the
//! history lives in its status, which a spec write keeps as stored. The deciders that evict or
//! move a workload describe what their write does to the history as [`HistoryStep`]s (an
//! eviction's entries from [`entries_for`]) and the one effect path
//! (`controllers/failover/effects.rs`) stages them into that same write ([`stage`], one write
//! of spec and status). Graceful eviction follows its spec write with a status write
//! ([`update`]; a conflict re-reads and tries again, as state preservation's condition does).
//! The scheduler needs none: it fills the new placement in its own write, and there opens the
//! entry of an eviction task that has none (a lost write).

use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::history::{
    failover_reason, note_failed_back, note_task_end, record, FailoverHistoryItem, TaskEnd,
    FAILOVER_HISTORY_LIMIT, GONE_WITHOUT_TASK,
};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use flotilla_api::meta::Time;
use serde_json::Value;

use crate::controllers::shared::json_edit::set_path;

/// How many times a conflicting write is tried again on a fresh read.
const ATTEMPTS: usize = 3;

/// The binding's history as stored (empty when it has none or it does not decode).
pub fn history_of(binding: &Value) -> Vec<FailoverHistoryItem> {
    binding
        .lookup("/status/failoverHistory")
        .cloned()
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default()
}

/// `spec.clusters` names of the binding as it is.
pub fn placement_of(binding: &Value) -> Vec<String> {
    binding
        .lookup("/spec/clusters")
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
    let generation = binding.lookup("/metadata/generation")?.as_i64()?;
    scheduled_placement_at(binding, generation)
}

/// As [`scheduled_placement`], for the binding at `generation` (the one a write of it leaves).
fn scheduled_placement_at(binding: &Value, generation: i64) -> Option<(Vec<String>, Time)> {
    let observed = binding
        .lookup("/status/schedulerObservedGeneration")
        .and_then(Value::as_i64)?;
    if observed != generation {
        return None;
    }
    let at: Time =
        serde_json::from_value(binding.lookup("/status/lastScheduledTime")?.clone()).ok()?;
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

/// One change a decider's write makes to the binding's history.
#[derive(Clone, Debug, PartialEq)]
pub enum HistoryStep {
    /// Opens an entry: an eviction, or a cluster giving replicas back in a failback. It
    /// starts with the new placement when the scheduler has already placed the generation the
    /// write leaves (and the entry has none of its own).
    Open(Box<FailoverHistoryItem>),
    /// The workload moved back to `cluster` at `at`: its newest entry gets `failedBackTime`.
    FailedBack {
        /// The cluster moved back to.
        cluster: String,
        /// When.
        at: Time,
    },
    /// The task of `cluster` ended at `at` for `reason`, the new placement not Healthy (a
    /// failback undone): the newest open entry of that cluster closes.
    TaskEnded {
        /// The task's cluster.
        cluster: String,
        /// Why it ended (the Event reason, the entry's `oldCopyGoneReason`).
        reason: String,
        /// When.
        at: Time,
    },
}

/// Stages `steps`, in order, into the history in the status of `updated` (the binding as
/// read, `read`, with the decision applied to it), so that the decision and its history are
/// one write ([`Store::update_with_status`]): a reader never sees the one without the other,
/// and a lost write loses both (the controller decides again). This is the one way the
/// deciders (taint manager, application failover, failback) write history, through
/// `effects::carry_out`. Returns whether the history changed.
pub fn stage(read: &Value, updated: &mut Value, steps: &[HistoryStep]) -> bool {
    if steps.is_empty() {
        return false;
    }
    let mut history = history_of(updated);
    // The placement the scheduler chose for the generation this write leaves, if any.
    let mut scheduled = None;
    let mut changed = false;
    for step in steps {
        changed |= match step {
            HistoryStep::Open(entry) => {
                let scheduled = scheduled.get_or_insert_with(|| {
                    let generation = crate::store::generation_after_update(read, updated);
                    scheduled_placement_at(updated, generation)
                });
                record(
                    &mut history,
                    FailoverHistoryItem::clone(entry),
                    scheduled.clone(),
                    FAILOVER_HISTORY_LIMIT,
                )
            }
            HistoryStep::FailedBack { cluster, at } => note_failed_back(&mut history, cluster, *at),
            HistoryStep::TaskEnded {
                cluster,
                reason,
                at,
            } => {
                let end = TaskEnd {
                    from_cluster: cluster,
                    reason,
                    healthy: false,
                };
                note_task_end(&mut history, end, &[], *at)
            }
        };
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

    /// Each step of a decider's write, staged into the binding it writes.
    #[test]
    #[allow(clippy::type_complexity)]
    fn stage_applies_each_step_in_order() {
        let t = |secs: i64| {
            Time::new(chrono::DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(secs))
        };
        let entry = |cluster: &str, at: i64| FailoverHistoryItem {
            reason: "ClusterFailover".into(),
            failover_time: Some(t(at)),
            from_cluster: cluster.into(),
            original_cluster: vec!["m1".into(), "m2".into()],
            ..FailoverHistoryItem::default()
        };
        // A binding the scheduler placed at generation 3, with a finished failover from m1
        // and an open one from m3.
        let read = json!({"metadata": {"generation": 3},
            "spec": {"clusters": [{"name": "m2", "replicas": 1}]},
            "status": {"schedulerObservedGeneration": 3, "lastScheduledTime": "1970-01-01T00:00:05Z",
                "failoverHistory": [
                    {"reason": "ClusterFailover", "failoverTime": "1970-01-01T00:00:01Z", "fromCluster": "m1",
                     "oldCopyGoneTime": "1970-01-01T00:00:02Z", "oldCopyGoneReason": "EvictionTaskDoneHealthy"},
                    {"reason": "ClusterFailover", "failoverTime": "1970-01-01T00:00:03Z", "fromCluster": "m3"}]}});
        let mut moved = read.clone();
        moved["spec"]["clusters"] = json!([{"name": "m1", "replicas": 1}]);
        // (what, the binding written, steps, history changed, the entries after:
        //  (fromCluster, targetCluster, failedBackTime, oldCopyGoneReason))
        let cases: Vec<(
            &str,
            &Value,
            Vec<HistoryStep>,
            bool,
            Vec<(&str, Value, Value, Value)>,
        )> = vec![
            ("no step: nothing staged", &read, vec![], false, vec![]),
            (
                "an entry opened by a write that leaves the scheduled generation starts placed",
                &read,
                vec![HistoryStep::Open(Box::new(entry("m2", 10)))],
                true,
                vec![("m2", json!(["m2"]), Value::Null, Value::Null)],
            ),
            (
                "an entry opened by a spec change waits for the scheduler",
                &moved,
                vec![HistoryStep::Open(Box::new(entry("m2", 10)))],
                true,
                vec![("m2", Value::Null, Value::Null, Value::Null)],
            ),
            (
                "the same entry twice (a retried write) is recorded once",
                &moved,
                vec![
                    HistoryStep::Open(Box::new(entry("m2", 10))),
                    HistoryStep::Open(Box::new(entry("m2", 10))),
                ],
                true,
                vec![("m2", Value::Null, Value::Null, Value::Null)],
            ),
            (
                "failed back: the cluster's newest entry gets the time",
                &moved,
                vec![HistoryStep::FailedBack {
                    cluster: "m1".into(),
                    at: t(10),
                }],
                true,
                vec![],
            ),
            (
                "a task ended: the cluster's open entry closes",
                &moved,
                vec![HistoryStep::TaskEnded {
                    cluster: "m3".into(),
                    reason: "FailbackAborted".into(),
                    at: t(10),
                }],
                true,
                vec![],
            ),
            (
                "a task without an open entry changes nothing",
                &moved,
                vec![HistoryStep::TaskEnded {
                    cluster: "m9".into(),
                    reason: "FailbackAborted".into(),
                    at: t(10),
                }],
                false,
                vec![],
            ),
        ];
        for (what, updated, steps, changed, opened) in cases {
            let mut written = updated.clone();
            assert_eq!(stage(&read, &mut written, &steps), changed, "{what}");
            if !changed {
                assert_eq!(&written, updated, "{what}");
                continue;
            }
            let h = history_of(&written);
            let new: Vec<(&str, Value, Value, Value)> = h[2..]
                .iter()
                .map(|e| {
                    let v = serde_json::to_value(e).unwrap_or_default();
                    (
                        e.from_cluster.as_str(),
                        v["targetCluster"].clone(),
                        v["failedBackTime"].clone(),
                        v["oldCopyGoneReason"].clone(),
                    )
                })
                .collect();
            assert_eq!(new, opened, "{what}");
            match &steps[0] {
                HistoryStep::FailedBack { .. } => {
                    assert_eq!(h[0].failed_back_time, Some(t(10)), "{what}");
                }
                HistoryStep::TaskEnded { reason, .. } => {
                    assert_eq!(h[1].old_copy_gone_reason, *reason, "{what}");
                    assert_eq!(h[1].old_copy_gone_time, Some(t(10)), "{what}");
                    assert!(h[1].healthy_time.is_none(), "{what}");
                }
                HistoryStep::Open(_) => {}
            }
        }
    }
}
