//! What a resource path addresses: the [`Target`] (kind, namespace, name, subresource) a path
//! resolves to, and what a request body must agree with it. Every handler of a resource path
//! takes a `Target`; this module depends on none of them.

use super::authz::Place;
use super::error::{ApiError, ApiResult};
use super::path;
use crate::kinds::KindRegistry;
use crate::store::StoreError;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use serde_json::{json, Value};

/// What a resource path addresses.
#[derive(Clone, Debug)]
pub struct Target {
    /// The kind.
    pub rt: ResourceType,
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
        ApiError::from_store(e, &self.rt.group, &self.rt.plural)
    }
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
    let rt = match registry.lookup(group, version, plural) {
        Some(rt) => rt,
        None if !group.is_empty() && registry.lookup_group_plural(group, plural).is_none() => {
            // A free-form template of an undeclared kind.
            KindRegistry::adhoc(group, version, plural, namespace.is_some())
        }
        None => return Ok(None),
    };
    if namespace.is_some() && !rt.namespaced {
        return Ok(None);
    }
    Ok(Some(Target {
        rt,
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
    let rt = &target.rt;
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

/// Where a write to `target` goes, for [`super::authz::check_write`].
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
