//! The local store's garbage collector: runs the [`GcJob`]s that the owner index
//! ([`super::super::owner_index`], kept inside the store's write state, so every decision
//! below is taken under the write lock) reports at each commit. One background thread
//! ([`GcQueue`]) runs them, one object per lock, so a large cascade never stalls writers.
//! What each job does is the owner index's rule; at open the jobs a crash may have
//! interrupted are found again from the index.

use super::super::meta;
use super::super::owner_index::{GcJob, ObjRef};
use super::super::rules::{self, Updated};
use super::super::{DeleteOptions, EventType, Propagation, StoreError};
use super::engine::Engine;
use super::kv_store::{KvStore, Txn};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

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
