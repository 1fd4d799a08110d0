//! Taint manager: decides when a binding must leave a cluster that carries a `NoExecute`
//! taint. For each cluster in a binding's `spec.clusters`, the binding's
//! `placement.clusterTolerations` are matched against the cluster's NoExecute taints (Karmada's
//! rules, `flotilla_api::taint_toleration`): an untolerated taint evicts at once; tolerated
//! taints evict once the earliest `timeAdded + tolerationSeconds` has passed (absent seconds
//! tolerate for ever, zero or negative evict at once), and until then the binding is looked at
//! again when that time comes.
//!
//! An eviction is an eviction task (producer `TaintManager`, reason `TaintUntolerated`) built
//! from the policy's `failover.cluster` (purge mode, grace period, state preservation) and
//! the cluster leaves `spec.clusters`, so the ordinary scheduler places the evicted replicas
//! elsewhere. With graceful eviction switched off the cluster is removed without a task, as in
//! the failover guide. Everything here is a pure function of (binding, clusters' taints,
//! settings, now): [`decide`] says what to evict, [`outcome`] what is written and told; the
//! controller only feeds them and hands the outcome to the failover wing's one effect path
//! ([`Effects::carry_out`]), which application failover and failback use too.

use crate::controllers::failover::brake::{
    earliest, hold_back, report_stops, Cause, EvictionBrake, Hold,
};
use crate::controllers::failover::effects::{evict, Effects, Evicted, Outcome, Since};
use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::failover::state_preservation::{preserve, Preservation};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::settings::TaintManagerSettings;
use crate::controllers::shared::binding_keys::{
    decode, live_binding, status_or_default, LiveBinding,
};
use crate::controllers::shared::cluster_cache::{ClusterCache, Clusters};
use crate::events::EventRecorder;
use crate::store::Store;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::binding::{
    EvictionOptions, ResourceBindingSpec, ResourceBindingStatus, EVICTION_PRODUCER_TAINT_MANAGER,
    EVICTION_REASON_TAINT_UNTOLERATED,
};
use flotilla_api::cluster::{Taint, TaintEffect};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::meta::Time;
use flotilla_api::policy::{PurgeMode, Toleration};
use flotilla_api::taint_toleration::{matching_tolerations, min_toleration_time, TolerationWait};
use flotilla_support::clock::SharedClock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the NoExecute taints of one cluster mean for one binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No NoExecute taint, or every one tolerated for ever.
    Tolerated,
    /// Tolerated for now; evict when this much time has passed.
    EvictAfter(Duration),
    /// Evict now, because of this taint.
    Evict(EvictionCause),
}

/// Why a binding is evicted from a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionCause {
    /// No toleration matches the taint.
    Untolerated(Taint),
    /// The tolerations matched, but their `tolerationSeconds` have run out.
    ToleranceExpired(Taint),
}

impl EvictionCause {
    /// The taint that evicts.
    pub fn taint(&self) -> &Taint {
        match self {
            EvictionCause::Untolerated(t) | EvictionCause::ToleranceExpired(t) => t,
        }
    }

    /// The sentence an Event and the task's message carry.
    pub fn message(&self, cluster: &str) -> String {
        match self {
            EvictionCause::Untolerated(t) => {
                format!("cluster {cluster} has taint {t}, which the placement does not tolerate")
            }
            EvictionCause::ToleranceExpired(t) => format!(
                "cluster {cluster} has had taint {t} longer than the placement's tolerationSeconds"
            ),
        }
    }
}

/// Karmada's `needEviction` for one cluster: the NoExecute taints of `taints` against
/// `tolerations` at `now`.
pub fn verdict(tolerations: &[Toleration], taints: &[Taint], now: DateTime<Utc>) -> Verdict {
    let no_execute: Vec<Taint> = taints
        .iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .cloned()
        .collect();
    let Some(first) = no_execute.first() else {
        return Verdict::Tolerated;
    };
    let used = match matching_tolerations(&no_execute, tolerations) {
        Ok(used) => used,
        Err(untolerated) => return Verdict::Evict(EvictionCause::Untolerated(untolerated.clone())),
    };
    // Zero or negative seconds evict at once, whatever the taint's timeAdded says (a taint
    // stamped by a clock slightly ahead must not buy time).
    if let Some(i) = used
        .iter()
        .position(|t| t.toleration_seconds.is_some_and(|s| s <= 0))
    {
        let taint = no_execute.get(i).unwrap_or(first).clone();
        return Verdict::Evict(EvictionCause::ToleranceExpired(taint));
    }
    match min_toleration_time(&no_execute, &used, now) {
        TolerationWait::Forever => Verdict::Tolerated,
        TolerationWait::After(d) => Verdict::EvictAfter(d),
        TolerationWait::Now => {
            // The taint whose tolerance ran out first names the cause.
            let expired = no_execute
                .iter()
                .filter(|t| t.time_added.is_some())
                .min_by_key(|t| t.time_added.as_ref().map(Time::as_datetime))
                .unwrap_or(first);
            Verdict::Evict(EvictionCause::ToleranceExpired(expired.clone()))
        }
    }
}

/// One cluster the binding leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The cluster.
    pub cluster: String,
    /// Why.
    pub cause: EvictionCause,
    /// The task to add (`None`: graceful eviction is off, the cluster is only removed).
    pub task: Option<EvictionOptions>,
    /// What the policy's state-preservation rules gave (`None`: it has none). Rules that gave
    /// no label do not hold the eviction back (a dead member must not keep its workload
    /// hostage); the controller reports them (state_preservation::report).
    pub preservation: Option<Preservation>,
}

/// The taint manager's decision for one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Clusters to evict now.
    pub evictions: Vec<Eviction>,
    /// When to look again: the earliest toleration that is still running.
    pub requeue_after: Option<Duration>,
}

/// Decides which target clusters of a binding to evict now and when to look again.
/// `taints_of` answers a cluster's taints (`None` when the Cluster is gone: nothing to do,
/// cluster deletion is handled elsewhere). Clusters that already have an eviction task are left
/// alone.
pub fn decide<'t>(
    spec: &ResourceBindingSpec,
    status: &ResourceBindingStatus,
    taints_of: impl Fn(&str) -> Option<&'t [Taint]>,
    settings: &TaintManagerSettings,
    now: DateTime<Utc>,
) -> Decision {
    let mut decision = Decision::default();
    if !settings.enabled {
        return decision;
    }
    let tolerations = spec
        .placement
        .as_ref()
        .map(|p| p.cluster_tolerations.as_slice())
        .unwrap_or_default();
    let cluster_failover = spec.failover.as_ref().and_then(|f| f.cluster.as_ref());
    let purge_mode = cluster_failover
        .and_then(|c| c.purge_mode)
        .unwrap_or(settings.default_purge_mode);
    let before: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
    for target in &spec.clusters {
        if spec.is_evicting(&target.name) {
            continue;
        }
        let Some(taints) = taints_of(&target.name) else {
            continue;
        };
        match verdict(tolerations, taints, now) {
            Verdict::Tolerated => {}
            Verdict::EvictAfter(d) => {
                decision.requeue_after = Some(decision.requeue_after.map_or(d, |r| r.min(d)));
            }
            Verdict::Evict(cause) => {
                let preservation = preserve(
                    cluster_failover.and_then(|c| c.state_preservation.as_ref()),
                    status,
                    &target.name,
                );
                let task = settings.graceful_eviction.then(|| EvictionOptions {
                    purge_mode: Some(purge_mode),
                    producer: EVICTION_PRODUCER_TAINT_MANAGER.into(),
                    reason: EVICTION_REASON_TAINT_UNTOLERATED.into(),
                    message: cause.message(&target.name),
                    grace_period_seconds: cluster_failover.and_then(|c| c.grace_period_seconds),
                    suppress_deletion: purge_mode.is_never().then_some(true),
                    preserved_label_state: preservation
                        .as_ref()
                        .map(|p| p.labels.clone())
                        .unwrap_or_default(),
                    clusters_before_failover: before.clone(),
                });
                decision.evictions.push(Eviction {
                    cluster: target.name.clone(),
                    cause,
                    task,
                    preservation,
                });
            }
        }
    }
    decision
}

/// Writes a decision into the binding's spec: each evicted cluster leaves `spec.clusters`;
/// with a task, the task is added with `creationTimestamp` now (so its grace period counts
/// from the eviction).
pub fn apply(spec: &mut ResourceBindingSpec, decision: &Decision, now: DateTime<Utc>) {
    for e in &decision.evictions {
        match &e.task {
            Some(opts) => evict(spec, &e.cluster, opts.clone(), now),
            None => spec.clusters.retain(|c| c.name != e.cluster),
        }
    }
}

/// What the controller writes and tells for `decision` (the one effect path,
/// [`Effects::carry_out`]): the binding as read (`read`, whose spec is `spec`) with the
/// decision applied ([`apply`]), each eviction's history entry, and how each is reported.
/// `None` when nothing is evicted.
pub fn outcome(
    read: &serde_json::Value,
    mut spec: ResourceBindingSpec,
    decision: &Decision,
    now: DateTime<Utc>,
) -> Option<Outcome> {
    if decision.evictions.is_empty() {
        return None;
    }
    apply(&mut spec, decision, now);
    let evicted = decision.evictions.iter().map(evicted).collect();
    Some(Outcome::evicting(
        read,
        read.clone(),
        &spec,
        evicted,
        Vec::new(),
        now,
    ))
}

/// How one eviction is reported: its Event says why and what becomes of the old copy; the
/// taint's `timeAdded` starts its latency.
fn evicted(e: &Eviction) -> Evicted {
    let cause = e.cause.message(&e.cluster);
    let how = match &e.task {
        Some(t) => format!(
            "an eviction task with purge mode {} keeps the old copy as that mode says",
            t.purge_mode.unwrap_or(PurgeMode::Graciously).as_str()
        ),
        None => "graceful eviction is off: the cluster is removed at once".to_string(),
    };
    Evicted {
        cluster: e.cluster.clone(),
        producer: EVICTION_PRODUCER_TAINT_MANAGER.into(),
        reason: EVICTION_REASON_TAINT_UNTOLERATED,
        event: format!("Evicted from cluster {}: {cause}; {how}", e.cluster),
        cause,
        purge_mode: e.task.as_ref().and_then(|t| t.purge_mode),
        since: e
            .cause
            .taint()
            .time_added
            .map(|t| Since::Taint(t.as_datetime())),
        preservation: e.preservation.clone(),
    }
}

/// The partition brake's part of a decision, as the controller makes it (the failover
/// dry-run makes it the same way): each eviction asks `brake` (in the decision's order, that
/// of `spec.clusters`); the ones it holds leave the decision and are answered, with how long
/// they wait. The caller looks again when the earliest hold says.
pub fn hold_evictions(
    decision: &mut Decision,
    brake: Option<&EvictionBrake>,
    clusters: &Clusters,
    key: &str,
    now: DateTime<Utc>,
) -> BTreeMap<String, Hold> {
    let held = hold_back(
        brake,
        clusters,
        key,
        Cause::ClusterFailure,
        decision.evictions.iter().map(|e| e.cluster.as_str()),
        now,
    );
    decision
        .evictions
        .retain(|e| !held.contains_key(&e.cluster));
    held
}

/// The taint manager controller: one reconcile per binding (`rb|ns|name`, `crb|name`), woken by
/// the binding and by changes of the clusters it targets; it evicts what [`decide`] says and
/// looks again when the earliest toleration runs out.
pub struct TaintManagerController {
    store: Arc<dyn Store>,
    clusters: ClusterCache,
    clock: SharedClock,
    events: EventRecorder,
    metrics: FailoverMetrics,
    settings: TaintManagerSettings,
    brake: Option<EvictionBrake>,
}

impl TaintManagerController {
    /// A taint manager over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        events: EventRecorder,
        metrics: FailoverMetrics,
        settings: TaintManagerSettings,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            clock,
            events: events.for_component("taint-manager"),
            metrics,
            settings,
            brake: None,
        }
    }

    /// Every eviction asks `brake` first (without one, nothing holds evictions back).
    pub fn with_brake(mut self, brake: EvictionBrake) -> Self {
        self.brake = Some(brake);
        self
    }
}

/// What of a Cluster the taint manager judges: its `NoExecute` taints (a Ready change
/// without one, or a `NoSchedule` taint, moves nothing) and whether it is going.
pub fn no_execute_fingerprint(cluster: &serde_json::Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Some(taints) = cluster
        .lookup("/spec/taints")
        .and_then(serde_json::Value::as_array)
    {
        for t in taints.iter().filter(|t| t["effect"] == "NoExecute") {
            t.to_string().hash(&mut h);
        }
    }
    cluster
        .lookup("/metadata/deletionTimestamp")
        .is_some()
        .hash(&mut h);
    h.finish()
}

#[async_trait]
impl Reconciler for TaintManagerController {
    fn name(&self) -> &'static str {
        "taint-manager"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        if !self.settings.enabled {
            return Ok(Action::Done);
        }
        let Some(LiveBinding { rt, object }) = live_binding(self.store.as_ref(), key).await? else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&object["spec"], key)?;
        // A status the scheduler will rebuild does not stop an eviction: it only loses the
        // state to preserve.
        let status = status_or_default(&object, key);
        let clusters = self.clusters.get().await?;
        let now = self.clock.now();
        let mut decision = decide(
            &spec,
            &status,
            |name| clusters.by_name.get(name).map(|c| c.spec.taints.as_slice()),
            &self.settings,
            now,
        );
        // The partition brake: an eviction it holds is not written; look again when it says.
        let held = hold_evictions(&mut decision, self.brake.as_ref(), &clusters, key, now);
        decision.requeue_after = earliest(decision.requeue_after, &held);
        report_stops(self.brake.as_ref(), &self.events, &object, key, &held).await;
        if let Some(outcome) = outcome(&object, spec, &decision, now) {
            // The eviction and its history entries in one write; a conflict retries the
            // whole decision on the new binding.
            let effects = Effects {
                store: self.store.as_ref(),
                events: &self.events,
                metrics: &self.metrics,
            };
            effects.carry_out(key, &rt, &object, outcome, now).await?;
        }
        Ok(decision
            .requeue_after
            .map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_no_execute_taints_wake_the_bindings_of_a_cluster() {
        use super::no_execute_fingerprint;
        let ready = serde_json::json!({"spec": {}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}]}});
        let mut unknown = ready.clone();
        unknown["status"]["conditions"][0]["status"] = serde_json::json!("Unknown");
        unknown["spec"]["taints"] = serde_json::json!([
            {"key": "cluster.karmada.io/unreachable", "effect": "NoSchedule"}]);
        assert_eq!(
            no_execute_fingerprint(&ready),
            no_execute_fingerprint(&unknown)
        );
        let mut tainted = unknown.clone();
        tainted["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(
            {"key": "cluster.karmada.io/unreachable", "effect": "NoExecute",
             "timeAdded": "2026-11-25T00:00:00Z"}));
        assert_ne!(
            no_execute_fingerprint(&unknown),
            no_execute_fingerprint(&tainted)
        );
        let mut going = ready.clone();
        going["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-25T00:00:00Z");
        assert_ne!(
            no_execute_fingerprint(&ready),
            no_execute_fingerprint(&going)
        );
    }

    use super::*;
    use crate::controllers::failover::testing::{assert_placement, one_opened};
    use chrono::TimeZone;
    use flotilla_api::binding::{AggregatedStatusItem, TargetCluster};
    use flotilla_api::policy::TolerationOperator;
    use flotilla_api::policy::{
        ClusterFailoverBehavior, FailoverBehavior, Placement, StatePreservation,
        StatePreservationRule,
    };
    use serde_json::json;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .unwrap_or_default()
    }

    fn taint(key: &str, effect: TaintEffect, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect,
            time_added: added.map(|s| Time::new(at(s))),
        }
    }

    fn tol(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: key.into(),
            operator: Some(TolerationOperator::Exists),
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: seconds,
        }
    }

    const NOT_READY: &str = "cluster.karmada.io/not-ready";
    const UNREACHABLE: &str = "cluster.karmada.io/unreachable";

    #[test]
    #[allow(clippy::type_complexity)]
    fn verdict_table() {
        use Verdict::*;
        let ne = |added| taint(NOT_READY, TaintEffect::NoExecute, added);
        let cases: Vec<(&str, Vec<Toleration>, Vec<Taint>, i64, Verdict)> = vec![
            ("no taints", vec![], vec![], 0, Tolerated),
            (
                "NoSchedule only",
                vec![],
                vec![taint(NOT_READY, TaintEffect::NoSchedule, Some(0))],
                0,
                Tolerated,
            ),
            (
                "untolerated",
                vec![tol(UNREACHABLE, Some(300))],
                vec![ne(Some(0))],
                0,
                Evict(EvictionCause::Untolerated(ne(Some(0)))),
            ),
            (
                "tolerated for ever",
                vec![tol(NOT_READY, None)],
                vec![ne(Some(0))],
                10_000,
                Tolerated,
            ),
            (
                "tolerated 300 s, 100 s in",
                vec![tol(NOT_READY, Some(300))],
                vec![ne(Some(0))],
                100,
                EvictAfter(Duration::from_secs(200)),
            ),
            (
                "tolerated 300 s, 300 s in",
                vec![tol(NOT_READY, Some(300))],
                vec![ne(Some(0))],
                300,
                Evict(EvictionCause::ToleranceExpired(ne(Some(0)))),
            ),
            (
                "tolerationSeconds 0",
                vec![tol(NOT_READY, Some(0))],
                vec![ne(Some(0))],
                0,
                Evict(EvictionCause::ToleranceExpired(ne(Some(0)))),
            ),
            (
                "negative tolerationSeconds",
                vec![tol(NOT_READY, Some(-5))],
                vec![ne(Some(10))],
                0,
                Evict(EvictionCause::ToleranceExpired(ne(Some(10)))),
            ),
            (
                "the smallest matching tolerationSeconds decides",
                vec![tol(NOT_READY, Some(600)), tol("", Some(60))],
                vec![ne(Some(0))],
                30,
                // The first matching toleration is used for each taint (Karmada), so 600 s.
                EvictAfter(Duration::from_secs(570)),
            ),
            (
                "two taints, the earliest deadline decides",
                vec![tol("", Some(100))],
                vec![
                    ne(Some(0)),
                    taint(UNREACHABLE, TaintEffect::NoExecute, Some(50)),
                ],
                20,
                EvictAfter(Duration::from_secs(80)),
            ),
            (
                "a taint without timeAdded never expires",
                vec![tol(NOT_READY, Some(10))],
                vec![ne(None)],
                1_000,
                Tolerated,
            ),
        ];
        for (what, tols, taints, now, want) in cases {
            assert_eq!(verdict(&tols, &taints, at(now)), want, "{what}");
        }
    }

    fn binding(mode: Option<PurgeMode>, tols: Vec<Toleration>) -> ResourceBindingSpec {
        ResourceBindingSpec {
            replicas: 3,
            clusters: vec![
                TargetCluster::new("member1", 1),
                TargetCluster::new("member2", 2),
            ],
            placement: Some(Placement {
                cluster_tolerations: tols,
                ..Default::default()
            }),
            failover: mode.map(|m| FailoverBehavior {
                cluster: Some(ClusterFailoverBehavior {
                    purge_mode: Some(m),
                    grace_period_seconds: Some(100),
                    state_preservation: None,
                    fencing: None,
                    failback: None,
                }),
                application: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn eviction_per_purge_mode() {
        let dead = vec![taint(NOT_READY, TaintEffect::NoExecute, Some(0))];
        let taints = |c: &str| (c == "member1").then_some(dead.as_slice());
        let status = ResourceBindingStatus::default();
        let on = TaintManagerSettings::default();
        // (the purge mode asked, the task's suppressDeletion and grace period); the task
        // carries the mode asked, Graciously when none is.
        let cases = [
            (None, None, None),
            (Some(PurgeMode::Immediately), None, Some(100)),
            (Some(PurgeMode::Directly), None, Some(100)),
            (Some(PurgeMode::Gracefully), None, Some(100)),
            (Some(PurgeMode::Never), Some(true), Some(100)),
        ];
        for (mode, want_suppress, want_grace) in cases {
            let want_mode = Some(mode.unwrap_or(PurgeMode::Graciously));
            let spec = binding(mode, vec![]);
            let d = decide(&spec, &status, taints, &on, at(0));
            assert_eq!(d.evictions.len(), 1, "{mode:?}");
            let e = &d.evictions[0];
            assert_eq!(e.cluster, "member1");
            let task = e.task.as_ref().expect("a task");
            assert_eq!(task.purge_mode, want_mode, "{mode:?}");
            assert_eq!(task.suppress_deletion, want_suppress, "{mode:?}");
            assert_eq!(task.grace_period_seconds, want_grace, "{mode:?}");
            assert_eq!(task.producer, EVICTION_PRODUCER_TAINT_MANAGER);
            assert_eq!(task.reason, EVICTION_REASON_TAINT_UNTOLERATED);
            assert_eq!(task.clusters_before_failover, ["member1", "member2"]);
            let mut applied = spec.clone();
            apply(&mut applied, &d, at(7));
            assert_eq!(applied.clusters, vec![TargetCluster::new("member2", 2)]);
            assert_eq!(applied.graceful_eviction_tasks.len(), 1);
            assert_eq!(applied.graceful_eviction_tasks[0].replicas, Some(1));
            assert_eq!(
                applied.graceful_eviction_tasks[0].creation_timestamp,
                Some(Time::new(at(7)))
            );
        }
        // Graceful eviction off: removed without a task.
        let off = TaintManagerSettings {
            graceful_eviction: false,
            ..Default::default()
        };
        let spec = binding(None, vec![]);
        let d = decide(&spec, &status, taints, &off, at(0));
        assert_eq!(d.evictions[0].task, None);
        let mut applied = spec.clone();
        apply(&mut applied, &d, at(0));
        assert_eq!(applied.clusters, vec![TargetCluster::new("member2", 2)]);
        assert!(applied.graceful_eviction_tasks.is_empty());
        // The taint manager off: nothing.
        let disabled = TaintManagerSettings {
            enabled: false,
            ..Default::default()
        };
        assert_eq!(
            decide(&spec, &status, taints, &disabled, at(0)),
            Decision::default()
        );
        // Already evicting that cluster, or a cluster that is gone: nothing more.
        let mut evicting = spec.clone();
        apply(
            &mut evicting,
            &decide(&spec, &status, taints, &on, at(0)),
            at(0),
        );
        evicting.clusters.push(TargetCluster::new("member1", 1));
        assert!(decide(&evicting, &status, taints, &on, at(1))
            .evictions
            .is_empty());
        assert!(decide(&spec, &status, |_| None, &on, at(1))
            .evictions
            .is_empty());
    }

    #[test]
    fn tolerated_clusters_requeue_at_the_earliest_deadline() {
        let t1 = vec![taint(NOT_READY, TaintEffect::NoExecute, Some(0))];
        let t2 = vec![taint(NOT_READY, TaintEffect::NoExecute, Some(100))];
        let taints = |c: &str| match c {
            "member1" => Some(t1.as_slice()),
            "member2" => Some(t2.as_slice()),
            _ => None,
        };
        let spec = binding(None, vec![tol(NOT_READY, Some(300))]);
        let settings = TaintManagerSettings::default();
        let status = ResourceBindingStatus::default();
        let d = decide(&spec, &status, taints, &settings, at(50));
        assert!(d.evictions.is_empty());
        assert_eq!(d.requeue_after, Some(Duration::from_secs(250)));
        let d = decide(&spec, &status, taints, &settings, at(300));
        assert_eq!(d.evictions.len(), 1);
        assert_eq!(d.evictions[0].cluster, "member1");
        assert_eq!(d.requeue_after, Some(Duration::from_secs(100)));
        let d = decide(&spec, &status, taints, &settings, at(400));
        assert_eq!(d.evictions.len(), 2);
    }

    /// What the controller hands to the one effect path: the binding with the decision
    /// applied, one history entry per eviction, and how each eviction is reported.
    #[test]
    fn the_outcome_evicts_opens_the_entry_and_says_how_it_is_reported() {
        use crate::controllers::failover::effects::Since;
        let spec = binding(Some(PurgeMode::Gracefully), vec![]);
        let read = json!({"metadata": {"name": "b", "namespace": "default", "generation": 1},
            "spec": serde_json::to_value(&spec).unwrap()});
        let status = ResourceBindingStatus::default();
        // (what, graceful eviction, the taint's timeAdded, the report's purge mode and
        //  latency start, what the Event says of the old copy, the entry still open)
        let cases = [
            (
                "a task",
                true,
                Some(0),
                Some(PurgeMode::Gracefully),
                Some(Since::Taint(at(0))),
                "an eviction task with purge mode Gracefully",
                true,
            ),
            (
                "a taint without timeAdded: no latency",
                true,
                None,
                Some(PurgeMode::Gracefully),
                None,
                "an eviction task with purge mode Gracefully",
                true,
            ),
            (
                "graceful eviction off: removed at once, the entry closed",
                false,
                Some(0),
                None,
                Some(Since::Taint(at(0))),
                "graceful eviction is off",
                false,
            ),
        ];
        for (what, graceful, added, purge_mode, since, how, open) in cases {
            let dead = vec![taint(NOT_READY, TaintEffect::NoExecute, added)];
            let taints = |c: &str| (c == "member1").then_some(dead.as_slice());
            let settings = TaintManagerSettings {
                graceful_eviction: graceful,
                ..TaintManagerSettings::default()
            };
            let d = decide(&spec, &status, taints, &settings, at(10));
            let o = outcome(&read, spec.clone(), &d, at(10)).expect("an eviction");
            assert_placement(
                &o.binding,
                json!([{"name": "member2", "replicas": 2}]),
                usize::from(graceful),
                what,
            );
            let entry = one_opened(&o.history, what);
            assert_eq!(entry.from_cluster, "member1", "{what}");
            assert_eq!(entry.is_open(), open, "{what}");
            let [e] = o.evicted.as_slice() else {
                panic!("{what}: one eviction: {:?}", o.evicted);
            };
            assert_eq!(e.cluster, "member1", "{what}");
            assert_eq!(e.producer, EVICTION_PRODUCER_TAINT_MANAGER, "{what}");
            assert_eq!(e.reason, EVICTION_REASON_TAINT_UNTOLERATED, "{what}");
            assert_eq!(e.cause, d.evictions[0].cause.message("member1"), "{what}");
            assert_eq!(e.purge_mode, purge_mode, "{what}");
            assert_eq!(e.since, since, "{what}");
            assert!(
                e.event.starts_with("Evicted from cluster member1: "),
                "{what}"
            );
            assert!(
                e.event.contains(NOT_READY) && e.event.contains(how),
                "{what}: {}",
                e.event
            );
            assert!(o.notes.is_empty(), "{what}");
        }
        // Nothing evicted: nothing to write.
        let d = decide(
            &spec,
            &status,
            |_| None,
            &TaintManagerSettings::default(),
            at(10),
        );
        assert_eq!(outcome(&read, spec.clone(), &d, at(10)), None);
    }

    #[test]
    fn cluster_failover_preserves_state_through_the_shared_rules() {
        let dead = vec![taint(NOT_READY, TaintEffect::NoExecute, Some(0))];
        let taints = |c: &str| (c == "member1").then_some(dead.as_slice());
        let mut spec = binding(Some(PurgeMode::Directly), vec![]);
        if let Some(c) = spec.failover.as_mut().and_then(|f| f.cluster.as_mut()) {
            c.grace_period_seconds = None;
            c.state_preservation = Some(StatePreservation {
                rules: vec![
                    StatePreservationRule {
                        alias_label_name: "failover.example.io/job".into(),
                        json_path: "{ .jobStatus.jobID }".into(),
                    },
                    StatePreservationRule {
                        alias_label_name: "failover.example.io/pods".into(),
                        json_path: "{ .pods[*].name }".into(),
                    },
                ],
            });
        }
        let status = ResourceBindingStatus {
            aggregated_status: vec![AggregatedStatusItem {
                cluster_name: "member1".into(),
                status: Some(
                    json!({"jobStatus": {"jobID": "abc"}, "pods": [{"name": "a"}, {"name": "b"}]}),
                ),
                ..Default::default()
            }],
            ..Default::default()
        };
        let decide_now = |spec: &ResourceBindingSpec| {
            decide(
                spec,
                &status,
                taints,
                &TaintManagerSettings::default(),
                at(0),
            )
        };
        let d = decide_now(&spec);
        let e = &d.evictions[0];
        let task = e.task.as_ref().expect("a task");
        // The eviction goes on with the label that could be read, and says which could not.
        assert_eq!(
            task.preserved_label_state,
            [("failover.example.io/job".to_string(), "abc".to_string())].into()
        );
        let p = e.preservation.as_ref().expect("rules were evaluated");
        assert_eq!(p.failures.len(), 1);
        assert_eq!(p.failures[0].label, "failover.example.io/pods");
        // No rules: nothing evaluated, nothing to report.
        let plain = binding(Some(PurgeMode::Directly), vec![]);
        assert_eq!(decide_now(&plain).evictions[0].preservation, None);
    }

    mod controller {
        use super::*;
        use crate::controllers::failover::testing::{eviction_succeeded_event, nginx_binding};
        use crate::controllers::runtime::testing::TestWorld;
        use crate::store::ListOptions;
        use flotilla_api::kinds::well_known;
        use flotilla_support::clock::FakeClock;

        async fn world(
            tolerations: serde_json::Value,
        ) -> (Arc<dyn Store>, Arc<FakeClock>, TaintManagerController) {
            let world = TestWorld::at(at(0));
            let (store, clock) = (world.store.clone(), world.clock.clone());
            for (name, taints) in [
                (
                    "member1",
                    serde_json::json!([{"key": NOT_READY, "effect": "NoExecute", "timeAdded": "2023-11-14T22:13:20Z"}]),
                ),
                ("member2", serde_json::json!([])),
            ] {
                store
                    .create(
                        &well_known::clusters(),
                        serde_json::json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                            "metadata": {"name": name}, "spec": {"syncMode": "Pull", "taints": taints}}),
                    )
                    .await
                    .unwrap();
            }
            store
                .create(
                    &well_known::resource_bindings(),
                    serde_json::json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": "nginx-deployment", "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                                 "replicas": 3,
                                 "placement": {"clusterTolerations": tolerations},
                                 "clusters": [{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 2}]}}),
                )
                .await
                .unwrap();
            let tm = TaintManagerController::new(
                store.clone(),
                world.shared_clock.clone(),
                world.events(),
                world.ctx.failover_metrics.clone(),
                TaintManagerSettings::default(),
            );
            (store, clock, tm)
        }

        const KEY: &str = "rb|default|nginx-deployment";

        /// Every Event stored.
        async fn stored_events(store: &Arc<dyn Store>) -> Vec<serde_json::Value> {
            store
                .list(&well_known::events(), None, &ListOptions::default())
                .await
                .unwrap()
                .items
        }

        #[tokio::test]
        async fn an_untolerated_noexecute_taint_evicts_with_a_task_and_an_event() {
            let (store, _, tm) = world(serde_json::json!([])).await;
            assert!(matches!(tm.reconcile(KEY).await, Ok(Action::Done)));
            let b = nginx_binding(&store).await;
            assert_eq!(
                b["spec"]["clusters"],
                serde_json::json!([{"name": "member2", "replicas": 2}])
            );
            let task = &b["spec"]["gracefulEvictionTasks"][0];
            assert_eq!(task["fromCluster"], "member1");
            assert_eq!(task["producer"], "TaintManager");
            assert_eq!(task["reason"], "TaintUntolerated");
            assert_eq!(task["replicas"], 1);
            assert_eq!(task["purgeMode"], "Graciously");
            assert!(task["creationTimestamp"].is_string(), "{task}");
            let events = stored_events(&store).await;
            assert!(eviction_succeeded_event(&events, "member1"), "{events:?}");
            // Evicted once: a second pass changes nothing.
            let rv = b["metadata"]["resourceVersion"].clone();
            tm.reconcile(KEY).await.unwrap();
            let again = nginx_binding(&store).await;
            assert_eq!(again["metadata"]["resourceVersion"], rv);
        }

        #[tokio::test]
        async fn a_rule_that_matches_nothing_is_an_event_and_a_condition_not_silence() {
            let (store, _, tm) = world(serde_json::json!([])).await;
            let rt = well_known::resource_bindings();
            let mut b = nginx_binding(&store).await;
            b["spec"]["failover"] = serde_json::json!({"cluster": {"purgeMode": "Immediately",
                "statePreservation": {"rules": [
                    {"aliasLabelName": "failover.example.io/job", "jsonPath": "{.jobStatus.jobID}"}]}}});
            let b = store.update(&rt, b).await.unwrap();
            let mut with_status = b.clone();
            with_status["status"] = serde_json::json!({"aggregatedStatus": [
                {"clusterName": "member1", "applied": true, "health": "Unknown",
                 "status": {"readyReplicas": 1}}]});
            store.update_status(&rt, with_status).await.unwrap();
            assert!(matches!(tm.reconcile(KEY).await, Ok(Action::Done)));
            let b = nginx_binding(&store).await;
            // Evicted all the same, without the label.
            let task = &b["spec"]["gracefulEvictionTasks"][0];
            assert_eq!(task["fromCluster"], "member1");
            assert!(
                task.get("preservedLabelState")
                    .is_none_or(|l| l == &serde_json::json!({})),
                "{task}"
            );
            let cond = b["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "StatePreserved"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(cond["status"], "False", "{b}");
            assert_eq!(cond["reason"], "StatePreservationFailed");
            assert!(
                cond["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("label failover.example.io/job"),
                "{cond}"
            );
            let events = stored_events(&store).await;
            assert_eq!(
                events
                    .iter()
                    .filter(|e| e["reason"] == "StatePreservationFailed" && e["type"] == "Warning")
                    .count(),
                1,
                "{events:?}"
            );
        }

        #[tokio::test]
        async fn the_brake_stops_evictions_while_every_cluster_is_down_and_lets_the_cluster_out_after(
        ) {
            use crate::controllers::failover::brake::{
                EvictionBrake, EVENT_EVICTION_HELD, STOPPED_RETRY,
            };
            use crate::controllers::settings::BrakeSettings;
            let (store, _clock, tm) = world(serde_json::json!([])).await;
            let brake = EvictionBrake::new(
                BrakeSettings {
                    startup_grace: Duration::ZERO,
                    ..BrakeSettings::default()
                },
                at(0),
                None,
            );
            let tm = tm.with_brake(brake);
            let rbs = well_known::resource_bindings();
            let mut second = nginx_binding(&store).await;
            second["metadata"] =
                serde_json::json!({"name": "other-deployment", "namespace": "default"});
            store.create(&rbs, second).await.unwrap();
            let held_events = || async {
                stored_events(&store)
                    .await
                    .into_iter()
                    .filter(|e| e["reason"] == EVENT_EVICTION_HELD)
                    .collect::<Vec<_>>()
            };
            // Neither member is Ready: the whole fleet is down, nothing is written.
            for _ in 0..2 {
                assert!(matches!(
                    tm.reconcile(KEY).await,
                    Ok(Action::RequeueAfter(d)) if d == STOPPED_RETRY
                ));
            }
            let b = nginx_binding(&store).await;
            assert_eq!(b["spec"]["clusters"].as_array().map(Vec::len), Some(2));
            let events = held_events().await;
            assert_eq!(events.len(), 1, "told once: {events:?}");
            assert_eq!(events[0]["count"], 1, "a stop is told once while it lasts");
            assert!(
                events[0]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("all 2 clusters of the fleet are not Ready"),
                "{}",
                events[0]
            );
            // member2 turns Ready: member1 takes its region's token, and all its bindings go
            // at once (the brake paces clusters, not bindings).
            let mut m2 = store
                .get(&well_known::clusters(), None, "member2")
                .await
                .unwrap();
            m2["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": "True",
                "reason": "ClusterReady", "message": "", "lastTransitionTime": "2023-11-14T22:13:20Z"}]});
            store
                .update_status(&well_known::clusters(), m2)
                .await
                .unwrap();
            for key in [KEY, "rb|default|other-deployment"] {
                assert!(matches!(tm.reconcile(key).await, Ok(Action::Done)), "{key}");
            }
            for name in ["nginx-deployment", "other-deployment"] {
                let b = store.get(&rbs, Some("default"), name).await.unwrap();
                assert_eq!(
                    b["spec"]["gracefulEvictionTasks"][0]["fromCluster"], "member1",
                    "{name}"
                );
            }
            assert_eq!(held_events().await.len(), 1, "no Event but the stop's");
        }

        #[tokio::test]
        async fn a_tolerated_taint_waits_for_its_seconds_on_the_injected_clock() {
            let (store, clock, tm) = world(serde_json::json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]))
            .await;
            // The taint was added at 0 (2023-11-14T22:13:20Z); now is 0.
            assert!(matches!(
                tm.reconcile(KEY).await,
                Ok(Action::RequeueAfter(d)) if d == Duration::from_secs(300)
            ));
            clock.advance(chrono::Duration::seconds(299));
            assert!(matches!(
                tm.reconcile(KEY).await,
                Ok(Action::RequeueAfter(d)) if d == Duration::from_secs(1)
            ));
            let b = nginx_binding(&store).await;
            assert_eq!(b["spec"]["clusters"].as_array().map(Vec::len), Some(2));
            clock.advance(chrono::Duration::seconds(1));
            assert!(matches!(tm.reconcile(KEY).await, Ok(Action::Done)));
            let b = nginx_binding(&store).await;
            assert_eq!(
                b["spec"]["clusters"],
                serde_json::json!([{"name": "member2", "replicas": 2}])
            );
        }
    }
}
