//! The resource detector: turns a resource template plus the policy that selects it into a
//! ResourceBinding (or a ClusterResourceBinding for cluster-scoped templates) named `<name>-<kind
//! lowercased>`, owned by the template and carrying its replicas, per-replica requests, and the
//! policy's placement, failover behaviour and propagateDeps. The template is marked with the
//! claiming policy (its permanent-id label, name and namespace annotations). Which policy wins is
//! [`crate::controllers::propagation::policy_matching`]'s decision. A policy change re-evaluates
//! the templates it selects; a template that no policy selects any more loses its claim and its
//! binding — unless other bindings still require it (`spec.requiredBy`, written by
//! [`crate::controllers::propagation::dependencies_distributor`]): then only the placement and
//! claim go and the binding stays as an attached binding. The detector never writes `requiredBy`. A
//! deleted template's binding (and so its works) goes by garbage collection. A replica rule that
//! fails (a Lua customization stopped by the sandbox) leaves the binding as it is, is reported on
//! the template (`ApplyPolicyFailed`) and retried with backoff.
//!
//! Templates of any kind are watched: a kind is watched from the moment a policy names it.

use crate::controllers::propagation::policy_cache::{PolicyCache, Refreshed};
use crate::controllers::propagation::policy_matching::{
    choose_policy, Candidate, PolicyScope, TemplateRef,
};
use crate::controllers::runtime::controller::{
    feed, generation_fingerprint, Action, ReconcileError, Reconciler, Source,
};
use crate::controllers::runtime::queue::WorkQueue;
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::events::{EventRecorder, EventType};
use crate::kinds::KindRegistry;
use crate::store::{DeleteOptions, ListOptions, Store, StoreError};
use async_trait::async_trait;
use flotilla_api::binding::ReplicaRequirements;
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType, WORK_GROUP};
use flotilla_api::policy::{
    ResourceSelector, APPLIED_PLACEMENT_ANNOTATION, CPP_PERMANENT_ID_LABEL, DEFAULT_SCHEDULER_NAME,
    PP_PERMANENT_ID_LABEL,
};
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::task::AbortHandle;

/// Annotation naming the claiming PropagationPolicy.
pub const PP_NAME_ANNOTATION: &str = "propagationpolicy.karmada.io/name";
/// Annotation naming the claiming PropagationPolicy's namespace.
pub const PP_NAMESPACE_ANNOTATION: &str = "propagationpolicy.karmada.io/namespace";
/// Annotation naming the claiming ClusterPropagationPolicy.
pub const CPP_NAME_ANNOTATION: &str = "clusterpropagationpolicy.karmada.io/name";

/// Namespaces whose objects are never propagated.
pub fn is_reserved_namespace(ns: &str) -> bool {
    ns == "karmada-system" || ns == "karmada-cluster" || ns.starts_with("karmada-es-")
}

/// The binding name of a template: `<name>-<kind lowercased>`, shortened with a hash when
/// that would be longer than a name may be (see [`flotilla_api::names::binding_name`]).
pub fn binding_name(name: &str, kind: &str) -> String {
    flotilla_api::names::binding_name(name, kind)
}

/// The detector's key of a template (what [`Detector`]'s `reconcile` is told).
pub fn template_key(rt: &ResourceType, namespace: &str, name: &str) -> String {
    format!(
        "t|{}|{}|{}|{}|{}|{namespace}|{name}",
        rt.group,
        rt.version,
        rt.plural,
        rt.kind,
        u8::from(rt.namespaced)
    )
}

fn parse_template_key(key: &str) -> Option<(ResourceType, String, String)> {
    let parts: Vec<&str> = key.split('|').collect();
    let ["t", group, version, plural, kind, namespaced, ns, name] = parts.as_slice() else {
        return None;
    };
    let rt = ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        plural: plural.to_string(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.to_string(),
        short_names: Vec::new(),
        namespaced: *namespaced == "1",
        status_subresource: true,
    };
    Some((rt, ns.to_string(), name.to_string()))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.lookup(pointer).and_then(Value::as_str).unwrap_or("")
}

/// An object's `metadata.labels` as label selectors read them (a non-string value as "").
pub fn labels_of(v: &Value) -> BTreeMap<String, String> {
    v.lookup("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A policy as Karmada's events name it: `namespace/name`, or `name` for a cluster policy.
fn policy_display(policy: &Candidate) -> String {
    if policy.namespace.is_empty() {
        policy.name.clone()
    } else {
        format!("{}/{}", policy.namespace, policy.name)
    }
}

/// The controller.
pub struct Detector {
    store: Arc<dyn Store>,
    clock: SharedClock,
    registry: Arc<KindRegistry>,
    interpreter: Arc<dyn TemplateInterpreter>,
    events: EventRecorder,
    queue: WorkQueue,
    /// The policies, decoded.
    policies: PolicyCache,
    /// Watched template kinds by storage name.
    feeds: Mutex<HashMap<String, (ResourceType, AbortHandle)>>,
}

impl Drop for Detector {
    fn drop(&mut self) {
        for (_, (_, h)) in self.feeds.lock().drain() {
            h.abort();
        }
    }
}

impl Detector {
    /// A detector queueing into `queue` (the queue it is spawned with).
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        registry: Arc<KindRegistry>,
        interpreter: Arc<dyn TemplateInterpreter>,
        events: EventRecorder,
        queue: WorkQueue,
    ) -> Self {
        Self {
            policies: PolicyCache::new(store.clone()),
            store,
            clock,
            registry,
            interpreter,
            events,
            queue,
            feeds: Mutex::new(HashMap::new()),
        }
    }

    /// The sources the detector starts with: both policy kinds.
    pub fn sources() -> Vec<Source> {
        vec![
            Source::mapped(well_known::propagation_policies(), |p| {
                vec![format!(
                    "pp|{}|{}",
                    str_at(p, "/metadata/namespace"),
                    str_at(p, "/metadata/name")
                )]
            }),
            Source::mapped(well_known::cluster_propagation_policies(), |p| {
                vec![format!("cpp|{}", str_at(p, "/metadata/name"))]
            }),
        ]
    }

    fn resolve(&self, api_version: &str, kind: &str) -> ResourceType {
        self.registry.resolve_kind(api_version, kind)
    }

    /// Starts watching a template kind (once).
    fn watch_kind(&self, rt: &ResourceType) {
        let mut feeds = self.feeds.lock();
        if feeds.contains_key(&rt.storage_name()) {
            return;
        }
        let keyed = rt.clone();
        let source = Source::mapped(rt.clone(), move |obj| {
            let ns = str_at(obj, "/metadata/namespace");
            if is_reserved_namespace(ns) {
                return Vec::new();
            }
            vec![template_key(&keyed, ns, str_at(obj, "/metadata/name"))]
        })
        .on_change_of(template_fingerprint);
        let task = tokio::spawn(feed(
            self.store.clone(),
            source,
            self.queue.clone(),
            "detector",
        ));
        feeds.insert(rt.storage_name(), (rt.clone(), task.abort_handle()));
    }

    /// Records the policy's change and queues every template it selected before or selects
    /// now (and starts watching their kinds). A selector that names its template queues that
    /// one key; others list the kind.
    async fn reconcile_policy(
        &self,
        scope: PolicyScope,
        ns: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let Refreshed {
            before,
            after,
            undecodable,
        } = self.policies.refresh(scope, ns, name).await?;
        if let Some((raw, error)) = undecodable {
            // Left out of the matching; the templates it claimed keep their bindings (see
            // reconcile_template) until it is fixed, which its watch event brings here again.
            tracing::warn!(namespace = ns, policy = name, %error, "policy cannot be decoded; matching goes on without it");
            self.events
                .record(
                    &raw,
                    EventType::Warning,
                    "InvalidPolicy",
                    &format!("The policy cannot be decoded and selects nothing until it is fixed: {error}"),
                )
                .await;
        }
        let selectors: Vec<&ResourceSelector> = before
            .iter()
            .chain(after.iter())
            .flat_map(|c| c.spec.resource_selectors.iter())
            .collect();
        let policy_ns = match scope {
            PolicyScope::Namespaced => Some(ns),
            PolicyScope::Cluster => None,
        };
        if selectors.is_empty() {
            // A policy deleted before the cache saw it: any watched kind may hold a template
            // it claimed.
            let kinds: Vec<ResourceType> = self
                .feeds
                .lock()
                .values()
                .map(|(rt, _)| rt.clone())
                .collect();
            for rt in kinds {
                let list_ns = if rt.namespaced { policy_ns } else { None };
                self.queue_all(&rt, list_ns).await?;
            }
            return Ok(Action::Done);
        }
        let mut listed = std::collections::HashSet::new();
        for s in selectors {
            let rt = self.resolve(&s.api_version, &s.kind);
            self.watch_kind(&rt);
            let sel_ns = match policy_ns {
                Some(ns) => Some(ns),
                None => Some(s.namespace.as_str()).filter(|n| !n.is_empty()),
            };
            let list_ns = if rt.namespaced { sel_ns } else { None };
            if !s.name.is_empty() && (!rt.namespaced || list_ns.is_some()) {
                let tns = list_ns.unwrap_or("");
                if !is_reserved_namespace(tns) {
                    self.queue.add(template_key(&rt, tns, &s.name));
                }
                continue;
            }
            if listed.insert((rt.storage_name(), list_ns.map(str::to_string))) {
                self.queue_all(&rt, list_ns).await?;
            }
        }
        Ok(Action::Done)
    }

    /// Queues every template of a kind (in one namespace, or all).
    async fn queue_all(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
    ) -> Result<(), ReconcileError> {
        let page = self
            .store
            .list(rt, namespace, &ListOptions::default())
            .await?;
        for t in page.items {
            let tns = str_at(&t, "/metadata/namespace");
            if !is_reserved_namespace(tns) {
                self.queue
                    .add(template_key(rt, tns, str_at(&t, "/metadata/name")));
            }
        }
        Ok(())
    }

    async fn reconcile_template(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        let namespace = (!ns.is_empty()).then_some(ns);
        let template = match self.store.get(rt, namespace, name).await {
            Ok(t) => t,
            // The binding is owned by the template: garbage collection removes it.
            Err(StoreError::NotFound { .. }) => return Ok(Action::Done),
            Err(e) => return Err(e.into()),
        };
        if template.lookup("/metadata/deletionTimestamp").is_some() {
            return Ok(Action::Done);
        }
        let labels = labels_of(&template);
        let claimed = labels
            .get(PP_PERMANENT_ID_LABEL)
            .or_else(|| labels.get(CPP_PERMANENT_ID_LABEL))
            .cloned();
        if let Some(id) = &claimed {
            if self.policies.holds_undecodable(id).await? {
                tracing::warn!(namespace = ns, template = name, policy_id = %id,
                    "the claiming policy cannot be decoded; template and binding left as they are");
                return Ok(Action::Done);
            }
        }
        let candidates = self.policies.candidates(ns, name).await?;
        let api_version = str_at(&template, "/apiVersion").to_string();
        let kind = str_at(&template, "/kind").to_string();
        let tref = TemplateRef {
            api_version: &api_version,
            kind: &kind,
            namespace: ns,
            name,
            labels: &labels,
        };
        let choice = choose_policy(&candidates, &tref, claimed.as_deref());
        let binding_rt = if rt.namespaced {
            well_known::resource_bindings()
        } else {
            well_known::cluster_resource_bindings()
        };
        let bname = binding_name(name, &kind);
        let Some(i) = choice else {
            self.set_claim(rt, &template, None).await?;
            match self.store.get(&binding_rt, namespace, &bname).await {
                Ok(b)
                    if owned_by(&b, str_at(&template, "/metadata/uid")) && has_required_by(&b) =>
                {
                    return self.keep_for_dependents(&binding_rt, &template, b).await;
                }
                Ok(b) if owned_by(&b, str_at(&template, "/metadata/uid")) => {
                    match self
                        .store
                        .delete(&binding_rt, namespace, &bname, &DeleteOptions::default())
                        .await
                    {
                        Ok(_) | Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                    tracing::info!(binding = %bname, "no policy selects the template any more; binding deleted");
                }
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::Done);
        };
        let policy: &Candidate = &candidates[i];
        let template = self.set_claim(rt, &template, Some(policy)).await?;
        // A failed replica rule leaves the binding as it is (zero replicas would scale the
        // members down), says why on the template, and is retried with backoff.
        let (replicas, requirements) = match self.interpreter.replicas(&template) {
            Ok(r) => r,
            Err(e) => {
                let message = format!(
                    "Apply policy({}) failed: {}",
                    policy_display(policy),
                    flotilla_support::error_chain(&e)
                );
                self.events
                    .record(&template, EventType::Warning, "ApplyPolicyFailed", &message)
                    .await;
                return Err(ReconcileError::Other(message));
            }
        };
        let desired = desired_binding(
            &template,
            rt,
            &binding_rt,
            &bname,
            policy,
            replicas,
            requirements,
        );
        self.ensure_binding(&binding_rt, namespace, &template, desired)
            .await
    }

    /// Writes (or removes) the claim labels and annotations; returns the template as stored.
    async fn set_claim(
        &self,
        rt: &ResourceType,
        template: &Value,
        policy: Option<&Candidate>,
    ) -> Result<Value, ReconcileError> {
        let mut updated = template.clone();
        let meta = updated["metadata"]
            .as_object_mut()
            .ok_or_else(|| ReconcileError::Other("template without metadata".into()))?;
        let mut labels = meta
            .get("labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut annotations = meta
            .get("annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for k in [PP_PERMANENT_ID_LABEL, CPP_PERMANENT_ID_LABEL] {
            labels.remove(k);
        }
        for k in [
            PP_NAME_ANNOTATION,
            PP_NAMESPACE_ANNOTATION,
            CPP_NAME_ANNOTATION,
        ] {
            annotations.remove(k);
        }
        if let Some(p) = policy {
            match p.scope {
                PolicyScope::Namespaced => {
                    labels.insert(PP_PERMANENT_ID_LABEL.into(), json!(p.permanent_id));
                    annotations.insert(PP_NAME_ANNOTATION.into(), json!(p.name));
                    annotations.insert(PP_NAMESPACE_ANNOTATION.into(), json!(p.namespace));
                }
                PolicyScope::Cluster => {
                    labels.insert(CPP_PERMANENT_ID_LABEL.into(), json!(p.permanent_id));
                    annotations.insert(CPP_NAME_ANNOTATION.into(), json!(p.name));
                }
            }
        }
        set_or_remove(meta, "labels", labels);
        set_or_remove(meta, "annotations", annotations);
        if &updated == template {
            return Ok(updated);
        }
        Ok(self.store.update(rt, updated).await?)
    }

    /// No policy selects the template, but other bindings still require it (it is one of their
    /// dependencies): the binding stays as an attached binding, without the policy's placement
    /// and claim, and so goes only where `spec.requiredBy` says.
    async fn keep_for_dependents(
        &self,
        rt: &ResourceType,
        template: &Value,
        binding: Value,
    ) -> Result<Action, ReconcileError> {
        let mut released = release_claim(&binding);
        if released == binding {
            return Ok(Action::Done);
        }
        let name = str_at(&binding, "/metadata/name").to_string();
        flotilla_api::admission::admit(
            WORK_GROUP,
            &rt.kind,
            &mut released,
            Some(&binding),
            &DefaultingConfig::default(),
            self.clock.now(),
        )
        .map_err(|e| ReconcileError::Other(format!("binding {name} is invalid: {e}")))?;
        self.store.update(rt, released).await?;
        tracing::info!(binding = %name, "no policy selects the template any more; binding kept for the bindings that require it");
        self.events
            .record(
                template,
                EventType::Normal,
                "PolicyClaimReleased",
                &format!(
                    "No policy selects the template any more; binding {name} keeps only the clusters of the bindings that depend on it (spec.requiredBy)"
                ),
            )
            .await;
        Ok(Action::Done)
    }

    async fn ensure_binding(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        template: &Value,
        desired: Value,
    ) -> Result<Action, ReconcileError> {
        let name = str_at(&desired, "/metadata/name").to_string();
        let now = self.clock.now();
        match self.store.get(rt, namespace, &name).await {
            Err(StoreError::NotFound { .. }) => {
                let mut obj = desired;
                obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                flotilla_api::admission::admit(
                    WORK_GROUP,
                    &rt.kind,
                    &mut obj,
                    None,
                    &DefaultingConfig::default(),
                    now,
                )
                .map_err(|e| ReconcileError::Other(format!("binding {name} is invalid: {e}")))?;
                self.store.create(rt, obj).await?;
                self.events
                    .record(
                        template,
                        EventType::Normal,
                        "ApplyPolicySucceed",
                        &format!("Apply policy succeed: binding {name} created"),
                    )
                    .await;
                Ok(Action::Done)
            }
            Ok(existing) => {
                let mut updated = existing.clone();
                merge_binding(&mut updated, &desired);
                if updated == existing {
                    return Ok(Action::Done);
                }
                flotilla_api::admission::admit(
                    WORK_GROUP,
                    &rt.kind,
                    &mut updated,
                    Some(&existing),
                    &DefaultingConfig::default(),
                    now,
                )
                .map_err(|e| ReconcileError::Other(format!("binding {name} is invalid: {e}")))?;
                self.store.update(rt, updated).await?;
                self.events
                    .record(
                        template,
                        EventType::Normal,
                        "ApplyPolicySucceed",
                        &format!("Apply policy succeed: binding {name} updated"),
                    )
                    .await;
                Ok(Action::Done)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// What of a template the detector reacts to: its spec (generation), labels (policies select
/// by them), annotations (they travel to members) and deletion; not the status that status
/// aggregation writes back, as Karmada's detector skips status-only updates.
fn template_fingerprint(obj: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    generation_fingerprint(obj).hash(&mut h);
    for part in ["/metadata/labels", "/metadata/annotations"] {
        if let Some(v) = obj.lookup(part) {
            v.to_string().hash(&mut h);
        }
    }
    h.finish()
}

fn set_or_remove(meta: &mut Map<String, Value>, key: &str, map: Map<String, Value>) {
    if map.is_empty() {
        meta.remove(key);
    } else {
        meta.insert(key.into(), Value::Object(map));
    }
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj.lookup("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

/// The binding a template and its policy call for (fields the detector owns only).
pub fn desired_binding(
    template: &Value,
    rt: &ResourceType,
    binding_rt: &ResourceType,
    name: &str,
    policy: &Candidate,
    replicas: i32,
    requirements: Option<ReplicaRequirements>,
) -> Value {
    let ns = str_at(template, "/metadata/namespace");
    let mut metadata = json!({
        "name": name,
        "ownerReferences": [{
            "apiVersion": str_at(template, "/apiVersion"),
            "kind": str_at(template, "/kind"),
            "name": str_at(template, "/metadata/name"),
            "uid": str_at(template, "/metadata/uid"),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    match policy.scope {
        PolicyScope::Namespaced => {
            metadata["labels"] = json!({PP_PERMANENT_ID_LABEL: policy.permanent_id});
            metadata["annotations"] =
                json!({PP_NAME_ANNOTATION: policy.name, PP_NAMESPACE_ANNOTATION: policy.namespace});
        }
        PolicyScope::Cluster => {
            metadata["labels"] = json!({CPP_PERMANENT_ID_LABEL: policy.permanent_id});
            metadata["annotations"] = json!({CPP_NAME_ANNOTATION: policy.name});
        }
    }
    if rt.namespaced {
        metadata["namespace"] = json!(ns);
    }
    let spec = &policy.spec;
    let mut resource = json!({
        "apiVersion": str_at(template, "/apiVersion"),
        "kind": str_at(template, "/kind"),
        "name": str_at(template, "/metadata/name"),
        "uid": str_at(template, "/metadata/uid"),
        "resourceVersion": str_at(template, "/metadata/resourceVersion"),
    });
    if !ns.is_empty() {
        resource["namespace"] = json!(ns);
    }
    let mut binding_spec = json!({
        "resource": resource,
        "propagateDeps": spec.propagate_deps.unwrap_or(false),
        "placement": spec.placement,
        "schedulerName": if spec.scheduler_name.is_empty() { DEFAULT_SCHEDULER_NAME } else { &spec.scheduler_name },
    });
    if replicas > 0 {
        binding_spec["replicas"] = json!(replicas);
    }
    if let Some(r) = requirements {
        binding_spec["replicaRequirements"] = json!(r);
    }
    if let Some(f) = &spec.failover {
        binding_spec["failover"] = json!(f);
    }
    if let Some(c) = &spec.conflict_resolution {
        binding_spec["conflictResolution"] = json!(c);
    }
    if let Some(s) = &spec.suspension {
        binding_spec["suspension"] = json!(s);
    }
    if let Some(p) = spec.preserve_resources_on_deletion {
        binding_spec["preserveResourcesOnDeletion"] = json!(p);
    }
    json!({
        "apiVersion": binding_rt.api_version(),
        "kind": binding_rt.kind,
        "metadata": metadata,
        "spec": binding_spec,
    })
}

/// The spec fields the detector owns; everything else (clusters, eviction tasks, requiredBy,
/// reschedule requests, status) belongs to other controllers and is kept.
const OWNED_SPEC_FIELDS: &[&str] = &[
    "resource",
    "propagateDeps",
    "placement",
    "schedulerName",
    "replicas",
    "replicaRequirements",
    "failover",
    "conflictResolution",
    "suspension",
    "preserveResourcesOnDeletion",
];

fn has_required_by(binding: &Value) -> bool {
    binding
        .lookup("/spec/requiredBy")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
}

/// The binding without what a policy gave it: the detector's spec fields (all but `resource`),
/// the scheduling result and what hangs on it (eviction tasks, reschedule request), and the
/// claim labels and annotations. `requiredBy`, the depended-by labels and the binding's own
/// permanent id stay: what is left is an attached binding.
pub fn release_claim(binding: &Value) -> Value {
    let mut out = binding.clone();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        for field in OWNED_SPEC_FIELDS
            .iter()
            .filter(|f| **f != "resource")
            .chain(&["clusters", "gracefulEvictionTasks", "rescheduleTriggeredAt"])
        {
            spec.remove(*field);
        }
    }
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for (part, keys) in [
            (
                "labels",
                &[PP_PERMANENT_ID_LABEL, CPP_PERMANENT_ID_LABEL][..],
            ),
            (
                "annotations",
                &[
                    PP_NAME_ANNOTATION,
                    PP_NAMESPACE_ANNOTATION,
                    CPP_NAME_ANNOTATION,
                    APPLIED_PLACEMENT_ANNOTATION,
                ][..],
            ),
        ] {
            let Some(map) = meta.get_mut(part).and_then(Value::as_object_mut) else {
                continue;
            };
            for k in keys {
                map.remove(*k);
            }
            if map.is_empty() {
                meta.remove(part);
            }
        }
    }
    out
}

fn merge_binding(existing: &mut Value, desired: &Value) {
    for field in OWNED_SPEC_FIELDS {
        match desired["spec"].get(*field) {
            Some(v) => existing["spec"][*field] = v.clone(),
            None => {
                if let Some(spec) = existing["spec"].as_object_mut() {
                    spec.remove(*field);
                }
            }
        }
    }
    for part in ["labels", "annotations"] {
        if let Some(want) = desired["metadata"][part].as_object() {
            for (k, v) in want {
                existing["metadata"][part][k] = v.clone();
            }
        }
    }
    existing["metadata"]["ownerReferences"] = desired["metadata"]["ownerReferences"].clone();
}

#[async_trait]
impl Reconciler for Detector {
    fn name(&self) -> &'static str {
        "detector"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let parts: Vec<&str> = key.split('|').collect();
        match parts.as_slice() {
            ["pp", ns, name] => {
                self.reconcile_policy(PolicyScope::Namespaced, ns, name)
                    .await
            }
            ["cpp", name] => self.reconcile_policy(PolicyScope::Cluster, "", name).await,
            _ => match parse_template_key(key) {
                Some((rt, ns, name)) => {
                    let rt = self
                        .registry
                        .by_kind(&rt.group, Some(&rt.version), &rt.kind)
                        .unwrap_or(rt);
                    self.reconcile_template(&rt, &ns, &name).await
                }
                None => Err(ReconcileError::Other(format!(
                    "unknown detector key {key:?}"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::{stored_events, SpecReplicas, TestWorld};
    use flotilla_api::kinds::builtin_by_plural;

    struct Fixture {
        world: TestWorld,
        store: Arc<dyn Store>,
        detector: Detector,
    }

    /// A detector on `world`, with the fake interpreter and a queue of its own.
    fn detector_on(world: &TestWorld) -> Detector {
        Detector::new(
            world.store.clone(),
            world.shared_clock.clone(),
            world.ctx.registry.clone(),
            Arc::new(SpecReplicas),
            world.events(),
            WorkQueue::default(),
        )
    }

    async fn fixture() -> Fixture {
        let world = TestWorld::new();
        let detector = detector_on(&world);
        Fixture {
            store: world.store.clone(),
            detector,
            world,
        }
    }

    async fn create(store: &Arc<dyn Store>, rt: &ResourceType, mut obj: Value) -> Value {
        obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        flotilla_api::admission::admit(
            &rt.group,
            &rt.kind,
            &mut obj,
            None,
            &DefaultingConfig::default(),
            chrono::Utc::now(),
        )
        .unwrap();
        store.create(rt, obj).await.unwrap()
    }

    fn policy(name: &str, clusters: &[&str], priority: i32) -> Value {
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"priority": priority,
                     "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                     "placement": {"clusterAffinity": {"clusterNames": clusters}}}})
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx", "namespace": "default"},
               "spec": {"replicas": 3}})
    }

    fn deploy_rt() -> ResourceType {
        builtin_by_plural("apps", "deployments").unwrap()
    }

    async fn binding(store: &Arc<dyn Store>) -> Option<Value> {
        crate::controllers::runtime::testing::nginx_binding(store).await
    }

    async fn invalid_policy_events(store: &Arc<dyn Store>) -> Vec<String> {
        stored_events(store)
            .await
            .iter()
            .filter(|e| e["reason"] == "InvalidPolicy")
            .filter_map(|e| e["involvedObject"]["name"].as_str().map(String::from))
            .collect()
    }

    #[tokio::test]
    async fn an_undecodable_policy_is_skipped_with_an_event_and_the_others_still_match() {
        let f = fixture().await;
        let pps = well_known::propagation_policies();
        create(&f.store, &deploy_rt(), deployment()).await;
        let mut web = deployment();
        web["metadata"]["name"] = json!("web");
        create(&f.store, &deploy_rt(), web).await;
        create(&f.store, &pps, policy("good", &["member1"], 0)).await;
        let mut for_web = policy("for-web", &["member2"], 0);
        for_web["spec"]["resourceSelectors"][0]["name"] = json!("web");
        create(&f.store, &pps, for_web).await;
        let web_key = template_key(&deploy_rt(), "default", "web");
        f.detector.reconcile(&web_key).await.unwrap();
        let web_binding = || async {
            f.store
                .get(
                    &well_known::resource_bindings(),
                    Some("default"),
                    "web-deployment",
                )
                .await
        };
        assert!(web_binding().await.is_ok(), "web is bound by for-web");

        // Stored around the API (older data, a bug): a higher-priority policy for every
        // Deployment with a null label value, and the policy that claimed web made undecodable.
        let mut broken = policy("broken", &["member3"], 10);
        broken["spec"]["resourceSelectors"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
            "labelSelector": {"matchLabels": {"a": null}}}]);
        f.store.create(&pps, broken).await.unwrap();
        let mut for_web = f.store.get(&pps, Some("default"), "for-web").await.unwrap();
        for_web["spec"]["placement"] = json!([1]);
        f.store.update(&pps, for_web).await.unwrap();

        // After a restart the cache loads around them and the good policy still binds nginx.
        let detector = detector_on(&f.world.restarted());
        let nginx_key = template_key(&deploy_rt(), "default", "nginx");
        assert_eq!(detector.reconcile(&nginx_key).await.unwrap(), Action::Done);
        let b = binding(&f.store)
            .await
            .expect("nginx bound by the good policy");
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member1"])
        );
        // web keeps its binding and claim while its policy cannot be read.
        assert_eq!(detector.reconcile(&web_key).await.unwrap(), Action::Done);
        assert!(web_binding().await.is_ok(), "web's binding is kept");

        // Each undecodable policy gets one warning Event per version, not one per resync.
        for key in [
            "pp|default|broken",
            "pp|default|for-web",
            "pp|default|broken",
        ] {
            assert_eq!(
                detector.reconcile(key).await.unwrap(),
                Action::Done,
                "{key}"
            );
        }
        let mut events = invalid_policy_events(&f.store).await;
        events.sort();
        assert_eq!(events, ["broken", "for-web"]);
        assert_eq!(detector.reconcile(&web_key).await.unwrap(), Action::Done);
        assert!(
            web_binding().await.is_ok(),
            "still kept after its policy's reconcile"
        );

        // Fixed, the policy is matched again.
        let mut fixed = f.store.get(&pps, Some("default"), "broken").await.unwrap();
        fixed["spec"]["resourceSelectors"][0]["labelSelector"] = json!({"matchLabels": {"a": "b"}});
        f.store.update(&pps, fixed).await.unwrap();
        detector.reconcile("pp|default|broken").await.unwrap();
        assert_eq!(
            invalid_policy_events(&f.store).await.len(),
            2,
            "no new event"
        );
    }

    #[tokio::test]
    async fn a_template_and_its_policy_make_a_binding_that_follows_them() {
        let f = fixture().await;
        let tpl = create(&f.store, &deploy_rt(), deployment()).await;
        let pp = create(
            &f.store,
            &well_known::propagation_policies(),
            policy("p", &["member1", "member2"], 0),
        )
        .await;
        assert_eq!(
            f.detector.reconcile("pp|default|p").await.unwrap(),
            Action::Done
        );
        assert_eq!(f.detector.queue.len(), 1, "the policy queued its template");
        let key = f.detector.queue.next().await.unwrap();
        f.detector.queue.done(&key);
        f.detector.reconcile(&key).await.unwrap();

        let b = binding(&f.store).await.expect("binding created");
        assert_eq!(b["spec"]["replicas"], 3);
        assert_eq!(b["spec"]["resource"]["name"], "nginx");
        assert_eq!(b["spec"]["resource"]["uid"], tpl["metadata"]["uid"]);
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member1", "member2"])
        );
        assert_eq!(
            b["metadata"]["ownerReferences"][0]["uid"],
            tpl["metadata"]["uid"]
        );
        assert!(b["metadata"]["labels"]["resourcebinding.karmada.io/permanent-id"].is_string());
        let claimed = f
            .store
            .get(&deploy_rt(), Some("default"), "nginx")
            .await
            .unwrap();
        assert_eq!(
            claimed["metadata"]["labels"][PP_PERMANENT_ID_LABEL],
            pp["metadata"]["labels"][PP_PERMANENT_ID_LABEL]
        );
        assert_eq!(claimed["metadata"]["annotations"][PP_NAME_ANNOTATION], "p");

        // The scheduler's result survives a policy change; the placement follows it.
        let mut scheduled = b.clone();
        scheduled["spec"]["clusters"] = json!([{"name": "member1", "replicas": 3}]);
        f.store
            .update(&well_known::resource_bindings(), scheduled)
            .await
            .unwrap();
        let mut changed = f
            .store
            .get(&well_known::propagation_policies(), Some("default"), "p")
            .await
            .unwrap();
        changed["spec"]["placement"]["clusterAffinity"]["clusterNames"] = json!(["member3"]);
        f.store
            .update(&well_known::propagation_policies(), changed)
            .await
            .unwrap();
        f.detector.reconcile("pp|default|p").await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store).await.unwrap();
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member3"])
        );
        assert_eq!(
            b["spec"]["clusters"],
            json!([{"name": "member1", "replicas": 3}])
        );
        // Replicas follow the template.
        let mut t = f
            .store
            .get(&deploy_rt(), Some("default"), "nginx")
            .await
            .unwrap();
        t["spec"]["replicas"] = json!(5);
        f.store.update(&deploy_rt(), t).await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        assert_eq!(binding(&f.store).await.unwrap()["spec"]["replicas"], 5);

        // Without a policy the claim and the binding go.
        f.store
            .delete(
                &well_known::propagation_policies(),
                Some("default"),
                "p",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        f.detector.reconcile("pp|default|p").await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        assert!(binding(&f.store).await.is_none());
        let t = f
            .store
            .get(&deploy_rt(), Some("default"), "nginx")
            .await
            .unwrap();
        assert!(
            t["metadata"]["labels"].get(PP_PERMANENT_ID_LABEL).is_none(),
            "{t}"
        );
    }

    #[tokio::test]
    async fn cluster_policies_apply_when_no_namespaced_one_does_and_claims_stick() {
        let f = fixture().await;
        create(&f.store, &deploy_rt(), deployment()).await;
        let mut cpp = policy("c", &["member9"], 0);
        cpp["kind"] = json!("ClusterPropagationPolicy");
        cpp["metadata"].as_object_mut().unwrap().remove("namespace");
        create(&f.store, &well_known::cluster_propagation_policies(), cpp).await;
        f.detector.reconcile("cpp|c").await.unwrap();
        let key = f.detector.queue.next().await.unwrap();
        f.detector.queue.done(&key);
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store).await.unwrap();
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member9"])
        );
        // A namespaced policy without preemption does not take a claimed template.
        create(
            &f.store,
            &well_known::propagation_policies(),
            policy("p", &["member1"], 10),
        )
        .await;
        f.detector.reconcile("pp|default|p").await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store).await.unwrap();
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member9"])
        );
        // With preemption it does.
        let mut p = f
            .store
            .get(&well_known::propagation_policies(), Some("default"), "p")
            .await
            .unwrap();
        p["spec"]["preemption"] = json!("Always");
        f.store
            .update(&well_known::propagation_policies(), p)
            .await
            .unwrap();
        f.detector.reconcile("pp|default|p").await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store).await.unwrap();
        assert_eq!(
            b["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["member1"])
        );
    }

    #[tokio::test]
    async fn deleting_the_template_collects_its_binding() {
        let f = fixture().await;
        create(&f.store, &deploy_rt(), deployment()).await;
        create(
            &f.store,
            &well_known::propagation_policies(),
            policy("p", &["m"], 0),
        )
        .await;
        f.detector.reconcile("pp|default|p").await.unwrap();
        let key = f.detector.queue.next().await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        assert!(binding(&f.store).await.is_some());
        f.store
            .delete(
                &deploy_rt(),
                Some("default"),
                "nginx",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        crate::testing::eventually(
            "the binding to be collected",
            std::time::Duration::from_secs(10),
            || async {
                match binding(&f.store).await {
                    None => Ok(()),
                    Some(b) => Err(format!("binding {b}")),
                }
            },
        )
        .await;
    }

    #[tokio::test]
    async fn a_binding_other_bindings_require_keeps_requiredby_and_outlives_its_policy() {
        let f = fixture().await;
        create(&f.store, &deploy_rt(), deployment()).await;
        create(
            &f.store,
            &well_known::propagation_policies(),
            policy("p", &["m1"], 0),
        )
        .await;
        f.detector.reconcile("pp|default|p").await.unwrap();
        let key = f.detector.queue.next().await.unwrap();
        f.detector.queue.done(&key);
        f.detector.reconcile(&key).await.unwrap();
        // The dependencies distributor adds a snapshot; the scheduler placed it.
        let mut b = binding(&f.store).await.unwrap();
        let depended_by = "resourcebinding.karmada.io/depended-by-0000abcd";
        b["spec"]["requiredBy"] = json!([{"namespace": "default", "name": "app-deployment", "clusters": [{"name": "m2"}]}]);
        b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 3}]);
        b["metadata"]["labels"][depended_by] = json!("app-id");
        b["metadata"]["annotations"][APPLIED_PLACEMENT_ANNOTATION] = json!("{}");
        f.store
            .update(&well_known::resource_bindings(), b)
            .await
            .unwrap();
        // A template change rewrites the detector's fields only.
        let mut t = f
            .store
            .get(&deploy_rt(), Some("default"), "nginx")
            .await
            .unwrap();
        t["spec"]["replicas"] = json!(4);
        f.store.update(&deploy_rt(), t).await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store).await.unwrap();
        assert_eq!(b["spec"]["replicas"], 4);
        assert_eq!(b["spec"]["requiredBy"][0]["name"], "app-deployment", "{b}");
        // No policy any more: the binding stays for its dependents, without placement or claim.
        f.store
            .delete(
                &well_known::propagation_policies(),
                Some("default"),
                "p",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        f.detector.reconcile("pp|default|p").await.unwrap();
        f.detector.reconcile(&key).await.unwrap();
        let b = binding(&f.store)
            .await
            .expect("kept for the bindings that require it");
        assert_eq!(b["spec"]["requiredBy"][0]["name"], "app-deployment");
        for gone in [
            "placement",
            "clusters",
            "propagateDeps",
            "replicas",
            "schedulerName",
        ] {
            assert!(b["spec"].get(gone).is_none(), "{gone}: {b}");
        }
        assert!(b["spec"]["resource"]["name"] == "nginx");
        let labels = &b["metadata"]["labels"];
        assert!(labels.get(PP_PERMANENT_ID_LABEL).is_none(), "{b}");
        assert_eq!(labels[depended_by], "app-id");
        assert!(labels["resourcebinding.karmada.io/permanent-id"].is_string());
        assert!(b["metadata"]
            .get("annotations")
            .and_then(|a| a.get(APPLIED_PLACEMENT_ANNOTATION))
            .is_none());
        // Converged: a second pass writes nothing.
        let rv = b["metadata"]["resourceVersion"].clone();
        f.detector.reconcile(&key).await.unwrap();
        assert_eq!(
            binding(&f.store).await.unwrap()["metadata"]["resourceVersion"],
            rv
        );
    }

    #[test]
    fn template_keys_round_trip_and_reserved_namespaces() {
        let rt = deploy_rt();
        let (back, ns, name) = parse_template_key(&template_key(&rt, "default", "web")).unwrap();
        assert_eq!(
            (
                back.group.as_str(),
                back.plural.as_str(),
                back.kind.as_str(),
                back.namespaced
            ),
            ("apps", "deployments", "Deployment", true)
        );
        assert_eq!((ns.as_str(), name.as_str()), ("default", "web"));
        assert!(parse_template_key("pp|a|b").is_none());
        for (ns, reserved) in [
            ("karmada-es-m1", true),
            ("karmada-system", true),
            ("karmada-cluster", true),
            ("default", false),
        ] {
            assert_eq!(is_reserved_namespace(ns), reserved, "{ns}");
        }
        assert_eq!(binding_name("nginx", "Deployment"), "nginx-deployment");
    }
}
