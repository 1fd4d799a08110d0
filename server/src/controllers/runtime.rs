//! How a controller runs: its store watches (with relist after a 410 or a dropped stream) and a
//! periodic resync feed keys into a [`WorkQueue`]; workers call the controller's level-triggered
//! `reconcile(key)`, which answers "done" or "look again after T". Errors are retried with
//! backoff; a write conflict is just a retry. Queue depth, reconciles, errors and latency are
//! metrics.

use super::queue::{Backoff, WorkQueue};
use crate::store::{EventType, ListOptions, Store, StoreError, WatchEvent, WatchOptions};
use async_trait::async_trait;
use flotilla_api::kinds::ResourceType;
use futures::StreamExt;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Converged; wait for the next change.
    Done,
    /// Look again after this long (the only way a controller waits for a timeout).
    RequeueAfter(Duration),
}

/// A failed reconcile; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The store failed or a write conflicted.
    #[error("store")]
    Store(#[from] StoreError),
    /// An object could not be decoded.
    #[error("cannot decode {what}: {message}")]
    Decode { what: String, message: String },
    /// Anything else, with context.
    #[error("{0}")]
    Other(String),
}

/// A controller: one kind of decision, converged per key.
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// Name for logs and metrics.
    fn name(&self) -> &'static str;
    /// Reads the world for `key` and converges it.
    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError>;
}

/// Maps a watched object to the keys it concerns.
pub type KeyMapper = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;

/// The usual key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key(obj: &Value) -> Option<String> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str)?;
    Some(
        match obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
        {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        },
    )
}

/// Splits a key into namespace and name.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// What of an object a controller reacts to; watch events that leave it unchanged are
/// dropped (see [`Source::on_change_of`]).
pub type Fingerprint = Arc<dyn Fn(&Value) -> u64 + Send + Sync>;

/// One watched kind and how its objects map to keys.
#[derive(Clone)]
pub struct Source {
    /// The kind.
    pub resource: ResourceType,
    /// Object to keys.
    pub keys: KeyMapper,
    /// When set, a watch event is queued only if this differs from the object's previous
    /// event (deletions and relists always are).
    pub fingerprint: Option<Fingerprint>,
    /// Watch events queue their keys this long after the event; a key already waiting keeps
    /// its earlier time, so a burst of events within the delay costs one reconcile.
    pub coalesce: Duration,
}

/// The fingerprint of a generation-driven object: `metadata.generation`, whether it is being
/// deleted, and its finalizers. Status writes and label or annotation changes leave it alone,
/// as Karmada's controllers ignore updates that keep the generation.
pub fn generation_fingerprint(obj: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let meta = obj.get("metadata");
    meta.and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .hash(&mut h);
    meta.and_then(|m| m.get("deletionTimestamp"))
        .is_some()
        .hash(&mut h);
    if let Some(f) = meta.and_then(|m| m.get("finalizers")) {
        f.to_string().hash(&mut h);
    }
    h.finish()
}

impl Source {
    /// Watches a kind whose objects are the controller's keys.
    pub fn primary(resource: ResourceType) -> Self {
        Self {
            resource,
            keys: Arc::new(|obj| object_key(obj).into_iter().collect()),
            fingerprint: None,
            coalesce: Duration::ZERO,
        }
    }

    /// Watches a kind whose objects map to keys through `keys`.
    pub fn mapped(
        resource: ResourceType,
        keys: impl Fn(&Value) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            resource,
            keys: Arc::new(keys),
            fingerprint: None,
            coalesce: Duration::ZERO,
        }
    }

    /// Queues watch events only when `fingerprint` changed since the object's last event.
    pub fn on_change_of(
        mut self,
        fingerprint: impl Fn(&Value) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.fingerprint = Some(Arc::new(fingerprint));
        self
    }

    /// Queues a watch event's keys `delay` after the event, so the events of a burst (a
    /// binding's Works reporting one after another) are handled together.
    pub fn coalesced(mut self, delay: Duration) -> Self {
        self.coalesce = delay;
        self
    }
}

/// The fingerprints a feed saw last, by object (kind-local storage identity).
#[derive(Default)]
struct Seen(std::collections::HashMap<String, u64>);

impl Seen {
    /// Whether an event is news to the controller; remembers it.
    fn is_news(&mut self, fingerprint: &Fingerprint, event: EventType, obj: &Value) -> bool {
        let id = object_key(obj).unwrap_or_default();
        if event == EventType::Deleted {
            self.0.remove(&id);
            return true;
        }
        let f = fingerprint(obj);
        self.0.insert(id, f) != Some(f)
    }
}

/// How to run a controller.
#[derive(Clone)]
pub struct ControllerConfig {
    /// What feeds the queue.
    pub sources: Vec<Source>,
    /// How often every source is relisted and every key queued again.
    pub resync: Duration,
    /// Concurrent reconciles (never two for one key).
    pub workers: usize,
    /// Retry backoff.
    pub backoff: Backoff,
}

impl ControllerConfig {
    /// One worker, a 5-minute resync, default backoff.
    pub fn new(sources: Vec<Source>) -> Self {
        Self {
            sources,
            resync: Duration::from_secs(300),
            workers: 1,
            backoff: Backoff::default(),
        }
    }
}

/// Controller metrics, shared by every controller of a server.
#[derive(Clone)]
pub struct ControllerMetrics {
    reconciles: IntCounterVec,
    latency: HistogramVec,
    depth: IntGaugeVec,
}

impl ControllerMetrics {
    /// Registers the controller metrics in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let reconciles = IntCounterVec::new(
            Opts::new(
                "flotilla_controller_reconciles_total",
                "Reconciles by controller and result (done, requeue, error).",
            ),
            &["controller", "result"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "flotilla_controller_reconcile_duration_seconds",
                "Reconcile latency by controller.",
            ),
            &["controller"],
        )?;
        let depth = IntGaugeVec::new(
            Opts::new(
                "flotilla_controller_queue_depth",
                "Keys waiting per controller.",
            ),
            &["controller"],
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(depth.clone()))?;
        Ok(Self {
            reconciles,
            latency,
            depth,
        })
    }
}

/// A running controller.
pub struct ControllerHandle {
    /// Its queue (tests and other components may add keys).
    pub queue: WorkQueue,
    tasks: JoinSet<()>,
}

impl ControllerHandle {
    /// Stops the controller and waits for its tasks.
    pub async fn stop(mut self) {
        self.queue.shut_down();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Starts a controller: watch and resync tasks plus workers. It stops when `stop` turns true
/// or through the handle.
pub fn spawn(
    store: Arc<dyn Store>,
    reconciler: Arc<dyn Reconciler>,
    config: ControllerConfig,
    metrics: Option<ControllerMetrics>,
    stop: watch::Receiver<bool>,
) -> ControllerHandle {
    let queue = WorkQueue::new(config.backoff);
    spawn_with_queue(store, reconciler, config, metrics, stop, queue)
}

/// Like [`spawn`], over a queue the reconciler also holds (to queue keys of its own, e.g. the
/// detector queueing templates when a policy changes).
pub fn spawn_with_queue(
    store: Arc<dyn Store>,
    reconciler: Arc<dyn Reconciler>,
    config: ControllerConfig,
    metrics: Option<ControllerMetrics>,
    stop: watch::Receiver<bool>,
    queue: WorkQueue,
) -> ControllerHandle {
    let mut tasks = JoinSet::new();
    for source in config.sources.clone() {
        tasks.spawn(feed(
            store.clone(),
            source,
            queue.clone(),
            reconciler.name(),
        ));
    }
    tasks.spawn(resync(
        store.clone(),
        config.sources.clone(),
        queue.clone(),
        config.resync,
    ));
    for _ in 0..config.workers.max(1) {
        tasks.spawn(work(reconciler.clone(), queue.clone(), metrics.clone()));
    }
    let q = queue.clone();
    let mut stop = stop;
    tasks.spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        q.shut_down();
    });
    ControllerHandle { queue, tasks }
}

/// Lists a source and queues the keys of its objects: now, or spread over `spread_over` (a
/// resync) at each key's [`resync_offset`].
async fn enqueue_all(
    store: &Arc<dyn Store>,
    source: &Source,
    queue: &WorkQueue,
    spread_over: Option<Duration>,
) -> Option<u64> {
    match store
        .list(&source.resource, None, &ListOptions::default())
        .await
    {
        Ok(page) => {
            for obj in &page.items {
                for key in (source.keys)(obj) {
                    match spread_over {
                        Some(every) => {
                            let offset = resync_offset(&key, every);
                            queue.add_after(key, offset);
                        }
                        None => queue.add(key),
                    }
                }
            }
            Some(page.resource_version)
        }
        Err(e) => {
            tracing::warn!(resource = %source.resource.qualified_name(), error = %e, "list failed");
            None
        }
    }
}

/// Lists, then watches from the list's version; relists after the stream ends or expires.
/// Runs until aborted.
pub async fn feed(
    store: Arc<dyn Store>,
    source: Source,
    queue: WorkQueue,
    controller: &'static str,
) {
    loop {
        let Some(rv) = enqueue_all(&store, &source, &queue, None).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let opts = WatchOptions {
            namespace: None,
            filter: None,
            from: Some(rv),
        };
        let mut events = match store.watch(&source.resource, opts).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(controller, error = %e, "watch failed; relisting");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut seen = Seen::default();
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent {
                    object, event_type, ..
                }) => {
                    if let Some(f) = &source.fingerprint {
                        if !seen.is_news(f, event_type, &object) {
                            continue;
                        }
                    }
                    for key in (source.keys)(&object) {
                        queue.add_after(key, source.coalesce);
                    }
                }
                Err(e) => {
                    tracing::debug!(controller, error = %e, "watch ended; relisting");
                    break;
                }
            }
        }
    }
}

/// Where in a resync period a key is queued: spread by a hash of the key, so a resync of
/// thousands of objects is a steady trickle instead of a burst that delays live work.
pub fn resync_offset(key: &str, every: Duration) -> Duration {
    let millis = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(u64::from(crate::scheduler::division::fnv1a32(key.as_bytes())) % millis)
}

async fn resync(store: Arc<dyn Store>, sources: Vec<Source>, queue: WorkQueue, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        for source in &sources {
            enqueue_all(&store, source, &queue, Some(every)).await;
        }
    }
}

async fn work(
    reconciler: Arc<dyn Reconciler>,
    queue: WorkQueue,
    metrics: Option<ControllerMetrics>,
) {
    let name = reconciler.name();
    while let Some(key) = queue.next().await {
        let start = Instant::now();
        let result = reconciler.reconcile(&key).await;
        let label = match &result {
            Ok(Action::Done) => {
                queue.forget(&key);
                "done"
            }
            Ok(Action::RequeueAfter(after)) => {
                queue.forget(&key);
                queue.add_after(key.clone(), *after);
                "requeue"
            }
            Err(ReconcileError::Store(StoreError::Conflict { .. })) => {
                tracing::debug!(controller = name, key = %key, "write conflict; retrying");
                queue.add_rate_limited(&key);
                "conflict"
            }
            Err(e) => {
                tracing::warn!(controller = name, key = %key, error = %crate::api::error::error_chain(e), "reconcile failed");
                queue.add_rate_limited(&key);
                "error"
            }
        };
        queue.done(&key);
        if let Some(m) = &metrics {
            m.reconciles.with_label_values(&[name, label]).inc();
            m.latency
                .with_label_values(&[name])
                .observe(start.elapsed().as_secs_f64());
            m.depth
                .with_label_values(&[name])
                .set(i64::try_from(queue.len()).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(generation: i64, status: &str, deleting: bool) -> Value {
        let mut o = json!({"metadata": {"name": "b", "namespace": "ns", "generation": generation},
                           "status": {"phase": status}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        o
    }

    #[test]
    fn only_changes_of_the_fingerprint_are_news() {
        let f: Fingerprint = Arc::new(generation_fingerprint);
        let mut seen = Seen::default();
        // (event, object, news?)
        let table = [
            (EventType::Added, obj(1, "a", false), true),
            (EventType::Modified, obj(1, "b", false), false), // status only
            (EventType::Modified, obj(2, "b", false), true),  // spec changed
            (EventType::Modified, obj(2, "c", false), false),
            (EventType::Modified, obj(2, "c", true), true), // deletion started
            (EventType::Deleted, obj(2, "c", true), true),  // always news
            (EventType::Added, obj(1, "a", false), true),   // recreated: forgotten
        ];
        for (i, (event, o, news)) in table.into_iter().enumerate() {
            assert_eq!(seen.is_news(&f, event, &o), news, "row {i}");
        }
    }

    #[test]
    fn resync_spreads_keys_over_the_period_and_keeps_each_in_place() {
        let every = Duration::from_secs(15);
        let offsets: Vec<Duration> = (0..1000)
            .map(|i| resync_offset(&format!("default/app-{i}-deployment"), every))
            .collect();
        assert!(offsets.iter().all(|o| *o < every));
        // Each second of the period gets some of the 1,000 keys, none a large share.
        let mut per_second = [0usize; 15];
        for o in &offsets {
            per_second[o.as_secs() as usize] += 1;
        }
        assert!(
            per_second.iter().all(|n| (30..=110).contains(n)),
            "{per_second:?}"
        );
        let key = "default/app-7-deployment";
        assert_eq!(resync_offset(key, every), resync_offset(key, every));
        assert_eq!(resync_offset(key, Duration::ZERO), Duration::ZERO);
    }
}
