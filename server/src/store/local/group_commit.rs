//! Group commit: a write is acknowledged only once it is on disk, and concurrent writers
//! share the fsync.
//!
//! A writer applies its batch (in memory, under the store's write lock), then calls
//! [`GroupCommit::enqueue`] and awaits the ticket outside the lock. One committer thread loops:
//! it takes every pending waiter, reads the newest applied resourceVersion, calls
//! [`Engine::durable_flush`] once, publishes that resourceVersion as durable (watchers only
//! see durable events) and wakes every waiter it took. Every batch applied before a waiter was
//! enqueued is covered by the flush that follows, so N concurrent writers cost about one fsync
//! per round instead of N.
//!
//! Pacing: a round starts at least `min_interval` after the previous one started. An idle
//! store flushes a lone write at once; under load, the writes that arrive within the interval
//! share a round. A round costs the same for one write as for fifty (the sled engine writes
//! its queued batches in one transaction, which seals sled's log buffer, then syncs), so
//! pacing bounds that cost at the price of a short wait per write.

use super::engine::{Engine, EngineError};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// The outcome a waiter receives.
pub(crate) type FlushResult = Result<(), Arc<EngineError>>;

/// What a writer awaits: resolved once its batch is durable.
pub(crate) type Ticket = oneshot::Receiver<FlushResult>;

#[derive(Default)]
struct State {
    waiters: Vec<oneshot::Sender<FlushResult>>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    flushes: AtomicU64,
    grouped_writes: AtomicU64,
}

/// The committer thread and its queue of waiters.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl GroupCommit {
    /// Starts the committer over `engine`. `applied` is the newest resourceVersion whose batch
    /// was applied; `durable` receives the newest durable one. Rounds start at least
    /// `min_interval` apart (zero: as soon as a writer waits).
    pub(crate) fn start<E: Engine>(
        engine: Arc<E>,
        applied: Arc<AtomicU64>,
        durable: Arc<watch::Sender<u64>>,
        min_interval: Duration,
    ) -> Result<Self, EngineError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            flushes: AtomicU64::new(0),
            grouped_writes: AtomicU64::new(0),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("store-commit".to_string())
            .spawn(move || {
                committer(&thread_shared, &*engine, &applied, &durable, min_interval);
            })
            .map_err(|source| EngineError::Thread {
                name: "store-commit",
                source,
            })?;
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Registers a writer whose batch is already applied; the ticket resolves after the next
    /// flush.
    pub(crate) fn enqueue(&self) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let mut state = self.shared.state.lock();
        if state.shutdown {
            let _ = tx.send(Err(Arc::new(EngineError::Closed)));
        } else {
            state.waiters.push(tx);
            self.shared.wake.notify_one();
        }
        rx
    }

    /// Flushes once more for every pending waiter and stops the thread. Idempotent.
    pub(crate) fn shutdown(&self) {
        {
            let mut state = self.shared.state.lock();
            state.shutdown = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("the store commit thread panicked");
            }
        }
    }

    /// (flushes done, writes acknowledged by them).
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.shared.flushes.load(Ordering::Relaxed),
            self.shared.grouped_writes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn committer(
    shared: &Shared,
    engine: &dyn EngineFlush,
    applied: &AtomicU64,
    durable: &watch::Sender<u64>,
    min_interval: Duration,
) {
    let mut previous: Option<Instant> = None;
    loop {
        let (waiters, last) = {
            let mut state = shared.state.lock();
            while state.waiters.is_empty() && !state.shutdown {
                shared.wake.wait(&mut state);
            }
            // Pacing: writers arriving until the round is due join it.
            if let Some(due) = previous.and_then(|p| p.checked_add(min_interval)) {
                while !state.shutdown && !shared.wake.wait_until(&mut state, due).timed_out() {}
            }
            (std::mem::take(&mut state.waiters), state.shutdown)
        };
        // Read after taking the waiters: every batch they stand for was applied before this.
        let rv = applied.load(Ordering::Acquire);
        let started = Instant::now();
        previous = Some(started);
        let result = engine.flush().map_err(Arc::new);
        shared.flushes.fetch_add(1, Ordering::Relaxed);
        shared
            .grouped_writes
            .fetch_add(waiters.len() as u64, Ordering::Relaxed);
        match &result {
            Ok(()) => {
                tracing::trace!(
                    writes = waiters.len(),
                    resource_version = rv,
                    duration_us = started.elapsed().as_micros() as u64,
                    "group commit flushed"
                );
                durable.send_if_modified(|current| {
                    let newer = rv > *current;
                    if newer {
                        *current = rv;
                    }
                    newer
                });
            }
            Err(error) => {
                tracing::error!(writes = waiters.len(), error = %error, "store flush failed");
            }
        }
        for waiter in waiters {
            let _ = waiter.send(result.clone());
        }
        if last {
            return;
        }
    }
}

/// The one engine call the committer makes (object safe, so the thread is not generic).
trait EngineFlush {
    fn flush(&self) -> Result<(), EngineError>;
}

impl<E: Engine> EngineFlush for E {
    fn flush(&self) -> Result<(), EngineError> {
        self.durable_flush()
    }
}
