//! Garbage collection on etcd: the jobs the [`super::mirror::Mirror`] finds in the changes it
//! follows (an owner gone, an owner in foreground deletion, an object created for an owner
//! that does not exist), run one at a time by a tokio task. The rules are the owner index's
//! (`store/owner_index.rs`), as for the local collector (`store/local/gc.rs`); each step is a
//! transaction that compares the revision it read, so a step taken on a stale view of the
//! owner index writes nothing, and the change that made it stale queues the job again.
//! Several servers may run a step for the same object: the first commits, the others find it
//! done.

use super::super::meta;
use super::super::owner_index::{GcJob, ObjRef};
use super::super::rules::{self, Precondition, Updated};
use super::super::{DeleteOptions, Propagation, StoreError};
use super::commit::{self, Write};
use super::etcd_store::Inner;
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<GcJob>,
    queued: HashSet<GcJob>,
    busy: bool,
    stopped: bool,
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
                    match queue.jobs.pop_front() {
                        Some(job) => {
                            queue.queued.remove(&job);
                            queue.busy = true;
                            Some(job)
                        }
                        None => None,
                    }
                };
                let Some(job) = job else {
                    let wake = collector.wake.clone();
                    let notified = wake.notified();
                    drop(collector);
                    notified.await;
                    continue;
                };
                let Some(inner) = weak_inner.upgrade() else {
                    return;
                };
                if let Err(error) = run(&inner, &job).await {
                    tracing::warn!(job = ?job, error = %error, "garbage collection step failed; the next change or open finds it again");
                }
                collector.queue.lock().busy = false;
            }
        });
        *collector.task.lock() = Some(task);
        collector
    }

    /// Queues jobs not queued already.
    pub(crate) fn push(&self, jobs: Vec<GcJob>) {
        if jobs.is_empty() {
            return;
        }
        let mut queue = self.queue.lock();
        if queue.stopped {
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

/// Runs one job.
async fn run(inner: &Inner, job: &GcJob) -> Result<(), StoreError> {
    match job {
        GcJob::Dependent(r) => dependent(inner, r).await,
        GcJob::OwnerGone(uid) => {
            for r in inner.mirror.with_owners(|o| o.dependents_of(uid)) {
                dependent(inner, &r).await?;
            }
            Ok(())
        }
        GcJob::Foreground(uid) => foreground(inner, uid).await,
    }
}

/// Deletes `r` (in background) when all of its owners are gone.
async fn dependent(inner: &Inner, r: &ObjRef) -> Result<(), StoreError> {
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
    {
        return Ok(());
    }
    tracing::debug!(resource = %r.resource, key = %r.key, "collecting an orphaned dependent");
    let opts = DeleteOptions {
        precondition_resource_version: Some(read.revision),
        ..DeleteOptions::default()
    };
    ignore_gone(inner.delete(None, &res, &r.key, &r.key, &opts).await)
}

/// Advances an owner in foreground deletion: its dependents go first (a dependent with
/// another live owner only loses its reference to this one), then the owner.
async fn foreground(inner: &Inner, uid: &str) -> Result<(), StoreError> {
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
        inner.commit(None, &[write]).await?;
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
        let other_owner_alive = inner
            .mirror
            .with_owners(|o| owners.iter().any(|u| u != uid && o.exists(u)));
        if other_owner_alive {
            let mut object = read.object;
            meta::remove_owner_reference(&mut object, uid)?;
            let write = Write::put(
                key,
                Precondition::At(read.revision),
                commit::encode(&object)?,
            );
            inner.commit(None, &[write]).await?;
        } else if !meta::is_deleting(&read.object) {
            let opts = DeleteOptions {
                propagation: Propagation::Foreground,
                precondition_resource_version: Some(read.revision),
                ..DeleteOptions::default()
            };
            ignore_gone(inner.delete(None, &res, &d.key, &d.key, &opts).await)?;
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
