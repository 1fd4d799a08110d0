//! The cluster controller's taints (docs/semantics.md §4.1 and Part 1): a member whose Ready
//! condition is False gets `cluster.karmada.io/not-ready:NoSchedule`, Unknown gets
//! `cluster.karmada.io/unreachable:NoSchedule` (the one swapped for the other), at once; once the
//! condition has lasted `--failover-eviction-timeout` the matching NoExecute taint follows (for
//! Unknown measured from the last lease renewal, as Karmada's v1.4 did); Ready True removes
//! them. Other taints (a user's, or these keys with other effects) are kept; with automatic
//! NoExecute taints turned off, NoExecute taints are left entirely to users.

use crate::controllers::members::support::{describe, live_cluster, write_taints};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::settings::TaintConfig;
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::events::{EventRecorder, EventType};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use flotilla_api::cluster::{
    Cluster, Taint, TaintEffect, CLUSTER_LEASE_NAMESPACE, TAINT_CLUSTER_NOT_READY,
    TAINT_CLUSTER_UNREACHABLE,
};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{ConditionStatus, Time};
use prometheus::IntCounterVec;
use serde_json::Value;
use std::sync::Arc;

/// The taints a member should carry now, and when to look again (a NoExecute taint is due).
/// `lease_renewed` is the member's last lease renewal (pull members).
pub fn desired_taints(
    cluster: &Cluster,
    lease_renewed: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    cfg: TaintConfig,
) -> (Vec<Taint>, Option<Duration>) {
    let ready = cluster.ready_condition();
    let mut add: Vec<(&str, TaintEffect)> = Vec::new();
    let mut remove: Vec<(&str, TaintEffect)> = Vec::new();
    let mut due = None;
    let since = |from: Option<DateTime<Utc>>| from.unwrap_or(now);
    match ready.map(|c| c.status) {
        None => add.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoSchedule)),
        Some(ConditionStatus::False) => {
            add.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoSchedule));
            remove.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoSchedule));
            if cfg.automatic_no_execute {
                let start = since(
                    ready
                        .and_then(|c| c.last_transition_time.as_ref())
                        .map(Time::as_datetime),
                );
                if now >= start + cfg.eviction_timeout {
                    add.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoExecute));
                    remove.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoExecute));
                } else {
                    due = Some(start + cfg.eviction_timeout - now);
                }
            }
        }
        Some(ConditionStatus::Unknown) => {
            add.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoSchedule));
            remove.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoSchedule));
            if cfg.automatic_no_execute {
                let start = since(lease_renewed.or_else(|| {
                    ready
                        .and_then(|c| c.last_transition_time.as_ref())
                        .map(Time::as_datetime)
                }));
                if now >= start + cfg.eviction_timeout {
                    add.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoExecute));
                    remove.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoExecute));
                } else {
                    due = Some(start + cfg.eviction_timeout - now);
                }
            }
        }
        Some(ConditionStatus::True) => {
            remove.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoSchedule));
            remove.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoSchedule));
            if cfg.automatic_no_execute {
                remove.push((TAINT_CLUSTER_NOT_READY, TaintEffect::NoExecute));
                remove.push((TAINT_CLUSTER_UNREACHABLE, TaintEffect::NoExecute));
            }
        }
    }
    let mut taints: Vec<Taint> = cluster
        .spec
        .taints
        .iter()
        .filter(|t| !remove.iter().any(|(k, e)| t.key == *k && t.effect == *e))
        .cloned()
        .collect();
    for (key, effect) in add {
        if !taints.iter().any(|t| t.key == key && t.effect == effect) {
            let mut taint = Taint::new(key, effect);
            taint.time_added = Some(Time::new(now));
            taints.push(taint);
        }
    }
    (taints, due)
}

/// The controller that keeps members' taints as [`desired_taints`] says.
pub struct ClusterTaintsController {
    store: Arc<dyn Store>,
    clock: flotilla_support::clock::SharedClock,
    config: TaintConfig,
    events: EventRecorder,
    changes: IntCounterVec,
}

impl ClusterTaintsController {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: flotilla_support::clock::SharedClock,
        config: TaintConfig,
        events: EventRecorder,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let changes = registered_counter_vec(
            registry,
            "flotilla_cluster_taint_changes_total",
            "Taints the cluster controller added or removed, by taint and action.",
            &["taint", "action"],
        )?;
        Ok(Self {
            store,
            clock,
            config,
            events,
            changes,
        })
    }
}

/// A lease renewal concerns the cluster of the same name (leases in the cluster lease
/// namespace only).
pub fn lease_cluster(lease: &Value) -> Vec<String> {
    let in_cluster_ns = lease.lookup("/metadata/namespace").and_then(Value::as_str)
        == Some(CLUSTER_LEASE_NAMESPACE);
    lease
        .lookup("/metadata/name")
        .and_then(Value::as_str)
        .filter(|_| in_cluster_ns)
        .map(|n| vec![n.to_string()])
        .unwrap_or_default()
}

/// Reads a member's last lease renewal.
pub async fn lease_renew_time(
    store: &dyn Store,
    cluster: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    match store
        .get(
            &well_known::leases(),
            Some(CLUSTER_LEASE_NAMESPACE),
            cluster,
        )
        .await
    {
        Ok(lease) => Ok(renew_time_of(&lease)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A Lease's `spec.renewTime`.
pub fn renew_time_of(lease: &Value) -> Option<DateTime<Utc>> {
    lease
        .lookup("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

#[async_trait]
impl Reconciler for ClusterTaintsController {
    fn name(&self) -> &'static str {
        "cluster-taints"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some((raw, cluster)) = live_cluster(self.store.as_ref(), key).await? else {
            return Ok(Action::Done);
        };
        let lease = lease_renew_time(self.store.as_ref(), key).await?;
        let now = self.clock.now();
        let (taints, due) = desired_taints(&cluster, lease, now, self.config);
        let next = due.map_or(Action::Done, |d| {
            Action::RequeueAfter(
                d.to_std().unwrap_or_default() + std::time::Duration::from_millis(10),
            )
        });
        if taints == cluster.spec.taints {
            return Ok(next);
        }
        let added: Vec<&Taint> = taints
            .iter()
            .filter(|t| !cluster.spec.taints.iter().any(|o| o.same_identity(t)))
            .collect();
        let removed: Vec<&Taint> = cluster
            .spec
            .taints
            .iter()
            .filter(|o| !taints.iter().any(|t| t.same_identity(o)))
            .collect();
        write_taints(self.store.as_ref(), &raw, &taints).await?;
        for t in &added {
            self.changes
                .with_label_values(&[&describe(t), "added"])
                .inc();
            tracing::info!(cluster = key, taint = %describe(t), "taint added");
        }
        for t in &removed {
            self.changes
                .with_label_values(&[&describe(t), "removed"])
                .inc();
            tracing::info!(cluster = key, taint = %describe(t), "taint removed");
        }
        let summary = |list: &[&Taint]| {
            list.iter()
                .map(|t| describe(t))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !added.is_empty() {
            self.events
                .cluster(
                    &raw,
                    // Karmada's reason and type (docs/semantics.md §4.1).
                    EventType::Normal,
                    "TaintClusterSucceed",
                    &format!("added taints: {}", summary(&added)),
                )
                .await;
        }
        if !removed.is_empty() {
            self.events
                .cluster(
                    &raw,
                    EventType::Normal,
                    "UntaintClusterSucceed",
                    &format!("removed taints: {}", summary(&removed)),
                )
                .await;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use flotilla_api::cluster::{ClusterSpec, CONDITION_READY};
    use flotilla_api::meta::Condition;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).single().unwrap()
    }

    fn cluster(ready: Option<(ConditionStatus, i64)>, taints: &[(&str, TaintEffect)]) -> Cluster {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        if let Some((status, since)) = ready {
            let mut cond = Condition::new(CONDITION_READY, status, "r", "m");
            cond.last_transition_time = Some(Time::new(t(since)));
            c.status.conditions.push(cond);
        }
        c.spec.taints = taints
            .iter()
            .map(|(k, e)| {
                let mut taint = Taint::new(k, *e);
                taint.time_added = Some(Time::new(t(-1000)));
                taint
            })
            .collect();
        c
    }

    const CFG: TaintConfig = TaintConfig {
        eviction_timeout: std::time::Duration::from_secs(300),
        automatic_no_execute: true,
    };

    fn ids(taints: &[Taint]) -> Vec<String> {
        taints.iter().map(describe).collect()
    }

    /// (ready (status, since), lease renewed, existing taints, now, cfg, want taints, want due)
    type TaintRow = (
        Option<(ConditionStatus, i64)>,
        Option<i64>,
        Vec<(&'static str, TaintEffect)>,
        i64,
        TaintConfig,
        Vec<String>,
        Option<i64>,
    );

    #[test]
    fn taints_follow_the_ready_condition() {
        use ConditionStatus::{False, True, Unknown};
        use TaintEffect::{NoExecute, NoSchedule};
        const NR: &str = TAINT_CLUSTER_NOT_READY;
        const UR: &str = TAINT_CLUSTER_UNREACHABLE;
        // (ready (status, since), lease renewed, existing taints, now, cfg, want taints, want due secs)
        let manual = ("example.com/maintenance", NoSchedule);
        let off = TaintConfig {
            automatic_no_execute: false,
            ..CFG
        };
        let table: Vec<TaintRow> = vec![
            (
                None,
                None,
                vec![],
                0,
                CFG,
                vec![format!("{NR}:NoSchedule")],
                None,
            ),
            (
                Some((False, 0)),
                None,
                vec![],
                10,
                CFG,
                vec![format!("{NR}:NoSchedule")],
                Some(290),
            ),
            (
                Some((False, 0)),
                None,
                vec![(UR, NoSchedule)],
                10,
                CFG,
                vec![format!("{NR}:NoSchedule")],
                Some(290),
            ),
            (
                Some((False, 0)),
                None,
                vec![(NR, NoSchedule)],
                300,
                CFG,
                vec![format!("{NR}:NoSchedule"), format!("{NR}:NoExecute")],
                None,
            ),
            (
                Some((False, 0)),
                None,
                vec![(UR, NoExecute)],
                300,
                CFG,
                vec![format!("{NR}:NoSchedule"), format!("{NR}:NoExecute")],
                None,
            ),
            (
                Some((Unknown, 40)),
                Some(0),
                vec![(NR, NoSchedule)],
                50,
                CFG,
                vec![format!("{UR}:NoSchedule")],
                Some(250),
            ),
            (
                Some((Unknown, 40)),
                Some(0),
                vec![],
                300,
                CFG,
                vec![format!("{UR}:NoSchedule"), format!("{UR}:NoExecute")],
                None,
            ),
            (
                Some((Unknown, 40)),
                None,
                vec![],
                300,
                CFG,
                vec![format!("{UR}:NoSchedule")],
                Some(40),
            ),
            (
                Some((True, 0)),
                None,
                vec![(NR, NoSchedule), (NR, NoExecute), (UR, NoExecute), manual],
                10,
                CFG,
                vec!["example.com/maintenance:NoSchedule".into()],
                None,
            ),
            // A user's taints stay whatever the condition.
            (
                Some((False, 0)),
                None,
                vec![manual],
                1,
                CFG,
                vec![
                    "example.com/maintenance:NoSchedule".into(),
                    format!("{NR}:NoSchedule"),
                ],
                Some(299),
            ),
            // Automatic NoExecute off: none added, and a hand-set one survives Ready True.
            (
                Some((False, 0)),
                None,
                vec![],
                1000,
                off,
                vec![format!("{NR}:NoSchedule")],
                None,
            ),
            (
                Some((True, 0)),
                None,
                vec![(NR, NoExecute), (NR, NoSchedule)],
                1000,
                off,
                vec![format!("{NR}:NoExecute")],
                None,
            ),
        ];
        for (i, (ready, lease, existing, now, cfg, want, due)) in table.into_iter().enumerate() {
            let c = cluster(ready, &existing);
            let (got, got_due) = desired_taints(&c, lease.map(t), t(now), cfg);
            assert_eq!(ids(&got), want, "row {i}");
            assert_eq!(got_due.map(|d| d.num_seconds()), due, "row {i}");
            for taint in &got {
                let kept = c.spec.taints.iter().any(|o| o == taint);
                assert!(
                    kept || taint.time_added == Some(Time::new(t(now))),
                    "row {i}: new taints carry timeAdded"
                );
            }
        }
    }
}
