//! [`KvStore`]: the [`Store`] trait implemented once over any [`Engine`].
//!
//! Write path: take the write lock, read what the rule needs, build a [`Txn`] of object
//! changes, and commit it as one atomic [`WriteBatch`] (objects, their events, the trimmed
//! oldest events, the resourceVersion counter and any new kind record). The in-memory
//! mirrors (event ring, owner index, counter) change only after the engine accepted the batch.
//! The lock is released before the durable wait ([`super::group_commit`]), so writers queue
//! for memory work only and share fsyncs.
//!
//! Reads (`get`, `list`) go to the engine without the lock; watches read the event ring.

use super::super::meta;
use super::super::owner_index::{GcJob, ObjRef, OwnerIndex};
use super::super::rules::{
    self, decode_continue, encode_continue, not_found, CreateName, Deletion, Part, Updated,
};
use super::super::{
    sorted_counts, DeleteOptions, Deleted, EventType, ListOptions, ObjectList, Propagation, Store,
    StoreError, WatchOptions, WatchProgress, WatchStream,
};
use super::engine::{Engine, EngineError, RawEngine, Scan, WriteBatch};
use super::gc::GcQueue;
use super::group_commit::{GroupCommit, Ticket};
use super::memory_engine::MemoryEngine;
use super::object_cache::ObjectCache;
use super::sled_engine::{SledEngine, SledOptions};
use super::watch::{self, event_key, EventLog, LoggedEvent, Selector};
use async_trait::async_trait;
use flotilla_api::kinds::ResourceType;
use flotilla_migrations::{
    MigrationError, EVENTS_TREE, META_TREE, RESOURCE_TYPE_PREFIX, RESOURCE_VERSION_KEY,
};
use flotilla_support::clock::{SharedClock, SystemClock};
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default number of events the watch log keeps.
pub const DEFAULT_EVENT_LOG_CAPACITY: usize = 10_000;

/// Default byte budget of the event log (the JSON of its events, in memory and on disk).
pub const DEFAULT_EVENT_LOG_MAX_BYTES: usize = 64 << 20;

/// Entries read per engine scan by `list` and at open.
const SCAN_CHUNK: usize = 1024;

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Source of creationTimestamp and deletionTimestamp.
    pub clock: SharedClock,
    /// Events kept for watches (at least 1); a watch from an older resourceVersion is Expired.
    pub event_log_capacity: usize,
    /// Bytes of event JSON kept for watches; the oldest events beyond it are dropped like
    /// those beyond the capacity (the newest event is kept whatever its size).
    pub event_log_max_bytes: usize,
    /// Options of the sled engine (ignored by others).
    pub sled: SledOptions,
    /// Group commit rounds start at least this far apart, so writes under load share one
    /// ([`super::group_commit`]); zero starts a round as soon as a writer waits.
    pub min_flush_interval: Duration,
    /// Encoded bytes of decoded objects kept for reads ([`super::object_cache`]); 0 keeps none.
    pub object_cache_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            event_log_capacity: DEFAULT_EVENT_LOG_CAPACITY,
            event_log_max_bytes: DEFAULT_EVENT_LOG_MAX_BYTES,
            sled: SledOptions::default(),
            min_flush_interval: Duration::ZERO,
            object_cache_bytes: super::object_cache::DEFAULT_BUDGET,
        }
    }
}

impl StoreConfig {
    /// The default configuration with another clock.
    pub fn with_clock(clock: SharedClock) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }
}

/// Counters of a store, for metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Flushes to disk done by group commit.
    pub durable_flushes: u64,
    /// Writes acknowledged by those flushes.
    pub grouped_writes: u64,
    /// Events retained for watches.
    pub retained_events: u64,
    /// Bytes of the retained events' JSON.
    pub retained_event_bytes: u64,
    /// resourceVersion of the oldest retained event.
    pub oldest_event: Option<u64>,
}

/// A store over sled.
pub type SledStore = KvStore<SledEngine>;
/// A store in memory.
pub type MemoryStore = KvStore<MemoryEngine>;

/// State that only writers touch, under the write lock.
pub(crate) struct WriteState {
    /// The last resourceVersion handed out.
    pub(crate) rv: u64,
    /// Every kind ever stored, by storage name.
    pub(crate) kinds: HashMap<String, ResourceType>,
    pub(crate) owners: OwnerIndex,
    /// resourceVersion of the last change per kind (storage name) since open.
    pub(crate) kind_rv: HashMap<String, u64>,
    /// Stored objects per kind (storage name): counted once at open, then moved by every
    /// create and removal, so a metrics scrape costs nothing per object (sled counts a tree
    /// by scanning it).
    pub(crate) counts: HashMap<String, u64>,
}

/// Object changes committed together, each with its own resourceVersion.
#[derive(Default)]
pub(crate) struct Txn {
    changes: Vec<Change>,
}

struct Change {
    res: ResourceType,
    key: String,
    /// The new state, or the last state for a removal.
    object: Value,
    event_type: EventType,
}

impl Txn {
    /// Stores `object` under `key` (Added or Modified).
    pub(crate) fn put(&mut self, res: &ResourceType, key: &str, object: Value, event: EventType) {
        self.changes.push(Change {
            res: res.clone(),
            key: key.to_string(),
            object,
            event_type: event,
        });
    }

    /// Removes `key`; `last` is the state the Deleted event carries.
    pub(crate) fn remove(&mut self, res: &ResourceType, key: &str, last: Value) {
        self.changes.push(Change {
            res: res.clone(),
            key: key.to_string(),
            object: last,
            event_type: EventType::Deleted,
        });
    }

    fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// What a commit produced: the objects as stored (with their resourceVersions), in the order
/// of the changes, and what to await for durability.
pub(crate) struct Committed {
    objects: Vec<Arc<Value>>,
    ticket: Option<Ticket>,
}

impl Committed {
    /// The last object written (shared with the event log and the cache) and the ticket.
    fn last(mut self) -> (Arc<Value>, Option<Ticket>) {
        let last = self.objects.pop().unwrap_or_else(|| Arc::new(Value::Null));
        (last, self.ticket)
    }
}

/// Kubernetes object semantics over an [`Engine`]. See the module and the [`Store`] trait.
pub struct KvStore<E: Engine> {
    engine: Arc<E>,
    clock: SharedClock,
    state: Mutex<WriteState>,
    /// The last resourceVersion whose batch the engine applied.
    applied_rv: Arc<AtomicU64>,
    log: Arc<EventLog>,
    commit: Option<GroupCommit>,
    pub(crate) gc: GcQueue,
    closed: AtomicBool,
    /// Decoded objects, so hot objects are not parsed again on every read.
    cache: ObjectCache,
}

impl<E: Engine> std::fmt::Debug for KvStore<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("engine", &self.engine.name())
            .field("resource_version", &self.applied_rv.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn engine_error(err: EngineError) -> StoreError {
    StoreError::Engine(Box::new(err))
}

fn schema_error(err: MigrationError) -> StoreError {
    match err {
        MigrationError::Engine(source) => StoreError::Engine(source),
        other => StoreError::Schema(other.to_string()),
    }
}

fn corrupt(tree: &str, key: &[u8], message: impl Into<String>) -> StoreError {
    engine_error(EngineError::Corrupt {
        tree: tree.to_string(),
        key: String::from_utf8_lossy(key).into_owned(),
        message: message.into(),
    })
}

fn encode(tree: &str, value: &impl serde::Serialize) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| {
        engine_error(EngineError::Encode {
            tree: tree.to_string(),
            source,
        })
    })
}

fn decode_object(tree: &str, key: &[u8], bytes: &[u8]) -> Result<Value, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(tree, key, e.to_string()))
}

fn set_resource_version(obj: &mut Value, rv: u64) -> Result<(), StoreError> {
    meta::set_meta(obj, "resourceVersion", Some(Value::String(rv.to_string())))
}

impl KvStore<SledEngine> {
    /// Opens (or creates) a sled store in the directory `path`, migrating it first.
    pub fn open_sled(path: &Path, config: StoreConfig) -> Result<Arc<Self>, StoreError> {
        let engine = SledEngine::open(path, &config.sled).map_err(engine_error)?;
        tracing::info!(path = %path.display(), "opening the sled store");
        Self::open(engine, config)
    }
}

impl KvStore<super::log_engine::LogEngine> {
    /// Opens (or creates) a store over the log engine in the directory `path` (every tree in
    /// memory, a write-ahead log and snapshots on disk), migrating it first.
    pub fn open_log(path: &Path, config: StoreConfig) -> Result<Arc<Self>, StoreError> {
        let options = super::log_engine::LogOptions::default();
        let engine = super::log_engine::LogEngine::open(path, options).map_err(engine_error)?;
        tracing::info!(path = %path.display(), "opening the log store");
        Self::open(engine, config)
    }
}

impl KvStore<MemoryEngine> {
    /// An empty store in memory (tests, tools).
    ///
    /// # Panics
    /// If the store's background threads cannot be started, or a migration fails on an empty
    /// store (a bug in the migration).
    pub fn memory(config: StoreConfig) -> Arc<Self> {
        Self::open(MemoryEngine::new(), config)
            .unwrap_or_else(|e| panic!("cannot open an empty in-memory store: {e}"))
    }
}

impl<E: Engine> KvStore<E> {
    /// Opens a store over `engine`: runs the migrations, reloads the counter, the kinds, the
    /// event log and the owner index, starts group commit (persistent engines) and garbage
    /// collection, and queues the collection work a crash may have interrupted.
    pub fn open(engine: E, config: StoreConfig) -> Result<Arc<Self>, StoreError> {
        let started = Instant::now();
        let migrated = flotilla_migrations::run(&mut RawEngine(&engine)).map_err(schema_error)?;
        let engine = Arc::new(engine);
        let capacity = watch::Capacity {
            events: config.event_log_capacity.max(1),
            bytes: config.event_log_max_bytes,
        };

        let mut rv = match engine
            .get(META_TREE, RESOURCE_VERSION_KEY.as_bytes())
            .map_err(engine_error)?
        {
            None => 0,
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    corrupt(META_TREE, RESOURCE_VERSION_KEY.as_bytes(), "not a number")
                })?,
        };

        let mut kinds = HashMap::new();
        let scan = Scan {
            prefix: RESOURCE_TYPE_PREFIX.as_bytes(),
            ..Scan::default()
        };
        for (key, bytes) in engine.scan(META_TREE, scan).map_err(engine_error)? {
            let res: ResourceType = serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(META_TREE, &key, e.to_string()))?;
            kinds.insert(res.storage_name(), res);
        }

        let mut events = Vec::new();
        for (key, bytes) in engine
            .scan(EVENTS_TREE, Scan::default())
            .map_err(engine_error)?
        {
            events.push(watch::decode_event(&key, &bytes).map_err(engine_error)?);
        }
        if let Some(last) = events.last() {
            if last.resource_version > rv {
                tracing::warn!(
                    counter = rv,
                    last_event = last.resource_version,
                    "the resourceVersion counter is behind the event log; moving it forward"
                );
                rv = last.resource_version;
            }
        }
        let excess = capacity.excess(
            events.len(),
            events.iter().map(|e| e.size).sum(),
            events.iter().map(|e| e.size),
        );
        if excess > 0 {
            let mut batch = WriteBatch::new();
            for e in events.drain(..excess) {
                batch.remove(EVENTS_TREE, event_key(e.resource_version));
            }
            engine.apply(&batch).map_err(engine_error)?;
            engine.durable_flush().map_err(engine_error)?;
        }

        let mut owners = OwnerIndex::default();
        let mut objects = 0u64;
        let mut counts: HashMap<String, u64> = HashMap::new();
        for res in kinds.values() {
            let tree = res.storage_name();
            let count = counts.entry(tree.clone()).or_default();
            let mut after: Option<Vec<u8>> = None;
            loop {
                let chunk = engine
                    .scan(
                        &tree,
                        Scan {
                            prefix: b"",
                            start_after: after.as_deref(),
                            limit: Some(SCAN_CHUNK),
                        },
                    )
                    .map_err(engine_error)?;
                let n = chunk.len();
                for (key, bytes) in chunk {
                    #[derive(serde::Deserialize)]
                    struct Head {
                        metadata: Option<Value>,
                    }
                    let head: Head = serde_json::from_slice(&bytes)
                        .map_err(|e| corrupt(&tree, &key, e.to_string()))?;
                    let head = serde_json::json!({ "metadata": head.metadata });
                    let r = ObjRef {
                        resource: tree.clone(),
                        key: String::from_utf8_lossy(&key).into_owned(),
                    };
                    owners.put(&r, &head);
                    objects += 1;
                    *count += 1;
                    after = Some(key);
                }
                if n < SCAN_CHUNK {
                    break;
                }
            }
        }
        let recovery = owners.recovery_jobs();

        let log = Arc::new(EventLog::new(events, capacity, rv));
        let applied_rv = Arc::new(AtomicU64::new(rv));
        let commit = if engine.is_persistent() {
            Some(
                GroupCommit::start(
                    engine.clone(),
                    applied_rv.clone(),
                    log.durable_sender(),
                    config.min_flush_interval,
                )
                .map_err(engine_error)?,
            )
        } else {
            None
        };
        let store = Arc::new(Self {
            engine,
            clock: config.clock,
            state: Mutex::new(WriteState {
                rv,
                kinds,
                owners,
                kind_rv: HashMap::new(),
                counts,
            }),
            applied_rv,
            log,
            commit,
            gc: GcQueue::default(),
            closed: AtomicBool::new(false),
            cache: ObjectCache::new(config.object_cache_bytes),
        });
        let weak = Arc::downgrade(&store);
        store
            .gc
            .start(move |job| match weak.upgrade() {
                Some(store) => {
                    store.run_gc_job(job);
                    true
                }
                None => false,
            })
            .map_err(|source| {
                engine_error(EngineError::Thread {
                    name: "store-gc",
                    source,
                })
            })?;
        tracing::info!(
            engine = store.engine.name(),
            schema_from = migrated.from,
            schema_to = migrated.to,
            resource_version = rv,
            kinds = store.state.lock().kinds.len(),
            objects,
            events = store.log.len(),
            gc_jobs = recovery.len(),
            duration_ms = started.elapsed().as_millis() as u64,
            "store opened"
        );
        store.gc.push(recovery);
        Ok(store)
    }

    /// Every kind this store ever held objects of, by storage name.
    pub fn kinds(&self) -> Vec<ResourceType> {
        let mut kinds: Vec<ResourceType> = self.state.lock().kinds.values().cloned().collect();
        kinds.sort_by_key(ResourceType::storage_name);
        kinds
    }

    /// The engine (for tools and tests).
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// True when no garbage collection work is queued or running.
    pub fn gc_idle(&self) -> bool {
        self.gc.is_idle()
    }

    /// Counters for metrics and benchmarks.
    pub fn stats(&self) -> StoreStats {
        let (durable_flushes, grouped_writes) = self
            .commit
            .as_ref()
            .map(GroupCommit::stats)
            .unwrap_or_default();
        StoreStats {
            durable_flushes,
            grouped_writes,
            retained_events: self.log.len() as u64,
            retained_event_bytes: self.log.bytes() as u64,
            oldest_event: self.log.oldest(),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The write lock, refused once the store is closed.
    pub(crate) fn write_lock(&self) -> Result<MutexGuard<'_, WriteState>, StoreError> {
        let guard = self.state.lock();
        if self.is_closed() {
            return Err(engine_error(EngineError::Closed));
        }
        Ok(guard)
    }

    /// Reads one object by storage key.
    pub(crate) fn read_object(
        &self,
        res: &ResourceType,
        key: &str,
    ) -> Result<Option<Value>, StoreError> {
        Ok(self.read_shared(res, key)?.map(|o| (*o).clone()))
    }

    /// Reads an object, from the parsed-object cache when it holds it.
    pub(crate) fn read_shared(
        &self,
        res: &ResourceType,
        key: &str,
    ) -> Result<Option<Arc<Value>>, StoreError> {
        let tree = res.storage_name();
        let miss = match self.cache.get(&tree, key) {
            Ok(hit) => return Ok(Some(hit)),
            Err(miss) => miss,
        };
        match self
            .engine
            .get(&tree, key.as_bytes())
            .map_err(engine_error)?
        {
            None => Ok(None),
            Some(bytes) => {
                let object = Arc::new(decode_object(&tree, key.as_bytes(), &bytes)?);
                self.cache
                    .fill(miss, &tree, key, object.clone(), bytes.len());
                Ok(Some(object))
            }
        }
    }

    /// Commits a transaction under the write lock: one atomic batch, then the in-memory
    /// mirrors, then the durability ticket and the collection jobs.
    pub(crate) fn commit_locked(
        &self,
        st: &mut WriteState,
        txn: Txn,
    ) -> Result<Committed, StoreError> {
        let mut batch = WriteBatch::new();
        let mut rv = st.rv;
        let mut new_kinds: Vec<ResourceType> = Vec::new();
        let mut events = Vec::with_capacity(txn.changes.len());
        let mut refs = Vec::with_capacity(txn.changes.len());
        let mut sizes = Vec::with_capacity(txn.changes.len());
        for change in txn.changes {
            rv += 1;
            let tree = change.res.storage_name();
            let known = st.kinds.get(&tree) == Some(&change.res) || new_kinds.contains(&change.res);
            if !known {
                batch.put(
                    META_TREE,
                    format!("{RESOURCE_TYPE_PREFIX}{tree}"),
                    encode(META_TREE, &change.res)?,
                );
                new_kinds.push(change.res.clone());
            }
            let mut object = change.object;
            set_resource_version(&mut object, rv)?;
            let bytes = if change.event_type == EventType::Deleted {
                batch.remove(&tree, change.key.as_bytes());
                None
            } else {
                Some(encode(&tree, &object)?)
            };
            let size = bytes.as_ref().map_or(0, Vec::len);
            let mut event = LoggedEvent {
                resource_version: rv,
                event_type: change.event_type,
                resource: tree.clone(),
                key: change.key.clone(),
                object: Arc::new(object),
                size: 0,
            };
            let encoded = match &bytes {
                Some(json) => watch::encode_event_with(&event, json),
                None => watch::encode_event(&event),
            }
            .map_err(engine_error)?;
            if let Some(json) = bytes {
                batch.put(&tree, change.key.as_bytes(), json);
            }
            event.size = encoded.len();
            batch.put(EVENTS_TREE, event_key(rv), encoded);
            refs.push(ObjRef {
                resource: tree,
                key: change.key,
            });
            sizes.push(size);
            events.push(event);
        }
        if events.is_empty() {
            return Ok(Committed {
                objects: Vec::new(),
                ticket: None,
            });
        }
        batch.put(META_TREE, RESOURCE_VERSION_KEY, rv.to_string());
        let adding: Vec<(u64, usize)> = events
            .iter()
            .map(|e| (e.resource_version, e.size))
            .collect();
        let trimmed = self.log.trim_plan(&adding);
        for old in &trimmed {
            batch.remove(EVENTS_TREE, event_key(*old));
        }

        self.engine.apply(&batch).map_err(engine_error)?;

        // The batch is in: move the mirrors.
        st.rv = rv;
        for res in new_kinds {
            st.kinds.insert(res.storage_name(), res);
        }
        let mut jobs: Vec<GcJob> = Vec::new();
        let mut objects = Vec::with_capacity(events.len());
        for ((event, r), size) in events.iter().zip(&refs).zip(sizes) {
            st.kind_rv
                .insert(r.resource.clone(), event.resource_version);
            // Only a create adds a key and only a removal drops one.
            match event.event_type {
                EventType::Added => *st.counts.entry(r.resource.clone()).or_default() += 1,
                EventType::Deleted => {
                    if let Some(n) = st.counts.get_mut(&r.resource) {
                        *n = n.saturating_sub(1);
                    }
                }
                _ => {}
            }
            if event.event_type == EventType::Deleted {
                self.cache.drop_object(&r.resource, &r.key);
                jobs.extend(st.owners.remove(r, &event.object));
            } else {
                self.cache
                    .put(&r.resource, &r.key, event.object.clone(), size);
                jobs.extend(st.owners.put(r, &event.object));
            }
            tracing::debug!(
                resource = %r.resource,
                key = %r.key,
                resource_version = event.resource_version,
                event = ?event.event_type,
                "object written"
            );
            objects.push(event.object.clone());
        }
        self.log.append(events, trimmed.len());
        self.applied_rv.store(rv, Ordering::Release);
        let ticket = match &self.commit {
            Some(commit) => Some(commit.enqueue()),
            None => {
                self.log.publish_durable(rv);
                None
            }
        };
        self.gc.push(jobs);
        Ok(Committed { objects, ticket })
    }

    /// Creates under the write lock; answers the object and the ticket of its durable round.
    fn commit_create(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<(Value, Option<Ticket>), StoreError> {
        let mut st = self.write_lock()?;
        self.create_locked(&mut st, res, obj)
    }

    /// Updates `part` of an object under the write lock; answers the object and the ticket of
    /// its durable round.
    fn commit_update(
        &self,
        res: &ResourceType,
        obj: Value,
        part: Part,
    ) -> Result<(Arc<Value>, Option<Ticket>), StoreError> {
        let mut st = self.write_lock()?;
        self.update_locked(&mut st, res, obj, part)
    }

    /// Updates `part` of an object and waits until the write is durable (the lock is released
    /// before the wait).
    async fn update_durably(
        &self,
        res: &ResourceType,
        obj: Value,
        part: Part,
    ) -> Result<Arc<Value>, StoreError> {
        let (value, ticket) = self.commit_update(res, obj, part)?;
        self.durable(ticket).await?;
        Ok(value)
    }

    /// Waits until a commit is durable.
    async fn durable(&self, ticket: Option<Ticket>) -> Result<(), StoreError> {
        let Some(ticket) = ticket else {
            return Ok(());
        };
        match ticket.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(engine_error(EngineError::Flush(e))),
            Err(_) => Err(engine_error(EngineError::Closed)),
        }
    }

    fn create_locked(
        &self,
        st: &mut WriteState,
        res: &ResourceType,
        obj: Value,
    ) -> Result<(Value, Option<Ticket>), StoreError> {
        let (namespace, target) = rules::create_target(res, &obj)?;
        let (name, key) = match target {
            CreateName::Named { name, key } => {
                if self.read_shared(res, &key)?.is_some() {
                    return Err(StoreError::AlreadyExists {
                        resource: res.qualified_name(),
                        name,
                    });
                }
                (name, key)
            }
            CreateName::Generate { prefix } => {
                let mut found = None;
                for _ in 0..rules::GENERATE_NAME_ATTEMPTS {
                    let (name, key) = rules::generated_name(res, namespace.as_deref(), &prefix)?;
                    if self.read_shared(res, &key)?.is_none() {
                        found = Some((name, key));
                        break;
                    }
                }
                found.ok_or_else(|| StoreError::AlreadyExists {
                    resource: res.qualified_name(),
                    name: format!("{prefix}*"),
                })?
            }
        };
        let now = meta::timestamp(self.clock.now());
        let uid = uuid::Uuid::new_v4().to_string();
        let obj = rules::created(res, obj, &name, namespace.as_deref(), &now, &uid)?;
        let mut txn = Txn::default();
        txn.put(res, &key, obj, EventType::Added);
        let (created, ticket) = self.commit_locked(st, txn)?.last();
        Ok((Arc::unwrap_or_clone(created), ticket))
    }

    /// Replaces the stored object with `obj`, the part of it `part` names, under the write lock
    /// (see [`Store::update`], [`Store::update_status`], [`Store::update_with_status`]).
    fn update_locked(
        &self,
        st: &mut WriteState,
        res: &ResourceType,
        obj: Value,
        part: Part,
    ) -> Result<(Arc<Value>, Option<Ticket>), StoreError> {
        let (name, key) = rules::update_target(res, &obj)?;
        let stored = self
            .read_shared(res, &key)?
            .ok_or_else(|| not_found(res, &name))?;
        rules::check_update_preconditions(res, &name, &obj, &stored)?;
        let mut txn = Txn::default();
        match rules::updated(res, &stored, obj, part)? {
            Updated::Unchanged => return Ok((stored, None)),
            Updated::Remove(last) => {
                tracing::debug!(resource = %res.storage_name(), key = %key, "last finalizer removed");
                txn.remove(res, &key, last);
            }
            Updated::Put(new) => txn.put(res, &key, new, EventType::Modified),
        }
        Ok(self.commit_locked(st, txn)?.last())
    }

    /// Removes every owner reference to `uid` from its dependents, into `txn`.
    fn orphan_into(&self, st: &WriteState, uid: &str, txn: &mut Txn) -> Result<(), StoreError> {
        for r in st.owners.dependents_of(uid) {
            let Some(res) = st.kinds.get(&r.resource) else {
                continue;
            };
            let Some(mut dependent) = self.read_object(res, &r.key)? else {
                continue;
            };
            if meta::remove_owner_reference(&mut dependent, uid)? {
                txn.put(res, &r.key, dependent, EventType::Modified);
            }
        }
        Ok(())
    }

    /// Deletes the object at `key` under the write lock (see [`Store::delete`]).
    pub(crate) fn delete_locked(
        &self,
        st: &mut WriteState,
        res: &ResourceType,
        key: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(Deleted, Option<Ticket>), StoreError> {
        let stored = self
            .read_object(res, key)?
            .ok_or_else(|| not_found(res, name))?;
        rules::check_delete_preconditions(res, name, &stored, opts)?;
        let uid = meta::uid(&stored).unwrap_or_default().to_string();
        let mut txn = Txn::default();
        if opts.propagation == Propagation::Orphan {
            self.orphan_into(st, &uid, &mut txn)?;
        }
        let has_dependents = !st.owners.dependents_of(&uid).is_empty();
        let now = meta::timestamp(self.clock.now());
        match rules::deletion(&stored, opts.propagation, has_dependents, &now)? {
            Deletion::AlreadyDeleting => {
                // Only orphaning can still change something.
                let ticket = if txn.is_empty() {
                    None
                } else {
                    self.commit_locked(st, txn)?.ticket
                };
                Ok((Deleted::Pending(stored), ticket))
            }
            Deletion::Remove => {
                txn.remove(res, key, stored);
                let (last, ticket) = self.commit_locked(st, txn)?.last();
                Ok((Deleted::Gone(Arc::unwrap_or_clone(last)), ticket))
            }
            Deletion::MarkDeleting(obj) => {
                txn.put(res, key, obj, EventType::Modified);
                let (pending, ticket) = self.commit_locked(st, txn)?.last();
                Ok((Deleted::Pending(Arc::unwrap_or_clone(pending)), ticket))
            }
        }
    }
}

impl<E: Engine> Drop for KvStore<E> {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.gc.shutdown();
        if let Some(commit) = &self.commit {
            commit.shutdown();
        }
        self.log.close();
    }
}

#[async_trait]
impl<E: Engine> Store for KvStore<E> {
    async fn create(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        let (value, ticket) = self.commit_create(res, obj)?;
        self.durable(ticket).await?;
        Ok(value)
    }

    async fn create_eventually_durable(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Value, StoreError> {
        // The commit registered with group commit; its round runs without this caller (a
        // round that fails leaves its batches queued for the next one).
        self.commit_create(res, obj).map(|(value, _ticket)| value)
    }

    async fn get(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        let key = meta::object_key(res, namespace, name)?;
        self.read_object(res, &key)?
            .ok_or_else(|| not_found(res, name))
    }

    async fn get_shared(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        let key = meta::object_key(res, namespace, name)?;
        self.read_shared(res, &key)?
            .ok_or_else(|| not_found(res, name))
    }

    async fn list(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        // Read the counter first: a watch from it may repeat a change seen here, never miss one.
        let resource_version = self.applied_rv.load(Ordering::Acquire);
        let tree = res.storage_name();
        let prefix = meta::namespace_prefix(res, namespace);
        let mut after = match opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            // The local backends keep no history: a later page reads the store as it is now.
            Some(token) => Some(decode_continue(token, &prefix)?.0.into_bytes()),
            None => None,
        };
        let limit = opts.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut more = false;
        'scan: loop {
            let chunk_size = match limit {
                Some(l) => (l - items.len() + 1).clamp(1, SCAN_CHUNK),
                None => SCAN_CHUNK,
            };
            let chunk = self
                .engine
                .scan(
                    &tree,
                    Scan {
                        prefix: prefix.as_bytes(),
                        start_after: after.as_deref(),
                        limit: Some(chunk_size),
                    },
                )
                .map_err(engine_error)?;
            let n = chunk.len();
            for (key, bytes) in chunk {
                if limit.is_some_and(|l| items.len() >= l) {
                    more = true;
                    break 'scan;
                }
                let obj = decode_object(&tree, &key, &bytes)?;
                after = Some(key);
                if opts.filter.as_ref().is_none_or(|f| f(&obj)) {
                    items.push(obj);
                }
            }
            if n < chunk_size {
                break;
            }
        }
        // As kube-apiserver: a page cut by the limit says how many objects follow it, unless
        // a selector filters them (then the count is unknown without reading them all).
        let remaining = match (&after, more && opts.filter.is_none()) {
            (Some(key), true) => Some(
                self.engine
                    .count(
                        &tree,
                        Scan {
                            prefix: prefix.as_bytes(),
                            start_after: Some(key),
                            limit: None,
                        },
                    )
                    .map_err(engine_error)?,
            ),
            _ => None,
        };
        let continue_token = match (more, after) {
            (true, Some(key)) => Some(encode_continue(
                &String::from_utf8_lossy(&key),
                resource_version,
            )),
            _ => None,
        };
        Ok(ObjectList {
            items,
            resource_version,
            continue_token,
            remaining,
        })
    }

    async fn list_dependents(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Value>, StoreError> {
        let shared = self.list_dependents_shared(res, owner_uid).await?;
        Ok(shared.into_iter().map(|o| (*o).clone()).collect())
    }

    async fn list_dependents_shared(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Arc<Value>>, StoreError> {
        let tree = res.storage_name();
        let refs: Vec<ObjRef> = {
            let st = self.write_lock()?;
            st.owners
                .dependents_of(owner_uid)
                .into_iter()
                .filter(|r| r.resource == tree)
                .collect()
        };
        // The index is read under the lock and the objects after it: an object changed in
        // between is read as it is now, and kept only if it still names the owner.
        let mut out = Vec::with_capacity(refs.len());
        for r in refs {
            if let Some(obj) = self.read_shared(res, &r.key)? {
                if meta::owner_uids(&obj).iter().any(|u| u == owner_uid) {
                    out.push(obj);
                }
            }
        }
        Ok(out)
    }

    async fn update(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.update_durably(res, obj, Part::Object)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn update_eventually_durable(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Value, StoreError> {
        self.commit_update(res, obj, Part::Object)
            .map(|(value, _ticket)| Arc::unwrap_or_clone(value))
    }

    async fn update_status(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.update_durably(res, obj, Part::Status)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn update_status_shared(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.update_durably(res, obj, Part::Status).await
    }

    async fn update_with_status(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.update_durably(res, obj, Part::ObjectAndStatus).await
    }

    async fn delete(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, StoreError> {
        let key = meta::object_key(res, namespace, name)?;
        let (deleted, ticket) = {
            let mut st = self.write_lock()?;
            self.delete_locked(&mut st, res, &key, name, opts)?
        };
        self.durable(ticket).await?;
        Ok(deleted)
    }

    async fn watch_with_progress(
        &self,
        res: &ResourceType,
        opts: WatchOptions,
    ) -> Result<(WatchStream, WatchProgress), StoreError> {
        let from = match opts.from {
            Some(from) => {
                self.log.check_from(from)?;
                from
            }
            None => self.log.durable_rv(),
        };
        let selector = Selector {
            resource: res.storage_name(),
            namespace: opts.namespace.filter(|n| res.namespaced && !n.is_empty()),
            filter: opts.filter,
        };
        Ok(watch::stream(self.log.clone(), from, selector))
    }

    async fn kind_revision(&self, res: &ResourceType) -> Result<u64, StoreError> {
        let st = self.write_lock()?;
        Ok(st.kind_rv.get(&res.storage_name()).copied().unwrap_or(0))
    }

    async fn current_resource_version(&self) -> Result<u64, StoreError> {
        Ok(self.applied_rv.load(Ordering::Acquire))
    }

    async fn object_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        // Kept by every commit: sled's own count scans the whole tree on every scrape.
        Ok(sorted_counts(&self.state.lock().counts))
    }

    fn durability_counts(&self) -> (u64, u64) {
        let stats = self.stats();
        (stats.durable_flushes, stats.grouped_writes)
    }

    async fn close(&self) -> Result<(), StoreError> {
        {
            let _st = self.state.lock();
            self.closed.store(true, Ordering::Release);
        }
        self.gc.shutdown();
        if let Some(commit) = &self.commit {
            commit.shutdown();
        }
        self.log.close();
        tracing::info!(
            engine = self.engine.name(),
            resource_version = self.applied_rv.load(Ordering::Acquire),
            "store closed"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_with_schema(version: &str) -> MemoryEngine {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        batch.put(META_TREE, flotilla_migrations::SCHEMA_VERSION_KEY, version);
        engine.apply(&batch).unwrap();
        engine
    }

    #[test]
    fn open_refuses_newer_or_unreadable_schemas() {
        for version in ["999", "abc"] {
            match KvStore::open(engine_with_schema(version), StoreConfig::default()) {
                Err(StoreError::Schema(message)) => assert!(message.contains(version)),
                other => panic!("schema {version}: expected Schema, got {other:?}"),
            }
        }
        let current = flotilla_migrations::LATEST.to_string();
        KvStore::open(engine_with_schema(&current), StoreConfig::default()).unwrap();
    }

    #[test]
    fn continue_tokens_are_bound_to_their_namespace() {
        let token = encode_continue("ns/name", 42);
        assert_eq!(
            decode_continue(&token, "ns/").unwrap(),
            ("ns/name".to_string(), Some(42))
        );
        assert_eq!(decode_continue(&token, "").unwrap().0, "ns/name");
        assert!(decode_continue(&token, "other/").is_err());
        assert!(decode_continue("%%%", "").is_err());
        // A first-version token (the key alone) still reads, without a revision.
        use base64::Engine as _;
        let v1 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("k1:ns/name");
        assert_eq!(
            decode_continue(&v1, "ns/").unwrap(),
            ("ns/name".to_string(), None)
        );
    }
}
