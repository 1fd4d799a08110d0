//! The life of a server's controllers when several servers share one etcd store: campaign;
//! once elected, start every controller on a fresh context over the store *fenced by the
//! term* (so each write commits only while the term lasts); when the term ends (renew
//! deadline, lease lost, a fenced write refused) stop them at once and campaign again; on
//! shutdown stop them first, then resign, so the next server leads at once.
//!
//! A fresh context per term is what keeps a new leader from mistaking its own arrival for a
//! failure: the health monitor's memory of when each member was last seen starts empty, so
//! every member gets a whole grace period from the moment this server leads, and the
//! eviction brake's startup grace counts from then too. Everything else is level-triggered:
//! the controllers list the store and redo whatever the previous leader left half done.

use super::elector::{Elector, TermEnd};
use crate::controllers::ControllerHandle;
use crate::store::etcd::EtcdStore;
use crate::store::Store;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the loop counts, in the server's registry.
#[derive(Clone)]
pub struct LeaderMetrics {
    /// 1 while this server leads.
    pub leader: IntGauge,
    /// Terms ended, by why.
    pub terms_ended: IntCounterVec,
    /// Controller writes refused by the fence of an ended term.
    pub fenced_writes: IntCounter,
    /// The current (or last) term's number: its election key's create revision.
    pub term_revision: IntGauge,
    /// The store revision at which the current (or last) term began: every write of an
    /// earlier leader committed before it.
    pub term_start_revision: IntGauge,
    /// The store revision of the last controller write this server committed as leader: a
    /// deposed leader's stays below its successor's term revision.
    pub last_commit_revision: IntGauge,
}

impl LeaderMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let leader = IntGauge::new(
            "flotilla_leader",
            "1 while this server leads the fleet and runs the controllers.",
        )?;
        let terms_ended = IntCounterVec::new(
            Opts::new(
                "flotilla_leader_terms_ended_total",
                "Terms of this server as leader that ended, by why.",
            ),
            &["reason"],
        )?;
        let fenced_writes = IntCounter::new(
            "flotilla_leader_fenced_writes_total",
            "Controller writes refused because this server's term had ended.",
        )?;
        let term_revision = IntGauge::new(
            "flotilla_leader_term_revision",
            "The number of this server's current or last term as leader (its election key's create revision).",
        )?;
        let term_start_revision = IntGauge::new(
            "flotilla_leader_term_start_revision",
            "The store revision at which this server's current or last term as leader began.",
        )?;
        let last_commit_revision = IntGauge::new(
            "flotilla_leader_last_commit_revision",
            "The store revision of the last controller write this server committed as leader.",
        )?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(terms_ended.clone()))?;
        registry.register(Box::new(fenced_writes.clone()))?;
        registry.register(Box::new(term_revision.clone()))?;
        registry.register(Box::new(term_start_revision.clone()))?;
        registry.register(Box::new(last_commit_revision.clone()))?;
        Ok(Self {
            leader,
            terms_ended,
            fenced_writes,
            term_revision,
            term_start_revision,
            last_commit_revision,
        })
    }
}

/// Starts one term's controllers over the fenced store; `stop` turns true when the term ends.
pub type StartTerm = Box<
    dyn Fn(Arc<dyn Store>, watch::Receiver<bool>) -> Result<Vec<ControllerHandle>, String>
        + Send
        + Sync,
>;

/// Called once a term's controllers have stopped.
pub type TermStopped = Box<dyn Fn() + Send + Sync>;

/// The running loop.
pub struct LeaderLoop {
    task: JoinHandle<()>,
}

impl LeaderLoop {
    /// Campaigns and runs terms until `shutdown` turns true.
    pub fn spawn(
        elector: Elector,
        store: Arc<EtcdStore>,
        start: StartTerm,
        stopped: TermStopped,
        metrics: LeaderMetrics,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let task = tokio::spawn(run(elector, store, start, stopped, metrics, shutdown));
        Self { task }
    }

    /// Waits until the loop has stopped the controllers and resigned (after shutdown).
    pub async fn join(self) {
        if let Err(error) = self.task.await {
            tracing::error!(error = %error, "the leader loop failed");
        }
    }
}

async fn run(
    elector: Elector,
    store: Arc<EtcdStore>,
    start: StartTerm,
    stopped: TermStopped,
    metrics: LeaderMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let retry = elector.timing().retry_period;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let term = match elector.campaign(&mut shutdown).await {
            Ok(Some(term)) => term,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %flotilla_support::error_chain(&error), "campaign failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(retry) => continue,
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        };
        let fence = term.fence();
        let counted = {
            let fenced_writes = metrics.fenced_writes.clone();
            let last_commit = metrics.last_commit_revision.clone();
            // The check and the set under one lock: concurrent commits never lower it.
            let lock = Arc::new(parking_lot::Mutex::new(()));
            let refused = fence.refused.clone();
            crate::store::etcd::Fence {
                refused: Arc::new(move || {
                    fenced_writes.inc();
                    refused();
                }),
                committed: Arc::new(move |revision| {
                    let revision = i64::try_from(revision).unwrap_or(i64::MAX);
                    let _one = lock.lock();
                    if revision > last_commit.get() {
                        last_commit.set(revision);
                    }
                }),
                ..fence
            }
        };
        metrics.term_revision.set(term.revision());
        metrics.term_start_revision.set(term.won_at());
        // A term starts from a caught-up view: every write of the former leader committed
        // before this term was won, so once this server's mirror holds that revision, no Work
        // or owner the former leader wrote is missing from what the controllers read.
        let won_at = u64::try_from(term.won_at()).unwrap_or(0);
        if let Err(error) = store.caught_up_to(won_at).await {
            tracing::warn!(
                error = %error,
                won_at,
                "this server's view of the store did not reach the term's start; resigning"
            );
            term.resign().await;
            tokio::select! {
                () = tokio::time::sleep(retry) => continue,
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        // Garbage collection is the leader's, through the same fence as the controllers.
        store.collect_in_term(counted.clone());
        let (stop_tx, stop_rx) = watch::channel(false);
        let handles = match start(store.fenced(counted), stop_rx) {
            Ok(handles) => handles,
            Err(error) => {
                tracing::error!(error = %error, "the controllers of this term could not start; resigning");
                store.stop_collecting();
                term.resign().await;
                tokio::select! {
                    () = tokio::time::sleep(retry) => continue,
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        };
        metrics.leader.set(1);
        tracing::info!(
            term = term.revision(),
            controllers = handles.len(),
            "leading: controllers started"
        );
        let why = tokio::select! {
            why = term.ended() => why,
            _ = shutdown.wait_for(|s| *s) => TermEnd::Resigned,
        };
        // Stop acting first: nothing of this term may run once another server can lead.
        let _ = stop_tx.send(true);
        store.stop_collecting();
        for handle in handles {
            handle.stop().await;
        }
        stopped();
        metrics.leader.set(0);
        metrics.terms_ended.with_label_values(&[why.as_str()]).inc();
        if why == TermEnd::Resigned {
            term.resign().await;
            return;
        }
        tracing::warn!(
            term = term.revision(),
            reason = why.as_str(),
            refused = term.refusals(),
            "the term ended: controllers stopped; campaigning again"
        );
        drop(term);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::LeaderElectionTiming;
    use crate::testing::etcd::EtcdCluster;
    use std::time::Duration;

    /// Polls `check` every 20 ms until it answers `Some`, for at most `within`.
    async fn until<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if let Some(value) = check() {
                return Some(value);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// The controllers of a term start from a view of the store that holds every change up to
    /// the revision at which the term was won (issue #36: they started at once, on a view that
    /// could miss the former leader's last Works). The view is made to lag: loaded before the
    /// campaign and following etcd only later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_term_starts_only_once_the_view_has_reached_its_start() {
        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let (store, mirror, loaded_at) = EtcdStore::open_unfollowed(client.clone(), "/loop-test")
            .await
            .expect("the store opens");
        let elector = Elector::new(
            client.clone(),
            "/loop-test",
            "a",
            LeaderElectionTiming::for_lease(Duration::from_secs(3)),
        );
        let metrics = LeaderMetrics::register(&Registry::new()).expect("metrics register");
        let started: Arc<parking_lot::Mutex<Option<(u64, i64)>>> = Arc::default();
        let start: StartTerm = {
            let (started, mirror, metrics) = (started.clone(), mirror.clone(), metrics.clone());
            Box::new(move |_store, _stop| {
                *started.lock() = Some((mirror.position(), metrics.term_start_revision.get()));
                Ok(Vec::new())
            })
        };
        let (shutdown_tx, shutdown) = watch::channel(false);
        let leading = LeaderLoop::spawn(
            elector,
            store,
            start,
            Box::new(|| {}),
            metrics.clone(),
            shutdown,
        );
        let won_at = until(Duration::from_secs(10), || {
            Some(metrics.term_start_revision.get()).filter(|r| *r > 0)
        })
        .await
        .expect("the term is won");
        assert!(
            u64::try_from(won_at).unwrap_or(0) > loaded_at,
            "the campaign wrote past the view"
        );

        let follow = tokio::spawn(mirror.clone().follow(client, loaded_at, |_| {}));
        let (position, term_start) = until(Duration::from_secs(10), || *started.lock())
            .await
            .expect("the controllers start once the view follows");
        assert_eq!(term_start, won_at);
        assert!(
            position >= u64::try_from(won_at).unwrap_or(u64::MAX),
            "the controllers started on a view at {position}, before the term's start at {won_at}"
        );
        shutdown_tx.send_replace(true);
        leading.join().await;
        follow.abort();
    }
}
