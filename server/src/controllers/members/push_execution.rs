//! The execution controller for push members (docs/semantics.md §10.4): the server applies
//! the manifests of each Work in `karmada-es-<cluster>` to a push member's HTTP surface, reads
//! the objects' status back into the Work's status (Applied condition, manifestStatuses) every
//! `status_period`, and on a Work's deletion deletes the objects on the member before it drops
//! the execution finalizer — waiting while the member is not Ready, unless the member itself is
//! being deleted. Pull members do all of this in their agent.
//!
//! Every apply and delete on a member first confirms the leader's term
//! ([`Store::confirm_term`]): the fence of the store's writes does not reach a member's API, so
//! a leader paused past its term would otherwise push an older generation over the one its
//! successor applied. What this term has applied starts empty with the term's controllers, so
//! a new leader applies each Work once before it only reads status.

use crate::controllers::members::member_credentials::member_target;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::probes::{MemberClient, MemberObject};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use flotilla_api::cluster::{cluster_of_execution_namespace, Cluster, SyncMode};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus};
use flotilla_api::work::{CONDITION_APPLIED, EXECUTION_CONTROLLER_FINALIZER};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The controller.
pub struct PushExecutionController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    member: Arc<dyn MemberClient>,
    status_period: Duration,
    /// Work uid -> generation last applied.
    applied: Mutex<HashMap<String, i64>>,
}

impl PushExecutionController {
    /// A controller that refreshes Work status every `status_period`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        member: Arc<dyn MemberClient>,
        status_period: Duration,
    ) -> Self {
        Self {
            store,
            clock,
            member,
            status_period,
            applied: Mutex::new(HashMap::new()),
        }
    }

    async fn remove_finalizer(&self, work: &Value) -> Result<(), ReconcileError> {
        let mut updated = work.clone();
        if let Some(f) = updated["metadata"]["finalizers"].as_array_mut() {
            f.retain(|x| x != EXECUTION_CONTROLLER_FINALIZER);
        }
        match self.store.update(&well_known::works(), updated).await {
            Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn manifests(work: &Value) -> Vec<Value> {
    work.lookup("/spec/workload/manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The manifestStatuses entry of one member object.
pub fn manifest_status(ordinal: usize, manifest: &Value, member_object: Option<&Value>) -> Value {
    let o = MemberObject::of(manifest);
    let (group, version) = o
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &o.api_version));
    let mut identifier = json!({
        "ordinal": ordinal,
        "group": group,
        "version": version,
        "kind": o.kind,
        "resource": format!("{}s", o.kind.to_ascii_lowercase()),
        "name": o.name,
    });
    if !o.namespace.is_empty() {
        identifier["namespace"] = json!(o.namespace);
    }
    let mut entry = json!({"identifier": identifier});
    if let Some(status) = member_object.and_then(|m| m.get("status")) {
        entry["status"] = status.clone();
    }
    if let Some(generation) = member_object.and_then(|m| m.lookup("/metadata/generation")) {
        entry["generation"] = generation.clone();
    }
    entry
}

#[async_trait]
impl Reconciler for PushExecutionController {
    fn name(&self) -> &'static str {
        "push-execution"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some((ns, name)) = key.split_once('/') else {
            return Ok(Action::Done);
        };
        let Some(cluster_name) = cluster_of_execution_namespace(ns) else {
            return Ok(Action::Done);
        };
        let cluster = match self
            .store
            .get_shared(&well_known::clusters(), None, cluster_name)
            .await
        {
            Ok(c) => c,
            Err(StoreError::NotFound { .. }) => return Ok(Action::Done),
            Err(e) => return Err(e.into()),
        };
        // Works of pull members are the agent's business (told apart before the Cluster is
        // decoded: most Works of a fleet of pull members come here only to be left alone).
        let push = cluster
            .lookup("/spec/syncMode")
            .is_some_and(|m| SyncMode::deserialize(m).ok() == Some(SyncMode::Push));
        let Some(cluster) = push
            .then(|| Cluster::deserialize(cluster.as_ref()).ok())
            .flatten()
        else {
            return Ok(Action::Done);
        };
        let works = well_known::works();
        let work = match self.store.get(&works, Some(ns), name).await {
            Ok(w) => w,
            Err(StoreError::NotFound { .. }) => {
                return Ok(Action::Done);
            }
            Err(e) => return Err(e.into()),
        };
        let member = member_target(self.store.as_ref(), &cluster).await?;
        let uid = work
            .lookup("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let deleting = work.lookup("/metadata/deletionTimestamp").is_some();
        let has_finalizer = work
            .lookup("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x == EXECUTION_CONTROLLER_FINALIZER));
        if deleting {
            if !has_finalizer {
                return Ok(Action::Done);
            }
            let preserve = work
                .lookup("/spec/preserveResourcesOnDeletion")
                .and_then(Value::as_bool)
                == Some(true);
            if !preserve && !cluster.metadata.is_deleting() {
                if !cluster.is_ready() {
                    tracing::debug!(
                        cluster = cluster_name,
                        work = key,
                        "member not Ready; work deletion waits"
                    );
                    return Ok(Action::RequeueAfter(self.status_period));
                }
                for m in manifests(&work) {
                    self.store.confirm_term().await?;
                    self.member
                        .delete(&member, &MemberObject::of(&m))
                        .await
                        .map_err(|e| ReconcileError::Other(e.to_string()))?;
                }
            }
            self.applied.lock().remove(&uid);
            self.remove_finalizer(&work).await?;
            return Ok(Action::Done);
        }
        if work
            .lookup("/spec/suspendDispatching")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Ok(Action::Done);
        }
        if !cluster.is_ready() {
            return Ok(Action::RequeueAfter(self.status_period));
        }
        let generation = work
            .lookup("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let needs_apply = self.applied.lock().get(&uid) != Some(&generation);
        let mut statuses = Vec::new();
        let mut failure = None;
        for (i, m) in manifests(&work).iter().enumerate() {
            let result = if needs_apply {
                // A deposed leader's push never leaves the process: the term is confirmed
                // before each apply (the new leader's own controller re-applies every Work
                // once in its term, as `applied` starts empty).
                self.store.confirm_term().await?;
                self.member.apply(&member, m).await.map(Some)
            } else {
                self.member.get(&member, &MemberObject::of(m)).await
            };
            match result {
                Ok(obj) => statuses.push(manifest_status(i, m, obj.as_ref())),
                Err(e) => {
                    failure = Some(e.to_string());
                    statuses.push(manifest_status(i, m, None));
                }
            }
        }
        let now = self.clock.now();
        let condition = match &failure {
            None => Condition::new(
                CONDITION_APPLIED,
                ConditionStatus::True,
                "AppliedSuccessful",
                "Manifest has been successfully applied",
            ),
            Some(e) => Condition::new(
                CONDITION_APPLIED,
                ConditionStatus::False,
                "AppliedFailed",
                e,
            ),
        };
        let mut conditions: Vec<Condition> = work
            .lookup("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        set_condition(&mut conditions, condition, now);
        let mut updated = work.clone();
        updated["status"] = json!({"conditions": conditions, "manifestStatuses": statuses});
        if updated != work {
            self.store.update_status(&works, updated).await?;
        }
        if failure.is_none() {
            self.applied.lock().insert(uid, generation);
        }
        Ok(Action::RequeueAfter(self.status_period))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;
    use crate::probes::{MemberError, SummaryError};
    use crate::probes::{MemberTarget, ProbeResult};
    use crate::store::DeleteOptions;

    #[derive(Default)]
    struct FakeMember {
        objects: Mutex<HashMap<String, Value>>,
        applies: Mutex<u32>,
    }

    fn id(o: &MemberObject) -> String {
        format!("{}/{}/{}/{}", o.api_version, o.kind, o.namespace, o.name)
    }

    #[async_trait]
    impl MemberClient for FakeMember {
        async fn probe(&self, _: &MemberTarget) -> ProbeResult {
            ProbeResult::answered(true)
        }
        async fn summary(&self, _: &MemberTarget) -> Result<Value, SummaryError> {
            Ok(json!({}))
        }
        async fn apply(&self, _: &MemberTarget, m: &Value) -> Result<Value, MemberError> {
            *self.applies.lock() += 1;
            let mut stored = m.clone();
            stored["status"] = json!({"readyReplicas": 0});
            stored["metadata"]["generation"] = json!(5);
            self.objects
                .lock()
                .insert(id(&MemberObject::of(m)), stored.clone());
            Ok(stored)
        }
        async fn get(
            &self,
            _: &MemberTarget,
            o: &MemberObject,
        ) -> Result<Option<Value>, MemberError> {
            Ok(self.objects.lock().get(&id(o)).cloned())
        }
        async fn delete(&self, _: &MemberTarget, o: &MemberObject) -> Result<(), MemberError> {
            self.objects.lock().remove(&id(o));
            Ok(())
        }
    }

    async fn setup(ready: &str) -> (Arc<dyn Store>, Arc<FakeMember>, PushExecutionController) {
        let world = TestWorld::new();
        let store = world.store.clone();
        let member = Arc::new(FakeMember::default());
        let c = PushExecutionController::new(
            store.clone(),
            world.shared_clock.clone(),
            member.clone(),
            Duration::from_secs(5),
        );
        member_m1_with_work_w(store.as_ref(), ready).await;
        (store, member, c)
    }

    /// Stores the push member `m1` (its Ready condition `ready`) and the Work `w` of one
    /// Deployment in its execution namespace.
    async fn member_m1_with_work_w(store: &dyn Store, ready: &str) {
        let clusters = well_known::clusters();
        let mut cluster = store
            .create(
                &clusters,
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": "m1"},
                       "spec": {"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1"}}),
            )
            .await
            .unwrap();
        cluster["status"] = json!({"conditions": [{"type": "Ready", "status": ready, "reason": "r", "message": "m"}]});
        store.update_status(&clusters, cluster).await.unwrap();
        store
            .create(&well_known::works(), json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                "metadata": {"name": "w", "namespace": "karmada-es-m1", "finalizers": [EXECUTION_CONTROLLER_FINALIZER]},
                "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2}}]}}}))
            .await
            .unwrap();
    }

    /// The Work `karmada-es-m1/w` as stored now.
    async fn stored_work(store: &dyn Store) -> Result<Value, StoreError> {
        store
            .get(&well_known::works(), Some("karmada-es-m1"), "w")
            .await
    }

    /// Deletes the Work `karmada-es-m1/w` (its finalizer keeps it until the controller lets go).
    async fn delete_work(store: &dyn Store) {
        store
            .delete(
                &well_known::works(),
                Some("karmada-es-m1"),
                "w",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn applies_reports_status_and_cleans_up_before_the_finalizer_goes() {
        let (store, member, c) = setup("True").await;
        assert_eq!(
            c.reconcile("karmada-es-m1/w").await.unwrap(),
            Action::RequeueAfter(Duration::from_secs(5))
        );
        let w = stored_work(store.as_ref()).await.unwrap();
        assert_eq!(w["status"]["conditions"][0]["type"], "Applied");
        assert_eq!(w["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            w["status"]["manifestStatuses"][0]["identifier"]["kind"],
            "Deployment"
        );
        assert_eq!(
            w["status"]["manifestStatuses"][0]["status"]["readyReplicas"],
            0
        );
        assert_eq!(
            w["status"]["manifestStatuses"][0]["generation"], 5,
            "the member object's generation"
        );
        // A second pass reads status without applying again.
        c.reconcile("karmada-es-m1/w").await.unwrap();
        assert_eq!(*member.applies.lock(), 1);
        // Deletion removes the member object, then the finalizer, then the Work is gone.
        delete_work(store.as_ref()).await;
        c.reconcile("karmada-es-m1/w").await.unwrap();
        assert!(member.objects.lock().is_empty());
        assert!(stored_work(store.as_ref()).await.is_err());
    }

    #[tokio::test]
    async fn nothing_is_applied_or_deleted_while_the_member_is_not_ready() {
        let (store, member, c) = setup("False").await;
        c.reconcile("karmada-es-m1/w").await.unwrap();
        assert_eq!(*member.applies.lock(), 0);
        delete_work(store.as_ref()).await;
        c.reconcile("karmada-es-m1/w").await.unwrap();
        let w = stored_work(store.as_ref()).await.unwrap();
        assert!(
            w["metadata"]["deletionTimestamp"].is_string(),
            "the finalizer holds the Work"
        );
    }

    /// A leader paused past its term wakes and pushes what it read before: with the fence of
    /// the store's writes alone, its apply reached the member and the successor's newer
    /// generation was overwritten (issue #36). The term is confirmed first, so neither the
    /// apply nor a delete leaves the process, and the term ends.
    #[tokio::test]
    async fn a_deposed_leaders_push_never_reaches_the_member() {
        use crate::store::etcd::{EtcdStore, EtcdStoreOptions, Fence};
        use crate::testing::etcd::EtcdCluster;
        use std::sync::atomic::{AtomicU64, Ordering};

        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let store = EtcdStore::open_with_client(
            client.clone(),
            "/push-test",
            crate::store::StoreConfig::default(),
            EtcdStoreOptions::default(),
        )
        .await
        .expect("the store opens");
        // The term: an election key, as the elector would hold it.
        let mut kv = client.kv_client();
        let key = b"/push-test-election/leader/a".to_vec();
        kv.put(key.clone(), "a", None).await.unwrap();
        let held = kv.get(key.clone(), None).await.unwrap().kvs()[0].create_revision();
        let refusals = Arc::new(AtomicU64::new(0));
        let counted = refusals.clone();
        let fenced = store.fenced(Fence {
            key: key.clone(),
            revision: held,
            refused: Arc::new(move || {
                counted.fetch_add(1, Ordering::Relaxed);
            }),
            committed: Arc::new(|_| {}),
        });
        member_m1_with_work_w(store.as_ref(), "True").await;
        let member = Arc::new(FakeMember::default());
        let leader = PushExecutionController::new(
            fenced,
            Arc::new(flotilla_support::clock::SystemClock),
            member.clone(),
            Duration::from_secs(5),
        );
        leader.reconcile("karmada-es-m1/w").await.unwrap();
        assert_eq!(*member.applies.lock(), 1, "applied while the term lasts");

        // Another server leads: its controller applies the Work once in its term, although
        // the Work's status says Applied, then the Work changes under it.
        kv.delete(key.clone(), None).await.unwrap();
        let successor = PushExecutionController::new(
            store.clone(),
            Arc::new(flotilla_support::clock::SystemClock),
            member.clone(),
            Duration::from_secs(5),
        );
        successor.reconcile("karmada-es-m1/w").await.unwrap();
        assert_eq!(*member.applies.lock(), 2, "the new term applies again");
        let mut work = stored_work(store.as_ref()).await.unwrap();
        work["spec"]["workload"]["manifests"][0]["spec"]["replicas"] = json!(3);
        store.update(&well_known::works(), work).await.unwrap();
        successor.reconcile("karmada-es-m1/w").await.unwrap();
        assert_eq!(*member.applies.lock(), 3);

        let late = leader.reconcile("karmada-es-m1/w").await;
        assert!(
            matches!(late, Err(ReconcileError::Store(StoreError::Fenced { .. }))),
            "the late push is refused: {late:?}"
        );
        assert_eq!(*member.applies.lock(), 3, "nothing more was applied");
        delete_work(store.as_ref()).await;
        let late = leader.reconcile("karmada-es-m1/w").await;
        assert!(matches!(
            late,
            Err(ReconcileError::Store(StoreError::Fenced { .. }))
        ));
        assert_eq!(member.objects.lock().len(), 1, "nothing was deleted");
        assert_eq!(refusals.load(Ordering::Relaxed), 2);
    }
}
