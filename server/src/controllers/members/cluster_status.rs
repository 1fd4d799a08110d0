//! The cluster status controller: owns each member's `Ready` condition on the server side.
//! Push members are probed every `--cluster-status-update-frequency` and their Ready follows
//! the probe through the success/failure thresholds; while Ready the member's summary
//! (version, API enablements, nodes, resources) is collected too. Pull members post their own
//! status; here they are only watched: Ready turns Unknown when the lease and the posted
//! condition stay unchanged past the monitor grace period, checked every
//! `--cluster-monitor-period`. Every transition is an Event on the Cluster and a metric.
//! Each look at a pull member also judges its Lease against the grace period
//! ([`lease_renewal`](crate::controllers::members::lease_renewal), docs/semantics.md §3.3):
//! a member that renews too slowly gets the `LeaseRenewalTooSlow` condition and a Warning
//! Event, once per change of the condition.

use crate::controllers::members::cluster_health::{
    monitor, observed_ready, threshold_adjusted, MonitorEntry, ThresholdEntry,
};
use crate::controllers::members::cluster_taints::renew_time_of;
use crate::controllers::members::lease_renewal::{
    declared_duration, renewal_condition, CONDITION_LEASE_RENEWAL_TOO_SLOW,
};
use crate::controllers::members::member_credentials::member_target;
use crate::controllers::members::support::decode_cluster;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::settings::HealthConfig;
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::events::{EventRecorder, EventType};
use crate::probes::MemberClient;
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::cluster::{
    Cluster, ClusterStatus, SyncMode, CLUSTER_LEASE_NAMESPACE, CONDITION_COMPLETE_API_ENABLEMENTS,
};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The controller.
pub struct ClusterStatusController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    member: Arc<dyn MemberClient>,
    config: HealthConfig,
    events: EventRecorder,
    transitions: IntCounterVec,
    renewal_transitions: IntCounterVec,
    thresholds: Mutex<HashMap<String, ThresholdEntry>>,
    monitors: Mutex<HashMap<String, MonitorEntry>>,
    last_probe: Mutex<HashMap<String, DateTime<Utc>>>,
}

/// How long until `at`, as the controller runtime waits: none once it has passed.
fn until(at: DateTime<Utc>, now: DateTime<Utc>) -> std::time::Duration {
    (at - now).to_std().unwrap_or_default()
}

impl ClusterStatusController {
    /// A controller probing push members with `member`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        member: Arc<dyn MemberClient>,
        config: HealthConfig,
        events: EventRecorder,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let transitions = registered_counter_vec(
            registry,
            "flotilla_cluster_ready_transitions_total",
            "Changes of members' Ready condition, by new status.",
            &["status"],
        )?;
        let renewal_transitions = registered_counter_vec(
            registry,
            "flotilla_cluster_lease_renewal_too_slow_transitions_total",
            "Changes of pull members' LeaseRenewalTooSlow condition (the lease declares more \
             than --cluster-monitor-grace-period), by new status.",
            &["status"],
        )?;
        Ok(Self {
            store,
            clock,
            member,
            config,
            events,
            transitions,
            renewal_transitions,
            thresholds: Mutex::new(HashMap::new()),
            monitors: Mutex::new(HashMap::new()),
            last_probe: Mutex::new(HashMap::new()),
        })
    }

    fn forget(&self, key: &str) {
        self.thresholds.lock().remove(key);
        self.monitors.lock().remove(key);
        self.last_probe.lock().remove(key);
    }

    /// Writes the new status if it differs, and reports a Ready transition.
    async fn write(
        &self,
        raw: &Value,
        old: &ClusterStatus,
        new: ClusterStatus,
    ) -> Result<Option<Value>, ReconcileError> {
        if &new == old {
            return Ok(None);
        }
        let mut updated = raw.clone();
        updated["status"] = serde_json::to_value(&new)
            .map_err(|e| ReconcileError::Other(format!("encoding cluster status: {e}")))?;
        let stored = self
            .store
            .update_status(&well_known::clusters(), updated)
            .await?;
        let before = old.conditions.iter().find(|c| c.type_ == "Ready");
        let after = new.conditions.iter().find(|c| c.type_ == "Ready");
        if let Some(after) = after {
            if before.map(|b| b.status) != Some(after.status) {
                let name = raw
                    .lookup("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.transitions
                    .with_label_values(&[after.status.as_str()])
                    .inc();
                tracing::info!(cluster = name, ready = after.status.as_str(), reason = %after.reason, "cluster Ready changed");
                let kind = if after.status == ConditionStatus::True {
                    EventType::Normal
                } else {
                    EventType::Warning
                };
                let reason = match after.status {
                    ConditionStatus::True => "ClusterReady",
                    ConditionStatus::False => "ClusterNotReady",
                    ConditionStatus::Unknown => "ClusterUnknown",
                };
                self.events
                    .cluster(
                        &stored,
                        kind,
                        reason,
                        &format!(
                            "Ready is {} ({}): {}",
                            after.status.as_str(),
                            after.reason,
                            after.message
                        ),
                    )
                    .await;
            }
        }
        Ok(Some(stored))
    }

    async fn reconcile_push(
        &self,
        key: &str,
        raw: &Value,
        cluster: &Cluster,
    ) -> Result<Action, ReconcileError> {
        let now = self.clock.now();
        let period = self.config.status_update_frequency;
        if let Some(last) = self.last_probe.lock().get(key).copied() {
            if now < last + period {
                return Ok(Action::RequeueAfter(until(last + period, now)));
            }
        }
        let member = member_target(self.store.as_ref(), cluster).await?;
        let probe = self.member.probe(&member).await;
        let now = self.clock.now();
        self.last_probe.lock().insert(key.to_string(), now);
        let observed = observed_ready(&probe);
        let current = cluster.ready_condition().cloned();
        let entry = self.thresholds.lock().get(key).cloned();
        let (ready, entry) = threshold_adjusted(
            entry.as_ref(),
            current.as_ref(),
            observed,
            now,
            self.config.thresholds,
        );
        self.thresholds.lock().insert(key.to_string(), entry);
        let mut status = cluster.status.clone();
        let is_ready = ready.status == ConditionStatus::True;
        set_condition(&mut status.conditions, ready, now);
        if probe.online && probe.healthy && is_ready {
            match self.member.summary(&member).await {
                Ok(summary) => merge_summary(&mut status, &summary, now),
                Err(e) => {
                    tracing::warn!(cluster = key, error = %e, "collecting the member summary failed")
                }
            }
        }
        self.write(raw, &cluster.status, status).await?;
        Ok(Action::RequeueAfter(period))
    }

    async fn reconcile_pull(
        &self,
        key: &str,
        raw: &Value,
        cluster: &Cluster,
    ) -> Result<Action, ReconcileError> {
        let mut lease = self.lease(key, false).await?;
        let now = self.clock.now();
        let created = cluster
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.as_datetime())
            .unwrap_or(now);
        let before = self.monitors.lock().get(key).cloned();
        let judge = |lease: &Option<Value>| {
            monitor(
                before.as_ref(),
                cluster.ready_condition(),
                created,
                lease.as_ref().and_then(renew_time_of),
                now,
                self.config.grace,
            )
        };
        let (mut entry, mut change) = judge(&lease);
        // A member is judged gone on the absence of renewals, which a view of the store that
        // lags (a leader's cache after a pause) would show wrongly: it is judged again on a
        // fresh read of its Lease before it turns not Ready.
        if change
            .as_ref()
            .is_some_and(|c| c.status != ConditionStatus::True)
        {
            lease = self.lease(key, true).await?;
            (entry, change) = judge(&lease);
        }
        self.monitors.lock().insert(key.to_string(), entry);
        let stored_renewal = cluster
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_LEASE_RENEWAL_TOO_SLOW);
        let renewal = renewal_condition(
            lease.as_ref().and_then(declared_duration),
            stored_renewal,
            self.config.grace.monitor,
        );
        let mut status = cluster.status.clone();
        if let Some(cond) = change {
            replace_condition(&mut status.conditions, cond);
        }
        let renewal_changed = renewal
            .as_ref()
            .filter(|c| !same_condition(stored_renewal, c));
        if let Some(cond) = renewal_changed {
            set_condition(&mut status.conditions, cond.clone(), now);
        }
        if status != cluster.status {
            let stored = self.write(raw, &cluster.status, status).await?;
            if let (Some(stored), Some(cond)) = (stored, renewal_changed) {
                self.report_renewal(&stored, key, stored_renewal, cond)
                    .await;
            }
        }
        Ok(Action::RequeueAfter(self.config.monitor_period))
    }

    /// A pull member's Lease, if it has one; `fresh`: never older than an acknowledged write.
    async fn lease(&self, cluster: &str, fresh: bool) -> Result<Option<Value>, StoreError> {
        let (leases, namespace) = (well_known::leases(), Some(CLUSTER_LEASE_NAMESPACE));
        let read = match fresh {
            true => self.store.get_fresh(&leases, namespace, cluster).await,
            false => self.store.get(&leases, namespace, cluster).await,
        };
        match read {
            Ok(lease) => Ok(Some(lease)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The log line, metric and Event of a changed `LeaseRenewalTooSlow` condition: a Warning
    /// when it turns True, Normal when it turns False again; a new message alone (the member
    /// declares another duration, still too long) is a new situation and is told again.
    async fn report_renewal(
        &self,
        stored: &Value,
        cluster: &str,
        before: Option<&Condition>,
        after: &Condition,
    ) {
        if before.map(|b| b.status) != Some(after.status) {
            self.renewal_transitions
                .with_label_values(&[after.status.as_str()])
                .inc();
        }
        let (kind, reason) = if after.status == ConditionStatus::True {
            tracing::warn!(cluster, detail = %after.message, "pull member renews its lease too slowly");
            (EventType::Warning, CONDITION_LEASE_RENEWAL_TOO_SLOW)
        } else {
            tracing::info!(cluster, detail = %after.message, "pull member renews its lease in time again");
            (EventType::Normal, "LeaseRenewalInTime")
        };
        self.events
            .cluster(stored, kind, reason, &after.message)
            .await;
    }
}

/// Whether `stored` says the same as `next` (status, reason, message): times aside.
fn same_condition(stored: Option<&Condition>, next: &Condition) -> bool {
    stored.is_some_and(|c| {
        c.status == next.status && c.reason == next.reason && c.message == next.message
    })
}

/// Puts `cond` in place of the condition of its type (keeping its own transition time).
fn replace_condition(conditions: &mut Vec<Condition>, cond: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(c) => *c = cond,
        None => conditions.push(cond),
    }
}

/// Copies a member summary into the status (as Karmada's collection does while Ready).
fn merge_summary(status: &mut ClusterStatus, summary: &Value, now: DateTime<Utc>) {
    let parsed: Result<ClusterStatus, _> = serde_json::from_value(summary.clone());
    let Ok(parsed) = parsed else {
        tracing::warn!("the member summary does not decode as cluster status");
        return;
    };
    if !parsed.kubernetes_version.is_empty() {
        status.kubernetes_version = parsed.kubernetes_version;
    }
    let complete = !parsed.api_enablements.is_empty();
    status.api_enablements = parsed.api_enablements;
    let (state, reason, message) = if complete {
        (
            ConditionStatus::True,
            "Complete",
            "collected complete API resources",
        )
    } else {
        (
            ConditionStatus::False,
            "Empty",
            "collected no API resources",
        )
    };
    set_condition(
        &mut status.conditions,
        Condition::new(CONDITION_COMPLETE_API_ENABLEMENTS, state, reason, message),
        now,
    );
    if parsed.node_summary.is_some() {
        status.node_summary = parsed.node_summary;
    }
    if parsed.resource_summary.is_some() {
        status.resource_summary = parsed.resource_summary;
    }
}

#[async_trait]
impl Reconciler for ClusterStatusController {
    fn name(&self) -> &'static str {
        "cluster-status"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let raw = match self.store.get(&well_known::clusters(), None, key).await {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => {
                self.forget(key);
                return Ok(Action::Done);
            }
            Err(e) => return Err(e.into()),
        };
        let cluster = decode_cluster(&raw, key)?;
        match cluster.spec.sync_mode {
            Some(SyncMode::Push) => self.reconcile_push(key, &raw, &cluster).await,
            _ => self.reconcile_pull(key, &raw, &cluster).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;
    use crate::controllers::settings::GracePeriods;
    use crate::probes::{MemberError, MemberObject, SummaryError};
    use crate::probes::{MemberTarget, ProbeResult};
    use chrono::{Duration, TimeZone};
    use flotilla_support::clock::{Clock, FakeClock};
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct FakeMember {
        healthy: AtomicBool,
    }

    #[async_trait]
    impl MemberClient for FakeMember {
        async fn probe(&self, _: &MemberTarget) -> ProbeResult {
            let ok = self.healthy.load(Ordering::SeqCst);
            ProbeResult::answered(ok)
        }
        async fn summary(&self, _: &MemberTarget) -> Result<Value, SummaryError> {
            Ok(json!({"kubernetesVersion": "v1.32.0-sim",
                "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                "nodeSummary": {"totalNum": 3, "readyNum": 3}}))
        }
        async fn apply(&self, _: &MemberTarget, m: &Value) -> Result<Value, MemberError> {
            Ok(m.clone())
        }
        async fn get(
            &self,
            _: &MemberTarget,
            _: &MemberObject,
        ) -> Result<Option<Value>, MemberError> {
            Ok(None)
        }
        async fn delete(&self, _: &MemberTarget, _: &MemberObject) -> Result<(), MemberError> {
            Ok(())
        }
    }

    async fn setup(
        mode: &str,
    ) -> (
        Arc<dyn Store>,
        Arc<FakeClock>,
        Arc<FakeMember>,
        ClusterStatusController,
    ) {
        let (store, clock, member, c, _) = setup_with(mode, HealthConfig::default()).await;
        (store, clock, member, c)
    }

    async fn setup_with(
        mode: &str,
        config: HealthConfig,
    ) -> (
        Arc<dyn Store>,
        Arc<FakeClock>,
        Arc<FakeMember>,
        ClusterStatusController,
        prometheus::Registry,
    ) {
        let world = TestWorld::at(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
        let (store, clock) = (world.store.clone(), world.clock.clone());
        let member = Arc::new(FakeMember {
            healthy: AtomicBool::new(true),
        });
        let c = ClusterStatusController::new(
            store.clone(),
            world.shared_clock.clone(),
            member.clone(),
            config,
            world.events(),
            &world.metrics,
        )
        .unwrap();
        let mut spec = json!({"syncMode": mode});
        if mode == "Push" {
            spec["apiEndpoint"] = json!("http://127.0.0.1:1");
        }
        store
            .create(&well_known::clusters(), json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "m1"}, "spec": spec}))
            .await
            .unwrap();
        (store, clock, member, c, world.metrics.clone())
    }

    async fn ready(store: &Arc<dyn Store>) -> Option<(String, String)> {
        let c = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        c.lookup("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map(|c| {
                (
                    c["status"].as_str().unwrap().to_string(),
                    c["reason"].as_str().unwrap().to_string(),
                )
            })
    }

    fn s(x: &str, y: &str) -> Option<(String, String)> {
        Some((x.into(), y.into()))
    }

    #[tokio::test]
    async fn push_members_follow_probes_through_the_thresholds() {
        let (store, clock, member, c) = setup("Push").await;
        assert_eq!(
            c.reconcile("m1").await.unwrap(),
            Action::RequeueAfter(std::time::Duration::from_secs(10))
        );
        assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        let cluster = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        assert_eq!(cluster["status"]["kubernetesVersion"], "v1.32.0-sim");
        // Unhealthy: stays True for the 30 s failure threshold, then False.
        member.healthy.store(false, Ordering::SeqCst);
        for _ in 0..3 {
            clock.advance(Duration::seconds(10));
            c.reconcile("m1").await.unwrap();
            assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        }
        clock.advance(Duration::seconds(10));
        c.reconcile("m1").await.unwrap();
        assert_eq!(ready(&store).await, s("False", "ClusterNotReady"));
        // A reconcile sooner than the update frequency does not probe again.
        member.healthy.store(true, Ordering::SeqCst);
        clock.advance(Duration::seconds(3));
        assert_eq!(
            c.reconcile("m1").await.unwrap(),
            Action::RequeueAfter(std::time::Duration::from_secs(7))
        );
        // Healthy again: True after the success threshold.
        for _ in 0..3 {
            clock.advance(Duration::seconds(10));
            c.reconcile("m1").await.unwrap();
        }
        assert_eq!(ready(&store).await, s("False", "ClusterNotReady"));
        clock.advance(Duration::seconds(10));
        c.reconcile("m1").await.unwrap();
        assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        // Each transition left an Event.
        let events = store
            .list(&well_known::events(), None, &Default::default())
            .await
            .unwrap();
        let mut reasons: Vec<(&str, i64)> = events
            .items
            .iter()
            .map(|e| (e["reason"].as_str().unwrap(), e["count"].as_i64().unwrap()))
            .collect();
        reasons.sort_unstable();
        // Ready, NotReady, Ready again: the second ClusterReady bumps the first one's count.
        assert_eq!(reasons, [("ClusterNotReady", 1), ("ClusterReady", 2)]);
    }

    #[tokio::test]
    async fn pull_members_turn_unknown_without_lease_renewals() {
        let (store, clock, _member, c) = setup("Pull").await;
        let lease = |t: DateTime<Utc>| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "m1", "namespace": "karmada-cluster"},
            "spec": {"holderIdentity": "m1", "leaseDurationSeconds": 40, "renewTime": t.to_rfc3339()}})
        };
        // Never posted: Unknown after the 60 s startup grace.
        c.reconcile("m1").await.unwrap();
        clock.advance(Duration::seconds(61));
        c.reconcile("m1").await.unwrap();
        assert_eq!(
            ready(&store).await,
            s("Unknown", "ClusterStatusNeverUpdated")
        );
        // The agent posts Ready and renews its lease.
        let mut cluster = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        cluster["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "ok", "lastTransitionTime": clock.now().to_rfc3339()}]);
        store
            .update_status(&well_known::clusters(), cluster)
            .await
            .unwrap();
        let mut stored = store
            .create(&well_known::leases(), lease(clock.now()))
            .await
            .unwrap();
        for _ in 0..10 {
            clock.advance(Duration::seconds(10));
            stored["spec"]["renewTime"] = json!(clock.now().to_rfc3339());
            stored = store.update(&well_known::leases(), stored).await.unwrap();
            c.reconcile("m1").await.unwrap();
            assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        }
        // The agent goes silent: Unknown once the 40 s grace has passed.
        clock.advance(Duration::seconds(40));
        c.reconcile("m1").await.unwrap();
        assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        clock.advance(Duration::seconds(1));
        c.reconcile("m1").await.unwrap();
        assert_eq!(ready(&store).await, s("Unknown", "ClusterStatusUnknown"));
    }

    /// A leader whose view of the store lags (its cache after a pause) holds an old renewal of
    /// a member that renewed since through another server: the member is judged on a fresh
    /// read of its Lease before it turns not Ready (issue #36's fault schedule: a paused
    /// leader's cache turned a healthy member Unknown).
    #[tokio::test]
    async fn a_member_is_judged_gone_only_on_a_fresh_read_of_its_lease() {
        use crate::store::etcd::etcd_store::ReadMode;
        use crate::store::etcd::{EtcdStore, EtcdStoreOptions};
        let etcd = crate::testing::etcd::EtcdCluster::start(1)
            .await
            .expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let api = EtcdStore::open_with_client(
            client.clone(),
            "/status-test",
            crate::store::StoreConfig::default(),
            EtcdStoreOptions::default(),
        )
        .await
        .expect("the store opens");
        let world = TestWorld::at(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
        let clock = world.clock.clone();
        let mut cluster = api
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "m1"}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        cluster["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "ClusterReady",
            "message": "ok", "lastTransitionTime": clock.now().to_rfc3339()}]);
        api.update_status(&well_known::clusters(), cluster)
            .await
            .unwrap();
        let mut lease = api
            .create(&well_known::leases(), json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "m1", "namespace": "karmada-cluster"},
                "spec": {"holderIdentity": "m1", "leaseDurationSeconds": 10, "renewTime": clock.now().to_rfc3339()}}))
            .await
            .unwrap();
        let lagging = EtcdStore::stalled(client, "/status-test", ReadMode::Cached).await;
        let c = ClusterStatusController::new(
            lagging,
            world.shared_clock.clone(),
            Arc::new(FakeMember {
                healthy: AtomicBool::new(true),
            }),
            HealthConfig::default(),
            world.events(),
            &world.metrics,
        )
        .unwrap();
        c.reconcile("m1").await.unwrap();
        // The agent renews through another server; the leader's view does not see it.
        clock.advance(Duration::seconds(30));
        lease["spec"]["renewTime"] = json!(clock.now().to_rfc3339());
        api.update(&well_known::leases(), lease).await.unwrap();
        // 45 s after the renewal the view holds, 15 s after the last one: still Ready.
        clock.advance(Duration::seconds(15));
        c.reconcile("m1").await.unwrap();
        let stored = api.get(&well_known::clusters(), None, "m1").await.unwrap();
        assert_eq!(
            stored["status"]["conditions"][0]["status"], "True",
            "{stored}"
        );
    }

    /// The (status, reason) of the cluster's `type_` condition.
    async fn condition(store: &Arc<dyn Store>, type_: &str) -> Option<(String, String)> {
        let c = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        c.lookup("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .map(|c| {
                (
                    c["status"].as_str().unwrap().to_string(),
                    c["reason"].as_str().unwrap().to_string(),
                )
            })
    }

    /// (reason, type, count) of every Event, sorted.
    async fn events(store: &Arc<dyn Store>) -> Vec<(String, String, i64)> {
        let events = store
            .list(&well_known::events(), None, &Default::default())
            .await
            .unwrap();
        let mut all: Vec<(String, String, i64)> = events
            .items
            .iter()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap().to_string(),
                    e["type"].as_str().unwrap().to_string(),
                    e["count"].as_i64().unwrap(),
                )
            })
            .collect();
        all.sort();
        all
    }

    fn counter(registry: &prometheus::Registry, name: &str, status: &str) -> f64 {
        registry
            .gather()
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric().iter())
            .filter(|m| m.get_label().iter().any(|l| l.value() == status))
            .map(|m| m.get_counter().get_value())
            .sum()
    }

    #[tokio::test]
    async fn a_pull_member_whose_lease_outlasts_the_grace_is_told_once_and_cleared() {
        let config = HealthConfig {
            grace: GracePeriods {
                monitor: std::time::Duration::from_secs(2),
                startup: std::time::Duration::from_secs(5),
            },
            monitor_period: std::time::Duration::from_millis(300),
            ..HealthConfig::default()
        };
        let (store, clock, _member, c, metrics) = setup_with("Pull", config).await;
        let mut cluster = store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        cluster["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "ok", "lastTransitionTime": clock.now().to_rfc3339()}]);
        store
            .update_status(&well_known::clusters(), cluster)
            .await
            .unwrap();
        // An agent started with --lease-renew-interval-ms 10000 declares 40 s.
        let mut lease = store
            .create(&well_known::leases(), json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "m1", "namespace": "karmada-cluster"},
                "spec": {"holderIdentity": "m1", "leaseDurationSeconds": 40, "renewTime": clock.now().to_rfc3339()}}))
            .await
            .unwrap();
        c.reconcile("m1").await.unwrap();
        assert_eq!(
            condition(&store, CONDITION_LEASE_RENEWAL_TOO_SLOW).await,
            s("True", "LeaseDurationExceedsGracePeriod")
        );
        assert_eq!(ready(&store).await, s("True", "ClusterReady"));
        // Every later look while nothing changes: no second Event, no second count.
        for _ in 0..5 {
            clock.advance(Duration::milliseconds(300));
            c.reconcile("m1").await.unwrap();
        }
        assert_eq!(
            events(&store).await,
            [("LeaseRenewalTooSlow".to_string(), "Warning".to_string(), 1)]
        );
        let name = "flotilla_cluster_lease_renewal_too_slow_transitions_total";
        assert_eq!(counter(&metrics, name, "True"), 1.0);
        // The agent follows the server now: 500 ms renewals declare 2 s.
        lease["spec"]["leaseDurationSeconds"] = json!(2);
        lease["spec"]["renewTime"] = json!(clock.now().to_rfc3339());
        store.update(&well_known::leases(), lease).await.unwrap();
        c.reconcile("m1").await.unwrap();
        assert_eq!(
            condition(&store, CONDITION_LEASE_RENEWAL_TOO_SLOW).await,
            s("False", "LeaseDurationWithinGracePeriod")
        );
        c.reconcile("m1").await.unwrap();
        assert_eq!(
            events(&store).await,
            [
                ("LeaseRenewalInTime".to_string(), "Normal".to_string(), 1),
                ("LeaseRenewalTooSlow".to_string(), "Warning".to_string(), 1)
            ]
        );
        assert_eq!(counter(&metrics, name, "False"), 1.0);
    }

    #[tokio::test]
    async fn a_pull_member_that_fits_the_grace_gets_no_renewal_condition() {
        let (store, _clock, _member, c) = setup("Pull").await;
        store
            .create(&well_known::leases(), json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "m1", "namespace": "karmada-cluster"},
                "spec": {"holderIdentity": "m1", "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00Z"}}))
            .await
            .unwrap();
        c.reconcile("m1").await.unwrap();
        assert_eq!(
            condition(&store, CONDITION_LEASE_RENEWAL_TOO_SLOW).await,
            None
        );
        assert_eq!(events(&store).await, []);
    }
}
