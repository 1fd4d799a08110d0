//! The kube runtime's local caches: kube-runtime reflectors, so that what the pull loop asks
//! on every change tick (`get`, `resource_version`, `status` of every applied object) and
//! what every cluster status report needs (nodes, pods) is read from memory, not from the
//! member's API.
//!
//! - one reflector per kind in use ([`ManagedObjects`]), started when the first object of
//!   the kind is applied, watching only Flotilla's objects (`karmada.io/managed=true`); each
//!   of its events moves the runtime's change counter, which wakes the pull loop to report
//!   `manifestStatuses`;
//! - one reflector on Nodes and one on Pods ([`ClusterObjects`]), trimmed to what the
//!   cluster summary reads ([`super::capacity`]); they do not move the change counter.
//!
//! Every watch relists on an expired resourceVersion and backs off on errors
//! (`default_backoff`); managed fields are dropped from what is kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::work::{MANAGED_LABEL, MANAGED_VALUE};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::watch;

/// The runtime's change counter: moved on every event of a managed object.
pub type Changes = Arc<watch::Sender<u64>>;

/// Moves the counter (subscribers wake).
pub fn bump(changes: &Changes) {
    changes.send_modify(|n| *n = n.wrapping_add(1));
}

/// One reflector: its store, whether its first list is in, and its task (aborted on drop).
pub struct Cache {
    /// The resource it watches.
    pub resource: ApiResource,
    store: Store<DynamicObject>,
    ready: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Cache {
    /// Starts watching `resource` in every namespace, objects matching `selector` only,
    /// each object passed through `trim` before it is kept; `changes` moves on every event.
    pub fn start(
        runtime: &Handle,
        client: Client,
        resource: ApiResource,
        selector: Option<&str>,
        trim: fn(&mut DynamicObject),
        changes: Option<Changes>,
    ) -> Cache {
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let mut config = watcher::Config::default();
        if let Some(s) = selector {
            config = config.labels(s);
        }
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let ready = Arc::new(AtomicBool::new(false));
        let stream = watcher(api, config)
            .default_backoff()
            .modify(trim)
            .reflect(writer);
        let kind = format!("{}.{}", resource.plural, resource.group);
        let flag = ready.clone();
        let task = runtime.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if !flag.swap(true, Ordering::SeqCst) {
                            tracing::debug!(resource = %kind, "member cache synced");
                        }
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {}
                    Err(e) => {
                        tracing::warn!(resource = %kind, error = %flotilla_support::error_chain(&e),
                            "watching the member failed; retrying with backoff");
                        continue;
                    }
                }
                if let Some(c) = &changes {
                    bump(c);
                }
            }
        });
        Cache {
            resource,
            store,
            ready,
            task: task.abort_handle(),
        }
    }

    /// Whether the first list is in (the store is complete, if perhaps stale).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The cached object, if any.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let mut key = reflector::ObjectRef::new_with(name, self.resource.clone());
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        self.store.get(&key)
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<DynamicObject>> {
        self.store.state()
    }

    /// Waits until the first list is in, at most `timeout`; answers whether it is.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        if self.is_ready() {
            return true;
        }
        matches!(
            tokio::time::timeout(timeout, self.store.wait_until_ready()).await,
            Ok(Ok(()))
        )
    }
}

/// Drops what no reader of a managed object needs.
fn trim_managed(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

fn trim_node(object: &mut DynamicObject) {
    trim_metadata(object);
    super::capacity::trim_node(&mut object.data);
}

fn trim_pod(object: &mut DynamicObject) {
    trim_metadata(object);
    super::capacity::trim_pod(&mut object.data);
}

fn trim_metadata(object: &mut DynamicObject) {
    let m = &mut object.metadata;
    m.managed_fields = None;
    m.annotations = None;
    m.labels = None;
    m.owner_references = None;
}

/// One reflector per kind in use, on Flotilla's objects only.
pub struct ManagedObjects {
    runtime: Handle,
    client: Client,
    changes: Changes,
    /// By (group, kind): one watch per kind, at the version it was first applied with.
    kinds: Mutex<HashMap<(String, String), Arc<Cache>>>,
}

impl ManagedObjects {
    /// No watches yet.
    pub fn new(runtime: Handle, client: Client, changes: Changes) -> Self {
        ManagedObjects {
            runtime,
            client,
            changes,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// Starts watching the kind of `resource` unless it is watched already.
    pub fn ensure(&self, resource: &ApiResource) {
        let key = (resource.group.clone(), resource.kind.clone());
        let mut kinds = self.kinds.lock();
        if kinds.contains_key(&key) {
            return;
        }
        tracing::info!(resource = %format!("{}.{}", resource.plural, resource.group),
            version = %resource.version, "watching Flotilla's objects of a new kind in the member");
        let cache = Cache::start(
            &self.runtime,
            self.client.clone(),
            resource.clone(),
            Some(&format!("{MANAGED_LABEL}={MANAGED_VALUE}")),
            trim_managed,
            Some(self.changes.clone()),
        );
        kinds.insert(key, Arc::new(cache));
    }

    /// The synced cache of this resource's kind, when it is watched at this resource's version.
    pub fn ready_cache(&self, resource: &ApiResource) -> Option<Arc<Cache>> {
        let kinds = self.kinds.lock();
        kinds
            .get(&(resource.group.clone(), resource.kind.clone()))
            .filter(|c| c.resource.version == resource.version && c.is_ready())
            .cloned()
    }

    /// Every watched kind's cache.
    pub fn caches(&self) -> Vec<Arc<Cache>> {
        self.kinds.lock().values().cloned().collect()
    }
}

/// The Node and Pod reflectors behind the cluster summary.
pub struct ClusterObjects {
    /// Nodes, trimmed.
    pub nodes: Cache,
    /// Pods of every namespace, trimmed.
    pub pods: Cache,
}

impl ClusterObjects {
    /// Starts both.
    pub fn start(runtime: &Handle, client: &Client) -> Self {
        ClusterObjects {
            nodes: Cache::start(
                runtime,
                client.clone(),
                ApiResource::erase::<Node>(&()),
                None,
                trim_node,
                None,
            ),
            pods: Cache::start(
                runtime,
                client.clone(),
                ApiResource::erase::<Pod>(&()),
                None,
                trim_pod,
                None,
            ),
        }
    }

    /// Waits until both have their first list, at most `timeout`; answers whether they do.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let nodes = self.nodes.wait_ready(timeout).await;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        nodes && self.pods.wait_ready(left).await
    }
}
