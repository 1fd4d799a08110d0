//! The dependencies distributor (Karmada's `pkg/dependenciesdistributor`): the ConfigMaps,
//! Secrets, ServiceAccounts and PersistentVolumeClaims a workload needs follow it to the clusters
//! it runs on. It owns **attached bindings** and their `spec.requiredBy`.
//!
//! For every ResourceBinding with `spec.propagateDeps: true` that a policy placed (it has a
//! placement and a non-empty `spec.clusters`), the interpreter names the template's
//! dependencies; for each one that exists in the binding's namespace, the binding
//! `<dependency name>-<kind lowercased>` (the name the detector would give it) is created or
//! updated: owned by the dependency, labelled [`depended_by_label`] = the dependent binding's
//! permanent id, `spec.resource` pointing at the dependency, and a snapshot
//! `{namespace, name, clusters}` of the dependent binding in `spec.requiredBy`, beside the
//! snapshots of other bindings that need the same object. The binding controller then writes a
//! Work for every `requiredBy` cluster, like for `spec.clusters`.
//!
//! When the dependent binding moves, its snapshot follows; when it no longer needs an object
//! (template changed, propagateDeps turned off, not placed anywhere, deleted), its snapshot and
//! label go, and an attached binding left with no snapshot and no placement of its own is
//! deleted. A binding of that name that a policy placed keeps its placement: the snapshots are
//! merged into it, and the detector keeps them. A binding of that name controlled by another
//! object (an earlier dependency of the same name still being collected, karmada-io/karmada#2090)
//! is an error, retried until it is gone.
//!
//! The dependent binding records what it requires in [`DEPENDENCIES_ANNOTATION`] (written
//! before any attached binding, so nothing is forgotten across a crash); what it stops
//! requiring is found from that record, and only a deleted binding needs a scan of its
//! namespace by label. Bindings that neither propagate dependencies nor have a record are not
//! queued at all.
//!
//! The rules are the pure functions [`merge_snapshot`], [`remove_snapshot`], [`plan_attach`]
//! and [`plan_release`]; the controller fetches, calls them and writes with compare-and-swap.
//! Keys: `rb|<ns>|<name>` for a binding, and `deps-ns|<ns>` when an object of a dependency kind
//! changed in a namespace (every propagateDeps binding there is queued again, so a ConfigMap
//! created after its Deployment is picked up, and a changed one reaches the members). User
//! guide: `docs/dependencies.md`.

use crate::controllers::propagation::detector::{binding_name, is_reserved_namespace, labels_of};
use crate::controllers::runtime::controller::{
    Action, Observer, ReconcileError, Reconciler, Source,
};
use crate::controllers::runtime::queue::WorkQueue;
use crate::controllers::shared::binding_keys::{binding_key, decode};
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::controllers::shared::template_ref::read_template;
use crate::events::{EventRecorder, EventType};
use crate::kinds::KindRegistry;
use crate::scheduler::division::fnv1a32;
use crate::store::{DeleteOptions, ListOptions, Store, StoreError};
use async_trait::async_trait;
use flotilla_api::binding::{
    BindingSnapshot, ResourceBindingSpec, TargetCluster, BINDING_API_VERSION, RB_PERMANENT_ID_LABEL,
};
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{builtin_by_plural, well_known, ResourceType, WORK_GROUP};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Prefix of the label an attached binding carries for each binding that requires it; the rest
/// of the key is a hash of that binding's `namespace/name` (see [`depended_by_label`]).
pub const DEPENDED_BY_LABEL_PREFIX: &str = "resourcebinding.karmada.io/depended-by-";

/// Kinds whose changes queue the propagateDeps bindings of their namespace again (the kinds
/// the native dependency rules name, as Karmada's distributor watches them).
pub const DEPENDENCY_PLURALS: &[&str] = &[
    "configmaps",
    "secrets",
    "serviceaccounts",
    "persistentvolumeclaims",
];

/// The label key marking an attached binding as required by the binding `namespace/name`:
/// `resourcebinding.karmada.io/depended-by-<8 hex digits of FNV-1a("namespace/name")>`. Its
/// value is that binding's permanent id. (Karmada hashes the same string with its own hash, so
/// the keys differ from Karmada's; the value is the same.)
pub fn depended_by_label(namespace: &str, name: &str) -> String {
    format!(
        "{DEPENDED_BY_LABEL_PREFIX}{:08x}",
        fnv1a32(format!("{namespace}/{name}").as_bytes())
    )
}

/// `existing` with `snapshot` in place of the one of the same binding, or added at the end.
pub fn merge_snapshot(
    existing: &[BindingSnapshot],
    snapshot: &BindingSnapshot,
) -> Vec<BindingSnapshot> {
    let mut out = existing.to_vec();
    match out
        .iter_mut()
        .find(|s| s.namespace == snapshot.namespace && s.name == snapshot.name)
    {
        Some(s) => s.clusters = snapshot.clusters.clone(),
        None => out.push(snapshot.clone()),
    }
    out
}

/// `existing` without the snapshot(s) of the binding `namespace/name`.
pub fn remove_snapshot(
    existing: &[BindingSnapshot],
    namespace: &str,
    name: &str,
) -> Vec<BindingSnapshot> {
    existing
        .iter()
        .filter(|s| !(s.namespace == namespace && s.name == name))
        .cloned()
        .collect()
}

/// The binding that depends on objects, as the rules need it.
#[derive(Clone, Debug)]
pub struct Dependent<'a> {
    /// Namespace (attached bindings live in the same one).
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// Its permanent id (the depended-by label's value).
    pub permanent_id: &'a str,
    /// Its scheduling result.
    pub clusters: &'a [TargetCluster],
}

impl Dependent<'_> {
    /// Its snapshot in `requiredBy`.
    pub fn snapshot(&self) -> BindingSnapshot {
        BindingSnapshot {
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            clusters: self.clusters.to_vec(),
        }
    }
}

/// What to do with one attached binding.
#[derive(Clone, Debug, PartialEq)]
pub enum AttachedPlan {
    /// Nothing to write.
    Keep,
    /// Create this binding.
    Create(Value),
    /// Update to this binding; `required_by_changed` says whether a snapshot changed (and not
    /// only the dependency's resourceVersion).
    Update {
        /// The binding to write.
        binding: Value,
        /// Whether `spec.requiredBy` changed.
        required_by_changed: bool,
    },
    /// Delete it: nothing requires it and no policy placed it.
    Delete,
}

/// Why an attached binding cannot be written now.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AttachError {
    /// A binding of that name is controlled by another object (karmada-io/karmada#2090: a deleted
    /// dependency's binding still waiting for garbage collection).
    #[error("binding {binding} is controlled by uid {owner:?}, not by {kind} {name} (uid {uid}); waiting for it to go")]
    OwnedByAnother {
        /// The binding's name.
        binding: String,
        /// Its controller's uid (empty: none).
        owner: String,
        /// The dependency's kind.
        kind: String,
        /// The dependency's name.
        name: String,
        /// The dependency's uid.
        uid: String,
    },
    /// The binding is being deleted; it is created again once it is gone.
    #[error("binding {0} is being deleted")]
    Deleting(String),
    /// `spec.requiredBy` of the stored binding cannot be read.
    #[error("binding {binding}: spec.requiredBy cannot be decoded: {message}")]
    Decode {
        /// The binding's name.
        binding: String,
        /// The decoder's message.
        message: String,
    },
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.lookup(pointer).and_then(Value::as_str).unwrap_or("")
}

fn required_by(binding: &Value) -> Result<Vec<BindingSnapshot>, AttachError> {
    match binding.lookup("/spec/requiredBy") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| AttachError::Decode {
            binding: str_at(binding, "/metadata/name").to_string(),
            message: e.to_string(),
        }),
    }
}

fn set_required_by(binding: &mut Value, snapshots: &[BindingSnapshot]) {
    if snapshots.is_empty() {
        if let Some(spec) = binding.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("requiredBy");
        }
    } else {
        binding["spec"]["requiredBy"] = json!(snapshots);
    }
}

fn controller_uid(binding: &Value) -> String {
    binding
        .lookup("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .map(|r| str_at(r, "/uid").to_string())
        .unwrap_or_default()
}

fn resource_ref(dependency: &Value) -> Value {
    json!({
        "apiVersion": str_at(dependency, "/apiVersion"),
        "kind": str_at(dependency, "/kind"),
        "namespace": str_at(dependency, "/metadata/namespace"),
        "name": str_at(dependency, "/metadata/name"),
        "uid": str_at(dependency, "/metadata/uid"),
        "resourceVersion": str_at(dependency, "/metadata/resourceVersion"),
    })
}

/// The attached binding of `dependency` once `dependent` requires it: a new one, or `existing`
/// with the dependent's snapshot merged in, its depended-by label set and `spec.resource`
/// pointing at the dependency as it is now. Placement and every other field of an existing
/// binding stay.
pub fn plan_attach(
    existing: Option<&Value>,
    dependency: &Value,
    dependent: &Dependent,
) -> Result<AttachedPlan, AttachError> {
    let kind = str_at(dependency, "/kind");
    let dep_name = str_at(dependency, "/metadata/name");
    let uid = str_at(dependency, "/metadata/uid");
    let name = binding_name(dep_name, kind);
    let label = depended_by_label(dependent.namespace, dependent.name);
    let snapshot = dependent.snapshot();
    let Some(existing) = existing else {
        return Ok(AttachedPlan::Create(json!({
            "apiVersion": BINDING_API_VERSION,
            "kind": "ResourceBinding",
            "metadata": {
                "name": name,
                "namespace": dependent.namespace,
                "labels": {label: dependent.permanent_id},
                "ownerReferences": [{
                    "apiVersion": str_at(dependency, "/apiVersion"),
                    "kind": kind,
                    "name": dep_name,
                    "uid": uid,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "resource": resource_ref(dependency),
                "requiredBy": [snapshot],
            },
        })));
    };
    if existing.lookup("/metadata/deletionTimestamp").is_some() {
        return Err(AttachError::Deleting(name));
    }
    let owner = controller_uid(existing);
    if owner != uid {
        return Err(AttachError::OwnedByAnother {
            binding: name,
            owner,
            kind: kind.to_string(),
            name: dep_name.to_string(),
            uid: uid.to_string(),
        });
    }
    let before = required_by(existing)?;
    let after = merge_snapshot(&before, &snapshot);
    let mut updated = existing.clone();
    set_required_by(&mut updated, &after);
    updated["metadata"]["labels"][&label] = json!(dependent.permanent_id);
    updated["spec"]["resource"] = resource_ref(dependency);
    if &updated == existing {
        return Ok(AttachedPlan::Keep);
    }
    Ok(AttachedPlan::Update {
        binding: updated,
        required_by_changed: before != after,
    })
}

/// The attached binding `existing` once the binding `namespace/name` no longer requires it:
/// its snapshot and depended-by label removed; deleted when no snapshot is left and it has no
/// placement of its own. A binding already being deleted is left alone.
pub fn plan_release(
    existing: &Value,
    namespace: &str,
    name: &str,
) -> Result<AttachedPlan, AttachError> {
    if existing.lookup("/metadata/deletionTimestamp").is_some() {
        return Ok(AttachedPlan::Keep);
    }
    let before = required_by(existing)?;
    let after = remove_snapshot(&before, namespace, name);
    let label = depended_by_label(namespace, name);
    let labelled = existing
        .lookup("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(&label));
    if after == before && !labelled {
        // Not required by that binding: not ours to touch.
        return Ok(AttachedPlan::Keep);
    }
    let placed = existing
        .lookup("/spec/placement")
        .is_some_and(|p| !p.is_null());
    if after.is_empty() && !placed {
        return Ok(AttachedPlan::Delete);
    }
    let mut updated = existing.clone();
    set_required_by(&mut updated, &after);
    if let Some(labels) = updated
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(&label);
    }
    if &updated == existing {
        return Ok(AttachedPlan::Keep);
    }
    Ok(AttachedPlan::Update {
        binding: updated,
        required_by_changed: before != after,
    })
}

/// Annotation on a binding recording the objects it requires (a JSON list of
/// `{apiVersion, kind, namespace, name}`, sorted), as Karmada records them; the distributor
/// reads it to find the attached bindings a binding stops requiring.
pub const DEPENDENCIES_ANNOTATION: &str = "resourcebinding.karmada.io/dependencies";

/// One object a binding requires.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRef {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl DependencyRef {
    /// The reference to a stored object.
    pub fn of(object: &Value) -> Self {
        DependencyRef {
            api_version: str_at(object, "/apiVersion").to_string(),
            kind: str_at(object, "/kind").to_string(),
            namespace: str_at(object, "/metadata/namespace").to_string(),
            name: str_at(object, "/metadata/name").to_string(),
        }
    }

    /// The name of its attached binding.
    pub fn binding_name(&self) -> String {
        binding_name(&self.name, &self.kind)
    }
}

fn annotation_pointer() -> String {
    format!(
        "/metadata/annotations/{}",
        DEPENDENCIES_ANNOTATION.replace('/', "~1")
    )
}

fn has_recorded_dependencies(binding: &Value) -> bool {
    binding.lookup(&annotation_pointer()).is_some()
}

/// The dependencies recorded on a binding; `None` when there is no record.
pub fn recorded_dependencies(binding: &Value) -> Result<Option<BTreeSet<DependencyRef>>, String> {
    match binding.lookup(&annotation_pointer()) {
        None => Ok(None),
        Some(v) => {
            let text = v.as_str().ok_or("not a string")?;
            serde_json::from_str(text)
                .map(Some)
                .map_err(|e| e.to_string())
        }
    }
}

/// `binding` with `deps` recorded (the annotation removed when there are none).
pub fn with_recorded_dependencies(binding: &Value, deps: &BTreeSet<DependencyRef>) -> Value {
    let mut out = binding.clone();
    if deps.is_empty() {
        if let Some(a) = out
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(DEPENDENCIES_ANNOTATION);
            if a.is_empty() {
                if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("annotations");
                }
            }
        }
    } else {
        let list: Vec<&DependencyRef> = deps.iter().collect();
        out["metadata"]["annotations"][DEPENDENCIES_ANNOTATION] =
            json!(serde_json::to_string(&list).unwrap_or_default());
    }
    out
}

/// The keys a ResourceBinding event concerns: the binding itself while it propagates
/// dependencies or has some recorded (also the last state seen of a deleted binding), and the
/// dependents named in its `requiredBy` (so an attached binding deleted or edited by hand is
/// put right at once). Other bindings concern nobody here.
pub fn binding_keys_concerned(binding: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    let propagating = binding.lookup("/spec/propagateDeps") == Some(&Value::Bool(true));
    if propagating || has_recorded_dependencies(binding) {
        keys.extend(binding_key(binding));
    }
    if let Some(snapshots) = binding.lookup("/spec/requiredBy").and_then(Value::as_array) {
        for s in snapshots {
            let (ns, name) = (str_at(s, "/namespace"), str_at(s, "/name"));
            if !ns.is_empty() && !name.is_empty() {
                keys.push(format!("rb|{ns}|{name}"));
            }
        }
    }
    keys
}

/// The propagateDeps bindings of each namespace, kept from the distributor's own binding feed,
/// so that a changed ConfigMap or Secret queues them without reading every binding of its
/// namespace: that list decoded all of them, a second at 20,000 bindings, on every ConfigMap
/// or Secret written in the namespace.
#[derive(Default)]
pub struct PropagatingBindings {
    inner: Mutex<Propagating>,
}

#[derive(Default)]
struct Propagating {
    /// The feed listed the bindings once; until then the index is not complete.
    listed: bool,
    /// Namespace → the keys (`rb|<ns>|<name>`) of its propagateDeps bindings.
    by_namespace: HashMap<String, BTreeSet<String>>,
}

impl PropagatingBindings {
    fn set(state: &mut Propagating, binding: &Value, deleted: bool) {
        let Some(key) = binding_key(binding).filter(|k| k.starts_with("rb|")) else {
            return;
        };
        let ns = str_at(binding, "/metadata/namespace").to_string();
        let propagating =
            !deleted && binding.lookup("/spec/propagateDeps") == Some(&Value::Bool(true));
        if propagating {
            state.by_namespace.entry(ns).or_default().insert(key);
        } else if let Some(keys) = state.by_namespace.get_mut(&ns) {
            keys.remove(&key);
            if keys.is_empty() {
                state.by_namespace.remove(&ns);
            }
        }
    }

    /// The keys of `namespace`'s propagateDeps bindings; `None` until the feed has listed
    /// the bindings.
    pub fn in_namespace(&self, namespace: &str) -> Option<Vec<String>> {
        let state = self.inner.lock();
        state.listed.then(|| {
            state
                .by_namespace
                .get(namespace)
                .map(|keys| keys.iter().cloned().collect())
                .unwrap_or_default()
        })
    }
}

impl Observer for PropagatingBindings {
    fn observe(&self, deleted: bool, object: &Value) {
        Self::set(&mut self.inner.lock(), object, deleted);
    }

    fn relisted(&self, _resource: &ResourceType, objects: &[Value]) {
        let mut state = self.inner.lock();
        state.by_namespace.clear();
        for b in objects {
            Self::set(&mut state, b, false);
        }
        state.listed = true;
    }
}

/// What one reconcile of a dependent binding changed (for its Event).
#[derive(Default)]
struct Outcome {
    changed: Vec<String>,
    errors: Vec<String>,
}

/// The controller.
pub struct DependenciesDistributor {
    store: Arc<dyn Store>,
    clock: SharedClock,
    registry: Arc<KindRegistry>,
    interpreter: Arc<dyn TemplateInterpreter>,
    events: EventRecorder,
    queue: WorkQueue,
    decisions: IntCounterVec,
    /// Warnings already recorded (`<binding key>|<what>`), so that a retried failure is one
    /// Event, not one per retry; forgotten when the binding converges.
    warned: Mutex<HashSet<String>>,
    /// The propagateDeps bindings by namespace, fed by the binding source of [`Self::sources`].
    propagating: Arc<PropagatingBindings>,
}

impl DependenciesDistributor {
    /// A distributor queueing into `queue` (the queue it is spawned with), counting its
    /// decisions in `flotilla_attached_binding_decisions_total{action}`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        registry: Arc<KindRegistry>,
        interpreter: Arc<dyn TemplateInterpreter>,
        events: EventRecorder,
        queue: WorkQueue,
        metrics: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let decisions = registered_counter_vec(
            metrics,
            "flotilla_attached_binding_decisions_total",
            "Attached bindings (dependencies of propagateDeps bindings) by action: created, \
             required_by_updated, refreshed (the dependency changed), deleted, blocked \
             (name held by another object), failed (dependencies could not be read).",
            &["action"],
        )?;
        Ok(Self {
            store,
            clock,
            registry,
            interpreter,
            events,
            queue,
            decisions,
            warned: Mutex::new(HashSet::new()),
            propagating: Arc::default(),
        })
    }

    /// What feeds the distributor: ResourceBindings (which also keep its index of propagateDeps
    /// bindings), and the dependency kinds (keyed by namespace).
    pub fn sources(&self) -> Vec<Source> {
        let mut sources =
            vec![
                Source::mapped(well_known::resource_bindings(), binding_keys_concerned)
                    .observed_by(self.propagating.clone()),
            ];
        for plural in DEPENDENCY_PLURALS {
            if let Some(rt) = builtin_by_plural("", plural) {
                sources.push(Source::mapped(rt, |obj| {
                    let ns = str_at(obj, "/metadata/namespace");
                    if ns.is_empty() || is_reserved_namespace(ns) {
                        Vec::new()
                    } else {
                        vec![format!("deps-ns|{ns}")]
                    }
                }));
            }
        }
        sources
    }

    fn count(&self, action: &str) {
        self.decisions.with_label_values(&[action]).inc();
    }

    /// Counts `action` and records it as a Normal Event on the attached binding it changed.
    async fn announce(&self, action: &str, binding: &Value, reason: &str, message: &str) {
        self.count(action);
        self.events
            .record(binding, EventType::Normal, reason, message)
            .await;
    }

    /// Warns once per `(key, what)` until [`Self::clear_warnings`].
    async fn warn_once(&self, key: &str, what: &str, object: &Value, reason: &str, message: &str) {
        let id = format!("{key}|{what}");
        if self.warned.lock().insert(id) {
            self.events
                .record(object, EventType::Warning, reason, message)
                .await;
        }
    }

    fn clear_warnings(&self, key: &str) {
        let prefix = format!("{key}|");
        self.warned.lock().retain(|w| !w.starts_with(&prefix));
    }

    /// Queues every propagateDeps binding of `namespace`: from the index once the binding feed
    /// has listed, from the store before.
    async fn fan_out(&self, namespace: &str) -> Result<Action, ReconcileError> {
        if let Some(keys) = self.propagating.in_namespace(namespace) {
            for k in keys {
                self.queue.add(k);
            }
            return Ok(Action::Done);
        }
        let opts = ListOptions {
            filter: Some(Arc::new(|b: &Value| {
                b.lookup("/spec/propagateDeps") == Some(&Value::Bool(true))
            })),
            ..ListOptions::default()
        };
        let page = self
            .store
            .list(&well_known::resource_bindings(), Some(namespace), &opts)
            .await?;
        for b in &page.items {
            if let Some(k) = binding_key(b) {
                self.queue.add(k);
            }
        }
        Ok(Action::Done)
    }

    /// The objects a binding requires now (none when it is not a placed propagateDeps binding).
    async fn required_objects(
        &self,
        key: &str,
        binding: &Value,
        spec: &ResourceBindingSpec,
    ) -> Result<Vec<Value>, ReconcileError> {
        if !spec.propagate_deps || spec.placement.is_none() || spec.clusters.is_empty() {
            return Ok(Vec::new());
        }
        let ns = str_at(binding, "/metadata/namespace");
        let (_, template) =
            read_template(self.store.as_ref(), &self.registry, &spec.resource).await?;
        let Some(template) = template else {
            return Ok(Vec::new());
        };
        let refs = match self.interpreter.dependencies(&template) {
            Ok(refs) => refs,
            Err(e) => {
                let message = format!("Get dependencies failed: {e}");
                self.count("failed");
                self.warn_once(
                    key,
                    "dependencies",
                    &template,
                    "GetDependenciesFailed",
                    &message,
                )
                .await;
                return Err(ReconcileError::Other(message));
            }
        };
        let mut objects: BTreeMap<(String, String), Value> = BTreeMap::new();
        for d in refs {
            if !d.namespace.is_empty() && d.namespace != ns {
                tracing::debug!(binding = key, dependency = %d.name, namespace = %d.namespace, "dependency in another namespace ignored");
                continue;
            }
            let rt = self.registry.resolve_kind(&d.api_version, &d.kind);
            if !rt.namespaced {
                tracing::debug!(binding = key, kind = %d.kind, "cluster-scoped dependency ignored");
                continue;
            }
            let found: Vec<Value> = if !d.name.is_empty() {
                match self.store.get(&rt, Some(ns), &d.name).await {
                    Ok(o) => vec![o],
                    Err(StoreError::NotFound { .. }) => Vec::new(),
                    Err(e) => return Err(e.into()),
                }
            } else if let Some(selector) = d.label_selector.clone() {
                let opts = ListOptions {
                    filter: Some(Arc::new(move |o: &Value| selector.matches(&labels_of(o)))),
                    ..ListOptions::default()
                };
                self.store.list(&rt, Some(ns), &opts).await?.items
            } else {
                Vec::new()
            };
            for o in found {
                if o.lookup("/metadata/deletionTimestamp").is_some() {
                    continue;
                }
                let k = (
                    str_at(&o, "/kind").to_string(),
                    str_at(&o, "/metadata/name").to_string(),
                );
                objects.insert(k, o);
            }
        }
        Ok(objects.into_values().collect())
    }

    /// Converges the attached bindings of the binding `ns/name`.
    ///
    /// The dependencies a binding required are recorded on it ([`DEPENDENCIES_ANNOTATION`])
    /// before any attached binding is written, so that the ones it stops requiring are found
    /// without scanning the namespace; only a deleted binding (or an unreadable record) needs
    /// the scan by [`depended_by_label`].
    async fn reconcile_binding(
        &self,
        key: &str,
        ns: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let rb = well_known::resource_bindings();
        let binding = match self.store.get(&rb, Some(ns), name).await {
            Ok(b) if b.lookup("/metadata/deletionTimestamp").is_none() => b,
            Ok(_) | Err(StoreError::NotFound { .. }) => {
                return self.release_all(key, ns, name).await;
            }
            Err(e) => return Err(e.into()),
        };
        let spec: ResourceBindingSpec = decode(&binding["spec"], key)?;
        let objects = self.required_objects(key, &binding, &spec).await?;
        let wanted: BTreeSet<DependencyRef> = objects.iter().map(DependencyRef::of).collect();
        let recorded = match recorded_dependencies(&binding) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(binding = key, error = %e, "unreadable dependencies record; scanning the namespace");
                None
            }
        };
        let scan = recorded.is_none() && has_recorded_dependencies(&binding);
        if recorded.is_none() && wanted.is_empty() && !scan {
            return Ok(Action::Done);
        }
        let recorded = recorded.unwrap_or_default();
        let union: BTreeSet<DependencyRef> = recorded.union(&wanted).cloned().collect();
        let mut current = binding;
        if union != recorded {
            current = self.record(&current, &union).await?;
        }
        let permanent_id = {
            let id = str_at(
                &current,
                &format!(
                    "/metadata/labels/{}",
                    RB_PERMANENT_ID_LABEL.replace('/', "~1")
                ),
            );
            if id.is_empty() {
                str_at(&current, "/metadata/uid")
            } else {
                id
            }
            .to_string()
        };
        let dependent = Dependent {
            namespace: ns,
            name,
            permanent_id: &permanent_id,
            clusters: &spec.clusters,
        };
        let mut outcome = Outcome::default();
        for dependency in &objects {
            let bname = DependencyRef::of(dependency).binding_name();
            let existing = self.get_binding(ns, &bname).await?;
            match plan_attach(existing.as_ref(), dependency, &dependent) {
                Ok(plan) => {
                    let why = format!("required by ResourceBinding {ns}/{name}");
                    self.apply(plan, existing.as_ref(), &bname, ns, &why, &mut outcome)
                        .await?;
                }
                Err(e) => {
                    self.count("blocked");
                    self.warn_once(
                        key,
                        &bname,
                        &current,
                        "SyncScheduleResultToDependenciesFailed",
                        &format!("Dependency {bname} not propagated: {e}"),
                    )
                    .await;
                    outcome.errors.push(e.to_string());
                }
            }
        }
        // Attached bindings this binding no longer requires.
        let wanted_names: BTreeSet<String> =
            wanted.iter().map(DependencyRef::binding_name).collect();
        let candidates = if scan {
            self.labelled(ns, name).await?
        } else {
            let mut found = Vec::new();
            for r in recorded.difference(&wanted) {
                if let Some(b) = self.get_binding(ns, &r.binding_name()).await? {
                    found.push(b);
                }
            }
            found
        };
        for attached in candidates {
            let bname = str_at(&attached, "/metadata/name").to_string();
            if wanted_names.contains(&bname) {
                continue;
            }
            self.release(&attached, ns, name, &mut outcome).await?;
        }
        if wanted != union || scan {
            current = self.record(&current, &wanted).await?;
        }
        if !outcome.changed.is_empty() {
            let clusters: Vec<&str> = spec.clusters.iter().map(|c| c.name.as_str()).collect();
            self.events
                .record(
                    &current,
                    EventType::Normal,
                    "SyncScheduleResultToDependenciesSucceed",
                    &format!(
                        "Dependencies follow the binding to [{}]: {}",
                        clusters.join(", "),
                        outcome.changed.join("; ")
                    ),
                )
                .await;
        }
        if outcome.errors.is_empty() {
            self.clear_warnings(key);
            Ok(Action::Done)
        } else {
            Err(ReconcileError::Other(outcome.errors.join("; ")))
        }
    }

    /// The binding `ns/bname`, if any.
    async fn get_binding(&self, ns: &str, bname: &str) -> Result<Option<Value>, ReconcileError> {
        match self
            .store
            .get(&well_known::resource_bindings(), Some(ns), bname)
            .await
        {
            Ok(b) => Ok(Some(b)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The bindings of `ns` labelled as required by `ns/name` (a scan of the namespace).
    async fn labelled(&self, ns: &str, name: &str) -> Result<Vec<Value>, ReconcileError> {
        let label = depended_by_label(ns, name);
        let labelled = ListOptions {
            filter: Some(Arc::new(move |b: &Value| {
                b.lookup("/metadata/labels")
                    .and_then(Value::as_object)
                    .is_some_and(|l| l.contains_key(&label))
            })),
            ..ListOptions::default()
        };
        Ok(self
            .store
            .list(&well_known::resource_bindings(), Some(ns), &labelled)
            .await?
            .items)
    }

    /// The binding `ns/name` is gone: every attached binding it required is released.
    async fn release_all(&self, key: &str, ns: &str, name: &str) -> Result<Action, ReconcileError> {
        let mut outcome = Outcome::default();
        for attached in self.labelled(ns, name).await? {
            self.release(&attached, ns, name, &mut outcome).await?;
        }
        self.clear_warnings(key);
        if outcome.errors.is_empty() {
            Ok(Action::Done)
        } else {
            Err(ReconcileError::Other(outcome.errors.join("; ")))
        }
    }

    async fn release(
        &self,
        attached: &Value,
        ns: &str,
        name: &str,
        outcome: &mut Outcome,
    ) -> Result<(), ReconcileError> {
        let bname = str_at(attached, "/metadata/name").to_string();
        match plan_release(attached, ns, name) {
            Ok(plan) => {
                let why = format!("no longer required by ResourceBinding {ns}/{name}");
                self.apply(plan, Some(attached), &bname, ns, &why, outcome)
                    .await
            }
            Err(e) => {
                outcome.errors.push(e.to_string());
                Ok(())
            }
        }
    }

    /// Writes the dependencies record of a binding; returns the binding as stored.
    async fn record(
        &self,
        binding: &Value,
        deps: &BTreeSet<DependencyRef>,
    ) -> Result<Value, ReconcileError> {
        let updated = with_recorded_dependencies(binding, deps);
        if &updated == binding {
            return Ok(updated);
        }
        Ok(self
            .store
            .update(&well_known::resource_bindings(), updated)
            .await?)
    }

    /// Writes one plan; a create that finds the name taken is a conflict (retried).
    async fn apply(
        &self,
        plan: AttachedPlan,
        existing: Option<&Value>,
        bname: &str,
        ns: &str,
        why: &str,
        outcome: &mut Outcome,
    ) -> Result<(), ReconcileError> {
        let rb = well_known::resource_bindings();
        let now = self.clock.now();
        let admit = |obj: &mut Value, old: Option<&Value>| {
            flotilla_api::admission::admit(
                WORK_GROUP,
                "ResourceBinding",
                obj,
                old,
                &DefaultingConfig::default(),
                now,
            )
            .map_err(|e| ReconcileError::Other(format!("binding {bname} is invalid: {e}")))
        };
        match plan {
            AttachedPlan::Keep => {}
            AttachedPlan::Create(mut obj) => {
                obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                admit(&mut obj, None)?;
                let created = match self.store.create(&rb, obj).await {
                    Ok(c) => c,
                    Err(StoreError::AlreadyExists { .. }) => {
                        return Err(ReconcileError::Other(format!(
                            "binding {ns}/{bname} appeared meanwhile"
                        )))
                    }
                    Err(e) => return Err(e.into()),
                };
                tracing::info!(binding = %format!("{ns}/{bname}"), %why, "attached binding created");
                self.announce(
                    "created",
                    &created,
                    "AttachedBindingCreated",
                    &format!("Attached binding created: {why}"),
                )
                .await;
                outcome.changed.push(format!("{bname} created"));
            }
            AttachedPlan::Update {
                mut binding,
                required_by_changed,
            } => {
                admit(&mut binding, existing)?;
                let updated = self.store.update(&rb, binding).await?;
                if required_by_changed {
                    tracing::info!(binding = %format!("{ns}/{bname}"), %why, "attached binding requiredBy updated");
                    self.announce(
                        "required_by_updated",
                        &updated,
                        "RequiredByUpdated",
                        &format!("spec.requiredBy updated: {why}"),
                    )
                    .await;
                    outcome.changed.push(format!("{bname} updated"));
                } else {
                    self.count("refreshed");
                }
            }
            AttachedPlan::Delete => {
                match self
                    .store
                    .delete(&rb, Some(ns), bname, &DeleteOptions::default())
                    .await
                {
                    Ok(_) | Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                tracing::info!(binding = %format!("{ns}/{bname}"), %why, "attached binding deleted");
                self.count("deleted");
                if let Some(b) = existing {
                    self.events
                        .record(
                            b,
                            EventType::Normal,
                            "AttachedBindingDeleted",
                            &format!(
                                "Attached binding deleted: {why}, and nothing else requires it"
                            ),
                        )
                        .await;
                }
                outcome.changed.push(format!("{bname} deleted"));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Reconciler for DependenciesDistributor {
    fn name(&self) -> &'static str {
        "dependencies-distributor"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let parts: Vec<&str> = key.split('|').collect();
        match parts.as_slice() {
            ["rb", ns, name] => self.reconcile_binding(key, ns, name).await,
            ["deps-ns", ns] => self.fan_out(ns).await,
            // ClusterResourceBindings do not propagate dependencies (as in Karmada).
            ["crb", _] => Ok(Action::Done),
            _ => Err(ReconcileError::Other(format!(
                "unknown dependencies-distributor key {key:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
