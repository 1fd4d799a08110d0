//! `kube`: a member runtime backed by a real Kubernetes API server, through kube-rs: what
//! `flotilla-agent --runtime kube` applies Works to, and what the control plane's push mode
//! can reuse with a client from [`client_for_endpoint`].
//!
//! - **apply**: server-side apply (field manager `flotilla-agent`) of the manifest marked as
//!   Flotilla's ([`ownership::mark_managed`]) to the resource discovery names for its group,
//!   version and kind ([`discovery`]); the namespace is created when missing; the live object
//!   is read first and [`ownership::decide`] says whether it may be changed (a foreign object
//!   is a [`RuntimeError::Conflict`] unless the Work says Overwrite) and whether the apply is
//!   forced. Answers the stored object, status included.
//! - **delete**: only an object that still carries `karmada.io/managed=true`, in the
//!   background (`propagationPolicy: Background`, as Karmada, so a Job's pods go too), with a
//!   precondition on the uid just read; gone already is done.
//! - **get** (and `resource_version`, `status`): from the reflector of the kind
//!   ([`watches`]) once it has synced, else (and for objects not in it) from the API. A
//!   kind's reflector starts with its first apply, or with the first read of one of
//!   Flotilla's objects of that kind (objects applied before a restart).
//! - **summary**: `/readyz` (`/healthz` on 404, [`health`]), `/version`, discovery's
//!   enablements, and node and resource counts from the Node and Pod reflectors
//!   ([`capacity`]).
//!
//! [`KubeRuntime::new`] takes a [`kube::Client`]; [`connect`] builds one from a kubeconfig,
//! the in-cluster service account, or an endpoint with a token and CA bundle.

pub mod capacity;
pub mod connect;
pub mod discovery;
pub mod health;
pub mod ownership;
pub mod watches;

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_api::json_pointer::JsonPointer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::ApiResource;
use kube::Client;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch;

pub use connect::{
    client_for_endpoint, client_from_kubeconfig, client_in_cluster, pem_certificates, ConnectError,
};

use self::discovery::{Discovery, Resolved};
use self::ownership::ApplyDecision;
use self::watches::{Changes, ClusterObjects, ManagedObjects};
use crate::{ClusterSummary, ListFilter, MemberRuntime, ObjectRef, RuntimeError};

/// The field manager of the agent's server-side applies.
pub const FIELD_MANAGER: &str = "flotilla-agent";

/// The kube runtime's knobs.
#[derive(Clone, Debug)]
pub struct KubeSettings {
    /// The member's name, for logs.
    pub cluster: String,
    /// Field manager of the server-side applies.
    pub field_manager: String,
    /// How long one request to the member's API may take.
    pub request_timeout: Duration,
    /// How old the discovery behind `apiEnablements` may be before a summary refreshes it.
    pub discovery_ttl: Duration,
    /// How long a summary waits for the Node and Pod caches' first list.
    pub cache_sync_timeout: Duration,
}

impl Default for KubeSettings {
    fn default() -> Self {
        KubeSettings {
            cluster: String::new(),
            field_manager: FIELD_MANAGER.into(),
            request_timeout: Duration::from_secs(30),
            discovery_ttl: Duration::from_secs(30),
            cache_sync_timeout: Duration::from_secs(10),
        }
    }
}

/// A member cluster's Kubernetes API as a [`MemberRuntime`].
pub struct KubeRuntime {
    client: Client,
    settings: KubeSettings,
    discovery: Discovery,
    managed: ManagedObjects,
    cluster: ClusterObjects,
    changes: Changes,
    /// Namespaces seen to exist (forgotten when an apply finds one gone).
    namespaces: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for KubeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRuntime")
            .field("cluster", &self.settings.cluster)
            .finish_non_exhaustive()
    }
}

/// Where one object lives in the member: its resource (from discovery) and namespace.
struct Target {
    resolved: Resolved,
    namespace: Option<String>,
    name: String,
}

/// A call to the member's API with a deadline.
pub(crate) async fn timed<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => answer,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {} ms", timeout.as_millis()).into(),
        )),
    }
}

fn api_error(operation: String) -> impl FnOnce(kube::Error) -> RuntimeError {
    move |e| RuntimeError::Api {
        operation,
        source: Box::new(e),
    }
}

fn status_of(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    status_of(e).is_some_and(|s| s.is_not_found())
}

fn is_conflict(e: &kube::Error) -> bool {
    status_of(e).is_some_and(|s| s.is_conflict())
}

/// A cached or fetched object as the runtime answers it: `apiVersion` and `kind` filled in
/// (list items may lack them), no managed fields.
fn object_value(object: &DynamicObject, resource: &ApiResource) -> Result<Value, RuntimeError> {
    let mut v = serde_json::to_value(object)
        .map_err(|e| RuntimeError::Invalid(format!("the member's object: {e}")))?;
    if let Some(root) = v.as_object_mut() {
        root.entry("apiVersion")
            .or_insert_with(|| Value::String(resource.api_version.clone()));
        root.entry("kind")
            .or_insert_with(|| Value::String(resource.kind.clone()));
        if let Some(meta) = root.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    Ok(v)
}

impl KubeRuntime {
    /// A runtime on `client`. Starts the Node and Pod reflectors of the cluster summary at
    /// once (on the current tokio runtime: call it from inside one); the reflectors of the
    /// kinds applied start with their first apply. Nothing is asked of the member's API
    /// before that, so a member that is down does not stop this.
    pub fn new(client: Client, settings: KubeSettings) -> Result<Self, RuntimeError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            RuntimeError::Unsupported(format!(
                "the kube runtime must be created inside a tokio runtime: {e}"
            ))
        })?;
        let changes: Changes = std::sync::Arc::new(watch::channel(0u64).0);
        Ok(KubeRuntime {
            discovery: Discovery::new(client.clone(), settings.request_timeout),
            managed: ManagedObjects::new(runtime.clone(), client.clone(), changes.clone()),
            cluster: ClusterObjects::start(&runtime, &client),
            client,
            settings,
            changes,
            namespaces: Mutex::new(HashSet::new()),
        })
    }

    /// The client it talks to the member with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Its settings.
    pub fn settings(&self) -> &KubeSettings {
        &self.settings
    }

    /// The kinds whose objects it watches, as (`apiVersion`, kind, synced), sorted.
    pub fn watched_kinds(&self) -> Vec<(String, String, bool)> {
        let mut out: Vec<(String, String, bool)> = self
            .managed
            .caches()
            .iter()
            .map(|c| {
                (
                    c.resource.api_version.clone(),
                    c.resource.kind.clone(),
                    c.is_ready(),
                )
            })
            .collect();
        out.sort();
        out
    }

    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        timed(self.settings.request_timeout, call).await
    }

    /// Where `r` lives, or `None` when the member does not serve its kind.
    async fn target(&self, r: &ObjectRef) -> Result<Option<Target>, RuntimeError> {
        let resolved = self
            .discovery
            .resolve(r.group(), r.version(), &r.kind)
            .await
            .map_err(api_error(format!(
                "discovering the resource of {} {} in the member",
                r.api_version, r.kind
            )))?;
        Ok(resolved.map(|resolved| {
            let namespace = resolved.namespaced.then(|| {
                if r.namespace.is_empty() {
                    "default".to_string()
                } else {
                    r.namespace.clone()
                }
            });
            Target {
                resolved,
                namespace,
                name: r.name.clone(),
            }
        }))
    }

    fn api(&self, t: &Target) -> Api<DynamicObject> {
        match &t.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &t.resolved.resource),
            None => Api::all_with(self.client.clone(), &t.resolved.resource),
        }
    }

    /// The object as the member's API has it now.
    async fn live(&self, r: &ObjectRef, t: &Target) -> Result<Option<Value>, RuntimeError> {
        let api = self.api(t);
        let found = self
            .call(api.get_opt(&t.name))
            .await
            .map_err(api_error(format!("reading {r} from the member")))?;
        found
            .map(|o| object_value(&o, &t.resolved.resource))
            .transpose()
    }

    /// Creates the namespace unless it is known to exist. It is labelled as Flotilla's, with no
    /// Work named: a Work that places the Namespace itself later takes it over without a
    /// conflict; no Work's record holds it, so it is never deleted on a Work's behalf.
    async fn ensure_namespace(&self, ns: &str) -> Result<(), RuntimeError> {
        if self.namespaces.lock().contains(ns) {
            return Ok(());
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let failed = || api_error(format!("creating namespace {ns} in the member"));
        if self
            .call(api.get_opt(ns))
            .await
            .map_err(failed())?
            .is_none()
        {
            let namespace = Namespace {
                metadata: kube::core::ObjectMeta {
                    name: Some(ns.to_string()),
                    labels: Some(
                        [(
                            flotilla_api::work::MANAGED_LABEL.to_string(),
                            flotilla_api::work::MANAGED_VALUE.to_string(),
                        )]
                        .into(),
                    ),
                    ..Default::default()
                },
                ..Default::default()
            };
            let params = PostParams {
                field_manager: Some(self.settings.field_manager.clone()),
                ..PostParams::default()
            };
            match self.call(api.create(&params, &namespace)).await {
                Ok(_) => tracing::info!(cluster = %self.settings.cluster, namespace = %ns,
                    "namespace created in the member"),
                Err(e) if status_of(&e).is_some_and(|s| s.is_already_exists()) => {}
                Err(e) => return Err(failed()(e)),
            }
        }
        self.namespaces.lock().insert(ns.to_string());
        Ok(())
    }

    async fn apply_to(
        &self,
        r: &ObjectRef,
        t: &Target,
        manifest: &Value,
    ) -> Result<Value, RuntimeError> {
        let desired = ownership::mark_managed(manifest, t.namespace.as_deref());
        if let Some(ns) = &t.namespace {
            self.ensure_namespace(ns).await?;
        }
        let live = self.live(r, t).await?;
        let force = match ownership::decide(r, &desired, live.as_ref()) {
            ApplyDecision::Apply { force } => force,
            ApplyDecision::Conflict(message) => {
                // The caller reports it (the pull loop: the Work's Applied condition and a
                // SyncFailed Event).
                tracing::debug!(cluster = %self.settings.cluster, object = %r, reason = %message,
                    "not applied: the member's object is not this Work's");
                return Err(RuntimeError::Conflict(message));
            }
        };
        let mut params = PatchParams::apply(&self.settings.field_manager);
        if force {
            params = params.force();
        }
        let api = self.api(t);
        let mut answer = self
            .call(api.patch(&t.name, &params, &Patch::Apply(&desired)))
            .await;
        if let (Err(e), Some(ns)) = (&answer, &t.namespace) {
            if is_not_found(e) {
                // The namespace went since it was seen: make it again, once.
                self.namespaces.lock().remove(ns);
                self.ensure_namespace(ns).await?;
                answer = self
                    .call(api.patch(&t.name, &params, &Patch::Apply(&desired)))
                    .await;
            }
        }
        let applied = match answer {
            Ok(o) => o,
            Err(e) if is_conflict(&e) => {
                let why = status_of(&e).map(|s| s.message.clone()).unwrap_or_default();
                return Err(RuntimeError::Conflict(format!(
                    "{r}: server-side apply conflicts with another field manager of the member \
                     cluster ({why}); conflictResolution: Overwrite on the propagation policy \
                     takes the fields over"
                )));
            }
            Err(e) => return Err(api_error(format!("applying {r} to the member"))(e)),
        };
        self.managed.ensure(&t.resolved.resource);
        object_value(&applied, &t.resolved.resource)
    }
}

#[async_trait]
impl MemberRuntime for KubeRuntime {
    async fn apply(&self, manifest: Value) -> Result<Value, RuntimeError> {
        let r = ObjectRef::from_manifest(&manifest)?;
        let Some(t) = self.target(&r).await? else {
            return Err(RuntimeError::Invalid(format!(
                "{r}: the member cluster serves no {} in {} (is its CRD installed?)",
                r.kind, r.api_version
            )));
        };
        self.apply_to(&r, &t, &manifest).await
    }

    async fn get(&self, r: &ObjectRef) -> Result<Option<Value>, RuntimeError> {
        let Some(t) = self.target(r).await? else {
            return Ok(None);
        };
        if let Some(cache) = self.managed.ready_cache(&t.resolved.resource) {
            if let Some(o) = cache.get(t.namespace.as_deref(), &t.name) {
                return object_value(&o, &t.resolved.resource).map(Some);
            }
        }
        // Not synced yet, not a kind in use, or not Flotilla's (e.g. a foreign object).
        let live = self.live(r, &t).await?;
        if live.as_ref().is_some_and(ownership::is_managed) {
            // Flotilla's, of a kind not watched yet: an object applied before the agent
            // restarted, which the pull loop reads without applying it again. Its status
            // changes must wake the pull loop too.
            self.managed.ensure(&t.resolved.resource);
        }
        Ok(live)
    }

    async fn delete(&self, r: &ObjectRef) -> Result<Option<Value>, RuntimeError> {
        let Some(t) = self.target(r).await? else {
            return Ok(None);
        };
        let Some(live) = self.live(r, &t).await? else {
            return Ok(None);
        };
        if !ownership::deletable(&live) {
            return Err(RuntimeError::Conflict(format!(
                "{r} in the member cluster is not Flotilla's (no {}={} label); it is not deleted",
                flotilla_api::work::MANAGED_LABEL,
                flotilla_api::work::MANAGED_VALUE
            )));
        }
        let uid = live
            .lookup("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        let params = DeleteParams::background().preconditions(Preconditions {
            uid,
            resource_version: None,
        });
        match self.call(self.api(&t).delete(&t.name, &params)).await {
            Ok(_) => Ok(Some(live)),
            Err(e) if is_not_found(&e) => Ok(Some(live)),
            Err(e) if is_conflict(&e) => Err(RuntimeError::Conflict(format!(
                "{r} was replaced in the member cluster while it was being deleted; \
                 the new object is not deleted"
            ))),
            Err(e) => Err(api_error(format!("deleting {r} from the member"))(e)),
        }
    }

    /// With a kind: that kind's objects from the member's API (a group version matching the
    /// filter's, in one namespace or all). Without a kind: Flotilla's objects of the kinds in
    /// use, from the caches.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Value>, RuntimeError> {
        let group = (!filter.api_version.is_empty())
            .then(|| crate::group_of(&filter.api_version).to_string());
        let version = (!filter.api_version.is_empty()).then(|| {
            filter
                .api_version
                .rsplit_once('/')
                .map_or(filter.api_version.as_str(), |(_, v)| v)
        });
        let mut out: Vec<(ObjectRef, Value)> = Vec::new();
        let mut keep = |v: Value| {
            if let Ok(r) = ObjectRef::from_manifest(&v) {
                let group_ok = group.as_deref().is_none_or(|g| r.group() == g);
                let ns_ok = filter.namespace.is_empty() || r.namespace == filter.namespace;
                if group_ok && ns_ok {
                    out.push((r, v));
                }
            }
        };
        if filter.kind.is_empty() {
            for cache in self.managed.caches() {
                for o in cache.state() {
                    keep(object_value(&o, &cache.resource)?);
                }
            }
        } else {
            let snapshot = self
                .discovery
                .snapshot(self.settings.discovery_ttl)
                .await
                .map_err(api_error("discovering the member's resources".into()))?;
            // The filter's version when served, else another of the same group and kind.
            let mut candidates: Vec<&Resolved> = snapshot
                .resources()
                .filter(|r| r.resource.kind == filter.kind)
                .filter(|r| group.as_deref().is_none_or(|g| r.resource.group == g))
                .collect();
            candidates.sort_by_key(|r| {
                (
                    version != Some(r.resource.version.as_str()),
                    r.resource.api_version.clone(),
                )
            });
            let resolved = candidates.first().map(|r| (*r).clone());
            if let Some(resolved) = resolved {
                let api: Api<DynamicObject> = match (resolved.namespaced, filter.namespace.as_str())
                {
                    (true, ns) if !ns.is_empty() => {
                        Api::namespaced_with(self.client.clone(), ns, &resolved.resource)
                    }
                    _ => Api::all_with(self.client.clone(), &resolved.resource),
                };
                let listed =
                    self.call(api.list(&ListParams::default()))
                        .await
                        .map_err(api_error(format!(
                            "listing {} {} in the member",
                            resolved.resource.api_version, resolved.resource.kind
                        )))?;
                for o in &listed.items {
                    keep(object_value(o, &resolved.resource)?);
                }
            }
        }
        out.sort_by(|(a, _), (b, _)| {
            (a.group(), &a.kind, &a.namespace, &a.name).cmp(&(
                b.group(),
                &b.kind,
                &b.namespace,
                &b.name,
            ))
        });
        Ok(out.into_iter().map(|(_, v)| v).collect())
    }

    async fn summary(&self) -> Result<ClusterSummary, RuntimeError> {
        let (healthy, probe) = health::check(&self.client, self.settings.request_timeout).await;
        if !healthy {
            tracing::warn!(cluster = %self.settings.cluster, probe = %health::describe(&probe),
                "the member's API server is not healthy");
            return Ok(ClusterSummary {
                healthy: false,
                ..ClusterSummary::default()
            });
        }
        let version = self
            .call(self.client.apiserver_version())
            .await
            .map_err(api_error("reading the member's /version".into()))?;
        let snapshot = self
            .discovery
            .snapshot(self.settings.discovery_ttl)
            .await
            .map_err(api_error("discovering the member's resources".into()))?;
        if !self
            .cluster
            .wait_ready(self.settings.cache_sync_timeout)
            .await
        {
            return Err(RuntimeError::Api {
                operation: "counting the member's nodes and pods".into(),
                source: format!(
                    "the node and pod caches did not sync within {} ms (may the agent list and \
                     watch nodes and pods? see deploy/10-agent-rbac.yaml)",
                    self.settings.cache_sync_timeout.as_millis()
                )
                .into(),
            });
        }
        let nodes = self.cluster.nodes.state();
        let pods = self.cluster.pods.state();
        Ok(ClusterSummary {
            kubernetes_version: version.git_version,
            api_enablements: discovery::enablements(&snapshot.lists),
            node_summary: capacity::node_summary(nodes.iter().map(|o| &o.data)),
            resource_summary: capacity::resource_summary(
                nodes.iter().map(|o| &o.data),
                pods.iter().map(|o| &o.data),
            ),
            healthy: true,
        })
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
