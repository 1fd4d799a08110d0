//! Garbage collection of dependents, driven by `metadata.ownerReferences` (by uid).
//!
//! [`OwnerIndex`] (uid -> object, object -> owner uids, owner uid -> dependents) lives inside
//! the store's write state, so it changes in step with every commit and every decision below
//! is taken under the write lock. Commits report [`GcJob`]s; one background thread
//! ([`GcQueue`]) runs them, one object per lock, so a large cascade never stalls writers:
//! - an owner is gone: each dependent whose owners are *all* gone is deleted (Background);
//! - an owner waits in foreground deletion (`foregroundDeletion` finalizer and
//!   deletionTimestamp): its dependents are deleted in foreground too, except that a dependent
//!   with another live owner only loses its reference to this one; once no dependent is left,
//!   the finalizer is removed and the owner goes (if no other finalizer holds it);
//! - orphaning is not a job: `delete` removes the owner references in its own batch.
//!
//! Jobs are not persisted. At open the index is rebuilt from every object and the jobs a
//! crash may have interrupted are found again: dependents whose owners are all gone, and
//! owners waiting in foreground deletion.

use super::engine::Engine;
use super::kv_store::{KvStore, Txn};
use super::meta::{self, FOREGROUND_FINALIZER};
use super::rules::{self, Updated};
use super::{DeleteOptions, EventType, Propagation, StoreError};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

/// An object, by kind (storage name) and storage key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjRef {
    pub(crate) resource: String,
    pub(crate) key: String,
}

/// One unit of collection work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GcJob {
    /// Delete this object if all its owners are gone.
    Dependent(ObjRef),
    /// The owner with this uid is gone: look at each of its dependents.
    OwnerGone(String),
    /// The owner with this uid waits in foreground deletion: advance it.
    Foreground(String),
}

/// Who owns whom.
#[derive(Debug, Default)]
pub(crate) struct OwnerIndex {
    /// Every stored object by uid.
    objects: HashMap<String, ObjRef>,
    /// Owner uids of every object that has owner references.
    owners: HashMap<ObjRef, Vec<String>>,
    /// Dependents by owner uid (the owner may be gone).
    dependents: HashMap<String, BTreeSet<ObjRef>>,
    /// Uids of objects waiting in foreground deletion.
    foreground: HashSet<String>,
}

impl OwnerIndex {
    /// Records the stored state of an object; returns the jobs it calls for.
    pub(crate) fn put(&mut self, r: &ObjRef, obj: &Value) -> Vec<GcJob> {
        let mut jobs = Vec::new();
        let uid = meta::uid(obj).map(str::to_string);
        if let Some(uid) = &uid {
            self.objects.insert(uid.clone(), r.clone());
        }
        let new_owners = meta::owner_uids(obj);
        let old_owners = self.owners.remove(r).unwrap_or_default();
        for owner in old_owners.iter().filter(|o| !new_owners.contains(o)) {
            self.unlink(owner, r, &mut jobs);
        }
        for owner in &new_owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert(r.clone());
        }
        if !new_owners.is_empty() {
            if !new_owners.iter().any(|o| self.exists(o)) {
                jobs.push(GcJob::Dependent(r.clone()));
            }
            self.owners.insert(r.clone(), new_owners);
        }
        if let Some(uid) = uid {
            let waiting = meta::is_deleting(obj)
                && meta::finalizers(obj)
                    .iter()
                    .any(|f| f == FOREGROUND_FINALIZER);
            if waiting {
                self.foreground.insert(uid.clone());
                jobs.push(GcJob::Foreground(uid));
            } else {
                self.foreground.remove(&uid);
            }
        }
        jobs
    }

    /// Forgets a removed object (`last` is its last state); returns the jobs it calls for.
    pub(crate) fn remove(&mut self, r: &ObjRef, last: &Value) -> Vec<GcJob> {
        let mut jobs = Vec::new();
        if let Some(uid) = meta::uid(last) {
            self.objects.remove(uid);
            self.foreground.remove(uid);
            if self.dependents.get(uid).is_some_and(|d| !d.is_empty()) {
                jobs.push(GcJob::OwnerGone(uid.to_string()));
            }
        }
        for owner in self.owners.remove(r).unwrap_or_default() {
            self.unlink(&owner, r, &mut jobs);
        }
        jobs
    }

    fn unlink(&mut self, owner: &str, r: &ObjRef, jobs: &mut Vec<GcJob>) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(r);
            if set.is_empty() {
                self.dependents.remove(owner);
                if self.foreground.contains(owner) {
                    jobs.push(GcJob::Foreground(owner.to_string()));
                }
            }
        }
    }

    /// True when an object with this uid is stored.
    pub(crate) fn exists(&self, uid: &str) -> bool {
        self.objects.contains_key(uid)
    }

    /// The object with this uid.
    pub(crate) fn locate(&self, uid: &str) -> Option<&ObjRef> {
        self.objects.get(uid)
    }

    /// The owner uids of an object (empty when it has none or is gone).
    pub(crate) fn owners_of(&self, r: &ObjRef) -> &[String] {
        self.owners.get(r).map(Vec::as_slice).unwrap_or_default()
    }

    /// The dependents of an owner.
    pub(crate) fn dependents_of(&self, uid: &str) -> Vec<ObjRef> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// True when the object with this uid waits in foreground deletion.
    pub(crate) fn is_foreground(&self, uid: &str) -> bool {
        self.foreground.contains(uid)
    }

    /// The work a crash may have interrupted: dependents whose owners are all gone, and
    /// owners waiting in foreground deletion.
    pub(crate) fn recovery_jobs(&self) -> Vec<GcJob> {
        let mut jobs: Vec<GcJob> = self
            .owners
            .iter()
            .filter(|(_, owners)| !owners.iter().any(|o| self.exists(o)))
            .map(|(r, _)| GcJob::Dependent(r.clone()))
            .collect();
        jobs.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        let mut waiting: Vec<&String> = self.foreground.iter().collect();
        waiting.sort();
        jobs.extend(waiting.into_iter().map(|u| GcJob::Foreground(u.clone())));
        jobs
    }
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<GcJob>,
    queued: HashSet<GcJob>,
    busy: bool,
    shutdown: bool,
}

#[derive(Default)]
struct QueueShared {
    state: Mutex<QueueState>,
    wake: Condvar,
}

/// The de-duplicating job queue and its worker thread.
#[derive(Default)]
pub(crate) struct GcQueue {
    shared: Arc<QueueShared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl GcQueue {
    /// Starts the worker; `work` runs one job and returns false when the store is gone.
    pub(crate) fn start(
        &self,
        mut work: impl FnMut(GcJob) -> bool + Send + 'static,
    ) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("store-gc".to_string())
            .spawn(move || loop {
                let job = {
                    let mut state = shared.state.lock();
                    while state.jobs.is_empty() && !state.shutdown {
                        shared.wake.wait(&mut state);
                    }
                    if state.shutdown {
                        return;
                    }
                    let Some(job) = state.jobs.pop_front() else {
                        continue;
                    };
                    state.queued.remove(&job);
                    state.busy = true;
                    job
                };
                let alive = work(job);
                shared.state.lock().busy = false;
                if !alive {
                    return;
                }
            })?;
        *self.thread.lock() = Some(thread);
        Ok(())
    }

    /// Queues jobs not queued already.
    pub(crate) fn push(&self, jobs: Vec<GcJob>) {
        if jobs.is_empty() {
            return;
        }
        let mut state = self.shared.state.lock();
        if state.shutdown {
            return;
        }
        for job in jobs {
            if state.queued.insert(job.clone()) {
                state.jobs.push_back(job);
            }
        }
        self.shared.wake.notify_one();
    }

    /// True when no job is queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        let state = self.shared.state.lock();
        state.jobs.is_empty() && !state.busy
    }

    /// True once shutdown was asked for.
    pub(crate) fn stopping(&self) -> bool {
        self.shared.state.lock().shutdown
    }

    /// Stops the worker after its current job; queued jobs are dropped (the next open finds
    /// them again). Idempotent.
    pub(crate) fn shutdown(&self) {
        {
            let mut state = self.shared.state.lock();
            state.shutdown = true;
            state.jobs.clear();
            state.queued.clear();
            self.shared.wake.notify_all();
        }
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            // The last handle of the store may be dropped by the worker itself.
            if handle.thread().id() != std::thread::current().id() && handle.join().is_err() {
                tracing::error!("the store gc thread panicked");
            }
        }
    }
}

impl<E: Engine> KvStore<E> {
    /// Runs one job; failures are logged (the next open finds the work again).
    pub(crate) fn run_gc_job(&self, job: GcJob) {
        let result = match &job {
            GcJob::Dependent(r) => self.gc_dependent(r),
            GcJob::OwnerGone(uid) => self.gc_owner_gone(uid),
            GcJob::Foreground(uid) => self.gc_foreground(uid),
        };
        if let Err(error) = result {
            if !self.is_closed() {
                tracing::warn!(
                    job = ?job,
                    error = %error,
                    "garbage collection step failed; it is retried at the next open"
                );
            }
        }
    }

    /// Deletes `r` (Background) if all its owners are gone.
    fn gc_dependent(&self, r: &ObjRef) -> Result<(), StoreError> {
        let mut st = self.write_lock()?;
        let owners = st.owners.owners_of(r);
        if owners.is_empty() || owners.iter().any(|o| st.owners.exists(o)) {
            return Ok(());
        }
        let Some(res) = st.kinds.get(&r.resource).cloned() else {
            return Ok(());
        };
        tracing::debug!(resource = %r.resource, key = %r.key, "collecting an orphaned dependent");
        self.delete_locked(&mut st, &res, &r.key, &r.key, &DeleteOptions::default())?;
        Ok(())
    }

    fn gc_owner_gone(&self, uid: &str) -> Result<(), StoreError> {
        let dependents = self.write_lock()?.owners.dependents_of(uid);
        for r in dependents {
            if self.gc.stopping() {
                break;
            }
            self.gc_dependent(&r)?;
        }
        Ok(())
    }

    fn gc_foreground(&self, uid: &str) -> Result<(), StoreError> {
        let dependents = {
            let mut st = self.write_lock()?;
            let Some(r) = st.owners.locate(uid).cloned() else {
                return Ok(());
            };
            if !st.owners.is_foreground(uid) {
                return Ok(());
            }
            let dependents = st.owners.dependents_of(uid);
            if !dependents.is_empty() {
                dependents
            } else {
                // Nothing left to wait for: release the owner.
                let Some(res) = st.kinds.get(&r.resource).cloned() else {
                    return Ok(());
                };
                let Some(owner) = self.read_object(&res, &r.key)? else {
                    return Ok(());
                };
                let mut txn = Txn::default();
                match rules::foreground_released(&owner)? {
                    Updated::Unchanged => return Ok(()),
                    Updated::Remove(last) => txn.remove(&res, &r.key, last),
                    Updated::Put(released) => txn.put(&res, &r.key, released, EventType::Modified),
                }
                tracing::debug!(resource = %r.resource, key = %r.key, "foreground deletion done");
                self.commit_locked(&mut st, txn)?;
                return Ok(());
            }
        };
        for r in dependents {
            if self.gc.stopping() {
                break;
            }
            let mut st = self.write_lock()?;
            let owners = st.owners.owners_of(&r);
            if !owners.iter().any(|o| o == uid) {
                continue;
            }
            let other_owner_alive = owners.iter().any(|o| o != uid && st.owners.exists(o));
            let Some(res) = st.kinds.get(&r.resource).cloned() else {
                continue;
            };
            let Some(mut dependent) = self.read_object(&res, &r.key)? else {
                continue;
            };
            if other_owner_alive {
                meta::remove_owner_reference(&mut dependent, uid)?;
                let mut txn = Txn::default();
                txn.put(&res, &r.key, dependent, EventType::Modified);
                self.commit_locked(&mut st, txn)?;
            } else if !meta::is_deleting(&dependent) {
                let opts = DeleteOptions {
                    propagation: Propagation::Foreground,
                    ..DeleteOptions::default()
                };
                self.delete_locked(&mut st, &res, &r.key, &r.key, &opts)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(key: &str) -> ObjRef {
        ObjRef {
            resource: "core/configmaps".to_string(),
            key: key.to_string(),
        }
    }

    fn obj(uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners.iter().map(|o| json!({"uid": o})).collect();
        json!({"metadata": {"uid": uid, "ownerReferences": refs}})
    }

    #[test]
    fn index_tracks_owners_and_reports_work() {
        let mut index = OwnerIndex::default();
        assert!(index.put(&r("o1"), &obj("u1", &[])).is_empty());
        assert!(index.put(&r("o2"), &obj("u2", &[])).is_empty());
        assert!(index.put(&r("d"), &obj("ud", &["u1", "u2"])).is_empty());
        assert_eq!(index.dependents_of("u1"), [r("d")]);
        // One owner gone: the dependent is looked at (and kept: u2 lives).
        assert_eq!(
            index.remove(&r("o1"), &obj("u1", &[])),
            [GcJob::OwnerGone("u1".to_string())]
        );
        assert!(index.exists("u2") && !index.exists("u1"));
        assert_eq!(
            index.recovery_jobs(),
            Vec::<GcJob>::new(),
            "d still has a live owner"
        );
        index.remove(&r("o2"), &obj("u2", &[]));
        assert_eq!(index.recovery_jobs(), [GcJob::Dependent(r("d"))]);
        // A dependent created for a missing owner is collected.
        assert_eq!(
            index.put(&r("e"), &obj("ue", &["nobody"])),
            [GcJob::Dependent(r("e"))]
        );
    }

    #[test]
    fn foreground_owner_is_advanced_when_its_last_dependent_goes() {
        let mut index = OwnerIndex::default();
        index.put(&r("d"), &obj("ud", &["uo"]));
        let mut owner = obj("uo", &[]);
        owner["metadata"]["deletionTimestamp"] = json!("2024-05-01T10:00:00Z");
        owner["metadata"]["finalizers"] = json!([FOREGROUND_FINALIZER]);
        assert_eq!(
            index.put(&r("o"), &owner),
            [GcJob::Foreground("uo".to_string())]
        );
        assert_eq!(
            index.remove(&r("d"), &obj("ud", &["uo"])),
            [GcJob::Foreground("uo".to_string())]
        );
        assert_eq!(index.recovery_jobs(), [GcJob::Foreground("uo".to_string())]);
    }

    #[tokio::test]
    async fn queue_deduplicates_and_reports_idle() {
        let queue = GcQueue::default();
        let (tx, rx) = std::sync::mpsc::channel();
        queue
            .start(move |job| {
                tx.send(job).unwrap();
                true
            })
            .unwrap();
        queue.push(vec![GcJob::OwnerGone("a".to_string())]);
        assert_eq!(rx.recv().unwrap(), GcJob::OwnerGone("a".to_string()));
        crate::testing::eventually(
            "the gc queue to be idle",
            std::time::Duration::from_secs(5),
            || async { queue.is_idle().then_some(()) },
        )
        .await;
        queue.shutdown();
        queue.push(vec![GcJob::OwnerGone("b".to_string())]);
        assert!(queue.is_idle());
    }
}
