//! How a controller runs: its store watches (with relist after a 410 or a dropped stream) and a
//! periodic resync feed keys into a [`WorkQueue`]; workers call the controller's level-triggered
//! `reconcile(key)`, which answers "done" or "look again after T". Errors are retried with backoff;
//! a write conflict is just a retry. Queue depth, reconciles, errors and latency are metrics, and
//! each reconcile runs in a `reconcile` span naming the controller and the key. A [`Controller`]
//! bundles a reconciler, its queue and its [`ControllerConfig`]; [`spawn`] is the one way to start
//! one. A source may carry an [`Observer`] that sees every object of its feed before the key
//! mapping (the cluster → bindings index of [`crate::controllers::shared::fan_out`] lives so), and
//! a config may carry a [`TokenBucket`] its workers share.

use crate::controllers::runtime::limiter::TokenBucket;
use crate::controllers::runtime::queue::{Backoff, WorkQueue};
use crate::store::{EventType, ListOptions, Store, StoreError, WatchEvent, WatchOptions};
use async_trait::async_trait;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use futures::StreamExt;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

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

/// An object's `metadata.name`, and its namespace unless that is empty or absent
/// (cluster-scoped); `None` without a name.
pub fn name_and_namespace(obj: &Value) -> Option<(&str, Option<&str>)> {
    let name = obj.lookup("/metadata/name").and_then(Value::as_str)?;
    let namespace = obj
        .lookup("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    Some((name, namespace))
}

/// The usual key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key(obj: &Value) -> Option<String> {
    let (name, namespace) = name_and_namespace(obj)?;
    Some(match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    })
}

/// Splits a key into namespace and name.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// Sees every object of a source's feed, before fingerprints and key mapping: each watch
/// event, and each full list the feed starts from (which replaces what it knew of the kind).
/// Indexes that a key mapper reads are kept this way.
pub trait Observer: Send + Sync + 'static {
    /// An object was added or modified (`deleted` false), or deleted.
    fn observe(&self, deleted: bool, object: &Value);
    /// The feed listed every object of `resource` (after a start, a 410 or a dropped stream).
    fn relisted(&self, resource: &ResourceType, objects: &[Value]);
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
    /// Sees every object the source's feed reads.
    pub observer: Option<Arc<dyn Observer>>,
    /// The controller's own writes, whose watch events do not wake it.
    pub own_writes: Option<Arc<crate::controllers::runtime::own_writes::OwnWrites>>,
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
            observer: None,
            own_writes: None,
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
            observer: None,
            own_writes: None,
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

    /// Shows every object of the feed to `observer` first.
    pub fn observed_by(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Drops the watch events of the objects the controller wrote itself, as it wrote them.
    pub fn skipping_own(
        mut self,
        writes: Arc<crate::controllers::runtime::own_writes::OwnWrites>,
    ) -> Self {
        self.own_writes = Some(writes);
        self
    }
}

/// The fingerprints a feed saw last, by object (kind-local storage identity).
#[derive(Default)]
struct Seen {
    /// Fingerprint by object key.
    known: std::collections::HashMap<String, u64>,
    /// The key of the event at hand, built here so that an object already known costs no
    /// allocation.
    key: String,
}

impl Seen {
    /// Whether an event is news to the controller; remembers it.
    fn is_news(&mut self, fingerprint: &Fingerprint, event: EventType, obj: &Value) -> bool {
        // The key as `object_key` spells it (empty without a name).
        self.key.clear();
        if let Some(name) = obj.lookup("/metadata/name").and_then(Value::as_str) {
            if let Some(ns) = obj
                .lookup("/metadata/namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
            {
                self.key.push_str(ns);
                self.key.push('/');
            }
            self.key.push_str(name);
        }
        if event == EventType::Deleted {
            self.known.remove(self.key.as_str());
            return true;
        }
        let f = fingerprint(obj);
        match self.known.get_mut(self.key.as_str()) {
            Some(known) => std::mem::replace(known, f) != f,
            None => {
                self.known.insert(self.key.clone(), f);
                true
            }
        }
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
    /// When set, every reconcile first takes a token from this bucket (shared by the
    /// controller's workers, and by whoever else holds a clone).
    pub limiter: Option<TokenBucket>,
}

impl ControllerConfig {
    /// One worker, a 5-minute resync, default backoff, no rate limit.
    pub fn new(sources: Vec<Source>) -> Self {
        Self {
            sources,
            resync: Duration::from_secs(300),
            workers: 1,
            backoff: Backoff::default(),
            limiter: None,
        }
    }

    /// With `workers` concurrent reconciles (at least one).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// With a resync every `every`.
    pub fn resync(mut self, every: Duration) -> Self {
        self.resync = every;
        self
    }

    /// With reconciles paced by `limiter`.
    pub fn limited_by(mut self, limiter: TokenBucket) -> Self {
        self.limiter = Some(limiter);
        self
    }
}

/// A controller ready to start: its reconciler, the queue its workers read (which the
/// reconciler may hold too, to queue keys of its own), and how to run it.
pub struct Controller {
    /// The decisions.
    pub reconciler: Arc<dyn Reconciler>,
    /// The queue.
    pub queue: WorkQueue,
    /// Sources, workers, resync, backoff, limiter.
    pub config: ControllerConfig,
}

impl Controller {
    /// A controller over a fresh queue with the config's backoff.
    pub fn new(reconciler: Arc<dyn Reconciler>, config: ControllerConfig) -> Self {
        Self {
            queue: WorkQueue::new(config.backoff),
            reconciler,
            config,
        }
    }

    /// A controller over a queue the reconciler also holds.
    pub fn with_queue(
        reconciler: Arc<dyn Reconciler>,
        config: ControllerConfig,
        queue: WorkQueue,
    ) -> Self {
        Self {
            reconciler,
            queue,
            config,
        }
    }

    /// The reconciler's name.
    pub fn name(&self) -> &'static str {
        self.reconciler.name()
    }
}

/// Controller metrics, shared by every controller of a server.
#[derive(Clone)]
pub struct ControllerMetrics {
    reconciles: IntCounterVec,
    latency: HistogramVec,
    depth: IntGaugeVec,
    busy: IntGaugeVec,
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
        let busy = IntGaugeVec::new(
            Opts::new(
                "flotilla_controller_busy",
                "Reconciles running plus feeds listing their kind, per controller.",
            ),
            &["controller"],
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(depth.clone()))?;
        registry.register(Box::new(busy.clone()))?;
        Ok(Self {
            reconciles,
            latency,
            depth,
            busy,
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

/// Starts a controller: a feed per source, the resync, and the workers. It stops when `stop`
/// turns true or through the handle.
pub fn spawn(
    store: Arc<dyn Store>,
    controller: Controller,
    metrics: Option<ControllerMetrics>,
    stop: watch::Receiver<bool>,
) -> ControllerHandle {
    let Controller {
        reconciler,
        queue,
        config,
    } = controller;
    if let Some(m) = &metrics {
        let name = reconciler.name();
        queue.report_to(
            m.depth.with_label_values(&[name]),
            m.busy.with_label_values(&[name]),
        );
    }
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
        tasks.spawn(work(
            reconciler.clone(),
            queue.clone(),
            metrics.clone(),
            config.limiter.clone(),
        ));
    }
    let q = queue.clone();
    let mut stop = stop;
    tasks.spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        q.shut_down();
    });
    ControllerHandle { queue, tasks }
}

/// Lists a source and queues the keys of its objects: now (the feed's list, shown to the
/// source's observer), or spread over `spread_over` (a resync) at each key's
/// [`resync_offset`].
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
            if let (None, Some(o)) = (spread_over, &source.observer) {
                o.relisted(&source.resource, &page.items);
            }
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
/// Runs until aborted. Its first list counts as the queue's work (its busy gauge) from the
/// moment `feed` is called, before the future is spawned, so no scrape in between sees the
/// controller idle.
pub fn feed(
    store: Arc<dyn Store>,
    source: Source,
    queue: WorkQueue,
    controller: &'static str,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let first = queue.listing();
    run_feed(store, source, queue, controller, first)
}

async fn run_feed(
    store: Arc<dyn Store>,
    source: Source,
    queue: WorkQueue,
    controller: &'static str,
    first: crate::controllers::runtime::queue::Listing,
) {
    let mut listing = Some(first);
    loop {
        // A relist replaces the events the controller's own writes were expecting.
        if let Some(w) = &source.own_writes {
            w.forget_all();
        }
        let guard = listing.take().unwrap_or_else(|| queue.listing());
        let listed = enqueue_all(&store, &source, &queue, None).await;
        drop(guard);
        let Some(rv) = listed else {
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
                    if let Some(o) = &source.observer {
                        o.observe(event_type == EventType::Deleted, &object);
                    }
                    // Both always look (each remembers what it saw), then either may drop it.
                    let news = source
                        .fingerprint
                        .as_ref()
                        .is_none_or(|f| seen.is_news(f, event_type, &object));
                    let own = source
                        .own_writes
                        .as_ref()
                        .is_some_and(|w| w.is_own(&source.resource, event_type, &object));
                    if !news || own {
                        continue;
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
    limiter: Option<TokenBucket>,
) {
    let name = reconciler.name();
    while let Some(key) = queue.next().await {
        if let Some(l) = &limiter {
            l.take().await;
        }
        let start = Instant::now();
        let span = tracing::info_span!("reconcile", controller = name, key = %key);
        let result = reconciler.reconcile(&key).instrument(span).await;
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
                tracing::warn!(controller = name, key = %key, error = %flotilla_support::error_chain(e), "reconcile failed");
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

    /// The spawn/feed/work loop on the memory store, with tokio's paused time.
    mod running {
        use super::*;
        use crate::controllers::runtime::limiter::{Rate, TokenBucket};
        use crate::controllers::runtime::testing::pull_cluster;
        use crate::controllers::shared::fan_out::binding_sources_with_cluster_fan_out;
        use crate::store::{KvStore, StoreConfig};
        use crate::testing::eventually;
        use flotilla_api::kinds::well_known;
        use parking_lot::Mutex;
        use serde_json::json;
        use std::collections::HashMap;
        use tokio::time::Instant;

        /// Records every reconcile (key, start time) and whether a key ever ran twice at once.
        #[derive(Default)]
        struct Recorder {
            calls: Mutex<Vec<(String, Instant)>>,
            running: Mutex<HashMap<String, usize>>,
            overlapped: Mutex<Vec<String>>,
            /// Per key: how long a reconcile takes (tokio time).
            slow: HashMap<String, Duration>,
            /// Per key: the first reconcile asks to look again after this long.
            requeue: HashMap<String, Duration>,
            /// The first reconcile of `gate.0` waits for `gate.1`.
            gate: Option<(String, Arc<tokio::sync::Notify>)>,
        }

        impl Recorder {
            fn count(&self, key: &str) -> usize {
                self.calls.lock().iter().filter(|(k, _)| k == key).count()
            }
            fn times(&self, key: &str) -> Vec<Instant> {
                self.calls
                    .lock()
                    .iter()
                    .filter(|(k, _)| k == key)
                    .map(|(_, t)| *t)
                    .collect()
            }
            fn keys_since(&self, from: usize) -> Vec<String> {
                let mut keys: Vec<String> = self.calls.lock()[from..]
                    .iter()
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.sort();
                keys
            }
        }

        #[async_trait]
        impl Reconciler for Recorder {
            fn name(&self) -> &'static str {
                "recorder"
            }
            async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
                let first = {
                    let mut calls = self.calls.lock();
                    calls.push((key.to_string(), Instant::now()));
                    calls.iter().filter(|(k, _)| k == key).count() == 1
                };
                {
                    let mut running = self.running.lock();
                    let n = running.entry(key.to_string()).or_default();
                    *n += 1;
                    if *n > 1 {
                        self.overlapped.lock().push(key.to_string());
                    }
                }
                if let Some((gated, gate)) = &self.gate {
                    if first && gated == key {
                        gate.notified().await;
                    }
                }
                if let Some(d) = self.slow.get(key) {
                    tokio::time::sleep(*d).await;
                }
                if let Some(n) = self.running.lock().get_mut(key) {
                    *n -= 1;
                }
                match self.requeue.get(key) {
                    Some(after) if first => Ok(Action::RequeueAfter(*after)),
                    _ => Ok(Action::Done),
                }
            }
        }

        fn store() -> Arc<dyn Store> {
            KvStore::memory(StoreConfig::default())
        }

        /// Stores the Cluster `name` (Pull mode).
        async fn add_cluster(store: &Arc<dyn Store>, name: &str) {
            store
                .create(&well_known::clusters(), pull_cluster(name))
                .await
                .unwrap();
        }

        /// A memory store holding the Clusters `names`.
        async fn store_with_clusters(names: &[&str]) -> Arc<dyn Store> {
            let store = store();
            for name in names {
                add_cluster(&store, name).await;
            }
            store
        }

        async fn taint(store: &Arc<dyn Store>, name: &str, key: &str) {
            let rt = well_known::clusters();
            let mut c = store.get(&rt, None, name).await.expect("cluster");
            c["spec"]["taints"] = json!([{"key": key, "effect": "NoExecute"}]);
            store.update(&rt, c).await.expect("taint");
        }

        /// Waits (in tokio time, at most five virtual minutes) until `done` holds of what the
        /// recorder saw; a late wait names the keys reconciled so far.
        async fn until_recorded(rec: &Recorder, what: &str, done: impl Fn(&Recorder) -> bool) {
            eventually(what, Duration::from_secs(300), || async {
                if done(rec) {
                    Ok(())
                } else {
                    Err(format!("calls {:?}", rec.keys_since(0)))
                }
            })
            .await;
        }

        fn start(
            store: &Arc<dyn Store>,
            rec: &Arc<Recorder>,
            config: ControllerConfig,
        ) -> (ControllerHandle, watch::Sender<bool>) {
            let (stop_tx, stop_rx) = watch::channel(false);
            let reconciler: Arc<dyn Reconciler> = rec.clone();
            let handle = spawn(
                store.clone(),
                Controller::new(reconciler, config),
                None,
                stop_rx,
            );
            (handle, stop_tx)
        }

        /// Cluster `a` in a memory store and the controller of `config` started on it with
        /// `rec`, once it has reconciled `a` a first time.
        async fn started_after_a(
            rec: Recorder,
            config: ControllerConfig,
        ) -> (
            Arc<dyn Store>,
            Arc<Recorder>,
            ControllerHandle,
            watch::Sender<bool>,
        ) {
            let store = store_with_clusters(&["a"]).await;
            let rec = Arc::new(rec);
            let (handle, stop) = start(&store, &rec, config);
            until_recorded(&rec, "a's first reconcile", |r| r.count("a") == 1).await;
            (store, rec, handle, stop)
        }

        fn clusters_config() -> ControllerConfig {
            ControllerConfig::new(vec![Source::primary(well_known::clusters())])
                .resync(Duration::from_secs(3600))
        }

        #[tokio::test(start_paused = true)]
        async fn watch_events_queue_keys_and_duplicates_coalesce() {
            let gate = Arc::new(tokio::sync::Notify::new());
            let rec = Recorder {
                gate: Some(("a".into(), gate.clone())),
                ..Recorder::default()
            };
            let (store, rec, handle, _stop) = started_after_a(rec, clusters_config()).await;
            // The only worker is busy with a: b is created and changed twice meanwhile.
            add_cluster(&store, "b").await;
            taint(&store, "b", "one").await;
            taint(&store, "b", "two").await;
            until_recorded(&rec, "b queued once", |_| handle.queue.len() == 1).await;
            gate.notify_one();
            // z comes after b in the same feed and the same FIFO queue.
            add_cluster(&store, "z").await;
            until_recorded(&rec, "z reconciled", |r| r.count("z") == 1).await;
            assert_eq!(rec.count("b"), 1, "three events of b, one reconcile");
            assert_eq!(rec.count("a"), 1);
            handle.stop().await;
        }

        #[tokio::test(start_paused = true)]
        async fn one_key_is_never_reconciled_twice_at_once() {
            let rec = Recorder {
                slow: HashMap::from([("a".to_string(), Duration::from_secs(1))]),
                ..Recorder::default()
            };
            let (store, rec, handle, _stop) =
                started_after_a(rec, clusters_config().workers(4)).await;
            // Changes while a runs: a runs again afterwards, never beside itself.
            for i in 0..5 {
                taint(&store, "a", &format!("k{i}")).await;
                handle.queue.add("a");
            }
            until_recorded(&rec, "a reconciled again", |r| r.count("a") >= 2).await;
            let times = rec.times("a");
            assert!(times[1] - times[0] >= Duration::from_secs(1), "{times:?}");
            assert!(rec.overlapped.lock().is_empty());
            handle.stop().await;
        }

        #[tokio::test(start_paused = true)]
        async fn requeue_after_fires_when_its_time_comes() {
            let rec = Recorder {
                requeue: HashMap::from([("a".to_string(), Duration::from_secs(30))]),
                ..Recorder::default()
            };
            let (_store, rec, handle, _stop) = started_after_a(rec, clusters_config()).await;
            assert_eq!(handle.queue.delayed_len(), 1, "a waits for its time");
            tokio::time::advance(Duration::from_secs(30)).await;
            until_recorded(&rec, "a's requeue", |r| r.count("a") == 2).await;
            let times = rec.times("a");
            let waited = times[1] - times[0];
            assert!(
                waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
                "{waited:?}"
            );
            handle.stop().await;
        }

        #[tokio::test(start_paused = true)]
        async fn resync_queues_every_object_again_within_its_period() {
            let store = store_with_clusters(&["a", "b", "c"]).await;
            let rec = Arc::new(Recorder::default());
            let every = Duration::from_secs(60);
            let (handle, _stop) = start(
                &store,
                &rec,
                ControllerConfig::new(vec![Source::primary(well_known::clusters())]).resync(every),
            );
            let start = Instant::now();
            until_recorded(&rec, "every key once", |r| {
                r.keys_since(0) == ["a", "b", "c"]
            })
            .await;
            until_recorded(&rec, "every key twice", |r| {
                ["a", "b", "c"].iter().all(|k| r.count(k) == 2)
            })
            .await;
            for k in ["a", "b", "c"] {
                let second = rec.times(k)[1] - start;
                // Queued at the first tick, spread over the next period.
                assert!(second >= every && second < every * 2, "{k}: {second:?}");
            }
            handle.stop().await;
        }

        #[tokio::test(start_paused = true)]
        async fn workers_share_the_controllers_limiter() {
            let store = store_with_clusters(&["a", "b", "c", "d", "e"]).await;
            let rec = Arc::new(Recorder::default());
            let limiter = TokenBucket::new(Rate {
                per_second: 2.0,
                burst: 1,
            });
            let (handle, _stop) = start(
                &store,
                &rec,
                clusters_config().workers(4).limited_by(limiter),
            );
            until_recorded(&rec, "five reconciles", |r| r.calls.lock().len() == 5).await;
            let mut times: Vec<Instant> = rec.calls.lock().iter().map(|(_, t)| *t).collect();
            times.sort();
            for pair in times.windows(2) {
                let gap = pair[1] - pair[0];
                assert!(
                    gap >= Duration::from_millis(499),
                    "{gap:?} between reconciles"
                );
            }
            handle.stop().await;
        }

        #[tokio::test(start_paused = true)]
        async fn a_cluster_change_queues_exactly_the_bindings_that_name_it() {
            let store = store();
            let rbs = well_known::resource_bindings();
            let binding = |name: &str, clusters: &[&str], evicted: &[&str]| {
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                       "metadata": {"namespace": "default", "name": name},
                       "spec": {"clusters": clusters.iter().map(|c| json!({"name": c})).collect::<Vec<_>>(),
                                "gracefulEvictionTasks": evicted.iter().map(|c| json!({"fromCluster": c})).collect::<Vec<_>>()}})
            };
            for name in ["m1", "m2", "m9"] {
                add_cluster(&store, name).await;
            }
            store
                .create(&rbs, binding("a", &["m1"], &[]))
                .await
                .unwrap();
            store
                .create(&rbs, binding("b", &["m2"], &[]))
                .await
                .unwrap();
            store
                .create(&rbs, binding("c", &["m2"], &["m1"]))
                .await
                .unwrap();
            store
                .create(&rbs, binding("z", &["m9"], &[]))
                .await
                .unwrap();
            let rec = Arc::new(Recorder::default());
            let (index, sources) = binding_sources_with_cluster_fan_out();
            let (handle, _stop) = start(
                &store,
                &rec,
                ControllerConfig::new(sources).resync(Duration::from_secs(3600)),
            );
            let all = [
                "rb|default|a",
                "rb|default|b",
                "rb|default|c",
                "rb|default|z",
            ];
            until_recorded(&rec, "every binding once", |r| {
                all.iter().all(|k| r.count(k) >= 1)
            })
            .await;
            until_recorded(&rec, "the index", |_| index.len() == 4).await;
            let before = rec.calls.lock().len();
            // A heartbeat-like status write is no news to the bindings.
            let mut m1 = store
                .get(&well_known::clusters(), None, "m1")
                .await
                .unwrap();
            m1["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]});
            store
                .update_status(&well_known::clusters(), m1)
                .await
                .unwrap();
            taint(&store, "m1", "down").await;
            // m9's change comes after m1's in the same feed: when z has run, m1's keys have.
            taint(&store, "m9", "sentinel").await;
            until_recorded(&rec, "z after m9's taint", |r| r.count("rb|default|z") == 2).await;
            let woken = rec.keys_since(before);
            // The status write and the taint may share a reconcile, never add b.
            assert!(
                woken.iter().all(|k| k != "rb|default|b"),
                "b is not on m1: {woken:?}"
            );
            for k in ["rb|default|a", "rb|default|c"] {
                assert!(woken.iter().any(|w| w == k), "{k} not woken: {woken:?}");
            }
            handle.stop().await;
        }
    }
}
