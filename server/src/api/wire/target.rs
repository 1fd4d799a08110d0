//! What a resource path addresses: the [`Target`] (kind, namespace, name, subresource) a path
//! resolves to, and what a request body must agree with it. Every handler of a resource path
//! takes a `Target`; this module depends on none of them.

use super::views::{self, View};
use crate::api::access::authz::Place;
use crate::api::error::{ApiError, ApiResult};
use crate::api::http::path;
use crate::kinds::KindRegistry;
use crate::store::{ObjectFilter, StoreError};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use serde_json::{json, Value};
use std::sync::Arc;

/// What a resource path addresses.
#[derive(Clone)]
pub struct Target {
    /// The kind as stored (for a view, the kind it is stored as).
    pub rt: ResourceType,
    /// The view the path addresses, when the kind is served as another's ([`views`]).
    pub view: Option<&'static View>,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource (`status`), if any.
    pub subresource: Option<String>,
}

impl Target {
    /// The kind's name for messages and list kinds (the plural for a free-form kind).
    pub fn kind_label(&self) -> String {
        if self.rt.kind.is_empty() {
            self.rt.plural.clone()
        } else {
            self.rt.kind.clone()
        }
    }

    /// A store error about this kind, as the API answers it.
    pub fn store_err(&self, e: StoreError) -> ApiError {
        let served = self.served();
        ApiError::from_store(e, &served.group, &served.plural)
    }

    /// The kind as the path addresses it (the view's, for a view).
    pub fn served(&self) -> ResourceType {
        match self.view {
            Some(view) => (view.served)(),
            None => self.rt.clone(),
        }
    }

    /// A stored object as the path's kind shows it (through the view, if any).
    pub fn to_served(&self, stored: &Value) -> Value {
        match self.view {
            Some(view) => (view.present)(stored),
            None => stored.clone(),
        }
    }

    /// An object written at the path, as it is stored (through the view, if any).
    pub fn to_stored(&self, served: Value) -> Value {
        match self.view {
            Some(view) => (view.store)(&served),
            None => served,
        }
    }

    /// The filter of a request's selectors, read against the object as the path's kind shows
    /// it (`regarding.name` of an events.k8s.io Event is the stored `involvedObject.name`).
    pub fn served_filter(&self, filter: Option<ObjectFilter>) -> Option<ObjectFilter> {
        match (self.view, filter) {
            (Some(view), Some(f)) => {
                let wrapped: ObjectFilter =
                    Arc::new(move |stored: &Value| f(&(view.present)(stored)));
                Some(wrapped)
            }
            (_, filter) => filter,
        }
    }

    /// Whether an answer must be rewritten from the stored object: a view, a computed field
    /// or metadata only. Otherwise the stored object is the answer, as it is.
    pub fn rewrites(&self, metadata: bool) -> bool {
        metadata
            || self.view.is_some()
            || (self.rt.group.is_empty() && self.rt.plural == "namespaces")
    }

    /// A stored object as an answer shows it: computed fields filled in, through the view,
    /// metadata only when asked.
    pub fn present(&self, stored: &Value, metadata: bool) -> Value {
        let mut obj = self.to_served(stored);
        views::decorate(&self.rt, &mut obj);
        if metadata {
            views::metadata_only(&obj)
        } else {
            obj
        }
    }

    /// Refuses (422) a create through a view that Kubernetes refuses; `stored` is the object
    /// as it will be stored.
    pub fn check_create(&self, stored: &Value) -> ApiResult<()> {
        match self.view {
            Some(view) => view.refuse(&name_of(stored), (view.create_causes)(stored)),
            None => Ok(()),
        }
    }

    /// Refuses (422) an update through a view that Kubernetes refuses (stored forms).
    pub fn check_update(&self, new: &Value, old: &Value) -> ApiResult<()> {
        match self.view {
            Some(view) => view.refuse(&name_of(new), (view.update_causes)(new, old)),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("rt", &self.rt)
            .field("view", &self.view.map(|v| (v.served)().api_version()))
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("subresource", &self.subresource)
            .finish()
    }
}

fn name_of(obj: &Value) -> String {
    obj.lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Maps the path segments after the group-version to a target. A name or namespace that no
/// object could have is a 400 here, so it never reaches a handler.
pub fn resolve(
    registry: &KindRegistry,
    group: &str,
    version: &str,
    tail: &[String],
) -> ApiResult<Option<Target>> {
    let is_sub = |s: &String| s == "status" || s == "finalize";
    let (namespace, rest): (Option<String>, &[String]) = match tail {
        [ns_word, ns, rest @ ..]
            if ns_word == "namespaces" && !rest.is_empty() && !is_sub(&rest[0]) =>
        {
            (Some(ns.clone()), rest)
        }
        other => (None, other),
    };
    let (plural, name, sub) = match rest {
        [p] => (p, None, None),
        [p, n] => (p, Some(n.clone()), None),
        [p, n, s] => (p, Some(n.clone()), Some(s.clone())),
        _ => return Ok(None),
    };
    if let Some(ns) = &namespace {
        path::check_namespace(ns)?;
    }
    if let Some(n) = &name {
        path::check_name(n)?;
    }
    let view = views::find(group, version, plural);
    let rt = match (view, registry.lookup(group, version, plural)) {
        (Some(view), _) => (view.stored)(),
        (None, Some(rt)) => rt,
        (None, None)
            if !group.is_empty() && registry.lookup_group_plural(group, plural).is_none() =>
        {
            // A free-form template of an undeclared kind.
            KindRegistry::adhoc(group, version, plural, namespace.is_some())
        }
        (None, None) => return Ok(None),
    };
    if namespace.is_some() && !rt.namespaced {
        return Ok(None);
    }
    Ok(Some(Target {
        rt,
        view,
        namespace,
        name,
        subresource: sub,
    }))
}

/// Fills in apiVersion/kind from the path and checks that the body belongs there.
pub fn check_identity(target: &Target, obj: &mut Value, name_from_path: bool) -> ApiResult<()> {
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
        ("/metadata/namespace", "metadata.namespace"),
    ] {
        // A value of the wrong type is refused, never replaced by the path's.
        if obj
            .lookup(pointer)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            return Err(ApiError::BadRequest(format!("{field}: must be a string")));
        }
    }
    let served = target.served();
    let rt = &served;
    let want_api = rt.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(want_api),
        Some(a) if a == want_api => {}
        Some(a) => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({a}) does not match the expected API version ({want_api})"
            )))
        }
    }
    match (obj.get("kind").and_then(Value::as_str), rt.kind.as_str()) {
        (None | Some(""), "") => {
            return Err(ApiError::BadRequest(
                "kind: Required value: the object must say its kind".into(),
            ))
        }
        (None | Some(""), k) => obj["kind"] = json!(k),
        (Some(got), want) if !want.is_empty() && got != want => {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({got}) does not match the expected kind ({want})"
            )))
        }
        _ => {}
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        if obj.get("metadata").is_some() {
            return Err(ApiError::BadRequest("metadata: must be an object".into()));
        }
        obj["metadata"] = json!({});
    }
    let meta_ns = obj
        .lookup("/metadata/namespace")
        .and_then(Value::as_str)
        .map(String::from);
    match (&target.namespace, meta_ns, rt.namespaced) {
        (Some(path_ns), Some(body_ns), _) if !body_ns.is_empty() && &body_ns != path_ns => {
            return Err(ApiError::BadRequest(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({path_ns})"
            )))
        }
        (Some(path_ns), _, _) => obj["metadata"]["namespace"] = json!(path_ns),
        (None, Some(body_ns), true) if !body_ns.is_empty() => {}
        (None, _, true) => {
            return Err(ApiError::BadRequest(
                "metadata.namespace: Required value: a namespaced object needs a namespace".into(),
            ))
        }
        (None, Some(ns), false) if !ns.is_empty() => {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
        _ => {}
    }
    if name_from_path {
        let path_name = target.name.as_deref().unwrap_or_default();
        match obj.lookup("/metadata/name").and_then(Value::as_str) {
            None | Some("") => obj["metadata"]["name"] = json!(path_name),
            Some(n) if n == path_name => {}
            Some(n) => {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({n}) does not match the name on the URL ({path_name})"
                )))
            }
        }
    }
    Ok(())
}

/// Where a write to `target` goes, for [`crate::api::access::authz::check_write`].
pub fn place(target: &Target) -> Place<'_> {
    Place {
        rt: &target.rt,
        namespace: target.namespace.as_deref(),
        subresource: target.subresource.as_deref(),
    }
}

/// For free-form kinds the kind comes from the body.
pub fn rt_with_kind(target: &Target, obj: &Value) -> ResourceType {
    let mut rt = target.rt.clone();
    if rt.kind.is_empty() {
        rt.kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
    }
    rt
}
