//! The binding controller: one Work per target cluster of a binding, in the cluster's execution
//! namespace `karmada-es-<cluster>` (docs/semantics.md §10). A Work holds the template's manifest
//! with the cluster's share of the replicas (the full count for Duplicated), carries the execution
//! finalizer (so its deletion waits until the member removed the object), and is owned by the
//! binding. Works of clusters the binding no longer expects — not in `spec.clusters`, not in
//! `requiredBy`, not the source of an eviction task that keeps its old copy — are deleted. A
//! cluster that is both a target and such a task's source (a failback shrank its share) keeps its
//! Work as it is until the task ends. While an Immediately/Directly eviction task's old copy still
//! exists on a Ready cluster, no new Work is dispatched (a stateful app never runs twice); when
//! that cluster is not Ready, the new Works go out at once (Part 1). With a single target after
//! such an eviction, the task's preserved label state is injected into the manifest (§10.3), and it
//! stays on that cluster's manifest after the task ends (annotation
//! `flotilla.io/preserved-labels`). A binding asking for exactly-once placement marks its Works
//! (`flotilla.io/placement-guarantee`) and dispatches nothing while an old copy on a not-Ready
//! member has not reached its fence time ([`crate::controllers::failover::fencing`]; a
//! `WaitingForFence` Event says until when). When a cluster's manifest cannot be revised to its
//! share (a `replicaRevision` rule failed), that cluster's Work is left as it is — never written
//! with the template's full count — the binding and its template get a Warning Event
//! `SyncWorkFailed` (Karmada's reason) naming the cluster, and it is tried again.

use crate::controllers::members::cluster_taints::lease_renew_time;
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::runtime::own_writes::OwnWrites;
use crate::controllers::shared::binding_keys::{decode, live_binding, owned_works, LiveBinding};
use crate::controllers::shared::cluster_cache::ClusterCache;
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::controllers::shared::json_edit::set_path;
use crate::controllers::shared::template_ref::{read_template, template_ref};
use crate::events::{EventRecorder, EventType};
use crate::interpreter::native::reflect::RESOURCE_TEMPLATE_GENERATION_ANNOTATION;
use crate::kinds::KindRegistry;
use crate::scheduler::division::fnv1a32;
use crate::store::{DeleteOptions, Deleted, Store, StoreError};
use async_trait::async_trait;
use flotilla_api::binding::{ResourceBindingSpec, CRB_PERMANENT_ID_LABEL, RB_PERMANENT_ID_LABEL};
use flotilla_api::cluster::{cluster_of_execution_namespace, execution_namespace};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::policy::ConflictResolution;
use flotilla_api::work::{
    stamp_member_marks, MemberMarks, ASSIGNED_REPLICAS_ANNOTATION, CONFLICT_ABORT,
    CONFLICT_OVERWRITE, EXACTLY_ONCE, EXECUTION_CONTROLLER_FINALIZER,
    PLACEMENT_GUARANTEE_ANNOTATION,
};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Annotations on a Work (and on its member objects) naming its binding and the binding's
/// namespace.
pub use flotilla_api::work::{BINDING_NAMESPACE_ANNOTATION, BINDING_NAME_ANNOTATION};
/// Annotation of a Work whose manifest got preserved state (§10.3): the injected label keys,
/// comma-separated, so that they stay on the manifest after the eviction task ends.
pub const PRESERVED_LABELS_ANNOTATION: &str = "flotilla.io/preserved-labels";
/// How long to wait before looking again at a gated dispatch.
pub const PURGE_GATE_RETRY: Duration = Duration::from_secs(5);
/// The Warning Event of Works that could not be written as planned: Karmada's binding
/// controller's reason, recorded on the binding and on its template.
pub const EVENT_SYNC_WORK_FAILED: &str = "SyncWorkFailed";

/// The Work name of a template (stable, distinct per kind/namespace/name).
pub fn work_name(kind: &str, namespace: &str, name: &str) -> String {
    let hash = fnv1a32(format!("{}.{namespace}.{name}", kind.to_ascii_lowercase()).as_bytes());
    let mut base: String = name.chars().take(200).collect();
    base = base.trim_end_matches(['-', '.']).to_string();
    format!("{base}-{hash:08x}")
}

/// The template as a manifest: server-set metadata and status removed.
pub fn manifest_of(template: &Value) -> Value {
    let mut m = template.clone();
    if let Some(obj) = m.as_object_mut() {
        obj.remove("status");
    }
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "ownerReferences",
            "finalizers",
            "selfLink",
        ] {
            meta.remove(k);
        }
    }
    m
}

/// What the controller should do for one binding.
#[derive(Debug, Default, PartialEq)]
pub struct WorkPlan {
    /// Works to create or update (complete objects).
    pub apply: Vec<Value>,
    /// Works to delete: (namespace, name).
    pub delete: Vec<(String, String)>,
    /// Dispatch is gated; look again after this long.
    pub retry_after: Option<Duration>,
    /// Clusters whose manifest could not be revised to their replicas, with the error: their
    /// Works are left as they are (none is created), and the binding is tried again.
    pub revise_failed: Vec<(String, String)>,
}

/// Decides the Works of a binding. `existing` are the binding's Works now; `ready` says
/// whether a cluster is Ready.
pub fn plan_works(
    binding: &Value,
    spec: &ResourceBindingSpec,
    template: &Value,
    existing: &[impl Borrow<Value>],
    interpreter: &dyn TemplateInterpreter,
    ready: &dyn Fn(&str) -> bool,
) -> WorkPlan {
    let mut plan = WorkPlan::default();
    let expected = spec.existing_clusters();
    let mut present: BTreeSet<String> = BTreeSet::new();
    // Clusters of the placement that are also a task's source (a failback shrank their
    // share): their Work stays as it is until the task ends.
    let mut kept: BTreeSet<String> = BTreeSet::new();
    for w in existing {
        let w: &Value = w.borrow();
        let ns = w
            .lookup("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(cluster) = cluster_of_execution_namespace(ns) else {
            continue;
        };
        let deleting = w.lookup("/metadata/deletionTimestamp").is_some();
        if !deleting && spec.targets(cluster) && keeps_old_copy(spec, cluster) {
            kept.insert(cluster.to_string());
        }
        if !expected.contains(cluster) {
            if !deleting {
                let name = w
                    .lookup("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                plan.delete.push((ns.to_string(), name.to_string()));
            }
            // An orphan still on its way out counts as present (it may still run there).
            present.insert(cluster.to_string());
        } else {
            present.insert(cluster.to_string());
        }
    }
    // §10.2 with Part 1: an immediate purge's old copy must be gone first, unless its cluster
    // is not Ready (cluster failover), in which case new works go out at once.
    let gated = spec
        .clusters_with_immediate_purge()
        .iter()
        .any(|c| present.contains(c) && ready(c));
    if gated {
        plan.retry_after = Some(PURGE_GATE_RETRY);
        return plan;
    }
    let mut targets: BTreeMap<String, i32> = spec
        .clusters
        .iter()
        .map(|c| (c.name.clone(), c.replicas))
        .collect();
    for r in &spec.required_by {
        for c in &r.clusters {
            targets.entry(c.name.clone()).or_insert(c.replicas);
        }
    }
    let injected = injected_labels(spec, &targets);
    let base = manifest_of(template);
    // The template generation the manifest is made from: the member's reflected status
    // carries it back (`resourceTemplateGeneration`), so aggregation can tell whether every
    // member runs the latest template.
    let template_generation = template
        .lookup("/metadata/generation")
        .and_then(Value::as_i64);
    let is_workload = spec.replicas > 0 || spec.replica_requirements.is_some();
    let kind = template.get("kind").and_then(Value::as_str).unwrap_or("");
    let tns = template
        .lookup("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let tname = template
        .lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let bmeta = &binding["metadata"];
    let binding_id_label = if bmeta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        RB_PERMANENT_ID_LABEL
    } else {
        CRB_PERMANENT_ID_LABEL
    };
    let binding_id = bmeta
        .lookup(&format!("/labels/{}", binding_id_label.replace('/', "~1")))
        .and_then(Value::as_str)
        .unwrap_or("");
    let template_uid = template
        .lookup("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    // Karmada's rule: the binding's resolution (from its policy) unless the template says.
    let conflict_resolution = spec.conflict_resolution.map(|c| match c {
        ConflictResolution::Overwrite => CONFLICT_OVERWRITE,
        ConflictResolution::Abort => CONFLICT_ABORT,
    });
    for (cluster, replicas) in targets {
        if kept.contains(&cluster) {
            continue;
        }
        let mut manifest = if is_workload {
            match interpreter.revise_replicas(&base, replicas) {
                Ok(m) => m,
                Err(e) => {
                    plan.revise_failed
                        .push((cluster, flotilla_support::error_chain(&e)));
                    continue;
                }
            }
        } else {
            base.clone()
        };
        // Injected now, or injected earlier into this cluster's Work: the preserved state stays
        // on the workload after its eviction task ends (dropping it would rewrite the running
        // workload a second time, without the state it started from).
        let preserved = injected
            .clone()
            .or_else(|| previously_injected(existing, &cluster));
        if let Some(labels) = &preserved {
            for (k, v) in labels {
                set_path(&mut manifest, &["metadata", "labels", k], json!(v));
            }
        }
        if let Some(generation) = template_generation {
            set_path(
                &mut manifest,
                &[
                    "metadata",
                    "annotations",
                    RESOURCE_TEMPLATE_GENERATION_ANNOTATION,
                ],
                json!(generation.to_string()),
            );
        }
        let name = work_name(kind, tns, tname);
        let namespace = execution_namespace(&cluster);
        stamp_member_marks(
            &mut manifest,
            &MemberMarks {
                work_name: &name,
                work_namespace: &namespace,
                binding_name: bmeta["name"].as_str().unwrap_or(""),
                binding_namespace: bmeta["namespace"].as_str().unwrap_or(""),
                template_uid,
                conflict_resolution,
            },
        );
        let mut annotations = Map::new();
        if let Some(labels) = preserved.as_ref().filter(|l| !l.is_empty()) {
            let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
            annotations.insert(PRESERVED_LABELS_ANNOTATION.into(), json!(keys.join(",")));
        }
        annotations.insert(BINDING_NAME_ANNOTATION.into(), bmeta["name"].clone());
        if spec.failover.as_ref().is_some_and(|f| f.exactly_once()) {
            annotations.insert(PLACEMENT_GUARANTEE_ANNOTATION.into(), json!(EXACTLY_ONCE));
        }
        if is_workload {
            annotations.insert(
                ASSIGNED_REPLICAS_ANNOTATION.into(),
                json!(replicas.to_string()),
            );
        }
        if let Some(ns) = bmeta
            .get("namespace")
            .filter(|n| n.as_str().is_some_and(|s| !s.is_empty()))
        {
            annotations.insert(BINDING_NAMESPACE_ANNOTATION.into(), ns.clone());
        }
        let mut work = json!({
            "apiVersion": "work.karmada.io/v1alpha1",
            "kind": "Work",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {binding_id_label: binding_id},
                "annotations": annotations,
                "finalizers": [EXECUTION_CONTROLLER_FINALIZER],
                "ownerReferences": [{
                    "apiVersion": binding["apiVersion"],
                    "kind": binding["kind"],
                    "name": bmeta["name"],
                    "uid": bmeta["uid"],
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {"workload": {"manifests": [manifest]}},
        });
        if let Some(s) = &spec.suspension {
            let on_this = s
                .dispatching_on_clusters
                .as_ref()
                .is_some_and(|d| d.cluster_names.contains(&cluster));
            if s.dispatching == Some(true) || on_this {
                work["spec"]["suspendDispatching"] = json!(true);
            }
        }
        if spec.preserve_resources_on_deletion == Some(true) {
            work["spec"]["preserveResourcesOnDeletion"] = json!(true);
        }
        plan.apply.push(work);
    }
    plan
}

/// Whether `cluster` is the source of an eviction task that keeps its old copy (any purge
/// mode but an immediate one).
fn keeps_old_copy(spec: &ResourceBindingSpec, cluster: &str) -> bool {
    spec.graceful_eviction_tasks
        .iter()
        .any(|t| t.from_cluster == cluster && !t.effective_purge_mode().is_immediate())
}

/// The preserved labels an existing Work of `cluster` carries from an earlier injection: the
/// keys its [`PRESERVED_LABELS_ANNOTATION`] names, with the values its manifest has.
fn previously_injected(
    existing: &[impl Borrow<Value>],
    cluster: &str,
) -> Option<BTreeMap<String, String>> {
    let ns = execution_namespace(cluster);
    let work: &Value = existing.iter().map(Borrow::borrow).find(|w: &&Value| {
        w.lookup("/metadata/namespace").and_then(Value::as_str) == Some(ns.as_str())
            && w.lookup("/metadata/deletionTimestamp").is_none()
    })?;
    let keys = work
        .lookup(&format!(
            "/metadata/annotations/{}",
            PRESERVED_LABELS_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str)?;
    let labels = work.lookup("/spec/workload/manifests/0/metadata/labels")?;
    let found: BTreeMap<String, String> = keys
        .split(',')
        .filter_map(|k| Some((k.to_string(), labels.get(k)?.as_str()?.to_string())))
        .collect();
    (!found.is_empty()).then_some(found)
}

/// §10.3: labels to inject when exactly one cluster is targeted after an immediate-purge
/// eviction that recorded state, and that cluster is not one the workload ran on before.
fn injected_labels(
    spec: &ResourceBindingSpec,
    targets: &BTreeMap<String, i32>,
) -> Option<BTreeMap<String, String>> {
    let last = spec.graceful_eviction_tasks.last()?;
    if targets.len() != 1
        || !last.effective_purge_mode().is_immediate()
        || last.preserved_label_state.is_empty()
    {
        return None;
    }
    let target = targets.keys().next()?;
    if last.clusters_before_failover.contains(target) {
        return None;
    }
    Some(last.preserved_label_state.clone())
}

/// The controller.
pub struct BindingWorksController {
    store: Arc<dyn Store>,
    registry: Arc<KindRegistry>,
    interpreter: Arc<dyn TemplateInterpreter>,
    events: EventRecorder,
    clusters: ClusterCache,
    /// Bindings whose failed revision was already reported, with the message: one Event per
    /// failure, not one per retry.
    warned: Mutex<HashMap<String, String>>,
    /// Time source of the fence gate.
    clock: SharedClock,
    /// `--member-fence-after`.
    member_fence_after: Duration,
    /// Bindings whose fence wait was already told, with the member and its fence time.
    fence_told: Mutex<HashMap<String, (String, chrono::DateTime<chrono::Utc>)>>,
    /// The Works it wrote, whose watch events do not wake it again.
    own_writes: Arc<OwnWrites>,
}

impl BindingWorksController {
    /// The record of its own Work writes, which its Work source skips.
    pub fn own_writes(&self) -> Arc<OwnWrites> {
        self.own_writes.clone()
    }

    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn Store>,
        registry: Arc<KindRegistry>,
        interpreter: Arc<dyn TemplateInterpreter>,
        events: EventRecorder,
    ) -> Self {
        Self {
            clusters: ClusterCache::new(store.clone()),
            store,
            registry,
            interpreter,
            events: events.for_component("binding-controller"),
            warned: Mutex::new(HashMap::new()),
            clock: Arc::new(flotilla_support::clock::SystemClock),
            member_fence_after: crate::controllers::settings::DEFAULT_MEMBER_FENCE_AFTER,
            fence_told: Mutex::new(HashMap::new()),
            own_writes: Arc::new(OwnWrites::default()),
        }
    }

    /// The fence gate's clock and `--member-fence-after`.
    pub fn with_fencing(mut self, clock: SharedClock, member_fence_after: Duration) -> Self {
        self.clock = clock;
        self.member_fence_after = member_fence_after;
        self
    }

    /// Writes `work`'s spec, labels and annotations into `current` (compare-and-swap on its
    /// resourceVersion) when they differ; with `adopt`, its ownerReferences too.
    async fn bring_to(
        &self,
        works_rt: &flotilla_api::kinds::ResourceType,
        current: &Value,
        work: &Value,
        adopt: bool,
    ) -> Result<(), StoreError> {
        let owners = &work["metadata"]["ownerReferences"];
        let owners_kept = !adopt || current["metadata"]["ownerReferences"] == *owners;
        // Most passes find the Work as planned: compare before copying it.
        let labels_kept = ["labels", "annotations"].iter().all(|part| {
            work["metadata"][part].as_object().is_none_or(|m| {
                m.iter()
                    .all(|(k, v)| current["metadata"][part].get(k) == Some(v))
            })
        });
        if owners_kept && labels_kept && current["spec"] == work["spec"] {
            return Ok(());
        }
        let mut updated = current.clone();
        updated["spec"] = work["spec"].clone();
        for part in ["labels", "annotations"] {
            if let Some(m) = work["metadata"][part].as_object() {
                for (k, v) in m {
                    updated["metadata"][part][k] = v.clone();
                }
            }
        }
        if adopt {
            updated["metadata"]["ownerReferences"] = owners.clone();
        }
        if updated != *current {
            self.own_writes.expect(works_rt, current);
            match self.store.update(works_rt, updated).await {
                Ok(written) => self.own_writes.confirm(works_rt, &written),
                Err(e) => {
                    self.own_writes.cancel(works_rt, current);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A Work this binding's plan creates that exists already: one the store's owner index
    /// does not show yet (a new leader whose view is catching up), a deleted binding's that the
    /// collector has not reached, or one made by hand. As Karmada's CreateOrUpdate, it is read
    /// and brought to the desired state, and this binding takes it over (its ownerReferences),
    /// never skipped. One being deleted is left to go, and looked at again shortly, since its
    /// going may wake no reconcile of this binding. Answers when to look again.
    async fn take_over(
        &self,
        works_rt: &flotilla_api::kinds::ResourceType,
        desired: &Value,
    ) -> Result<Option<Duration>, StoreError> {
        let namespace = desired["metadata"]["namespace"].as_str().unwrap_or("");
        let name = desired["metadata"]["name"].as_str().unwrap_or("");
        let current = self.store.get(works_rt, Some(namespace), name).await?;
        if current.lookup("/metadata/deletionTimestamp").is_some() {
            return Ok(Some(TAKE_OVER_RETRY));
        }
        tracing::info!(work = %format!("{namespace}/{name}"), "a Work of this binding's name exists; taking it over");
        self.bring_to(works_rt, &current, desired, true).await?;
        Ok(None)
    }

    /// The fence gate (see [`crate::controllers::failover::fencing`]): how long an exactly-once
    /// binding's dispatch must still wait for an old member to fence itself; tells it once with an
    /// Event.
    async fn fence_gate(
        &self,
        key: &str,
        binding: &Value,
        candidates: Vec<String>,
    ) -> Result<Option<Duration>, ReconcileError> {
        if candidates.is_empty() {
            self.fence_told.lock().remove(key);
            return Ok(None);
        }
        let mut renewals = Vec::with_capacity(candidates.len());
        for cluster in candidates {
            let renewed = lease_renew_time(self.store.as_ref(), &cluster).await?;
            renewals.push((cluster, renewed));
        }
        let now = self.clock.now();
        let Some(wait) = crate::controllers::failover::fencing::fence_wait(
            &renewals,
            now,
            self.member_fence_after,
        ) else {
            self.fence_told.lock().remove(key);
            return Ok(None);
        };
        let told = (wait.cluster.clone(), wait.until);
        let first = self.fence_told.lock().insert(key.to_string(), told.clone()) != Some(told);
        if first {
            let message = format!(
                "exactly-once: new Works wait until {} for cluster {} to fence itself \
                 (last lease renewal {} + --member-fence-after {}s)",
                wait.until.to_rfc3339(),
                wait.cluster,
                wait.renewed.to_rfc3339(),
                self.member_fence_after.as_secs_f64(),
            );
            tracing::info!(binding = key, cluster = %wait.cluster, until = %wait.until.to_rfc3339(),
                "dispatch waits for the old member's fence time");
            self.events
                .record(binding, EventType::Normal, "WaitingForFence", &message)
                .await;
        }
        Ok(Some(wait.remaining(now).max(Duration::from_millis(10))))
    }

    /// The binding key a Work belongs to (from its annotations).
    pub fn work_key(work: &Value) -> Vec<String> {
        let ann = |k: &str| {
            work.lookup(&format!("/metadata/annotations/{}", k.replace('/', "~1")))
                .and_then(Value::as_str)
        };
        match (
            ann(BINDING_NAMESPACE_ANNOTATION),
            ann(BINDING_NAME_ANNOTATION),
        ) {
            (Some(ns), Some(name)) => vec![format!("rb|{ns}|{name}")],
            (None, Some(name)) => vec![format!("crb|{name}")],
            _ => Vec::new(),
        }
    }
}

/// Both binding kinds keyed as the binding controllers key them, queued when a binding's spec
/// (generation), deletion or finalizers change, not when its status does.
pub fn binding_sources() -> Vec<crate::controllers::runtime::controller::Source> {
    use crate::controllers::runtime::controller::{generation_fingerprint, Source};
    [
        well_known::resource_bindings(),
        well_known::cluster_resource_bindings(),
    ]
    .into_iter()
    .map(|rt| {
        Source::mapped(rt, |b| {
            crate::controllers::shared::binding_keys::binding_key(b)
                .into_iter()
                .collect()
        })
        .on_change_of(generation_fingerprint)
    })
    .collect()
}

/// How soon a binding looks again at a Work of its name that is being deleted.
const TAKE_OVER_RETRY: Duration = Duration::from_secs(2);

#[async_trait]
impl Reconciler for BindingWorksController {
    fn name(&self) -> &'static str {
        "binding-works"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(LiveBinding {
            object: binding, ..
        }) = live_binding(self.store.as_ref(), key).await?
        else {
            return Ok(Action::Done);
        };
        let spec: ResourceBindingSpec = decode(&binding["spec"], key)?;
        let (_, template) =
            read_template(self.store.as_ref(), &self.registry, &spec.resource).await?;
        let Some(template) = template else {
            return Ok(Action::Done);
        };
        let works_rt = well_known::works();
        let existing = owned_works(self.store.as_ref(), &binding).await?;
        let clusters = self.clusters.get().await?;
        let mut plan = plan_works(
            &binding,
            &spec,
            &template,
            &existing,
            self.interpreter.as_ref(),
            &|c| clusters.is_ready(c),
        );
        // Nothing is written for a cluster being deleted (Karmada: its execution namespace is
        // terminating); the scheduler takes it out of the placement (docs/semantics.md §2).
        plan.apply.retain(|w| {
            w.lookup("/metadata/namespace")
                .and_then(Value::as_str)
                .and_then(cluster_of_execution_namespace)
                .is_none_or(|c| !clusters.is_deleting(c))
        });
        // Exactly-once: nothing is dispatched before the old member's fence time.
        let candidates =
            // A cluster being deleted counts as not Ready: its agent's credential is revoked,
            // so it fences on its own clock whatever it last reported.
            crate::controllers::failover::fencing::unfenced_candidates(&spec, &existing, &|c| {
                clusters.is_ready(c) && !clusters.is_deleting(c)
            });
        if let Some(wait) = self.fence_gate(key, &binding, candidates).await? {
            plan.apply.clear();
            plan.retry_after = Some(plan.retry_after.map_or(wait, |r| r.min(wait)));
        }
        let existing_work = |wns: &str, wname: &str| {
            existing.iter().map(AsRef::as_ref).find(|w: &&Value| {
                w["metadata"]["namespace"] == wns && w["metadata"]["name"] == wname
            })
        };
        for (wns, wname) in &plan.delete {
            // A Work with finalizers gets a deletion mark: its event need not wake us.
            let current = existing_work(wns, wname);
            if let Some(w) = current {
                self.own_writes.expect(&works_rt, w);
            }
            match self
                .store
                .delete(&works_rt, Some(wns), wname, &DeleteOptions::default())
                .await
            {
                Ok(deleted) => {
                    match &deleted {
                        Deleted::Pending(marked) => self.own_writes.confirm(&works_rt, marked),
                        Deleted::Gone(gone) => self.own_writes.cancel(&works_rt, gone),
                    }
                    tracing::info!(binding = key, work = %format!("{wns}/{wname}"), "orphan work deleted");
                }
                Err(e) => {
                    if matches!(e, StoreError::NotFound { .. }) {
                        if let Some(w) = current {
                            self.own_writes.cancel(&works_rt, w);
                        }
                        continue;
                    }
                    if let Some(w) = current {
                        self.own_writes.cancel(&works_rt, w);
                    }
                    return Err(e.into());
                }
            }
        }
        // The Works of the targets are written together (they share a durable round).
        let writes = plan.apply.into_iter().map(|work| {
            let works_rt = &works_rt;
            let existing_work = &existing_work;
            async move {
                let wns = work["metadata"]["namespace"].as_str().unwrap_or("");
                let wname = work["metadata"]["name"].as_str().unwrap_or("");
                let Some(current) = existing_work(wns, wname) else {
                    // Expected before the write: its watch event may come before the answer.
                    self.own_writes.expect(works_rt, &work);
                    let identity = work["metadata"].clone();
                    let desired = work.clone();
                    return match self.store.create(works_rt, work).await {
                        Ok(created) => {
                            self.own_writes.confirm(works_rt, &created);
                            Ok(None)
                        }
                        Err(e) => {
                            self.own_writes
                                .cancel(works_rt, &json!({ "metadata": identity }));
                            match e {
                                StoreError::AlreadyExists { .. } => {
                                    self.take_over(works_rt, &desired).await
                                }
                                e => Err(e),
                            }
                        }
                    };
                };
                if current.lookup("/metadata/deletionTimestamp").is_some() {
                    return Ok(None);
                }
                self.bring_to(works_rt, current, &work, false)
                    .await
                    .map(|()| None)
            }
        });
        let retries = futures::future::try_join_all(writes).await?;
        if let Some(wait) = retries.into_iter().flatten().min() {
            plan.retry_after = Some(plan.retry_after.map_or(wait, |r| r.min(wait)));
        }
        if !plan.revise_failed.is_empty() {
            let message = plan
                .revise_failed
                .iter()
                .map(|(cluster, error)| format!("cluster {cluster}: {error}"))
                .collect::<Vec<_>>()
                .join("; ");
            tracing::warn!(binding = key, %message, "revising replicas failed; those Works are left as they are");
            let first = self.warned.lock().insert(key.to_string(), message.clone())
                != Some(message.clone());
            if first {
                // Karmada's binding controller: SyncWorkFailed, on the binding and its template.
                let text = format!(
                    "revising the manifest's replicas failed, Works left as they are: {message}"
                );
                let binding = Value::clone(&binding);
                let template = template_ref(&binding);
                for object in std::iter::once(&binding).chain(template.as_ref()) {
                    self.events
                        .record(object, EventType::Warning, EVENT_SYNC_WORK_FAILED, &text)
                        .await;
                }
            }
            return Err(ReconcileError::Other(format!(
                "revising replicas failed: {message}"
            )));
        }
        self.warned.lock().remove(key);
        Ok(plan.retry_after.map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::SpecReplicas;
    use crate::interpreter::InterpretError;
    use flotilla_api::work::{
        CONFLICT_RESOLUTION_ANNOTATION, MANAGED_LABEL, TEMPLATE_UID_ANNOTATION,
        WORK_NAMESPACE_ANNOTATION, WORK_NAME_ANNOTATION,
    };

    fn binding(spec: Value) -> (Value, ResourceBindingSpec) {
        let b = json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "nginx-deployment", "namespace": "default", "uid": "b-uid",
                         "labels": {RB_PERMANENT_ID_LABEL: "b-id"}},
            "spec": spec});
        let typed = serde_json::from_value(b["spec"].clone()).unwrap();
        (b, typed)
    }

    fn template() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "nginx", "namespace": "default", "uid": "t", "resourceVersion": "9", "generation": 4, "labels": {"app": "nginx"}},
               "spec": {"replicas": 3}, "status": {"readyReplicas": 3}})
    }

    fn work_in(cluster: &str, deleting: bool) -> Value {
        let mut w = json!({"metadata": {"name": work_name("Deployment", "default", "nginx"), "namespace": execution_namespace(cluster)}});
        if deleting {
            w["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        w
    }

    fn clusters_of(plan: &WorkPlan) -> Vec<(String, i64)> {
        plan.apply
            .iter()
            .map(|w| {
                (
                    w["metadata"]["namespace"].as_str().unwrap().to_string(),
                    w["spec"]["workload"]["manifests"][0]["spec"]["replicas"]
                        .as_i64()
                        .unwrap_or(-1),
                )
            })
            .collect()
    }

    fn all_ready(_: &str) -> bool {
        true
    }

    /// `SpecReplicas`, except that revising to 2 replicas fails as a broken rule would.
    struct RevisionFailsAtTwo;

    impl TemplateInterpreter for RevisionFailsAtTwo {
        fn replicas(
            &self,
            t: &Value,
        ) -> Result<(i32, Option<flotilla_api::binding::ReplicaRequirements>), InterpretError>
        {
            SpecReplicas.replicas(t)
        }
        fn revise_replicas(&self, m: &Value, replicas: i32) -> Result<Value, InterpretError> {
            if replicas == 2 {
                return Err(InterpretError::NoKind);
            }
            SpecReplicas.revise_replicas(m, replicas)
        }
        fn health(&self, o: &Value) -> flotilla_api::work::ResourceHealth {
            SpecReplicas.health(o)
        }
        fn reflect_status(&self, o: &Value) -> Option<Value> {
            SpecReplicas.reflect_status(o)
        }
        fn has_health_rule(&self, o: &Value) -> bool {
            SpecReplicas.has_health_rule(o)
        }
        fn aggregate_status(
            &self,
            t: &Value,
            items: &[flotilla_api::binding::AggregatedStatusItem],
        ) -> Option<Value> {
            SpecReplicas.aggregate_status(t, items)
        }
        fn dependencies(
            &self,
            t: &Value,
        ) -> Result<Vec<crate::interpreter::ObjectRef>, InterpretError> {
            SpecReplicas.dependencies(t)
        }
    }

    #[test]
    fn a_failed_replica_revision_leaves_that_clusters_work_alone_never_full_size() {
        let (b, spec) = binding(
            json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 2}]}),
        );
        let existing = [work_in("m2", false)];
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &existing,
            &RevisionFailsAtTwo,
            &all_ready,
        );
        assert_eq!(clusters_of(&plan), [("karmada-es-m1".to_string(), 1)]);
        assert_eq!(plan.revise_failed.len(), 1);
        assert_eq!(plan.revise_failed[0].0, "m2");
        assert!(plan.delete.is_empty(), "m2's Work stays as it is");
    }

    /// The fence gate on an in-memory store with a fake clock: an exactly-once binding moved
    /// off a not-Ready pull member gets no new Work before that member's lease renewal +
    /// `member_fence_after`, says so once with an Event, and looks again at the fence time.
    #[tokio::test]
    async fn the_replacement_waits_for_the_old_members_fence_time() {
        use crate::controllers::runtime::testing::TestWorld;
        use crate::store::ListOptions;
        use chrono::TimeZone;
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let world = TestWorld::at(t0);
        let (store, fake, registry) = (
            world.store.clone(),
            world.clock.clone(),
            world.ctx.registry.clone(),
        );
        let controller = BindingWorksController::new(
            store.clone(),
            registry.clone(),
            Arc::new(SpecReplicas),
            world.events(),
        )
        .with_fencing(world.shared_clock.clone(), Duration::from_secs(45));
        let mut tpl = template();
        tpl["metadata"]["name"] = json!("db");
        tpl["spec"]["replicas"] = json!(1);
        store
            .create(&registry.resolve_kind("apps/v1", "Deployment"), tpl)
            .await
            .unwrap();
        for (name, ready) in [("member1", "Unknown"), ("member2", "True")] {
            store
                .create(
                    &well_known::clusters(),
                    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                           "metadata": {"name": name}, "spec": {"syncMode": "Pull"},
                           "status": {"conditions": [{"type": "Ready", "status": ready,
                               "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
                )
                .await
                .unwrap();
        }
        store
            .create(
                &well_known::leases(),
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "member1", "namespace": "karmada-cluster"},
                       "spec": {"holderIdentity": "member1", "leaseDurationSeconds": 40,
                                "renewTime": "2026-01-01T00:00:00.000000Z"}}),
            )
            .await
            .unwrap();
        let rb = store
            .create(
                &well_known::resource_bindings(),
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                       "metadata": {"name": "db-deployment", "namespace": "default", "uid": "b-uid"},
                       "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "namespace": "default", "name": "db"},
                                "replicas": 1, "clusters": [{"name": "member2", "replicas": 1}],
                                "failover": {"cluster": {"purgeMode": "Immediately",
                                                         "fencing": {"exactlyOnce": true}}}}}),
            )
            .await
            .unwrap();
        let uid = rb["metadata"]["uid"].clone();
        store
            .create(
                &well_known::works(),
                json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                       // The execution finalizer keeps it (being deleted) until its member
                       // confirms, as in the real flow.
                       "metadata": {"name": "db-1", "namespace": "karmada-es-member1",
                                    "finalizers": [EXECUTION_CONTROLLER_FINALIZER],
                                    "ownerReferences": [{"apiVersion": "work.karmada.io/v1alpha2",
                                        "kind": "ResourceBinding", "name": "db-deployment",
                                        "uid": uid, "controller": true}]},
                       "spec": {"workload": {"manifests": []}}}),
            )
            .await
            .unwrap();
        let key = "rb|default|db-deployment";
        let works_on_member2 = || async {
            store
                .list(
                    &well_known::works(),
                    Some("karmada-es-member2"),
                    &ListOptions::default(),
                )
                .await
                .unwrap()
                .items
                .len()
        };
        let waits = || async {
            store
                .list(
                    &well_known::events(),
                    Some("default"),
                    &ListOptions::default(),
                )
                .await
                .unwrap()
                .items
                .iter()
                .filter(|e| e["reason"] == "WaitingForFence")
                .count()
        };

        fake.advance(chrono::Duration::seconds(10));
        let action = controller.reconcile(key).await.unwrap();
        assert!(
            matches!(action, Action::RequeueAfter(d) if d == Duration::from_secs(35)),
            "{action:?}"
        );
        assert_eq!(works_on_member2().await, 0);
        assert_eq!(waits().await, 1);
        // Looking again before the fence time: still waiting, told once.
        fake.advance(chrono::Duration::seconds(30));
        let action = controller.reconcile(key).await.unwrap();
        assert!(
            matches!(action, Action::RequeueAfter(d) if d == Duration::from_secs(5)),
            "{action:?}"
        );
        assert_eq!(works_on_member2().await, 0);
        assert_eq!(waits().await, 1);
        // The fence time has passed: the replacement goes out.
        fake.advance(chrono::Duration::seconds(5));
        assert!(matches!(
            controller.reconcile(key).await.unwrap(),
            Action::Done
        ));
        assert_eq!(works_on_member2().await, 1);
    }

    #[test]
    fn exactly_once_bindings_mark_their_works() {
        let resource = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"});
        let table = [
            (json!(null), None),
            (json!({"cluster": {"purgeMode": "Immediately"}}), None),
            (
                json!({"cluster": {"purgeMode": "Immediately", "fencing": {"exactlyOnce": false}}}),
                None,
            ),
            (
                json!({"cluster": {"purgeMode": "Immediately", "fencing": {"exactlyOnce": true}}}),
                Some(EXACTLY_ONCE),
            ),
        ];
        for (failover, want) in table {
            let (b, spec) = binding(json!({"resource": resource, "replicas": 1,
                "clusters": [{"name": "m1", "replicas": 1}], "failover": failover}));
            let plan = plan_works(
                &b,
                &spec,
                &template(),
                &[] as &[Value],
                &SpecReplicas,
                &all_ready,
            );
            let got =
                plan.apply[0]["metadata"]["annotations"][PLACEMENT_GUARANTEE_ANNOTATION].as_str();
            assert_eq!(got, want, "{failover}");
        }
    }

    #[test]
    fn one_work_per_target_with_its_share() {
        let (b, spec) = binding(
            json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 2}]}),
        );
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[] as &[Value],
            &SpecReplicas,
            &all_ready,
        );
        assert_eq!(
            clusters_of(&plan),
            [
                ("karmada-es-m1".to_string(), 1),
                ("karmada-es-m2".to_string(), 2)
            ]
        );
        let w = &plan.apply[0];
        assert_eq!(
            w["metadata"]["finalizers"],
            json!([EXECUTION_CONTROLLER_FINALIZER])
        );
        assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "b-uid");
        assert_eq!(w["metadata"]["labels"][RB_PERMANENT_ID_LABEL], "b-id");
        assert_eq!(
            w["metadata"]["annotations"][BINDING_NAMESPACE_ANNOTATION],
            "default"
        );
        let m = &w["spec"]["workload"]["manifests"][0];
        assert!(
            m.get("status").is_none()
                && m["metadata"].get("uid").is_none()
                && m["metadata"].get("resourceVersion").is_none(),
            "{m}"
        );
        assert_eq!(m["metadata"]["labels"]["app"], "nginx");
        assert!(m["metadata"].get("generation").is_none(), "{m}");
        assert_eq!(
            m["metadata"]["annotations"][RESOURCE_TEMPLATE_GENERATION_ANNOTATION], "4",
            "the template generation the manifest was made from"
        );
        // Karmada's ownership marks, read by member runtimes to tell their objects apart.
        assert_eq!(m["metadata"]["labels"][MANAGED_LABEL], "true");
        let a = &m["metadata"]["annotations"];
        assert_eq!(a[WORK_NAME_ANNOTATION], w["metadata"]["name"]);
        assert_eq!(a[WORK_NAMESPACE_ANNOTATION], "karmada-es-m1");
        assert_eq!(a[BINDING_NAME_ANNOTATION], "nginx-deployment");
        assert_eq!(a[BINDING_NAMESPACE_ANNOTATION], "default");
        assert_eq!(a[TEMPLATE_UID_ANNOTATION], "t");
        assert!(a.get(CONFLICT_RESOLUTION_ANNOTATION).is_none(), "{a}");
        assert!(plan.delete.is_empty() && plan.retry_after.is_none());
    }

    #[test]
    fn the_bindings_conflict_resolution_reaches_the_manifest_unless_the_template_says() {
        let spec = json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
            "namespace": "default", "name": "nginx"}, "replicas": 3,
            "conflictResolution": "Overwrite", "clusters": [{"name": "m1", "replicas": 3}]});
        let (b, typed) = binding(spec);
        for (template_says, want) in [(None, "overwrite"), (Some("abort"), "abort")] {
            let mut t = template();
            if let Some(v) = template_says {
                t["metadata"]["annotations"] = json!({CONFLICT_RESOLUTION_ANNOTATION: v});
            }
            let plan = plan_works(&b, &typed, &t, &[] as &[Value], &SpecReplicas, &all_ready);
            let m = &plan.apply[0]["spec"]["workload"]["manifests"][0];
            assert_eq!(
                m["metadata"]["annotations"][CONFLICT_RESOLUTION_ANNOTATION], want,
                "{template_says:?}"
            );
        }
    }

    #[test]
    fn orphans_go_but_graceful_eviction_sources_stay() {
        let (b, spec) = binding(
            json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m2", "replicas": 3}],
            "gracefulEvictionTasks": [{"fromCluster": "m1", "purgeMode": "Graciously", "reason": "TaintUntolerated", "producer": "TaintManager"}]}),
        );
        let existing = [
            work_in("m1", false),
            work_in("m3", false),
            work_in("m4", true),
        ];
        let plan = plan_works(&b, &spec, &template(), &existing, &SpecReplicas, &all_ready);
        assert_eq!(
            plan.delete,
            [(
                "karmada-es-m3".to_string(),
                work_name("Deployment", "default", "nginx")
            )]
        );
        assert_eq!(clusters_of(&plan), [("karmada-es-m2".to_string(), 3)]);
    }

    #[test]
    fn a_target_that_is_also_a_failback_source_keeps_its_work_until_the_task_ends() {
        // Failback: m1 gets 1 of 3 back, m2 goes from 3 to 2 but keeps its 3 until m1's copy
        // is Healthy (the task), then its Work is written with 2.
        let with_task = json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 2}],
            "gracefulEvictionTasks": [{"fromCluster": "m2", "purgeMode": "Graciously", "replicas": 3,
                                       "reason": "Failback", "producer": "Failback"}]});
        let (b, spec) = binding(with_task.clone());
        let existing = [work_in("m2", false)];
        let plan = plan_works(&b, &spec, &template(), &existing, &SpecReplicas, &all_ready);
        assert!(plan.delete.is_empty(), "{plan:?}");
        assert_eq!(clusters_of(&plan), [("karmada-es-m1".to_string(), 1)]);
        // Without a Work yet there is nothing to keep: it is written with its share.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[] as &[Value],
            &SpecReplicas,
            &all_ready,
        );
        assert_eq!(clusters_of(&plan).len(), 2);
        // The task ended: m2's Work gets its new share.
        let mut ended = with_task;
        ended["gracefulEvictionTasks"] = json!([]);
        let (b, spec) = binding(ended);
        let plan = plan_works(&b, &spec, &template(), &existing, &SpecReplicas, &all_ready);
        assert_eq!(
            clusters_of(&plan),
            [
                ("karmada-es-m1".to_string(), 1),
                ("karmada-es-m2".to_string(), 2)
            ]
        );
    }

    #[test]
    fn immediate_purge_waits_for_the_old_copy_only_while_its_cluster_is_ready() {
        let spec = json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m2", "replicas": 3}],
            "gracefulEvictionTasks": [{"fromCluster": "m1", "purgeMode": "Immediately", "reason": "ApplicationFailure", "producer": "x",
                                       "preservedLabelState": {"application.karmada.io/failover-jobid": "abc"},
                                       "clustersBeforeFailover": ["m1"]}]});
        let (b, spec) = binding(spec);
        // Old copy present on a Ready cluster: deleted first, nothing new dispatched yet.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[work_in("m1", false)],
            &SpecReplicas,
            &all_ready,
        );
        assert_eq!(plan.delete.len(), 1);
        assert!(plan.apply.is_empty());
        assert_eq!(plan.retry_after, Some(PURGE_GATE_RETRY));
        // Still being deleted: still gated.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[work_in("m1", true)],
            &SpecReplicas,
            &all_ready,
        );
        assert!(plan.apply.is_empty() && plan.delete.is_empty());
        // The old cluster is down: the new copy goes out at once, with the preserved state.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[work_in("m1", true)],
            &SpecReplicas,
            &|c| c != "m1",
        );
        assert_eq!(clusters_of(&plan), [("karmada-es-m2".to_string(), 3)]);
        let labels = &plan.apply[0]["spec"]["workload"]["manifests"][0]["metadata"]["labels"];
        assert_eq!(labels["application.karmada.io/failover-jobid"], "abc");
        // Old copy gone: dispatched with the injected label.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[] as &[Value],
            &SpecReplicas,
            &all_ready,
        );
        assert_eq!(plan.apply.len(), 1);
    }

    /// §10.3 as a table: the last task's preserved state goes into the manifest only when it
    /// was an Immediately/Directly eviction, exactly one cluster is targeted, and that cluster
    /// is not one the workload ran on before the failover.
    #[test]
    fn label_injection_table() {
        let task = |from: &str, mode: &str, state: Value, before: Value| {
            json!({"fromCluster": from, "purgeMode": mode, "reason": "ApplicationFailure",
                   "producer": "resource-binding-application-failover-controller",
                   "preservedLabelState": state, "clustersBeforeFailover": before})
        };
        let jobid = json!({"application.karmada.io/failover-jobid": "abc"});
        let rows: Vec<(&str, Value, Value, bool)> = vec![
            (
                "Immediately, one new cluster",
                json!([{"name": "m2", "replicas": 3}]),
                json!([task("m1", "Immediately", jobid.clone(), json!(["m1"]))]),
                true,
            ),
            (
                "Directly, one new cluster",
                json!([{"name": "m2", "replicas": 3}]),
                json!([task("m1", "Directly", jobid.clone(), json!(["m1"]))]),
                true,
            ),
            (
                "not back to a cluster it ran on before",
                json!([{"name": "m1", "replicas": 3}]),
                json!([task("m2", "Directly", jobid.clone(), json!(["m1", "m2"]))]),
                false,
            ),
            (
                "several targets: none gets it",
                json!([{"name": "m2", "replicas": 1}, {"name": "m3", "replicas": 2}]),
                json!([task("m1", "Directly", jobid.clone(), json!(["m1"]))]),
                false,
            ),
            (
                "Graciously records the state but does not inject it",
                json!([{"name": "m2", "replicas": 3}]),
                json!([task("m1", "Graciously", jobid.clone(), json!(["m1"]))]),
                false,
            ),
            (
                "Never records the state but does not inject it",
                json!([{"name": "m2", "replicas": 3}]),
                json!([task("m1", "Never", jobid.clone(), json!(["m1"]))]),
                false,
            ),
            (
                "the last task decides",
                json!([{"name": "m3", "replicas": 3}]),
                json!([
                    task("m1", "Directly", jobid.clone(), json!(["m1"])),
                    task("m2", "Directly", json!({}), json!(["m2"]))
                ]),
                false,
            ),
            (
                "no task",
                json!([{"name": "m2", "replicas": 3}]),
                json!([]),
                false,
            ),
        ];
        for (what, clusters, tasks, want) in rows {
            let (b, spec) = binding(
                json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                "replicas": 3, "clusters": clusters, "gracefulEvictionTasks": tasks}),
            );
            let plan = plan_works(
                &b,
                &spec,
                &template(),
                &[] as &[Value],
                &SpecReplicas,
                &all_ready,
            );
            assert!(!plan.apply.is_empty(), "{what}");
            for w in &plan.apply {
                let labels = &w["spec"]["workload"]["manifests"][0]["metadata"]["labels"];
                assert_eq!(
                    labels.get("application.karmada.io/failover-jobid"),
                    want.then(|| json!("abc")).as_ref(),
                    "{what}"
                );
                assert_eq!(labels["app"], "nginx", "{what}: the template's labels stay");
            }
        }
    }

    #[test]
    fn injected_state_stays_on_the_new_clusters_work_after_the_task_ends() {
        let with_task = json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m2", "replicas": 3}],
            "gracefulEvictionTasks": [{"fromCluster": "m1", "purgeMode": "Directly", "reason": "ApplicationFailure", "producer": "x",
                                       "preservedLabelState": {"a.io/job": "abc"}, "clustersBeforeFailover": ["m1"]}]});
        let (b, spec) = binding(with_task);
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[] as &[Value],
            &SpecReplicas,
            &all_ready,
        );
        let injected = plan.apply[0].clone();
        assert_eq!(
            injected["metadata"]["annotations"][PRESERVED_LABELS_ANNOTATION],
            "a.io/job"
        );
        // The task ended: the Work is planned again from the binding without it.
        let (b, spec) = binding(
            json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
            "replicas": 3, "clusters": [{"name": "m2", "replicas": 3}]}),
        );
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            std::slice::from_ref(&injected),
            &SpecReplicas,
            &all_ready,
        );
        let labels = &plan.apply[0]["spec"]["workload"]["manifests"][0]["metadata"]["labels"];
        assert_eq!(labels["a.io/job"], "abc", "{labels}");
        assert_eq!(labels["app"], "nginx");
        // A Work that never got state gets none.
        let plan = plan_works(
            &b,
            &spec,
            &template(),
            &[work_in("m2", false)],
            &SpecReplicas,
            &all_ready,
        );
        let labels = &plan.apply[0]["spec"]["workload"]["manifests"][0]["metadata"]["labels"];
        assert!(labels.get("a.io/job").is_none(), "{labels}");
        assert!(plan.apply[0]["metadata"]["annotations"]
            .get(PRESERVED_LABELS_ANNOTATION)
            .is_none());
    }

    #[test]
    fn required_by_clusters_and_suspension() {
        let (b, spec) = binding(
            json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cfg"},
            "requiredBy": [{"name": "web", "namespace": "default", "clusters": [{"name": "m1"}, {"name": "m2"}]}],
            "suspension": {"dispatchingOnClusters": {"clusterNames": ["m2"]}}}),
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": {"a": "1"}});
        let plan = plan_works(&b, &spec, &cm, &[] as &[Value], &SpecReplicas, &all_ready);
        assert_eq!(plan.apply.len(), 2);
        assert!(plan.apply[0]["spec"].get("suspendDispatching").is_none());
        assert_eq!(plan.apply[1]["spec"]["suspendDispatching"], true);
        assert_eq!(
            plan.apply[0]["spec"]["workload"]["manifests"][0]["data"]["a"],
            "1"
        );
    }

    #[test]
    fn work_names_are_stable_and_distinct_per_kind() {
        let a = work_name("Deployment", "default", "nginx");
        assert_eq!(a, work_name("Deployment", "default", "nginx"));
        assert_ne!(a, work_name("Service", "default", "nginx"));
        assert_ne!(a, work_name("Deployment", "other", "nginx"));
        assert!(a.starts_with("nginx-"));
        assert!(work_name("Deployment", "d", &"x".repeat(300)).len() <= 253);
    }
}
