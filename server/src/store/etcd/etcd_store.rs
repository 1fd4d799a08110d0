//! [`EtcdStore`]: the [`Store`] on etcd. The object rules are the store's own
//! ([`super::super::rules`]); what differs from `KvStore` is only how a decision commits:
//! instead of a process-local lock, each write is one etcd transaction that compares the
//! revision of every key it writes with the revision its rule read, so several servers can
//! write the same objects and a decision taken on a stale read never lands (the caller's rule
//! runs again on a fresh read, or the client gets a Conflict when it named a
//! resourceVersion). resourceVersion is etcd's mod revision, a list's is the header revision,
//! and watches are served from the mirror's one etcd watch (`watch_hub.rs`). The owner
//! index, the kinds and the counts come from the [`Mirror`], fed by that watch, so they
//! include every server's writes; garbage collection runs on its jobs (`collector.rs`). `get`
//! and a list's first page (and the controllers' `list_dependents`) are answered from the
//! mirror's watch cache once it is fresh enough for the view's [`ReadMode`], else from etcd;
//! an update starts from the cache's copy when it holds the revision the writer read, a delete
//! reads etcd. The Events' creates share transactions (`create_batch.rs`).

use super::super::meta;
use super::super::rules::{
    self, decode_continue, encode_continue, not_found, CreateName, Deletion, Part, Precondition,
    Updated,
};
use super::super::{
    DeleteOptions, Deleted, EngineError, ListOptions, ObjectList, Propagation, Store, StoreConfig,
    StoreError, WatchOptions, WatchProgress, WatchStream,
};
use super::collector::{Collection, Collector};
use super::commit::{self, etcd_error, revision_of, Fence, Read, Write};
use super::compactor::Compactor;
use super::connect::{connect, EtcdConfig};
use super::create_batch::CreateBatcher;
use super::keys::{prefix_end, Keys};
use super::mirror::{Mirror, REACH_IDLE};
use super::revision_probe::RevisionProbe;
use super::watch_stream::{self, Selection};
use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, GetOptions};
use flotilla_api::kinds::ResourceType;
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Reads and commits an update or a delete tries before it answers Conflict: each failed
/// attempt means another writer changed the object in between.
const MAX_ATTEMPTS: usize = 32;

/// Objects read per request by `list`.
const LIST_CHUNK: usize = 500;

/// [`EtcdStoreOptions::cache_wait`] by default (kube-apiserver's wait for a fresh watch cache).
pub const DEFAULT_CACHE_WAIT: Duration = Duration::from_secs(3);

/// How a view of the store answers `get` and the first page of a `list`, and for the
/// controllers `list_dependents` (a fresh `list_dependents`, updates and deletes read etcd).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Never older than a write acknowledged before the read began, through any server: the
    /// read learns etcd's current revision ([`RevisionProbe`]: one count-only request, shared
    /// with concurrent reads that began before it was sent) and answers from the watch cache
    /// once the cache has reached that revision, from etcd when it has not within
    /// [`EtcdStoreOptions::cache_wait`]. The store itself (the API) reads so.
    Fresh,
    /// Without a request to etcd: from the watch cache once it holds every write this process
    /// committed and every event a watch of this process delivered (an informer's guarantee:
    /// a reader sees its own writes and what it was told of, and the cache never goes back);
    /// from etcd when it has not within the wait. It may not have another server's latest
    /// write yet, so it is for writers whose every write is conditional (a resourceVersion
    /// that must match, a create that must be new): the controllers.
    Cached,
}

/// The etcd engine's knobs beside the connection.
#[derive(Clone, Debug)]
pub struct EtcdStoreOptions {
    /// How often the compactor runs (`--etcd-compaction-interval`); zero turns it off.
    pub compaction_interval: Duration,
    /// Which servers of the store collect garbage (dependents of gone owners, foreground
    /// deletions): this one always, only while it leads ([`EtcdStore::collect_in_term`]), or
    /// none (`migrate-store`).
    pub garbage_collection: Collection,
    /// The longest a read waits for the watch cache to be fresh enough before it reads etcd
    /// instead (it gives up sooner when the cache does not move at all for 100 ms).
    pub cache_wait: Duration,
}

impl Default for EtcdStoreOptions {
    fn default() -> Self {
        Self {
            compaction_interval: super::compactor::DEFAULT_COMPACTION_INTERVAL,
            garbage_collection: Collection::Always,
            cache_wait: DEFAULT_CACHE_WAIT,
        }
    }
}

/// What the store and its background tasks share.
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    clock: SharedClock,
    pub(crate) mirror: Arc<Mirror>,
    /// The highest revision this process committed: reads that must see its own writes wait
    /// for the mirror to reach it.
    written: AtomicU64,
    /// Kinds whose record this process has seen stored.
    recorded_kinds: Mutex<HashSet<String>>,
    closed: AtomicBool,
    /// Set at close to the last revision this process wrote: watches deliver up to it, then
    /// end.
    closing: watch::Sender<Option<u64>>,
    commits: AtomicU64,
    /// The highest revision a watch of this process delivered: [`ReadMode::Cached`] reads
    /// wait for the cache to reach it, so a reader never misses what it was told of.
    delivered: Arc<AtomicU64>,
    probe: RevisionProbe,
    cache_wait: Duration,
    /// Reads answered from the watch cache, and from etcd because it was not fresh in time.
    cache_reads: AtomicU64,
    etcd_reads: AtomicU64,
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl EtcdStore {
    /// A view of the store under `prefix` that reads as `read`, whose view of the store is
    /// loaded now and never follows etcd (a leader's cache after a pause, a broken watch).
    pub(crate) async fn stalled(client: Client, prefix: &str, read: ReadMode) -> Arc<Self> {
        let mirror = Mirror::new(Keys::new(prefix));
        mirror.load(&client).await.expect("the mirror loads");
        Arc::new(Self {
            inner: Arc::new(Inner::over_mirror(client, Keys::new(prefix), mirror)),
            fence: None,
            read,
            background: None,
            batcher: OnceLock::new(),
        })
    }
}

#[cfg(test)]
impl Inner {
    /// Shared state over `client` that reads `mirror` as it is, followed or not (tests give
    /// the collector a view that lags).
    pub(crate) fn over_mirror(client: Client, keys: Keys, mirror: Arc<Mirror>) -> Self {
        let options = EtcdStoreOptions::default();
        Self::new(
            client,
            keys,
            Arc::new(flotilla_support::clock::SystemClock),
            mirror,
            0,
            &options,
        )
    }
}

#[cfg(test)]
impl EtcdStore {
    /// A store over `client` whose view is loaded but does not follow etcd (tests make it lag,
    /// then follow it themselves: `mirror.follow(client, loaded_at, ...)`); it collects
    /// nothing. Answers the store, its view and the revision the view was loaded at.
    pub(crate) async fn open_unfollowed(
        client: Client,
        prefix: &str,
    ) -> Result<(Arc<Self>, Arc<Mirror>, u64), StoreError> {
        let keys = Keys::new(prefix);
        let mirror = Mirror::new(keys.clone());
        let (loaded_at, _) = mirror.load(&client).await?;
        let inner = Arc::new(Inner::over_mirror(client, keys, mirror.clone()));
        let store = Arc::new(Self {
            inner: inner.clone(),
            fence: None,
            read: ReadMode::Fresh,
            batcher: OnceLock::new(),
            background: Some(Background {
                collector: Collector::start(inner),
                tasks: Mutex::new(Vec::new()),
                compactor: Mutex::new(None),
            }),
        });
        Ok((store, mirror, loaded_at))
    }
}

/// Kubernetes object semantics on etcd. See the module.
///
/// [`EtcdStore::fenced`] gives a view of the same store whose every write carries a leader's
/// fence: the controllers of a term write through it, the API through the store itself.
/// [`EtcdStore::for_controllers`] is the unfenced view of controllers that do not elect a
/// leader. The store itself reads [`ReadMode::Fresh`], the controllers' views
/// [`ReadMode::Cached`].
pub struct EtcdStore {
    inner: Arc<Inner>,
    /// The fence of this view's writes; `None` for the store itself.
    fence: Option<Fence>,
    /// How this view reads.
    read: ReadMode,
    /// The background work, owned by the store itself (not by its fenced views).
    background: Option<Background>,
    /// Commits this view's eventually durable creates together (started on the first).
    batcher: OnceLock<CreateBatcher>,
}

/// What an opened store runs besides requests.
struct Background {
    collector: Arc<Collector>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    compactor: Mutex<Option<Compactor>>,
}

impl Background {
    fn stop(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        self.collector.stop();
        if let Some(compactor) = self.compactor.lock().take() {
            compactor.stop();
        }
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.inner.keys.prefix())
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to etcd as `etcd` says and opens the store under its prefix.
    pub async fn open(
        etcd: &EtcdConfig,
        config: StoreConfig,
        options: EtcdStoreOptions,
    ) -> Result<Arc<Self>, StoreError> {
        let client = connect(etcd).await.map_err(|e| {
            StoreError::Engine(Box::new(EngineError::Io {
                path: etcd.endpoints.join(","),
                source: std::io::Error::other(e.to_string()),
            }))
        })?;
        Self::open_with_client(client, &etcd.prefix, config, options).await
    }

    /// Opens the store under `prefix` with a connected client: checks the layout's version
    /// (a newer one is refused, an older one migrated), lists everything into the mirror,
    /// then follows it, and starts garbage collection (with the work a crash may have left)
    /// and the compactor.
    pub async fn open_with_client(
        client: Client,
        prefix: &str,
        config: StoreConfig,
        options: EtcdStoreOptions,
    ) -> Result<Arc<Self>, StoreError> {
        let keys = Keys::new(prefix);
        super::schema::check(&client, &keys).await?;
        let mirror = Mirror::new(keys.clone());
        let (revision, recovery) = mirror.load(&client).await?;
        let inner = Arc::new(Inner::new(
            client.clone(),
            keys.clone(),
            config.clock,
            mirror.clone(),
            revision,
            &options,
        ));
        let collector = Collector::start(inner.clone());
        if options.garbage_collection == Collection::Always {
            collector.open(None, recovery);
        }
        let queue = collector.clone();
        let follow = tokio::spawn(
            mirror
                .clone()
                .follow(client.clone(), revision, move |jobs| queue.push(jobs)),
        );
        let compactor = (!options.compaction_interval.is_zero())
            .then(|| Compactor::start(client.clone(), keys.prefix(), options.compaction_interval));
        tracing::info!(
            prefix = keys.prefix(),
            revision,
            kinds = mirror.counts().len(),
            "etcd store opened"
        );
        Ok(Arc::new(Self {
            inner,
            fence: None,
            read: ReadMode::Fresh,
            batcher: OnceLock::new(),
            background: Some(Background {
                collector,
                tasks: Mutex::new(vec![follow]),
                compactor: Mutex::new(compactor),
            }),
        }))
    }

    /// A get read as `mode` says, whatever this view's own mode.
    async fn get_as(
        &self,
        mode: ReadMode,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        let namespace = namespace.filter(|_| res.namespaced);
        let key = meta::object_key(res, namespace, name)?;
        if self.inner.cache_fresh(mode).await? {
            return self
                .inner
                .mirror
                .cache()
                .get(&self.inner.object_key(res, &key))
                .ok_or_else(|| not_found(res, name));
        }
        let read = self
            .inner
            .read(res, &key)
            .await?
            .ok_or_else(|| not_found(res, name))?;
        if self.read == ReadMode::Cached {
            // Monotonic: the next cached read waits for the cache to hold this state.
            self.inner
                .delivered
                .fetch_max(read.revision, Ordering::AcqRel);
        }
        Ok(Arc::new(read.object))
    }

    /// The same store, every write of which also requires `fence` to hold: a write after the
    /// term ended commits nothing and fails with `StoreError::Fenced`. It reads
    /// [`ReadMode::Cached`]: the controllers of a term write through it.
    pub fn fenced(&self, fence: Fence) -> Arc<EtcdStore> {
        Arc::new(Self {
            inner: self.inner.clone(),
            fence: Some(fence),
            read: ReadMode::Cached,
            background: None,
            batcher: OnceLock::new(),
        })
    }

    /// Collects garbage through `fence` from now on (a store opened with
    /// [`Collection::InTerm`], once its server leads): first whatever the whole owner index
    /// calls for, as no server collected while the leadership changed hands. Call it once the
    /// view of the store has caught up with the term's start.
    pub fn collect_in_term(&self, fence: Fence) {
        if let Some(background) = &self.background {
            let jobs = self.inner.mirror.with_owners(|o| o.recovery_jobs());
            background.collector.open(Some(fence), jobs);
        }
    }

    /// Stops collecting garbage (the term ended): queued work is dropped, the next term
    /// finds it again.
    pub fn stop_collecting(&self) {
        if let Some(background) = &self.background {
            background.collector.close();
        }
    }

    /// The same store read [`ReadMode::Cached`], its writes unfenced: for controllers that run
    /// without leader election.
    pub fn for_controllers(&self) -> Arc<EtcdStore> {
        Arc::new(Self {
            inner: self.inner.clone(),
            fence: self.fence.clone(),
            read: ReadMode::Cached,
            background: None,
            batcher: OnceLock::new(),
        })
    }

    /// How this view reads.
    pub fn read_mode(&self) -> ReadMode {
        self.read
    }

    /// Reads answered from the watch cache so far, and reads that asked etcd because the cache
    /// was not fresh enough in time (for tests and benchmarks; every view of the store counts).
    pub fn read_counts(&self) -> (u64, u64) {
        (
            self.inner.cache_reads.load(Ordering::Relaxed),
            self.inner.etcd_reads.load(Ordering::Relaxed),
        )
    }

    /// etcd requests sent for fresh reads' revisions so far (for tests and benchmarks).
    pub fn revision_requests(&self) -> u64 {
        self.inner.probe.requests()
    }

    /// True when garbage collection has nothing queued or running and the mirror has every
    /// write of this process (for tests).
    pub fn gc_idle(&self) -> bool {
        self.background
            .as_ref()
            .is_none_or(|b| b.collector.is_idle())
            && self.inner.mirror.position() >= self.inner.written.load(Ordering::Acquire)
    }

    /// Waits until this server's watch-fed view of the store (the mirror that owner lookups,
    /// kind revisions and garbage collection read) holds every change up to `revision`; fails
    /// when it has not within the mirror's catch-up timeout.
    pub async fn caught_up_to(&self, revision: u64) -> Result<(), StoreError> {
        self.inner.mirror.caught_up(revision).await
    }

    /// The etcd client (for tools and tests).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Stores `object` exactly as it is (uid, timestamps, finalizers and owners kept; only the
    /// resourceVersion is etcd's), under a key that must be free: for moving a store from
    /// another engine (`store::migrate_store`), never for serving requests.
    pub async fn import(&self, res: &ResourceType, object: &Value) -> Result<u64, StoreError> {
        let namespace = if res.namespaced {
            meta::namespace(object)
        } else {
            None
        };
        let name = meta::name(object).ok_or_else(|| meta::invalid("metadata.name", "required"))?;
        let key = meta::object_key(res, namespace, name)?;
        let mut writes = vec![Write::put(
            self.inner.object_key(res, &key),
            Precondition::Absent,
            commit::encode(object)?,
        )];
        writes.extend(self.inner.kind_record(res)?);
        match self.inner.commit(None, &writes).await? {
            Some(revision) => {
                self.inner.recorded_kinds.lock().insert(res.storage_name());
                Ok(revision)
            }
            None => Err(StoreError::AlreadyExists {
                resource: res.qualified_name(),
                name: name.to_string(),
            }),
        }
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(background) = &self.background {
            self.inner.closed.store(true, Ordering::Release);
            self.inner.closing.send_replace(Some(0));
            background.stop();
        }
    }
}

impl Inner {
    /// Shared state over `client`, whose mirror is loaded at `revision`.
    fn new(
        client: Client,
        keys: Keys,
        clock: SharedClock,
        mirror: Arc<Mirror>,
        revision: u64,
        options: &EtcdStoreOptions,
    ) -> Self {
        Self {
            probe: RevisionProbe::new(client.clone(), keys.compact_rev_key()),
            client,
            keys,
            clock,
            mirror,
            written: AtomicU64::new(revision),
            recorded_kinds: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            closing: watch::channel(None).0,
            commits: AtomicU64::new(0),
            delivered: Arc::new(AtomicU64::new(0)),
            cache_wait: options.cache_wait,
            cache_reads: AtomicU64::new(0),
            etcd_reads: AtomicU64::new(0),
        }
    }

    /// Waits until the watch cache may answer a read of `mode` (see [`ReadMode`]); false when
    /// it did not get there in time and the read must ask etcd.
    async fn cache_fresh(&self, mode: ReadMode) -> Result<bool, StoreError> {
        let needed = match mode {
            ReadMode::Fresh => self.probe.current().await?,
            ReadMode::Cached => self
                .written
                .load(Ordering::Acquire)
                .max(self.delivered.load(Ordering::Acquire)),
        };
        if self.mirror.reach(needed, self.cache_wait, REACH_IDLE).await {
            self.cache_reads.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        self.etcd_reads.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            needed,
            position = self.mirror.position(),
            mode = ?mode,
            "the watch cache is behind; reading etcd"
        );
        Ok(false)
    }

    fn check_open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Engine(Box::new(EngineError::Closed)));
        }
        Ok(())
    }

    fn object_key(&self, res: &ResourceType, key: &str) -> String {
        self.keys.object(&res.storage_name(), key)
    }

    /// The write of the kind's record, when this process has not seen it stored: it goes in
    /// the transaction of the kind's first object, so the record never costs a revision of
    /// its own.
    fn kind_record(&self, res: &ResourceType) -> Result<Option<Write>, StoreError> {
        let storage = res.storage_name();
        if self.recorded_kinds.lock().contains(&storage)
            || self.mirror.kind(&storage).as_ref() == Some(res)
        {
            return Ok(None);
        }
        let value = serde_json::to_vec(res).map_err(|source| {
            StoreError::Engine(Box::new(EngineError::Encode {
                tree: "etcd".to_string(),
                source,
            }))
        })?;
        Ok(Some(Write::overwrite(
            self.keys.kind_record(&storage),
            value,
        )))
    }

    /// Commits writes, guarded by `fence` when there is one; `None` when a precondition
    /// failed.
    pub(crate) async fn commit(
        &self,
        fence: Option<&Fence>,
        writes: &[Write],
    ) -> Result<Option<u64>, StoreError> {
        self.commit_checked(fence, Vec::new(), writes).await
    }

    /// As [`Inner::commit`], with further compares that must hold (keys read, not written).
    async fn commit_checked(
        &self,
        fence: Option<&Fence>,
        checks: Vec<Compare>,
        writes: &[Write],
    ) -> Result<Option<u64>, StoreError> {
        self.check_open()?;
        let committed = commit::commit(&self.client, fence, &checks, writes).await?;
        if let Some(revision) = committed {
            self.written.fetch_max(revision, Ordering::AcqRel);
            self.commits.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                revision,
                writes = writes.len(),
                "etcd transaction committed"
            );
        }
        Ok(committed)
    }

    /// Waits until the mirror has every write this process committed.
    async fn mirror_current(&self) -> Result<(), StoreError> {
        self.mirror
            .caught_up(self.written.load(Ordering::Acquire))
            .await
    }

    async fn read(&self, res: &ResourceType, key: &str) -> Result<Option<Read>, StoreError> {
        commit::read(&self.client, &self.object_key(res, key)).await
    }

    /// The object at storage key `key` as the watch cache holds it, if that is at `revision`.
    fn cached_at(&self, res: &ResourceType, key: &str, revision: Option<u64>) -> Option<Read> {
        let revision = revision.filter(|r| *r > 0)?;
        let key = self.object_key(res, key);
        let cached = self.mirror.cache().get(&key)?;
        (meta::resource_version(&cached).ok()?? == revision).then(|| Read {
            key,
            object: Arc::unwrap_or_clone(cached),
            revision,
        })
    }

    pub(crate) async fn create(
        &self,
        fence: Option<&Fence>,
        res: &ResourceType,
        obj: Value,
        batch: Option<&CreateBatcher>,
    ) -> Result<Value, StoreError> {
        self.check_open()?;
        let (namespace, target) = rules::create_target(res, &obj)?;
        let record = self.kind_record(res)?;
        let now = meta::timestamp(self.clock.now());
        let uid = uuid::Uuid::new_v4().to_string();
        let names: Vec<(String, String)> = match &target {
            CreateName::Named { name, key } => vec![(name.clone(), key.clone())],
            CreateName::Generate { prefix } => (0..rules::GENERATE_NAME_ATTEMPTS)
                .map(|_| rules::generated_name(res, namespace.as_deref(), prefix))
                .collect::<Result<_, _>>()?,
        };
        for (name, key) in names {
            let mut object =
                rules::created(res, obj.clone(), &name, namespace.as_deref(), &now, &uid)?;
            let mut writes = vec![Write::put(
                self.object_key(res, &key),
                Precondition::Absent,
                commit::encode(&object)?,
            )];
            writes.extend(record.clone());
            let committed = match batch {
                Some(batch) => batch.commit(writes).await?,
                None => self.commit(fence, &writes).await?,
            };
            if let Some(revision) = committed {
                self.recorded_kinds.lock().insert(res.storage_name());
                meta::set_meta(
                    &mut object,
                    "resourceVersion",
                    Some(Value::String(revision.to_string())),
                )?;
                return Ok(object);
            }
        }
        let name = match target {
            CreateName::Named { name, .. } => name,
            CreateName::Generate { prefix } => format!("{prefix}*"),
        };
        Err(StoreError::AlreadyExists {
            resource: res.qualified_name(),
            name,
        })
    }

    pub(crate) async fn update(
        &self,
        fence: Option<&Fence>,
        res: &ResourceType,
        obj: Value,
        part: Part,
    ) -> Result<Arc<Value>, StoreError> {
        let (name, key) = rules::update_target(res, &obj)?;
        // The object at the revision the writer read, when the watch cache still holds it, is
        // what etcd has at that revision: the first attempt starts from it and commits only if
        // etcd is still there (Kubernetes' GuaranteedUpdate with a cached suggestion). What
        // only etcd can decide (a precondition failed, nothing would change) is read again.
        let mut suggestion = self.cached_at(res, &key, meta::resource_version(&obj)?);
        for _ in 0..MAX_ATTEMPTS {
            let (stored, suggested) = match suggestion.take() {
                Some(cached) => (cached, true),
                None => (
                    self.read(res, &key)
                        .await?
                        .ok_or_else(|| not_found(res, &name))?,
                    false,
                ),
            };
            let checked = rules::check_update_preconditions(res, &name, &obj, &stored.object);
            if suggested && checked.is_err() {
                continue;
            }
            checked?;
            let (write, mut answer) = match rules::updated(res, &stored.object, obj.clone(), part)?
            {
                Updated::Unchanged if suggested => continue,
                Updated::Unchanged => return Ok(Arc::new(stored.object)),
                Updated::Remove(last) => (
                    Write::delete(self.object_key(res, &key), stored.revision),
                    last,
                ),
                Updated::Put(new) => (
                    Write::put(
                        self.object_key(res, &key),
                        Precondition::At(stored.revision),
                        commit::encode(&new)?,
                    ),
                    new,
                ),
            };
            if let Some(revision) = self.commit(fence, &[write]).await? {
                meta::set_meta(
                    &mut answer,
                    "resourceVersion",
                    Some(Value::String(revision.to_string())),
                )?;
                return Ok(Arc::new(answer));
            }
        }
        Err(rules::conflict(res, &name, rules::STALE_REASON))
    }

    /// Deletes the object at storage key `key` (see [`Store::delete`]).
    pub(crate) async fn delete(
        &self,
        fence: Option<&Fence>,
        res: &ResourceType,
        key: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let stored = self
                .read(res, key)
                .await?
                .ok_or_else(|| not_found(res, name))?;
            rules::check_delete_preconditions(res, name, &stored.object, opts)?;
            let uid = meta::uid(&stored.object).unwrap_or_default().to_string();
            let needs_dependents = matches!(
                opts.propagation,
                Propagation::Orphan | Propagation::Foreground
            );
            if needs_dependents {
                self.mirror_current().await?;
            }
            let dependents = self.mirror.with_owners(|o| o.dependents_of(&uid));
            let mut writes = Vec::new();
            if opts.propagation == Propagation::Orphan && !dependents.is_empty() {
                writes = self.orphan_writes(&uid, &dependents).await?;
                if writes.len() + 1 > commit::MAX_TXN_OPS {
                    // Too many for one transaction: orphan them first, in batches (each
                    // safe alone: a reference to an owner that is going anyway), then
                    // delete the owner with whatever references are left.
                    for batch in commit::batches(writes) {
                        self.commit(fence, &batch).await?;
                    }
                    continue;
                }
            }
            let now = meta::timestamp(self.clock.now());
            let own_key = self.object_key(res, key);
            let mut checks = Vec::new();
            let decision = rules::deletion(
                &stored.object,
                opts.propagation,
                !dependents.is_empty(),
                &now,
            )?;
            let answer = match decision {
                Deletion::AlreadyDeleting => {
                    if writes.is_empty() {
                        return Ok(Deleted::Pending(stored.object));
                    }
                    // Orphaning only: the owner itself must not have changed meanwhile.
                    checks.push(Compare::mod_revision(
                        own_key,
                        CompareOp::Equal,
                        i64::try_from(stored.revision).unwrap_or(i64::MAX),
                    ));
                    None
                }
                Deletion::Remove => {
                    writes.push(Write::delete(own_key, stored.revision));
                    Some(Deleted::Gone(stored.object.clone()))
                }
                Deletion::MarkDeleting(marked) => {
                    writes.push(Write::put(
                        own_key,
                        Precondition::At(stored.revision),
                        commit::encode(&marked)?,
                    ));
                    Some(Deleted::Pending(marked))
                }
            };
            if let Some(revision) = self.commit_checked(fence, checks, &writes).await? {
                let rv = Some(Value::String(revision.to_string()));
                return Ok(match answer {
                    None => Deleted::Pending(stored.object),
                    Some(Deleted::Gone(mut last)) => {
                        meta::set_meta(&mut last, "resourceVersion", rv)?;
                        Deleted::Gone(last)
                    }
                    Some(Deleted::Pending(mut marked)) => {
                        meta::set_meta(&mut marked, "resourceVersion", rv)?;
                        Deleted::Pending(marked)
                    }
                });
            }
        }
        Err(rules::conflict(res, name, rules::STALE_REASON))
    }

    /// Writes that remove every owner reference to `uid` from `dependents`.
    async fn orphan_writes(
        &self,
        uid: &str,
        dependents: &[super::super::owner_index::ObjRef],
    ) -> Result<Vec<Write>, StoreError> {
        let keys: Vec<String> = dependents
            .iter()
            .map(|r| self.keys.object(&r.resource, &r.key))
            .collect();
        let mut writes = Vec::new();
        for read in commit::read_many(&self.client, &keys).await? {
            let mut object = read.object;
            if meta::remove_owner_reference(&mut object, uid)? {
                writes.push(Write::put(
                    read.key,
                    Precondition::At(read.revision),
                    commit::encode(&object)?,
                ));
            }
        }
        Ok(writes)
    }

    /// The etcd keys of the objects of a kind the owner index has as dependents of
    /// `owner_uid`, in key order.
    fn dependent_keys(&self, res: &ResourceType, owner_uid: &str) -> Vec<String> {
        let storage = res.storage_name();
        self.mirror
            .with_owners(|o| o.dependents_of(owner_uid))
            .into_iter()
            .filter(|r| r.resource == storage)
            .map(|r| self.keys.object(&r.resource, &r.key))
            .collect()
    }

    /// Objects of a kind that name `owner_uid` as an owner, in key order.
    async fn dependents(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Value>, StoreError> {
        self.mirror_current().await?;
        let keys = self.dependent_keys(res, owner_uid);
        let reads = commit::read_many(&self.client, &keys).await?;
        Ok(reads
            .into_iter()
            .map(|r| r.object)
            .filter(|o| meta::owner_uids(o).iter().any(|u| u == owner_uid))
            .collect())
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn create(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner.create(self.fence.as_ref(), res, obj, None).await
    }

    async fn create_eventually_durable(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Value, StoreError> {
        // etcd makes every commit durable; what these creates can spare is a transaction each.
        let batcher = self
            .batcher
            .get_or_init(|| CreateBatcher::start(self.inner.clone(), self.fence.clone()));
        self.inner
            .create(self.fence.as_ref(), res, obj, Some(batcher))
            .await
    }

    async fn get(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.get_shared(res, namespace, name)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn get_shared(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        self.get_as(self.read, res, namespace, name).await
    }

    async fn get_fresh(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.get_as(ReadMode::Fresh, res, namespace, name)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn list(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let prefix = meta::namespace_prefix(res, namespace);
        let kind_prefix = self.inner.keys.kind(&res.storage_name());
        let full_prefix = format!("{kind_prefix}{prefix}");
        let end = prefix_end(full_prefix.as_bytes());
        let token = opts.continue_token.as_deref().filter(|t| !t.is_empty());
        let limit = opts.limit.filter(|l| *l > 0);
        if token.is_none() && self.inner.cache_fresh(self.read).await? {
            return Ok(cached_list(
                &self.inner.mirror,
                &kind_prefix,
                &full_prefix,
                limit,
                opts,
            ));
        }
        let (mut after, snapshot) = match token {
            Some(token) => {
                let (key, revision) = decode_continue(token, &prefix)?;
                (Some(key), revision)
            }
            None => (None, None),
        };
        let mut items = Vec::new();
        let mut more = false;
        // Every page of one list reads at the revision of its first (Kubernetes' etcd3 store);
        // a revision etcd compacted away is a 410, and the client lists again.
        let mut revision = snapshot.map_or(0, |r| i64::try_from(r).unwrap_or(i64::MAX));
        let expired = |e: etcd_client::Error| match snapshot {
            Some(requested) if e.to_string().contains("compacted") => StoreError::Expired {
                requested,
                oldest: 0,
            },
            _ => etcd_error("list")(e),
        };
        let kv = self.inner.client.kv_client();
        'scan: loop {
            let start = match &after {
                Some(key) => {
                    let mut start = format!("{kind_prefix}{key}").into_bytes();
                    start.push(0);
                    start
                }
                None => full_prefix.clone().into_bytes(),
            };
            let chunk = match limit {
                Some(l) => (l - items.len() + 1).clamp(1, LIST_CHUNK),
                None => LIST_CHUNK,
            };
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(i64::try_from(chunk).unwrap_or(i64::MAX));
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let response = commit::retrying(commit::Retry::Read, || {
                let (mut kv, start, options) = (kv.clone(), start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await
            .map_err(&expired)?;
            if revision == 0 {
                revision = response.header().map_or(0, |h| h.revision());
            }
            for item in response.kvs() {
                if limit.is_some_and(|l| items.len() >= l) {
                    more = true;
                    break 'scan;
                }
                let object = commit::decode(item.key(), item.value(), item.mod_revision())?;
                after = self.inner.keys.parse_object(item.key()).map(|(_, key)| key);
                if opts.filter.as_ref().is_none_or(|f| f(&object)) {
                    items.push(object);
                }
            }
            if !response.more() {
                break;
            }
        }
        let remaining = match (&after, more && opts.filter.is_none()) {
            (Some(key), true) => {
                let mut start = format!("{kind_prefix}{key}").into_bytes();
                start.push(0);
                let options = GetOptions::new()
                    .with_range(end.clone())
                    .with_count_only()
                    .with_revision(revision);
                let response = commit::retrying(commit::Retry::Read, || {
                    let (mut kv, start, options) = (kv.clone(), start.clone(), options.clone());
                    async move { kv.get(start, Some(options)).await }
                })
                .await
                .map_err(etcd_error("count a list's rest"))?;
                Some(u64::try_from(response.count()).unwrap_or(0))
            }
            _ => None,
        };
        let continue_token = match (more, after) {
            (true, Some(key)) => Some(encode_continue(&key, revision_of(revision))),
            _ => None,
        };
        Ok(ObjectList {
            items,
            resource_version: revision_of(revision),
            continue_token,
            remaining,
        })
    }

    async fn update(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner
            .update(self.fence.as_ref(), res, obj, Part::Object)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn update_status(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner
            .update(self.fence.as_ref(), res, obj, Part::Status)
            .await
            .map(Arc::unwrap_or_clone)
    }

    async fn update_status_shared(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.inner
            .update(self.fence.as_ref(), res, obj, Part::Status)
            .await
    }

    async fn update_with_status(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.inner
            .update(self.fence.as_ref(), res, obj, Part::ObjectAndStatus)
            .await
    }

    async fn delete(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, StoreError> {
        let namespace = namespace.filter(|_| res.namespaced);
        let key = meta::object_key(res, namespace, name)?;
        self.inner
            .delete(self.fence.as_ref(), res, &key, name, opts)
            .await
    }

    async fn list_dependents(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Value>, StoreError> {
        let shared = self.list_dependents_shared(res, owner_uid).await?;
        Ok(shared.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    async fn list_dependents_shared(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Arc<Value>>, StoreError> {
        // A fresh read reads the dependents from etcd: the owner index may lack another
        // server's latest reference, and only this process's writes are waited for.
        if self.read == ReadMode::Cached && self.inner.cache_fresh(self.read).await? {
            let keys = self.inner.dependent_keys(res, owner_uid);
            let objects = self.inner.mirror.cache().get_many(&keys);
            return Ok(objects
                .into_iter()
                .filter(|o| meta::owner_uids(o).iter().any(|u| u == owner_uid))
                .collect());
        }
        let objects = self.inner.dependents(res, owner_uid).await?;
        Ok(objects.into_iter().map(Arc::new).collect())
    }

    async fn watch_with_progress(
        &self,
        res: &ResourceType,
        opts: WatchOptions,
    ) -> Result<(WatchStream, WatchProgress), StoreError> {
        self.inner.check_open()?;
        let probe = self.inner.keys.compact_rev_key();
        let from = match opts.from {
            Some(from) => from,
            None => commit::current_revision(&self.inner.client, &probe).await?,
        };
        let mut prefix = self.inner.keys.kind(&res.storage_name());
        if let Some(ns) = opts.namespace.filter(|n| res.namespaced && !n.is_empty()) {
            prefix.push_str(&ns);
            prefix.push('/');
        }
        let selection = Selection {
            prefix,
            filter: opts.filter,
            delivered: self.inner.delivered.clone(),
        };
        // A revision etcd compacted answers 410 on every server alike, though this one's
        // ring may still hold it.
        if opts.from.is_some() {
            watch_stream::check_not_compacted(&self.inner.client, &probe, from).await?;
        }
        // Served from the mirror's changes while its ring reaches back to `from`; from etcd's
        // history before that.
        let closing = self.inner.closing.subscribe();
        let selection = match self
            .inner
            .mirror
            .hub()
            .watch(selection, from, closing.clone())
        {
            Ok(served) => return Ok(served),
            Err(selection) => selection,
        };
        watch_stream::start(&self.inner.client, selection, from, closing).await
    }

    async fn kind_revision(&self, res: &ResourceType) -> Result<u64, StoreError> {
        self.inner.mirror_current().await?;
        Ok(self.inner.mirror.kind_revision(&res.storage_name()))
    }

    async fn current_resource_version(&self) -> Result<u64, StoreError> {
        commit::current_revision(&self.inner.client, &self.inner.keys.compact_rev_key()).await
    }

    async fn object_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        // The counts are the watch-fed mirror's: wait until it holds this process's own
        // writes, so a caller reads its writes (the mirror lagged a create in a CI run).
        self.inner.mirror_current().await?;
        Ok(self.inner.mirror.counts())
    }

    fn durability_counts(&self) -> (u64, u64) {
        // etcd makes every acknowledged transaction durable on a quorum itself.
        let commits = self.inner.commits.load(Ordering::Relaxed);
        (commits, commits)
    }

    async fn confirm_term(&self) -> Result<(), StoreError> {
        match &self.fence {
            Some(fence) => commit::confirm(&self.inner.client, fence).await,
            None => Ok(()),
        }
    }

    async fn close(&self) -> Result<(), StoreError> {
        let Some(background) = &self.background else {
            // A fenced view closes nothing: the store itself does.
            return Ok(());
        };
        self.inner.closed.store(true, Ordering::Release);
        let last = self.inner.written.load(Ordering::Acquire);
        self.inner.closing.send_replace(Some(last));
        // The watches served from the mirror deliver up to the last write: let it get there.
        let drain = Duration::from_secs(5);
        self.inner.mirror.reach(last, drain, drain).await;
        background.stop();
        tracing::info!(prefix = self.inner.keys.prefix(), "etcd store closed");
        Ok(())
    }
}

/// The first page of a list from the watch cache, as the etcd path answers it: the same items,
/// `remaining` and continue token (its revision the cache's, so the next page reads etcd at
/// the revision this one was read at).
fn cached_list(
    mirror: &Mirror,
    kind_prefix: &str,
    full_prefix: &str,
    limit: Option<usize>,
    opts: &ListOptions,
) -> ObjectList {
    let page = mirror
        .cache()
        .list(full_prefix, limit, opts.filter.as_deref());
    let continue_token = page
        .more_after
        .as_deref()
        .and_then(|key| key.strip_prefix(kind_prefix))
        .map(|key| encode_continue(key, page.revision));
    ObjectList {
        items: page.items.into_iter().map(Arc::unwrap_or_clone).collect(),
        resource_version: page.revision,
        continue_token,
        remaining: page.remaining,
    }
}
