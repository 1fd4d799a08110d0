//! The object store: Kubernetes object semantics (uid, resourceVersion, generation,
//! finalizers, owner references and garbage collection, optimistic concurrency, watch).
//! [`Store`] is the narrow interface everything else uses; two backends implement it, side
//! by side:
//!
//! - [`local`]: [`KvStore`], one server's store over a key-value [`Engine`] (sled for real,
//!   memory for fast tests, and the log engine: every tree in memory, durable through a
//!   write-ahead log and snapshots);
//! - [`etcd`]: [`EtcdStore`], the same rules committed as etcd
//!   transactions, so several servers share one store.
//!
//! What both share lives here: the trait and its types (this file), the pure object rules
//! ([`rules`]), object metadata (`meta.rs`), the owner index that drives garbage collection
//! (`owner_index.rs`), the engines' error ([`EngineError`]), and the copy from one backend to
//! etcd ([`migrate_store`]).
//!
//! Objects are JSON values (`serde_json::Value`) so that templates of any kind keep every
//! field; typed views live in `flotilla-api`.

mod engine_error;
pub mod etcd;
pub mod local;
mod meta;
pub mod migrate_store;
mod owner_index;
pub mod rules;

pub use engine_error::EngineError;
pub use etcd::EtcdStore;
pub use local::{
    Engine, KvStore, LogEngine, LogOptions, MemoryEngine, MemoryStore, SledEngine, SledOptions,
    SledStore, StoreConfig, StoreStats, DEFAULT_EVENT_LOG_CAPACITY, DEFAULT_EVENT_LOG_MAX_BYTES,
};
pub use meta::FOREGROUND_FINALIZER;

use async_trait::async_trait;
use flotilla_api::kinds::ResourceType;
use futures::stream::BoxStream;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Errors of the store. The API layer maps each variant to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No object with that name (404).
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    /// Create of a name that exists (409).
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    /// Stale resourceVersion or failed precondition (409).
    #[error("operation cannot be fulfilled on {resource} \"{name}\": {reason}")]
    Conflict {
        resource: String,
        name: String,
        reason: String,
    },
    /// Watch from a resourceVersion older than the event log (410).
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    /// The object itself is unacceptable, e.g. no name (422); `field` is the JSON path at fault.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The store on disk was written by a newer Flotilla or could not be migrated.
    #[error("store schema: {0}")]
    Schema(String),
    /// A leader's write was refused because its term is over: another server leads now
    /// (503). Only controllers write fenced; see `store::etcd::commit::Fence`.
    #[error("not the leader: the term of election key {key} (revision {revision}) is over")]
    Fenced { key: String, revision: i64 },
    /// The engine failed (500).
    #[error("storage engine failure")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A predicate over objects, built by callers from label and field selectors.
pub type ObjectFilter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// Options of [`Store::list`].
#[derive(Clone, Default)]
pub struct ListOptions {
    /// Only objects for which the filter is true.
    pub filter: Option<ObjectFilter>,
    /// At most this many items; the answer then carries a continue token.
    pub limit: Option<usize>,
    /// Continue token of the previous page.
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, Default)]
pub struct ObjectList {
    /// The objects, ordered by storage key (`namespace/name` bytes, as etcd orders them).
    pub items: Vec<Value>,
    /// The store's resourceVersion when the list was read; a watch from it misses nothing.
    pub resource_version: u64,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// Number of further matching items after this page, when known.
    pub remaining: Option<u64>,
}

/// How dependents of a deleted object are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the owner now; the garbage collector deletes dependents afterwards.
    #[default]
    Background,
    /// Dependents are deleted first; the owner goes when none is left.
    Foreground,
    /// Dependents are kept and lose their owner reference.
    Orphan,
}

/// Options of [`Store::delete`].
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Dependents' fate.
    pub propagation: Propagation,
    /// Delete only if the stored uid equals this.
    pub precondition_uid: Option<String>,
    /// Delete only if the stored resourceVersion equals this.
    pub precondition_resource_version: Option<u64>,
}

/// Result of a delete.
#[derive(Clone, Debug, PartialEq)]
pub enum Deleted {
    /// The object is gone; this was its last state.
    Gone(Value),
    /// The object has finalizers (or waits for dependents): it now carries a
    /// deletionTimestamp and goes when the last finalizer is removed.
    Pending(Value),
}

/// Kind of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object changed.
    Modified,
    /// The object was removed; the event carries its last state.
    Deleted,
}

/// One change, as a watch delivers it.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for Deleted: its last state).
    pub object: Arc<Value>,
    /// The resourceVersion of the change.
    pub resource_version: u64,
}

/// Options of [`Store::watch`].
#[derive(Clone, Default)]
pub struct WatchOptions {
    /// Only this namespace (namespaced kinds).
    pub namespace: Option<String>,
    /// Only objects for which the filter is true (applied to the object after the change).
    pub filter: Option<ObjectFilter>,
    /// Deliver every change after this resourceVersion; `None` means from now on.
    pub from: Option<u64>,
}

/// A stream of watch events. It ends with `Err(StoreError::Expired)` when the watcher fell
/// behind the bounded event log; the caller relists.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, StoreError>>;

/// How far a watch stream has looked: every change up to [`WatchProgress::get`] that the
/// watch's selector matches has been yielded by the stream. It is the store's position, not
/// the last event delivered: a watcher of a quiet kind moves on with every write anywhere, so
/// a BOOKMARK carrying it keeps the client inside the event log (as kube-apiserver's watch
/// cache bookmarks carry its current resourceVersion).
#[derive(Clone, Debug, Default)]
pub struct WatchProgress(Arc<AtomicU64>);

impl WatchProgress {
    /// Progress that starts at `from` (everything up to it was seen before the watch).
    pub fn new(from: u64) -> Self {
        Self(Arc::new(AtomicU64::new(from)))
    }

    /// Every matching change up to this resourceVersion has been yielded.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Records that everything up to `rv` has been looked at (never moves backwards).
    pub fn advance(&self, rv: u64) {
        self.0.fetch_max(rv, Ordering::AcqRel);
    }
}

/// The `metadata.generation` that an update of `stored` (as read, with its resourceVersion) to
/// `new` leaves: one more when anything outside `metadata` and `status` changed, else the same
/// (the rule of [`Store::update`]). A status written with [`Store::update_with_status`] that
/// records the generation it observed takes it from here.
pub fn generation_after_update(stored: &Value, new: &Value) -> i64 {
    let generation = meta::generation(stored);
    if meta::same_outside_metadata_and_status(new, stored) {
        generation
    } else {
        generation + 1
    }
}

/// What [`Store::update_status`] reads of an object to write `status` to it: its name,
/// namespace and uid, its resourceVersion (the precondition), and the status. A status writer
/// sends this instead of a copy of the whole object with the status changed.
pub fn status_write(obj: &Value, status: Value) -> Value {
    let mut metadata = serde_json::Map::new();
    if let Some(meta) = obj.get("metadata").and_then(Value::as_object) {
        for field in ["name", "namespace", "uid", "resourceVersion"] {
            if let Some(v) = meta.get(field) {
                metadata.insert(field.to_string(), v.clone());
            }
        }
    }
    serde_json::json!({"metadata": metadata, "status": status})
}

/// What [`Store::object_counts`] answers from a backend's running counts by kind: the kinds
/// that have objects, with their counts, sorted by kind.
pub(crate) fn sorted_counts(counts: &HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut sorted: Vec<(String, u64)> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(kind, n)| (kind.clone(), *n))
        .collect();
    sorted.sort();
    sorted
}

/// Kubernetes object semantics over a durable engine. Every write returns only after it is
/// durable (for engines that persist).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates an object. Sets uid, resourceVersion, generation 1 and creationTimestamp;
    /// drops `status` when the kind has a status subresource; honours `generateName`.
    async fn create(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError>;

    /// As [`Store::create`], but answers once the write is committed (readable at once, and
    /// made durable by the next round of group commit, before any later write is acknowledged)
    /// without waiting for that round: for records that nobody waits on and whose loss in a
    /// crash is acceptable, such as the Events controllers record (Kubernetes' event recorder
    /// does not wait either). Watches see it once it is durable, as every write.
    async fn create_eventually_durable(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Value, StoreError> {
        self.create(res, obj).await
    }

    /// Reads one object (`namespace` is `None` for cluster-scoped kinds).
    async fn get(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError>;

    /// As [`Store::get`], shared: a reader that only looks at the object (most controller
    /// reads) is spared a copy of it. Never older than the last acknowledged write.
    async fn get_shared(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        self.get(res, namespace, name).await.map(Arc::new)
    }

    /// As [`Store::get`], never older than a write acknowledged to anyone before it began,
    /// whatever this view's reads promise otherwise: for a decision taken on the absence of a
    /// write (a lease not renewed in time), which a view that lags would take wrongly. The
    /// local engines' reads are all of this kind.
    async fn get_fresh(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.get(res, namespace, name).await
    }

    /// Lists objects of a kind, in one namespace or (`None`) all of them.
    async fn list(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError>;

    /// Replaces an object. A non-empty `metadata.resourceVersion` must equal the stored one
    /// (else Conflict). uid, creationTimestamp and deletionTimestamp are kept; generation bumps
    /// when anything outside `metadata` and `status` changed; the stored status is kept when
    /// the kind has a status subresource. A write that changes nothing returns the stored
    /// object without a new resourceVersion. Removing the last finalizer of an object that is
    /// being deleted deletes it.
    async fn update(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError>;

    /// As [`Store::update`], without waiting for durability (see
    /// [`Store::create_eventually_durable`]).
    async fn update_eventually_durable(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Value, StoreError> {
        self.update(res, obj).await
    }

    /// Replaces only the `status` of an object (same precondition rules as `update`).
    async fn update_status(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError>;

    /// As [`Store::update_status`], the object as written shared (see [`Store::get_shared`]): a
    /// writer that only looks at it, or not at all, is spared a copy of it.
    async fn update_status_shared(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.update_status(res, obj).await.map(Arc::new)
    }

    /// Replaces an object and its `status` in one write (same rules as `update`, but the status
    /// given is stored, also for a kind with a status subresource). For a controller that
    /// decides both halves at once (an eviction and its history entry, a placement and the
    /// generation the scheduler observed): one write instead of two, and no reader ever sees
    /// the one without the other. A status that names the generation it observed takes it
    /// from [`generation_after_update`]. The object as written is shared (see
    /// [`Store::get_shared`]): these writers only look at it.
    async fn update_with_status(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError>;

    /// Deletes an object, or stamps its deletionTimestamp when it has finalizers.
    async fn delete(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, StoreError>;

    /// Objects of one kind that name `owner_uid` in their ownerReferences, in storage-key
    /// order. Answered from the owner index the garbage collector keeps, so it costs the
    /// dependents found, not a scan of the kind.
    async fn list_dependents(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Value>, StoreError>;

    /// As [`Store::list_dependents`], shared (see [`Store::get_shared`]).
    async fn list_dependents_shared(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Arc<Value>>, StoreError> {
        let objects = self.list_dependents(res, owner_uid).await?;
        Ok(objects.into_iter().map(Arc::new).collect())
    }

    /// Watches changes of one kind: [`Store::watch_with_progress`] without the progress.
    async fn watch(
        &self,
        res: &ResourceType,
        opts: WatchOptions,
    ) -> Result<WatchStream, StoreError> {
        self.watch_with_progress(res, opts)
            .await
            .map(|(stream, _)| stream)
    }

    /// Watches changes of one kind, with the stream's [`WatchProgress`]: how far the backend's
    /// cursor went, past the events the stream yields (the local event log's position, or the
    /// etcd watch's revision).
    async fn watch_with_progress(
        &self,
        res: &ResourceType,
        opts: WatchOptions,
    ) -> Result<(WatchStream, WatchProgress), StoreError>;

    /// The resourceVersion of the last change to any object of this kind since the store
    /// was opened (0 when none). A cache of a kind's list stays valid while this is unchanged;
    /// a list read after seeing a value reflects at least that change.
    async fn kind_revision(&self, res: &ResourceType) -> Result<u64, StoreError>;

    /// The newest resourceVersion handed out.
    async fn current_resource_version(&self) -> Result<u64, StoreError>;

    /// Kinds that have stored objects, with their object counts (for metrics).
    async fn object_counts(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Durable flushes done so far and the writes they acknowledged (for metrics).
    fn durability_counts(&self) -> (u64, u64);

    /// Confirms, just before a side effect outside the store (a push to a member's API), that
    /// the writes of this view still commit: for a leader's fenced view, a linearizable read
    /// that its term lasts, [`StoreError::Fenced`] (and the term ended) when another server
    /// leads. A view without a fence (the local engines, the API's view) has nothing to
    /// confirm.
    async fn confirm_term(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Waits until every acknowledged write is durable and stops background work.
    async fn close(&self) -> Result<(), StoreError>;
}
