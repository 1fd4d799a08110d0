//! A binding's failover history (`status.failoverHistory`): one entry per cluster a binding was
//! evicted from, filled in step by step by the controllers that decide each step — the
//! eviction (taint manager, application failover), the new placement (scheduler), the end of
//! the eviction task with the old copy (graceful eviction). Bounded to the newest
//! [`FAILOVER_HISTORY_LIMIT`] entries so that a flapping workload cannot grow its binding.
//!
//! Field names follow Karmada's alpha `FailoverHistoryItem` (`reason`, `failoverTime`,
//! `fromCluster`, `originalCluster`, `targetCluster`, `preservedLabelState`); the rest are
//! Flotilla's. Pure functions only: the controllers call them and write the result.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::binding::{
    GracefulEvictionTask, EVICTION_REASON_APPLICATION_FAILURE, EVICTION_REASON_FAILBACK,
};
use crate::meta::Time;
use crate::policy::PurgeMode;

/// How many entries a binding keeps (the oldest go first).
pub const FAILOVER_HISTORY_LIMIT: usize = 10;
/// Karmada's failover reason for a cluster failure (any eviction but an application one).
pub const FAILOVER_REASON_CLUSTER: &str = "ClusterFailover";
/// Karmada's failover reason for an application failure.
pub const FAILOVER_REASON_APPLICATION: &str = "ApplicationFailover";
/// Flotilla's failover reason for a move back to a recovered cluster (failback): the entry's
/// `fromCluster` is the cluster the workload left, `targetCluster` the placement it went back to.
pub const FAILOVER_REASON_FAILBACK: &str = "Failback";
/// `oldCopyGoneReason` of an eviction without a task (graceful eviction off): the old copy
/// went with the eviction.
pub const GONE_WITHOUT_TASK: &str = "EvictedWithoutTask";

/// One failover of one binding from one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailoverHistoryItem {
    /// `ClusterFailover` or `ApplicationFailover` (Karmada).
    pub reason: String,
    /// When the eviction was decided and written (Karmada).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_time: Option<Time>,
    /// The evicted cluster (Karmada).
    pub from_cluster: String,
    /// The clusters of the placement before the eviction (Karmada).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub original_cluster: Vec<String>,
    /// The placement before the eviction with each cluster's replicas (Flotilla; what a
    /// failback restores). Empty in an entry opened from a task alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub original_placement: Vec<crate::binding::TargetCluster>,
    /// The placement the scheduler chose after it (Karmada).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub target_cluster: Vec<String>,
    /// State carried to the new cluster as labels (Karmada).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved_label_state: BTreeMap<String, String>,
    /// Replicas the evicted cluster had (0 for non-workloads).
    #[serde(skip_serializing_if = "is_zero")]
    pub replicas: i32,
    /// The eviction task's reason (`TaintUntolerated`, `ApplicationFailure`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub eviction_reason: String,
    /// The eviction's message (the same as the `EvictWorkloadFromClusterSucceed` Event's cause).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The controller that evicted.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub producer: String,
    /// The task's purge mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// When the scheduler chose `targetCluster`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescheduled_time: Option<Time>,
    /// When every cluster of the new placement ran the workload Healthy (seen by the graceful
    /// eviction controller while the task lived; empty when the task ended otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy_time: Option<Time>,
    /// When the eviction task ended and with it the old copy (its Work is then deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_copy_gone_time: Option<Time>,
    /// Why the task ended: the Event reason (`EvictionTaskDoneHealthy`,
    /// `EvictionTaskTimedOut`, `EvictionTaskReleased`) or [`GONE_WITHOUT_TASK`].
    #[serde(skip_serializing_if = "String::is_empty")]
    pub old_copy_gone_reason: String,
    /// When the workload moved back to `fromCluster` after it recovered (failback; the move
    /// has its own `Failback` entry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_back_time: Option<Time>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Karmada's failover reason for an eviction task's reason.
pub fn failover_reason(eviction_reason: &str) -> &'static str {
    match eviction_reason {
        EVICTION_REASON_APPLICATION_FAILURE => FAILOVER_REASON_APPLICATION,
        EVICTION_REASON_FAILBACK => FAILOVER_REASON_FAILBACK,
        _ => FAILOVER_REASON_CLUSTER,
    }
}

impl FailoverHistoryItem {
    /// The entry for an eviction that wrote `task`; `original` is the placement before it.
    pub fn from_task(
        task: &GracefulEvictionTask,
        original: Vec<String>,
        at: DateTime<Utc>,
    ) -> Self {
        FailoverHistoryItem {
            reason: failover_reason(&task.reason).to_string(),
            failover_time: Some(Time::new(at)),
            from_cluster: task.from_cluster.clone(),
            original_cluster: original,
            preserved_label_state: task.preserved_label_state.clone(),
            replicas: task.replicas.unwrap_or(0),
            eviction_reason: task.reason.clone(),
            message: task.message.clone(),
            producer: task.producer.clone(),
            purge_mode: task.purge_mode,
            ..FailoverHistoryItem::default()
        }
    }

    /// Whether the old copy may still exist (the task has not ended).
    pub fn is_open(&self) -> bool {
        self.old_copy_gone_time.is_none()
    }
}

/// Appends `item`, keeping the newest `limit` entries. An entry for the same cluster at the
/// same time is not added twice (a retried write, or one the scheduler opened from the task
/// first: that one only gains the placement before, which the task does not carry).
/// `scheduled` is the placement the scheduler has already chosen for the binding as read
/// (its clusters and time) when it has seen the eviction: the entry then starts with it.
/// Returns whether the history changed.
pub fn record(
    history: &mut Vec<FailoverHistoryItem>,
    mut item: FailoverHistoryItem,
    scheduled: Option<(Vec<String>, Time)>,
    limit: usize,
) -> bool {
    if let Some(same) = history
        .iter_mut()
        .find(|h| h.from_cluster == item.from_cluster && h.failover_time == item.failover_time)
    {
        if same.original_cluster.is_empty() && !item.original_cluster.is_empty() {
            same.original_cluster = item.original_cluster;
            return true;
        }
        return false;
    }
    if let Some((clusters, at)) = scheduled.filter(|(c, _)| !c.is_empty()) {
        if item.target_cluster.is_empty() {
            item.target_cluster = clusters;
            item.rescheduled_time = Some(at);
        }
    }
    history.push(item);
    bound(history, limit);
    true
}

/// Opens an entry for each stamped eviction task of the binding that has none — an eviction
/// whose history write was lost (the server stopped between the spec write and it) or a task
/// a user wrote — from the task, at its `creationTimestamp`, with `clustersBeforeFailover` as
/// the placement before. A cluster with an open entry already has its entry. Returns whether
/// the history changed.
pub fn backfill(
    history: &mut Vec<FailoverHistoryItem>,
    tasks: &[GracefulEvictionTask],
    limit: usize,
) -> bool {
    let mut changed = false;
    for task in tasks {
        let Some(created) = task.creation_timestamp else {
            continue;
        };
        if history.iter().any(|h| {
            h.from_cluster == task.from_cluster && (h.is_open() || h.failover_time == Some(created))
        }) {
            continue;
        }
        history.push(FailoverHistoryItem::from_task(
            task,
            task.clusters_before_failover.clone(),
            created.as_datetime(),
        ));
        changed = true;
    }
    if changed {
        history.sort_by_key(|h| h.failover_time);
        bound(history, limit);
    }
    changed
}

/// The cluster failovers a failback may undo: for each cluster, its newest entry when that is a
/// [`FAILOVER_REASON_CLUSTER`] entry whose old copy is gone (the failover is over) and that
/// was not failed back yet. Oldest failover first.
pub fn awaiting_failback(history: &[FailoverHistoryItem]) -> Vec<&FailoverHistoryItem> {
    let mut newest: BTreeMap<&str, &FailoverHistoryItem> = BTreeMap::new();
    for h in history {
        newest.insert(h.from_cluster.as_str(), h);
    }
    let mut out: Vec<&FailoverHistoryItem> = newest
        .into_values()
        .filter(|h| {
            h.reason == FAILOVER_REASON_CLUSTER && !h.is_open() && h.failed_back_time.is_none()
        })
        .collect();
    out.sort_by_key(|h| h.failover_time);
    out
}

/// The workload moved back to `cluster` at `at`: its newest entry gets `failedBackTime`.
/// Returns whether the history changed.
pub fn note_failed_back(history: &mut [FailoverHistoryItem], cluster: &str, at: Time) -> bool {
    match history.iter_mut().rev().find(|h| h.from_cluster == cluster) {
        Some(h) if h.failed_back_time.is_none() => {
            h.failed_back_time = Some(at);
            true
        }
        _ => false,
    }
}

/// Drops the oldest entries beyond `limit`.
pub fn bound(history: &mut Vec<FailoverHistoryItem>, limit: usize) {
    if history.len() > limit {
        let excess = history.len() - limit;
        history.drain(..excess);
    }
}

/// The scheduler chose `clusters` at `at`: open entries without a new placement get it. An
/// empty result (nothing fits) is not a placement; the entries wait for one. Returns whether
/// the history changed.
pub fn note_placement(history: &mut [FailoverHistoryItem], clusters: &[String], at: Time) -> bool {
    if clusters.is_empty() {
        return false;
    }
    let mut changed = false;
    for h in history
        .iter_mut()
        .filter(|h| h.is_open() && h.target_cluster.is_empty())
    {
        h.target_cluster = clusters.to_vec();
        h.rescheduled_time = Some(at);
        changed = true;
    }
    changed
}

/// How an eviction task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskEnd<'a> {
    /// The evicted cluster of the task.
    pub from_cluster: &'a str,
    /// The Event reason of the end.
    pub reason: &'a str,
    /// Whether it ended because the new placement was Healthy.
    pub healthy: bool,
}

/// The task of `end.from_cluster` ended at `at` with the binding placed on `placement`: the
/// newest open entry for that cluster is closed (and gets the placement if the scheduler's
/// write did not reach it). Returns whether the history changed.
pub fn note_task_end(
    history: &mut [FailoverHistoryItem],
    end: TaskEnd<'_>,
    placement: &[String],
    at: Time,
) -> bool {
    let Some(h) = history
        .iter_mut()
        .rev()
        .find(|h| h.is_open() && h.from_cluster == end.from_cluster)
    else {
        return false;
    };
    if end.healthy && h.healthy_time.is_none() {
        h.healthy_time = Some(at);
    }
    if h.target_cluster.is_empty() && !placement.is_empty() {
        h.target_cluster = placement.to_vec();
    }
    h.old_copy_gone_time = Some(at);
    h.old_copy_gone_reason = end.reason.to_string();
    true
}

/// The new placement runs Healthy at `at`: open entries of the clusters still being left
/// (`alive`, their tasks kept) get `healthyTime` once. Returns whether the history changed.
pub fn note_healthy(history: &mut [FailoverHistoryItem], alive: &[&str], at: Time) -> bool {
    let mut changed = false;
    for h in history.iter_mut().filter(|h| {
        h.is_open() && h.healthy_time.is_none() && alive.contains(&h.from_cluster.as_str())
    }) {
        h.healthy_time = Some(at);
        changed = true;
    }
    changed
}

/// One entry of the fleet-wide list: the binding it belongs to and the entry.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetEntry {
    /// `ResourceBinding` or `ClusterResourceBinding`.
    pub binding_kind: String,
    /// The binding's namespace (empty for a ClusterResourceBinding).
    pub namespace: String,
    /// The binding's name.
    pub binding: String,
    /// The entry.
    pub item: FailoverHistoryItem,
}

impl FleetEntry {
    /// A stable object name, unique in the fleet:
    /// `[<namespace>.]<binding>.<fromCluster>.<failover unix seconds>`.
    pub fn name(&self) -> String {
        let secs = self
            .item
            .failover_time
            .as_ref()
            .map_or(0, |t| t.as_datetime().timestamp());
        let ns = if self.namespace.is_empty() {
            String::new()
        } else {
            format!("{}.", self.namespace)
        };
        format!("{ns}{}.{}.{secs}", self.binding, self.item.from_cluster)
    }
}

/// The newest `limit` entries of the fleet (`None`: all), newest first; ties by name so
/// the order is stable.
pub fn recent(mut entries: Vec<FleetEntry>, limit: Option<usize>) -> Vec<FleetEntry> {
    entries.sort_by(|a, b| {
        b.item
            .failover_time
            .as_ref()
            .map(Time::as_datetime)
            .cmp(&a.item.failover_time.as_ref().map(Time::as_datetime))
            .then_with(|| a.name().cmp(&b.name()))
    });
    if let Some(n) = limit {
        entries.truncate(n);
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn entry(cluster: &str, secs: i64) -> FailoverHistoryItem {
        FailoverHistoryItem {
            reason: FAILOVER_REASON_CLUSTER.into(),
            failover_time: Some(Time::new(at(secs))),
            from_cluster: cluster.into(),
            ..FailoverHistoryItem::default()
        }
    }

    fn names(v: &[String]) -> Vec<String> {
        v.to_vec()
    }

    #[test]
    fn failback_waits_for_the_newest_closed_cluster_failover_of_each_cluster() {
        let closed = |cluster: &str, secs: i64, reason: &str| FailoverHistoryItem {
            reason: reason.into(),
            old_copy_gone_time: Some(Time::new(at(secs + 1))),
            ..entry(cluster, secs)
        };
        let mut history = vec![
            closed("m1", 0, FAILOVER_REASON_CLUSTER),
            closed("m2", 5, FAILOVER_REASON_APPLICATION),
            entry("m3", 6),
            closed("m4", 2, FAILOVER_REASON_CLUSTER),
            closed("m1", 8, FAILOVER_REASON_CLUSTER),
        ];
        let froms = |h: &[FailoverHistoryItem]| -> Vec<(String, i64)> {
            awaiting_failback(h)
                .iter()
                .map(|e| {
                    let t = e.failover_time.map(|t| t.as_datetime().timestamp());
                    (e.from_cluster.clone(), t.unwrap_or(0) - 1_700_000_000)
                })
                .collect()
        };
        // m2 left for an application failure, m3's failover is not over; m1's newest counts.
        assert_eq!(froms(&history), vec![("m4".into(), 2), ("m1".into(), 8)]);
        assert!(note_failed_back(&mut history, "m1", Time::new(at(20))));
        assert!(!note_failed_back(&mut history, "m1", Time::new(at(21))));
        assert_eq!(history[4].failed_back_time, Some(Time::new(at(20))));
        assert_eq!(history[0].failed_back_time, None);
        assert_eq!(froms(&history), vec![("m4".into(), 2)]);
        // A failover after the failback starts again.
        history.push(closed("m1", 30, FAILOVER_REASON_CLUSTER));
        assert_eq!(froms(&history), vec![("m4".into(), 2), ("m1".into(), 30)]);
        assert_eq!(failover_reason("Failback"), FAILOVER_REASON_FAILBACK);
    }

    #[test]
    fn from_task_copies_the_eviction() {
        let task = GracefulEvictionTask {
            from_cluster: "member1".into(),
            purge_mode: Some(PurgeMode::Immediately),
            replicas: Some(3),
            reason: EVICTION_REASON_APPLICATION_FAILURE.into(),
            message: "unhealthy for 60s".into(),
            producer: "resource-binding-application-failover-controller".into(),
            preserved_label_state: BTreeMap::from([("job".into(), "42".into())]),
            ..GracefulEvictionTask::default()
        };
        let e =
            FailoverHistoryItem::from_task(&task, vec!["member1".into(), "member2".into()], at(5));
        assert_eq!(e.reason, FAILOVER_REASON_APPLICATION);
        assert_eq!(e.eviction_reason, "ApplicationFailure");
        assert_eq!(e.replicas, 3);
        assert_eq!(e.failover_time, Some(Time::new(at(5))));
        assert_eq!(e.original_cluster, vec!["member1", "member2"]);
        assert_eq!(e.preserved_label_state["job"], "42");
        assert!(e.is_open());
        let v = serde_json::to_value(&e).unwrap();
        for field in [
            "reason",
            "failoverTime",
            "fromCluster",
            "originalCluster",
            "preservedLabelState",
            "replicas",
            "evictionReason",
            "producer",
            "purgeMode",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert!(v.get("targetCluster").is_none(), "{v}");
    }

    #[test]
    fn record_table() {
        // (name, history before (cluster, secs), new (cluster, secs), scheduled, limit,
        //  changed, clusters after, target of the new entry)
        type Case = (
            &'static str,
            Vec<(&'static str, i64)>,
            (&'static str, i64),
            Option<Vec<String>>,
            usize,
            bool,
            Vec<&'static str>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "first",
                vec![],
                ("m1", 0),
                None,
                10,
                true,
                vec!["m1"],
                vec![],
            ),
            (
                "a retried write adds nothing",
                vec![("m1", 0)],
                ("m1", 0),
                None,
                10,
                false,
                vec!["m1"],
                vec![],
            ),
            (
                "the same cluster later is a new failover",
                vec![("m1", 0)],
                ("m1", 9),
                None,
                10,
                true,
                vec!["m1", "m1"],
                vec![],
            ),
            (
                "over the bound the oldest goes",
                vec![("m1", 0), ("m2", 1), ("m3", 2)],
                ("m4", 3),
                None,
                3,
                true,
                vec!["m2", "m3", "m4"],
                vec![],
            ),
            (
                "already scheduled: starts with the placement",
                vec![],
                ("m1", 0),
                Some(vec!["m2".to_string()]),
                10,
                true,
                vec!["m1"],
                vec!["m2"],
            ),
            (
                "an empty placement is none",
                vec![],
                ("m1", 0),
                Some(vec![]),
                10,
                true,
                vec!["m1"],
                vec![],
            ),
        ];
        for (name, before, new, scheduled, limit, changed, after, target) in cases {
            let mut h: Vec<_> = before.iter().map(|(c, s)| entry(c, *s)).collect();
            let got = record(
                &mut h,
                entry(new.0, new.1),
                scheduled.map(|c| (c, Time::new(at(100)))),
                limit,
            );
            assert_eq!(got, changed, "{name}");
            let clusters: Vec<&str> = h.iter().map(|e| e.from_cluster.as_str()).collect();
            assert_eq!(clusters, after, "{name}");
            let last = h.last().unwrap();
            if changed {
                assert_eq!(names(&last.target_cluster), target, "{name}");
                assert_eq!(
                    last.rescheduled_time.is_some(),
                    !target.is_empty(),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn backfill_opens_entries_only_for_tasks_without_one() {
        let task = |cluster: &str, secs: Option<i64>| GracefulEvictionTask {
            from_cluster: cluster.into(),
            reason: "TaintUntolerated".into(),
            producer: "TaintManager".into(),
            creation_timestamp: secs.map(|s| Time::new(at(s))),
            clusters_before_failover: vec!["m1".into(), "m2".into()],
            ..GracefulEvictionTask::default()
        };
        let mut closed_m3 = entry("m3", 1);
        closed_m3.old_copy_gone_time = Some(Time::new(at(2)));
        let mut h = vec![entry("m1", 5), closed_m3];
        let tasks = [
            task("m1", Some(9)), // m1 has an open entry: it is this task's
            task("m2", None),    // not stamped yet
            task("m3", Some(4)), // m3's entry is closed and older: a new eviction
            task("m4", Some(3)), // lost write
        ];
        assert!(backfill(&mut h, &tasks, 10));
        let got: Vec<(&str, i64)> = h
            .iter()
            .map(|e| {
                (
                    e.from_cluster.as_str(),
                    e.failover_time.unwrap().as_datetime().timestamp() - 1_700_000_000,
                )
            })
            .collect();
        assert_eq!(got, vec![("m3", 1), ("m4", 3), ("m3", 4), ("m1", 5)]);
        assert_eq!(h[1].original_cluster, vec!["m1", "m2"]);
        assert!(!backfill(&mut h, &tasks, 10), "once");
        // The producer's own write, arriving after, adds only the placement before.
        let mut late = entry("m4", 3);
        late.original_cluster = vec!["m4".into(), "m2".into()];
        h[1].original_cluster.clear();
        assert!(record(&mut h, late, None, 10));
        assert_eq!(h.len(), 4);
        assert_eq!(h[1].original_cluster, vec!["m4", "m2"]);
    }

    #[test]
    fn placement_fills_open_entries_once() {
        let mut closed = entry("m0", 0);
        closed.old_copy_gone_time = Some(Time::new(at(1)));
        let mut h = vec![closed, entry("m1", 2)];
        assert!(!note_placement(&mut h, &[], Time::new(at(3))));
        assert!(note_placement(&mut h, &["m2".into()], Time::new(at(3))));
        assert!(h[0].target_cluster.is_empty(), "a closed entry is left");
        assert_eq!(h[1].target_cluster, vec!["m2"]);
        // A later placement does not rewrite the one that followed the eviction.
        assert!(!note_placement(&mut h, &["m3".into()], Time::new(at(4))));
        assert_eq!(h[1].rescheduled_time, Some(Time::new(at(3))));
    }

    #[test]
    fn task_end_table() {
        // (name, reason, healthy, entry target before, changed, healthy set, target after)
        let cases = [
            (
                "healthy",
                "EvictionTaskDoneHealthy",
                true,
                vec!["m2"],
                true,
                true,
                vec!["m2"],
            ),
            (
                "timed out",
                "EvictionTaskTimedOut",
                false,
                vec!["m2"],
                true,
                false,
                vec!["m2"],
            ),
            (
                "placement missed by the scheduler's write",
                "EvictionTaskDoneHealthy",
                true,
                vec![],
                true,
                true,
                vec!["m3"],
            ),
        ];
        for (name, reason, healthy, target, changed, healthy_set, after) in cases {
            let mut e = entry("m1", 0);
            e.target_cluster = target.iter().map(|s| s.to_string()).collect();
            let mut h = vec![entry("m1", -50), e];
            h[0].old_copy_gone_time = Some(Time::new(at(-40)));
            let end = TaskEnd {
                from_cluster: "m1",
                reason,
                healthy,
            };
            let got = note_task_end(&mut h, end, &["m3".into()], Time::new(at(30)));
            assert_eq!(got, changed, "{name}");
            assert_eq!(h[1].old_copy_gone_reason, reason, "{name}");
            assert_eq!(h[1].old_copy_gone_time, Some(Time::new(at(30))), "{name}");
            assert_eq!(h[1].healthy_time.is_some(), healthy_set, "{name}");
            assert_eq!(h[1].target_cluster, after, "{name}");
            assert_eq!(
                h[0].old_copy_gone_time,
                Some(Time::new(at(-40))),
                "{name}: the closed entry is left"
            );
        }
        let mut h = vec![entry("m1", 0)];
        let other = TaskEnd {
            from_cluster: "m9",
            reason: "EvictionTaskTimedOut",
            healthy: false,
        };
        assert!(!note_task_end(&mut h, other, &[], Time::new(at(1))));
    }

    #[test]
    fn healthy_is_noted_once_on_open_entries_of_kept_tasks() {
        let mut gone = entry("m0", 0);
        gone.old_copy_gone_time = Some(Time::new(at(1)));
        let mut h = vec![gone, entry("m1", 2), entry("m2", 3)];
        assert!(note_healthy(&mut h, &["m0", "m1"], Time::new(at(5))));
        assert!(h[0].healthy_time.is_none(), "closed");
        assert_eq!(h[1].healthy_time, Some(Time::new(at(5))));
        assert!(h[2].healthy_time.is_none(), "its task is not kept");
        assert!(!note_healthy(&mut h, &["m1"], Time::new(at(9))), "once");
    }

    #[test]
    fn the_fleet_list_is_newest_first_and_limited() {
        let fe = |ns: &str, b: &str, c: &str, secs: i64| FleetEntry {
            binding_kind: "ResourceBinding".into(),
            namespace: ns.into(),
            binding: b.into(),
            item: entry(c, secs),
        };
        let all = vec![
            fe("a", "x", "m1", 1),
            fe("b", "y", "m2", 3),
            fe("a", "z", "m1", 2),
            fe("a", "w", "m3", 3),
        ];
        let got: Vec<String> = recent(all.clone(), None)
            .iter()
            .map(FleetEntry::name)
            .collect();
        assert_eq!(
            got,
            vec![
                "a.w.m3.1700000003",
                "b.y.m2.1700000003",
                "a.z.m1.1700000002",
                "a.x.m1.1700000001"
            ]
        );
        assert_eq!(recent(all, Some(1)).len(), 1);
    }
}
