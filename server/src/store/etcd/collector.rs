//! Garbage collection on etcd: the jobs the [`super::mirror::Mirror`] finds in the changes it
//! follows (an owner gone, an owner in foreground deletion, an object created for an owner
//! that does not exist), run one at a time by a tokio task. The rules are the owner index's
//! (`store/owner_index.rs`), as for the local collector (`store/local/gc.rs`); each step is a
//! transaction that compares the revision it read, so a step taken on a stale view of the
//! owner index writes nothing, and the change that made it stale queues the job again.
//!
//! Where several servers share the store, only the leader collects ([`Collection::InTerm`]):
//! its term hands the collector its fence ([`Collector::open`]), so every step commits only
//! while the term lasts, and the term's start queues the work the whole owner index calls for
//! (what changed while no one collected). A standby's collector drops every job; it would
//! decide on a view of the store that may lag. Before a dependent goes, each of its owners is
//! read from etcd itself ([`any_owner_live`]).

use super::super::meta;
use super::super::owner_index::{GcJob, ObjRef};
use super::super::rules::{self, Precondition, Updated};
use super::super::{DeleteOptions, Propagation, StoreError};
use super::commit::{self, Fence, Write};
use super::etcd_store::Inner;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Which servers of a store collect its garbage (`--leader-elect` chooses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Collection {
    /// This server, always, unfenced: the only server of its store (no leader election).
    #[default]
    Always,
    /// Only while this server leads, through its term's fence: the servers share the store.
    InTerm,
    /// Never (`migrate-store`, which writes dependents before their owners).
    Off,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<GcJob>,
    queued: HashSet<GcJob>,
    busy: bool,
    stopped: bool,
    /// `None` while the collector is closed (jobs are dropped); else the fence its steps
    /// commit through (`Some(None)`: no fence).
    open: Option<Option<Fence>>,
}

/// The job queue and the task that runs it.
pub(crate) struct Collector {
    queue: Mutex<Queue>,
    wake: Arc<Notify>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Collector {
    /// Starts the task; it holds the store's shared state weakly.
    pub(crate) fn start(inner: Arc<Inner>) -> Arc<Self> {
        let collector = Arc::new(Self {
            queue: Mutex::new(Queue::default()),
            wake: Arc::new(Notify::new()),
            task: Mutex::new(None),
        });
        let weak_inner = Arc::downgrade(&inner);
        drop(inner);
        let me = Arc::downgrade(&collector);
        let task = tokio::spawn(async move {
            loop {
                let Some(collector) = me.upgrade() else {
                    return;
                };
                let job = {
                    let mut queue = collector.queue.lock();
                    if queue.stopped {
                        return;
                    }
                    let fence = queue.open.clone().flatten();
                    match queue.jobs.pop_front() {
                        Some(job) => {
                            queue.queued.remove(&job);
                            queue.busy = true;
                            Some((job, fence))
                        }
                        None => None,
                    }
                };
                let Some((job, fence)) = job else {
                    let wake = collector.wake.clone();
                    let notified = wake.notified();
                    drop(collector);
                    notified.await;
                    continue;
                };
                let Some(inner) = weak_inner.upgrade() else {
                    return;
                };
                if let Err(error) = run(&inner, fence.as_ref(), &job).await {
                    tracing::warn!(job = ?job, error = %error, "garbage collection step failed; the next change or open finds it again");
                }
                collector.queue.lock().busy = false;
            }
        });
        *collector.task.lock() = Some(task);
        collector
    }

    /// Opens the collector: from now on its steps commit through `fence` (none: unfenced),
    /// starting with `jobs`.
    pub(crate) fn open(&self, fence: Option<Fence>, jobs: Vec<GcJob>) {
        self.queue.lock().open = Some(fence);
        self.push(jobs);
    }

    /// Closes the collector: queued jobs are dropped, and so is every job pushed until it
    /// opens again (a step already running commits only if its fence still holds).
    pub(crate) fn close(&self) {
        let mut queue = self.queue.lock();
        queue.open = None;
        queue.jobs.clear();
        queue.queued.clear();
    }

    /// Queues jobs not queued already; drops them while the collector is closed.
    pub(crate) fn push(&self, jobs: Vec<GcJob>) {
        if jobs.is_empty() {
            return;
        }
        let mut queue = self.queue.lock();
        if queue.stopped || queue.open.is_none() {
            return;
        }
        for job in jobs {
            if queue.queued.insert(job.clone()) {
                queue.jobs.push_back(job);
            }
        }
        drop(queue);
        self.wake.notify_one();
    }

    /// True when nothing is queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        let queue = self.queue.lock();
        queue.jobs.is_empty() && !queue.busy
    }

    /// Stops the task; queued jobs are dropped (the next open finds them again).
    pub(crate) fn stop(&self) {
        {
            let mut queue = self.queue.lock();
            queue.stopped = true;
            queue.jobs.clear();
            queue.queued.clear();
        }
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// Runs one job, its commits through `fence`.
async fn run(inner: &Inner, fence: Option<&Fence>, job: &GcJob) -> Result<(), StoreError> {
    match job {
        GcJob::Dependent(r) => dependent(inner, fence, r).await,
        GcJob::OwnerGone(uid) => {
            for r in inner.mirror.with_owners(|o| o.dependents_of(uid)) {
                dependent(inner, fence, &r).await?;
            }
            Ok(())
        }
        GcJob::Foreground(uid) => foreground(inner, fence, uid).await,
    }
}

/// Deletes `r` (in background) when all of its owners are gone.
async fn dependent(inner: &Inner, fence: Option<&Fence>, r: &ObjRef) -> Result<(), StoreError> {
    let Some(res) = inner.mirror.kind(&r.resource) else {
        return Ok(());
    };
    let Some(read) = commit::read(&inner.client, &inner.keys.object(&r.resource, &r.key)).await?
    else {
        return Ok(());
    };
    let owners = meta::owner_uids(&read.object);
    if owners.is_empty()
        || inner
            .mirror
            .with_owners(|o| owners.iter().any(|u| o.exists(u)))
        || any_owner_live(inner, &read.object, None).await?
    {
        return Ok(());
    }
    tracing::debug!(resource = %r.resource, key = %r.key, "collecting an orphaned dependent");
    let opts = DeleteOptions {
        precondition_resource_version: Some(read.revision),
        ..DeleteOptions::default()
    };
    ignore_gone(inner.delete(fence, &res, &r.key, &r.key, &opts).await)
}

/// Whether one of `object`'s owners (but `except`) exists in etcd now with the uid its
/// reference names, read
/// by name with a linearizable get. The mirror that queued the job may lag (an owner replaced
/// a moment ago, the dependent's reference already moved to the new one), so a dependent is
/// deleted only when etcd itself says every owner is gone, as Kubernetes' collector verifies
/// an owner with a live read before it deletes (`isDangling`). An owner of a kind never stored
/// cannot exist.
async fn any_owner_live(
    inner: &Inner,
    object: &Value,
    except: Option<&str>,
) -> Result<bool, StoreError> {
    let namespace = meta::namespace(object);
    let references = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for reference in references {
        let field = |name: &str| reference.get(name).and_then(Value::as_str);
        let (Some(api_version), Some(kind), Some(name), Some(uid)) = (
            field("apiVersion"),
            field("kind"),
            field("name"),
            field("uid"),
        ) else {
            continue;
        };
        if except == Some(uid) {
            continue;
        }
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let Some(res) = inner.mirror.kind_named(group, kind) else {
            continue;
        };
        let Ok(key) = meta::object_key(&res, namespace, name) else {
            continue;
        };
        let owner =
            commit::read(&inner.client, &inner.keys.object(&res.storage_name(), &key)).await?;
        if owner.is_some_and(|owner| meta::uid(&owner.object) == Some(uid)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Advances an owner in foreground deletion: its dependents go first (a dependent with
/// another live owner only loses its reference to this one), then the owner.
async fn foreground(inner: &Inner, fence: Option<&Fence>, uid: &str) -> Result<(), StoreError> {
    let Some((r, waiting, dependents)) = inner.mirror.with_owners(|o| {
        o.locate(uid)
            .cloned()
            .map(|r| (r, o.is_foreground(uid), o.dependents_of(uid)))
    }) else {
        return Ok(());
    };
    if !waiting {
        return Ok(());
    }
    if dependents.is_empty() {
        let Some(read) =
            commit::read(&inner.client, &inner.keys.object(&r.resource, &r.key)).await?
        else {
            return Ok(());
        };
        let key = inner.keys.object(&r.resource, &r.key);
        let write = match rules::foreground_released(&read.object)? {
            Updated::Unchanged => return Ok(()),
            Updated::Remove(_) => Write::delete(key, read.revision),
            Updated::Put(released) => Write::put(
                key,
                Precondition::At(read.revision),
                commit::encode(&released)?,
            ),
        };
        tracing::debug!(resource = %r.resource, key = %r.key, "foreground deletion done");
        inner.commit(fence, &[write]).await?;
        return Ok(());
    }
    for d in dependents {
        let Some(res) = inner.mirror.kind(&d.resource) else {
            continue;
        };
        let key = inner.keys.object(&d.resource, &d.key);
        let Some(read) = commit::read(&inner.client, &key).await? else {
            continue;
        };
        let owners = meta::owner_uids(&read.object);
        if !owners.iter().any(|o| o == uid) {
            continue;
        }
        // As for a dependent of an owner gone: a lagging mirror may not know the other owner
        // yet, so etcd is asked before the dependent goes with this one.
        let other_owner_alive = inner
            .mirror
            .with_owners(|o| owners.iter().any(|u| u != uid && o.exists(u)))
            || any_owner_live(inner, &read.object, Some(uid)).await?;
        if other_owner_alive {
            let mut object = read.object;
            meta::remove_owner_reference(&mut object, uid)?;
            let write = Write::put(
                key,
                Precondition::At(read.revision),
                commit::encode(&object)?,
            );
            inner.commit(fence, &[write]).await?;
        } else if !meta::is_deleting(&read.object) {
            let opts = DeleteOptions {
                propagation: Propagation::Foreground,
                precondition_resource_version: Some(read.revision),
                ..DeleteOptions::default()
            };
            ignore_gone(inner.delete(fence, &res, &d.key, &d.key, &opts).await)?;
        }
    }
    Ok(())
}

/// A step whose object went or changed meanwhile has nothing left to do.
fn ignore_gone<T>(result: Result<T, StoreError>) -> Result<(), StoreError> {
    match result {
        Ok(_) | Err(StoreError::NotFound { .. }) | Err(StoreError::Conflict { .. }) => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::etcd::keys::Keys;
    use crate::store::etcd::mirror::Mirror;
    use crate::store::etcd::{EtcdStore, EtcdStoreOptions};
    use crate::store::{Store, StoreConfig};
    use crate::testing::etcd::EtcdCluster;
    use flotilla_api::kinds::builtin_by_plural;
    use serde_json::json;
    use std::time::Duration;

    const PREFIX: &str = "/gc-test";

    /// A one-member etcd, a client of it and a store over it whose own collector is off (the
    /// tests run collection steps themselves, over a view of their making).
    async fn store_without_collector() -> (EtcdCluster, etcd_client::Client, Arc<EtcdStore>) {
        store_collecting(Collection::Off).await
    }

    /// A one-member etcd, a client of it and a store over it that collects as `collection`
    /// says.
    async fn store_collecting(
        collection: Collection,
    ) -> (EtcdCluster, etcd_client::Client, Arc<EtcdStore>) {
        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let store = EtcdStore::open_with_client(
            client.clone(),
            PREFIX,
            StoreConfig::default(),
            EtcdStoreOptions {
                garbage_collection: collection,
                compaction_interval: Duration::ZERO,
                ..EtcdStoreOptions::default()
            },
        )
        .await
        .expect("the store opens");
        (etcd, client, store)
    }

    /// `kubectl replace --force` on an owner, seen by a server whose view of the store lags:
    /// the dependent already names the new owner, which that view does not know yet. The
    /// collector reads the owner from etcd itself and keeps the dependent; a dependent whose
    /// owner is gone for etcd too is collected (issue #36: the lagging view deleted it).
    #[tokio::test]
    async fn a_lagging_view_never_collects_a_dependent_whose_new_owner_exists() {
        let (_etcd, client, store) = store_without_collector().await;
        let deployments = builtin_by_plural("apps", "deployments").expect("a kind");
        let configmaps = builtin_by_plural("", "configmaps").expect("a kind");
        let nginx = || {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "nginx", "namespace": "default"}, "spec": {"replicas": 1}})
        };
        let owned_by = |name: &str, uid: &str| json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid}]);
        let config_map = |name: &str, owners: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default", "ownerReferences": owners}})
        };
        let first = store.create(&deployments, nginx()).await.unwrap();
        let first_uid = meta::uid(&first).unwrap().to_string();
        store
            .create(
                &configmaps,
                config_map("kept", owned_by("nginx", &first_uid)),
            )
            .await
            .unwrap();
        store
            .create(
                &configmaps,
                config_map("orphan", owned_by("gone", "no-such-uid")),
            )
            .await
            .unwrap();
        // A standby's view that stopped here.
        let lagging = Mirror::new(Keys::new(PREFIX));
        lagging.load(&client).await.expect("the view loads");
        // Replaced by force: the owner comes back with another uid, the dependent follows it.
        store
            .delete(
                &deployments,
                Some("default"),
                "nginx",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        let second = store.create(&deployments, nginx()).await.unwrap();
        let mut kept = store
            .get(&configmaps, Some("default"), "kept")
            .await
            .unwrap();
        kept["metadata"]["ownerReferences"] = owned_by("nginx", meta::uid(&second).unwrap());
        store.update(&configmaps, kept).await.unwrap();

        let inner = Inner::over_mirror(client.clone(), Keys::new(PREFIX), lagging);
        let dependent_at = |name: &str| ObjRef {
            resource: configmaps.storage_name(),
            key: format!("default/{name}"),
        };
        dependent(&inner, None, &dependent_at("kept"))
            .await
            .unwrap();
        assert!(
            store
                .get(&configmaps, Some("default"), "kept")
                .await
                .is_ok(),
            "the dependent of a live owner stays"
        );
        dependent(&inner, None, &dependent_at("orphan"))
            .await
            .unwrap();
        assert!(
            matches!(
                store.get(&configmaps, Some("default"), "orphan").await,
                Err(StoreError::NotFound { .. })
            ),
            "a dependent whose owner is gone goes"
        );
    }

    /// An owner in foreground deletion whose dependent has just gained another owner, seen by
    /// a lagging view that does not know the new owner yet: the dependent only loses its
    /// reference to the owner going, it is not deleted with it.
    #[tokio::test]
    async fn a_lagging_view_lets_a_dependent_with_a_new_owner_outlive_a_foreground_owner() {
        let (_etcd, client, store) = store_without_collector().await;
        let deployments = builtin_by_plural("apps", "deployments").expect("a kind");
        let configmaps = builtin_by_plural("", "configmaps").expect("a kind");
        let deployment = |name: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": name, "namespace": "default"}, "spec": {"replicas": 1}})
        };
        let reference = |owner: &Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "name": meta::name(owner).unwrap(), "uid": meta::uid(owner).unwrap()})
        };
        let going = store
            .create(&deployments, deployment("going"))
            .await
            .unwrap();
        store
            .create(
                &configmaps,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "shared", "namespace": "default",
                                    "ownerReferences": [reference(&going)]}}),
            )
            .await
            .unwrap();
        let in_foreground = DeleteOptions {
            propagation: Propagation::Foreground,
            ..DeleteOptions::default()
        };
        store
            .delete(&deployments, Some("default"), "going", &in_foreground)
            .await
            .unwrap();
        // A standby's view that stopped here: the owner waits for its dependent.
        let lagging = Mirror::new(Keys::new(PREFIX));
        lagging.load(&client).await.expect("the view loads");
        let staying = store
            .create(&deployments, deployment("staying"))
            .await
            .unwrap();
        let mut shared = store
            .get(&configmaps, Some("default"), "shared")
            .await
            .unwrap();
        shared["metadata"]["ownerReferences"] = json!([reference(&going), reference(&staying)]);
        store.update(&configmaps, shared).await.unwrap();

        let inner = Inner::over_mirror(client.clone(), Keys::new(PREFIX), lagging);
        foreground(&inner, None, meta::uid(&going).unwrap())
            .await
            .unwrap();
        let shared = store
            .get(&configmaps, Some("default"), "shared")
            .await
            .expect("the dependent of a live owner stays");
        assert_eq!(
            shared["metadata"]["ownerReferences"],
            json!([reference(&staying)]),
            "only the reference to the owner going is removed"
        );
    }

    /// Where servers share the store only the leader collects, through its term's fence: a
    /// standby drops the jobs its view finds (issue #36: every server collected, unfenced), a
    /// deposed leader's collector commits nothing, and a term's start collects what was left
    /// while no one did.
    #[tokio::test]
    async fn only_a_leader_collects_and_only_while_its_term_lasts() {
        use std::sync::atomic::{AtomicU64, Ordering};

        let (_etcd, client, store) = store_collecting(Collection::InTerm).await;
        let configmaps = builtin_by_plural("", "configmaps").expect("a kind");
        let owner = store
            .create(
                &configmaps,
                json!({"metadata": {"name": "owner", "namespace": "default"}}),
            )
            .await
            .unwrap();
        store
            .create(
                &configmaps,
                json!({"metadata": {"name": "dependent", "namespace": "default",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                         "uid": meta::uid(&owner).unwrap()}]}}),
            )
            .await
            .unwrap();
        store
            .delete(
                &configmaps,
                Some("default"),
                "owner",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        let dependent_stored = || async {
            store
                .get(&configmaps, Some("default"), "dependent")
                .await
                .is_ok()
        };
        let settled = || async {
            for _ in 0..200 {
                if store.gc_idle() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("garbage collection did not settle");
        };
        // A standby: its view has seen the owner go, and nothing is queued or running.
        settled().await;
        assert!(dependent_stored().await, "a standby collects nothing");

        // A term already over: the step is refused by the fence.
        let mut kv = client.kv_client();
        let fence = |key: &[u8], revision: i64, refusals: Arc<AtomicU64>| Fence {
            key: key.to_vec(),
            revision,
            refused: Arc::new(move || {
                refusals.fetch_add(1, Ordering::Relaxed);
            }),
            committed: Arc::new(|_| {}),
        };
        let key = b"/gc-test-election/leader/a";
        kv.put(key.to_vec(), "a", None).await.unwrap();
        let term_a = kv.get(key.to_vec(), None).await.unwrap().kvs()[0].create_revision();
        kv.delete(key.to_vec(), None).await.unwrap();
        let refusals = Arc::new(AtomicU64::new(0));
        store.collect_in_term(fence(key, term_a, refusals.clone()));
        settled().await;
        store.stop_collecting();
        assert!(
            dependent_stored().await,
            "a deposed leader collects nothing"
        );
        assert_eq!(refusals.load(Ordering::Relaxed), 1);

        // The leader's term: what the owner index calls for is collected at its start.
        kv.put(key.to_vec(), "b", None).await.unwrap();
        let term_b = kv.get(key.to_vec(), None).await.unwrap().kvs()[0].create_revision();
        store.collect_in_term(fence(key, term_b, Arc::new(AtomicU64::new(0))));
        settled().await;
        assert!(!dependent_stored().await, "the leader collected the orphan");
    }
}
