//! The cluster removal controller (docs/semantics.md §2, Karmada's cluster controller
//! `removeCluster`): a deleted Cluster stays, being deleted, behind the finalizer
//! [`CLUSTER_CONTROLLER_FINALIZER`] until no binding lists it in `spec.clusters` and its Works
//! are gone, so that its workloads move instead of being forgotten. It owns that finalizer:
//! it puts it on every live Cluster, and on a deleted one it lets every Work of the
//! execution namespace go without contacting the member (the execution finalizer dropped,
//! the Work deleted; an exactly-once Work only once the member has fenced itself), waits for
//! the scheduler to move the bindings off the cluster (§8.1, trigger 5), then deletes the
//! member's Lease and removes the finalizer, and the Cluster is gone. What to do is the pure
//! [`plan`]; the reconciler reads, calls it, writes, records an Event per step a user would
//! ask about, and looks again every [`REMOVAL_RETRY`] while it waits.

use crate::controllers::failover::fencing::{fence_wait, FenceWait};
use crate::controllers::members::cluster_taints::lease_renew_time;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::events::{EventRecorder, EventType};
use crate::store::{DeleteOptions, ListOptions, Store, StoreError};
use async_trait::async_trait;
use flotilla_api::cluster::{
    execution_namespace, CLUSTER_CONTROLLER_FINALIZER, CLUSTER_LEASE_NAMESPACE,
};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType};
use flotilla_api::work::{
    EXACTLY_ONCE, EXECUTION_CONTROLLER_FINALIZER, PLACEMENT_GUARANTEE_ANNOTATION,
};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How soon a deleted Cluster whose bindings have not all left is looked at again (Karmada:
/// 10 s). Bindings usually leave within one scheduler pass, so this is short.
pub const REMOVAL_RETRY: Duration = Duration::from_secs(2);

/// Event reason: the Works of a deleted Cluster were let go without contacting the member.
pub const EVENT_WORKS_RELEASED: &str = "ClusterWorksReleased";
/// Event reason: a deleted Cluster waits for bindings to leave it.
pub const EVENT_REMOVAL_WAITING: &str = "ClusterRemovalWaiting";
/// Event reason: a deleted Cluster's exactly-once Works wait for the member's fence time.
pub const EVENT_WAITING_FOR_FENCE: &str = "WaitingForFence";
/// Event reason: a deleted Cluster's finalizer was removed; the Cluster is gone.
pub const EVENT_CLUSTER_REMOVED: &str = "ClusterRemoved";

/// A Work of the cluster's execution namespace, as [`plan`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkFacts {
    /// Its name.
    pub name: String,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// It carries the execution finalizer (only the member's side could remove it).
    pub held: bool,
    /// It is a Work of an exactly-once binding (`flotilla.io/placement-guarantee`).
    pub exactly_once: bool,
}

/// What the controller read of one Cluster and its world.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovalFacts {
    /// The Cluster exists (false: it is gone, only its Works may be left).
    pub exists: bool,
    /// The Cluster has a deletionTimestamp.
    pub deleting: bool,
    /// The Cluster carries [`CLUSTER_CONTROLLER_FINALIZER`].
    pub has_finalizer: bool,
    /// The Works in its execution namespace.
    pub works: Vec<WorkFacts>,
    /// Keys of the bindings whose `spec.clusters` lists it, sorted.
    pub bindings: Vec<String>,
    /// The member may still run an exactly-once copy: its fence time (last lease renewal +
    /// `--member-fence-after`) is still ahead.
    pub unfenced: bool,
}

/// What to write for one Cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovalPlan {
    /// Put the finalizer on the (live) Cluster.
    pub add_finalizer: bool,
    /// Works whose execution finalizer is dropped (without calling the member).
    pub release: Vec<String>,
    /// Works to delete (those not already being deleted).
    pub delete: Vec<String>,
    /// The bindings the removal waits for (they still list the cluster).
    pub waiting_for: Vec<String>,
    /// Exactly-once Works kept until the member's fence time.
    pub fencing: Vec<String>,
    /// Remove the Cluster's finalizer: nothing holds it any more.
    pub remove_finalizer: bool,
}

impl RemovalPlan {
    /// Whether the removal is still under way (look again later).
    pub fn waits(&self) -> bool {
        !self.waiting_for.is_empty()
            || !self.release.is_empty()
            || !self.delete.is_empty()
            || !self.fencing.is_empty()
    }
}

/// Decides what happens to a Cluster (docs/semantics.md §2):
/// - live: it gets the finalizer if it lacks it; nothing else;
/// - being deleted, or gone: every Work of its execution namespace goes without the member
///   being called (execution finalizer dropped, Work deleted) — the member may be down for
///   good, and its agent's credential was revoked with the delete — except the Works of
///   exactly-once bindings while the member has not fenced itself: they stay until its fence
///   time, so that binding-works' fence gate keeps their replacements back (Part 1,
///   "Self-fencing and failback");
/// - being deleted: the finalizer goes once no binding lists the cluster and no Work is left
///   (Works released in this pass are checked on the next one, as binding-works may write a
///   Work again for a binding the scheduler has not moved yet).
///
/// The last copy is not protected here: a user who deletes a Cluster means it, and the
/// scheduler takes a deleted cluster out of every placement even when nothing replaces it
/// (docs/semantics.md §8.7), as Karmada does.
pub fn plan(facts: &RemovalFacts) -> RemovalPlan {
    if facts.exists && !facts.deleting {
        return RemovalPlan {
            add_finalizer: !facts.has_finalizer,
            ..RemovalPlan::default()
        };
    }
    let (fencing, going): (Vec<&WorkFacts>, Vec<&WorkFacts>) = facts
        .works
        .iter()
        .partition(|w| w.exactly_once && facts.unfenced);
    let release = going
        .iter()
        .filter(|w| w.held)
        .map(|w| w.name.clone())
        .collect();
    let delete = going
        .iter()
        .filter(|w| !w.deleting)
        .map(|w| w.name.clone())
        .collect();
    RemovalPlan {
        add_finalizer: false,
        release,
        delete,
        fencing: fencing.iter().map(|w| w.name.clone()).collect(),
        waiting_for: if facts.exists {
            facts.bindings.clone()
        } else {
            Vec::new()
        },
        remove_finalizer: facts.exists
            && facts.has_finalizer
            && facts.works.is_empty()
            && facts.bindings.is_empty(),
    }
}

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj.lookup("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Records `message` as the last one said of `key` in `said`: true when it differs from the
/// one before (so it is said once, not once a pass).
fn is_news(said: &Mutex<HashMap<String, String>>, key: &str, message: &str) -> bool {
    said.lock()
        .insert(key.to_string(), message.to_string())
        .as_deref()
        != Some(message)
}

/// `obj` with `finalizer` added or taken away.
fn with_finalizer(obj: &Value, finalizer: &str, present: bool) -> Value {
    let mut updated = obj.clone();
    let mut list: Vec<Value> = updated
        .lookup("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    list.retain(|x| x != finalizer);
    if present {
        list.push(json!(finalizer));
    }
    updated["metadata"]["finalizers"] = json!(list);
    updated
}

/// The keys of the bindings in `items` whose `spec.clusters` names `cluster`.
fn bindings_listing(items: &[Value], prefix: &str, cluster: &str) -> Vec<String> {
    items
        .iter()
        .filter(|b| {
            b.lookup("/spec/clusters")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == cluster))
        })
        .filter_map(|b| {
            let name = b.lookup("/metadata/name").and_then(Value::as_str)?;
            Some(
                match b.lookup("/metadata/namespace").and_then(Value::as_str) {
                    Some(ns) if !ns.is_empty() => format!("{prefix}{ns}/{name}"),
                    _ => format!("{prefix}{name}"),
                },
            )
        })
        .collect()
}

/// The controller.
pub struct ClusterRemovalController {
    store: Arc<dyn Store>,
    clock: SharedClock,
    member_fence_after: Duration,
    events: EventRecorder,
    steps: IntCounterVec,
    /// The last waiting message recorded per cluster, so a wait is one Event, not one a pass.
    last_wait: Mutex<HashMap<String, String>>,
    /// The same for the fence wait.
    last_fence: Mutex<HashMap<String, String>>,
}

impl ClusterRemovalController {
    /// A controller over `store`; its metric `flotilla_cluster_removal_steps_total` goes into
    /// `registry`. `member_fence_after` is the server's `--member-fence-after`: how long after
    /// its last lease renewal a pull member has fenced its exactly-once copies.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        member_fence_after: Duration,
        events: EventRecorder,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let steps = registered_counter_vec(
            registry,
            "flotilla_cluster_removal_steps_total",
            "Steps of the removal of deleted Clusters: works_released (Works let go without \
             contacting the member), finalizer_removed (a deleted Cluster gone).",
            &["step"],
        )?;
        Ok(Self {
            store,
            clock,
            member_fence_after,
            events,
            steps,
            last_wait: Mutex::new(HashMap::new()),
            last_fence: Mutex::new(HashMap::new()),
        })
    }

    /// What [`plan`] reads, and the member's fence wait when it has exactly-once Works whose
    /// fence time is ahead.
    async fn facts(
        &self,
        name: &str,
        cluster: Option<&Value>,
    ) -> Result<(RemovalFacts, Option<FenceWait>), StoreError> {
        let deleting = cluster.is_some_and(|c| c.lookup("/metadata/deletionTimestamp").is_some());
        let held = cluster.is_some_and(|c| has_finalizer(c, CLUSTER_CONTROLLER_FINALIZER));
        // A live Cluster's plan reads only its finalizer: its Works and bindings are not read.
        if cluster.is_some() && !deleting {
            return Ok((
                RemovalFacts {
                    exists: true,
                    has_finalizer: held,
                    ..RemovalFacts::default()
                },
                None,
            ));
        }
        let ns = execution_namespace(name);
        let works = self
            .store
            .list(&well_known::works(), Some(&ns), &ListOptions::default())
            .await?
            .items
            .iter()
            .filter_map(|w| {
                Some(WorkFacts {
                    name: w.lookup("/metadata/name")?.as_str()?.to_string(),
                    deleting: w.lookup("/metadata/deletionTimestamp").is_some(),
                    held: has_finalizer(w, EXECUTION_CONTROLLER_FINALIZER),
                    exactly_once: w
                        .lookup(&format!(
                            "/metadata/annotations/{}",
                            PLACEMENT_GUARANTEE_ANNOTATION.replace('/', "~1")
                        ))
                        .and_then(Value::as_str)
                        == Some(EXACTLY_ONCE),
                })
            })
            .collect::<Vec<WorkFacts>>();
        let fence = if works.iter().any(|w| w.exactly_once) {
            let renewed = lease_renew_time(self.store.as_ref(), name).await?;
            fence_wait(
                &[(name.to_string(), renewed)],
                self.clock.now(),
                self.member_fence_after,
            )
        } else {
            None
        };
        let mut bindings = Vec::new();
        // Only a deleted Cluster waits for its bindings (a gone one has nothing to wait for).
        if deleting {
            for (rt, prefix) in [
                (well_known::resource_bindings(), "ResourceBinding "),
                (
                    well_known::cluster_resource_bindings(),
                    "ClusterResourceBinding ",
                ),
            ] {
                let items = self
                    .store
                    .list(&rt, None, &ListOptions::default())
                    .await?
                    .items;
                bindings.extend(bindings_listing(&items, prefix, name));
            }
            bindings.sort();
        }
        Ok((
            RemovalFacts {
                exists: cluster.is_some(),
                deleting,
                has_finalizer: held,
                works,
                bindings,
                unfenced: fence.is_some(),
            },
            fence,
        ))
    }

    /// Writes `obj` back without `finalizer`; an object already gone is no error.
    async fn release(
        &self,
        rt: &ResourceType,
        obj: &Value,
        finalizer: &str,
    ) -> Result<(), StoreError> {
        match self
            .store
            .update(rt, with_finalizer(obj, finalizer, false))
            .await
        {
            Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Drops the execution finalizer of the Works named in `release` and deletes those in
    /// `delete`; answers how many were let go.
    async fn let_works_go(&self, name: &str, plan: &RemovalPlan) -> Result<usize, StoreError> {
        let rt = well_known::works();
        let ns = execution_namespace(name);
        for work in &plan.release {
            let stored = match self.store.get(&rt, Some(&ns), work).await {
                Ok(w) => w,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            self.release(&rt, &stored, EXECUTION_CONTROLLER_FINALIZER)
                .await?;
        }
        for work in &plan.delete {
            match self
                .store
                .delete(&rt, Some(&ns), work, &DeleteOptions::default())
                .await
            {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut gone: Vec<&String> = plan.release.iter().chain(&plan.delete).collect();
        gone.sort();
        gone.dedup();
        Ok(gone.len())
    }
}

#[async_trait]
impl Reconciler for ClusterRemovalController {
    fn name(&self) -> &'static str {
        "cluster-removal"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let rt = well_known::clusters();
        let cluster = match self.store.get(&rt, None, key).await {
            Ok(c) => Some(c),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let (facts, fence) = self.facts(key, cluster.as_ref()).await?;
        let plan = plan(&facts);
        if plan.add_finalizer {
            if let Some(c) = &cluster {
                self.store
                    .update(&rt, with_finalizer(c, CLUSTER_CONTROLLER_FINALIZER, true))
                    .await?;
            }
            return Ok(Action::Done);
        }
        if !plan.release.is_empty() || !plan.delete.is_empty() {
            let n = self.let_works_go(key, &plan).await?;
            self.steps
                .with_label_values(&["works_released"])
                .inc_by(n as u64);
            tracing::info!(
                cluster = key,
                works = n,
                "the Works of a deleted cluster are let go without contacting the member"
            );
            let message = format!(
                "{n} Work(s) in {} let go without contacting the member: the cluster is being deleted",
                execution_namespace(key)
            );
            let subject = cluster.clone().unwrap_or_else(|| {
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": key}})
            });
            self.events
                .record(&subject, EventType::Normal, EVENT_WORKS_RELEASED, &message)
                .await;
        }
        if let Some(wait) = &fence {
            let message = format!(
                "{} exactly-once Work(s) kept until {}, when the member has fenced itself (last \
                 lease renewal {} + --member-fence-after)",
                plan.fencing.len(),
                wait.until.to_rfc3339(),
                wait.renewed.to_rfc3339()
            );
            if is_news(&self.last_fence, key, &message) {
                tracing::info!(cluster = key, until = %wait.until.to_rfc3339(), "exactly-once Works of a deleted cluster wait for its fence time");
                let subject = cluster.clone().unwrap_or_else(|| json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": key}}));
                self.events
                    .record(
                        &subject,
                        EventType::Normal,
                        EVENT_WAITING_FOR_FENCE,
                        &message,
                    )
                    .await;
            }
            let remaining = wait.remaining(self.clock.now());
            return Ok(Action::RequeueAfter(
                remaining.clamp(Duration::from_millis(10), REMOVAL_RETRY),
            ));
        }
        let Some(cluster) = cluster else {
            self.last_wait.lock().remove(key);
            self.last_fence.lock().remove(key);
            return Ok(Action::Done);
        };
        if !plan.waiting_for.is_empty() {
            const SHOWN: usize = 5;
            let shown: Vec<&str> = plan
                .waiting_for
                .iter()
                .take(SHOWN)
                .map(String::as_str)
                .collect();
            let more = plan.waiting_for.len().saturating_sub(SHOWN);
            let mut message = format!(
                "Waiting for {} binding(s) to leave the cluster before it is removed: {}",
                plan.waiting_for.len(),
                shown.join(", ")
            );
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            if is_news(&self.last_wait, key, &message) {
                tracing::info!(
                    cluster = key,
                    bindings = plan.waiting_for.len(),
                    "deleted cluster waits for its bindings to move"
                );
                self.events
                    .record(&cluster, EventType::Normal, EVENT_REMOVAL_WAITING, &message)
                    .await;
            }
        }
        if plan.remove_finalizer {
            // The member's Lease goes with it: a Cluster joined again under the same name
            // must not read the old member's last renewal as its own.
            match self
                .store
                .delete(
                    &well_known::leases(),
                    Some(CLUSTER_LEASE_NAMESPACE),
                    key,
                    &DeleteOptions::default(),
                )
                .await
            {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            self.release(&rt, &cluster, CLUSTER_CONTROLLER_FINALIZER)
                .await?;
            self.last_wait.lock().remove(key);
            self.steps.with_label_values(&["finalizer_removed"]).inc();
            tracing::info!(
                cluster = key,
                "deleted cluster removed: no binding lists it and its Works are gone"
            );
            self.events
                .record(
                    &cluster,
                    EventType::Normal,
                    EVENT_CLUSTER_REMOVED,
                    "No binding lists the cluster and its Works are gone: the cluster is removed",
                )
                .await;
            return Ok(Action::Done);
        }
        Ok(if facts.deleting {
            Action::RequeueAfter(REMOVAL_RETRY)
        } else {
            Action::Done
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;

    fn work(name: &str, deleting: bool, held: bool) -> WorkFacts {
        WorkFacts {
            name: name.into(),
            deleting,
            held,
            exactly_once: false,
        }
    }

    fn exactly_once(name: &str) -> WorkFacts {
        WorkFacts {
            exactly_once: true,
            ..work(name, false, true)
        }
    }

    #[test]
    fn the_plan_for_each_state_of_a_cluster() {
        let live = RemovalFacts {
            exists: true,
            ..RemovalFacts::default()
        };
        let deleting = RemovalFacts {
            exists: true,
            deleting: true,
            has_finalizer: true,
            ..RemovalFacts::default()
        };
        let rows: Vec<(&str, RemovalFacts, RemovalPlan)> = vec![
            (
                "live without the finalizer: it gets it",
                live.clone(),
                RemovalPlan {
                    add_finalizer: true,
                    ..RemovalPlan::default()
                },
            ),
            (
                "live with it, Works and bindings: nothing",
                RemovalFacts {
                    has_finalizer: true,
                    works: vec![work("w", false, true)],
                    bindings: vec!["rb".into()],
                    ..live.clone()
                },
                RemovalPlan::default(),
            ),
            (
                "deleted, nothing left: the finalizer goes",
                deleting.clone(),
                RemovalPlan {
                    remove_finalizer: true,
                    ..RemovalPlan::default()
                },
            ),
            (
                "deleted with Works: released and deleted, the finalizer waits a pass",
                RemovalFacts {
                    works: vec![
                        work("a", false, true),
                        work("b", true, true),
                        work("c", false, false),
                    ],
                    ..deleting.clone()
                },
                RemovalPlan {
                    release: vec!["a".into(), "b".into()],
                    delete: vec!["a".into(), "c".into()],
                    ..RemovalPlan::default()
                },
            ),
            (
                "deleted, a binding still lists it: wait",
                RemovalFacts {
                    bindings: vec!["ResourceBinding default/web".into()],
                    ..deleting.clone()
                },
                RemovalPlan {
                    waiting_for: vec!["ResourceBinding default/web".into()],
                    ..RemovalPlan::default()
                },
            ),
            (
                "deleted without the finalizer (removed by hand): nothing to remove",
                RemovalFacts {
                    has_finalizer: false,
                    ..deleting.clone()
                },
                RemovalPlan::default(),
            ),
            (
                "deleted, an exactly-once Work before the member's fence time: it stays",
                RemovalFacts {
                    works: vec![exactly_once("eo"), work("a", false, true)],
                    unfenced: true,
                    ..deleting.clone()
                },
                RemovalPlan {
                    release: vec!["a".into()],
                    delete: vec!["a".into()],
                    fencing: vec!["eo".into()],
                    ..RemovalPlan::default()
                },
            ),
            (
                "deleted, an exactly-once Work after the fence time: it goes",
                RemovalFacts {
                    works: vec![exactly_once("eo")],
                    ..deleting.clone()
                },
                RemovalPlan {
                    release: vec!["eo".into()],
                    delete: vec!["eo".into()],
                    ..RemovalPlan::default()
                },
            ),
            (
                "gone, Works left behind: they go too",
                RemovalFacts {
                    works: vec![work("a", true, true)],
                    ..RemovalFacts::default()
                },
                RemovalPlan {
                    release: vec!["a".into()],
                    ..RemovalPlan::default()
                },
            ),
        ];
        for (name, facts, want) in rows {
            assert_eq!(plan(&facts), want, "{name}");
        }
    }

    #[test]
    fn bindings_are_named_by_kind_and_only_when_they_list_the_cluster() {
        let items = vec![
            json!({"metadata": {"namespace": "default", "name": "a"},
                   "spec": {"clusters": [{"name": "m1", "replicas": 3}, {"name": "m2"}]}}),
            json!({"metadata": {"namespace": "default", "name": "b"},
                   "spec": {"clusters": [{"name": "m2"}],
                            "gracefulEvictionTasks": [{"fromCluster": "m1"}]}}),
            json!({"metadata": {"name": "c"}, "spec": {"clusters": [{"name": "m1"}]}}),
        ];
        assert_eq!(
            bindings_listing(&items, "ResourceBinding ", "m1"),
            vec!["ResourceBinding default/a", "ResourceBinding c"]
        );
        assert!(bindings_listing(&items, "x", "m3").is_empty());
    }

    fn controller(world: &TestWorld) -> ClusterRemovalController {
        ClusterRemovalController::new(
            world.store.clone(),
            world.shared_clock.clone(),
            Duration::from_secs(45),
            world.events(),
            &world.metrics,
        )
        .unwrap()
    }

    /// A world with the pull member m1, which the controller has seen once (it carries the
    /// finalizer then).
    async fn joined() -> (TestWorld, ClusterRemovalController) {
        let world = TestWorld::new();
        let c = controller(&world);
        world
            .cluster("m1", json!({"syncMode": "Pull"}), json!({}))
            .await;
        c.reconcile("m1").await.unwrap();
        (world, c)
    }

    /// Deletes the Cluster m1 (its finalizer keeps it, being deleted).
    async fn delete_m1(world: &TestWorld) {
        world
            .store
            .delete(
                &well_known::clusters(),
                None,
                "m1",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
    }

    /// Stores an empty Work with `metadata` (in m1's execution namespace).
    async fn work_in_m1(world: &TestWorld, metadata: Value) {
        world
            .store
            .create(
                &well_known::works(),
                json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                       "metadata": metadata, "spec": {"workload": {"manifests": []}}}),
            )
            .await
            .unwrap();
    }

    /// Stores m1's Lease (in the cluster lease namespace) with `spec`.
    async fn lease_of_m1(world: &TestWorld, spec: Value) {
        world
            .store
            .create(
                &well_known::leases(),
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "m1", "namespace": CLUSTER_LEASE_NAMESPACE}, "spec": spec}),
            )
            .await
            .unwrap();
    }

    /// The Works in m1's execution namespace.
    async fn works_in_m1(world: &TestWorld) -> Vec<Value> {
        world
            .store
            .list(
                &well_known::works(),
                Some("karmada-es-m1"),
                &ListOptions::default(),
            )
            .await
            .unwrap()
            .items
    }

    async fn binding_on(world: &TestWorld, clusters: Value) -> Value {
        world
            .store
            .create(
                &well_known::resource_bindings(),
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                       "metadata": {"name": "web-deployment", "namespace": "default"},
                       "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "namespace": "default", "name": "web"},
                                "replicas": 10, "clusters": clusters}}),
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_deleted_cluster_lets_its_works_go_and_waits_for_its_bindings() {
        let (world, c) = joined().await;
        let stored = world
            .store
            .get(&well_known::clusters(), None, "m1")
            .await
            .unwrap();
        assert_eq!(
            stored["metadata"]["finalizers"],
            json!([CLUSTER_CONTROLLER_FINALIZER])
        );
        let binding = binding_on(&world, json!([{"name": "m1", "replicas": 3}])).await;
        work_in_m1(
            &world,
            json!({"name": "web", "namespace": "karmada-es-m1",
                   "finalizers": [EXECUTION_CONTROLLER_FINALIZER]}),
        )
        .await;
        lease_of_m1(&world, json!({"holderIdentity": "m1"})).await;
        // The delete leaves the Cluster, being deleted.
        delete_m1(&world).await;
        assert_eq!(
            c.reconcile("m1").await.unwrap(),
            Action::RequeueAfter(REMOVAL_RETRY)
        );
        let works = works_in_m1(&world).await;
        assert!(works.is_empty(), "the Work is gone: {works:?}");
        // A pass later it still waits for the binding.
        assert_eq!(
            c.reconcile("m1").await.unwrap(),
            Action::RequeueAfter(REMOVAL_RETRY)
        );
        let events = world.stored_events().await;
        let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
        assert!(reasons.contains(&EVENT_WORKS_RELEASED), "{reasons:?}");
        assert_eq!(
            reasons
                .iter()
                .filter(|r| **r == EVENT_REMOVAL_WAITING)
                .count(),
            1,
            "one waiting Event for one wait: {reasons:?}"
        );
        // The scheduler moves the binding: the Cluster goes.
        let mut moved = binding;
        moved["spec"]["clusters"] = json!([{"name": "m2", "replicas": 10}]);
        world
            .store
            .update(&well_known::resource_bindings(), moved)
            .await
            .unwrap();
        assert_eq!(c.reconcile("m1").await.unwrap(), Action::Done);
        assert!(matches!(
            world.store.get(&well_known::clusters(), None, "m1").await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(
            matches!(
                world
                    .store
                    .get(&well_known::leases(), Some(CLUSTER_LEASE_NAMESPACE), "m1")
                    .await,
                Err(StoreError::NotFound { .. })
            ),
            "the member's Lease went with it"
        );
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&world.metrics.gather())
            .unwrap();
        assert!(
            text.contains("flotilla_cluster_removal_steps_total{step=\"finalizer_removed\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_exactly_once_work_stays_until_the_member_has_fenced_itself() {
        let (world, c) = joined().await;
        let renewed = world.now();
        lease_of_m1(
            &world,
            json!({"holderIdentity": "m1", "leaseDurationSeconds": 40,
                   "renewTime": renewed.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)}),
        )
        .await;
        work_in_m1(
            &world,
            json!({"name": "db", "namespace": "karmada-es-m1",
                   "annotations": {PLACEMENT_GUARANTEE_ANNOTATION: EXACTLY_ONCE},
                   "finalizers": [EXECUTION_CONTROLLER_FINALIZER]}),
        )
        .await;
        delete_m1(&world).await;
        let works = || async { works_in_m1(&world).await.len() };
        // Before the fence time (renewal + 45 s) the Work stays, and the wait is said once.
        for _ in 0..2 {
            assert_eq!(
                c.reconcile("m1").await.unwrap(),
                Action::RequeueAfter(REMOVAL_RETRY)
            );
            world.clock.advance(chrono::Duration::seconds(10));
        }
        assert_eq!(works().await, 1, "kept until the member has fenced itself");
        let fence_events = world
            .stored_events()
            .await
            .iter()
            .filter(|e| e["reason"] == EVENT_WAITING_FOR_FENCE)
            .count();
        assert_eq!(fence_events, 1);
        // Past it, the Work goes and then the Cluster.
        world.clock.advance(chrono::Duration::seconds(30));
        c.reconcile("m1").await.unwrap();
        assert_eq!(works().await, 0);
        assert_eq!(c.reconcile("m1").await.unwrap(), Action::Done);
        assert!(matches!(
            world.store.get(&well_known::clusters(), None, "m1").await,
            Err(StoreError::NotFound { .. })
        ));
    }
}
