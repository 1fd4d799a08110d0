//! What the binding controllers (scheduler, works, status) share: their keys (`rb|<ns>|<name>`
//! for ResourceBindings, `crb|<name>` for ClusterResourceBindings), reading a live binding, and
//! the Works a binding owns.

use crate::controllers::runtime::controller::{name_and_namespace, ReconcileError};
use crate::store::{Store, StoreError};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType};
use serde_json::Value;

/// A binding as a controller reads it.
pub struct LiveBinding {
    /// ResourceBinding or ClusterResourceBinding.
    pub rt: ResourceType,
    /// The stored object, shared with the store's cache: clone it to change it.
    pub object: std::sync::Arc<Value>,
}

/// The key of a binding object.
pub fn binding_key(binding: &Value) -> Option<String> {
    let (name, namespace) = name_and_namespace(binding)?;
    Some(match namespace {
        Some(ns) => format!("rb|{ns}|{name}"),
        None => format!("crb|{name}"),
    })
}

/// Reads the binding behind `key`; `None` when it is gone or being deleted (its Works are
/// owned by it and go with it).
pub async fn live_binding(
    store: &dyn Store,
    key: &str,
) -> Result<Option<LiveBinding>, ReconcileError> {
    let parts: Vec<&str> = key.split('|').collect();
    let (rt, ns, name) = match parts.as_slice() {
        ["rb", ns, name] => (well_known::resource_bindings(), Some(*ns), *name),
        ["crb", name] => (well_known::cluster_resource_bindings(), None, *name),
        _ => {
            return Err(ReconcileError::Other(format!(
                "unknown binding key {key:?}"
            )))
        }
    };
    match store.get_shared(&rt, ns, name).await {
        Ok(b) if b.lookup("/metadata/deletionTimestamp").is_some() => Ok(None),
        Ok(object) => Ok(Some(LiveBinding { rt, object })),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reads `object` again as the store holds it now (after a write of it met a conflict).
pub async fn reread(
    store: &dyn Store,
    rt: &ResourceType,
    object: &Value,
) -> Result<Value, StoreError> {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .filter(|s| !s.is_empty());
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    store.get(rt, ns, name).await
}

/// Decodes a binding's spec (or another part) by the API's rules (a struct must be an
/// object: serde_json alone would read `[1]` as a struct whose first field is 1).
///
/// What controllers decode was admitted by those rules already, so serde_json's own reading of
/// the value is tried first (it is several times cheaper); the API's decoder, which tracks the
/// path of every field to name the one at fault, runs only to explain a failure.
pub fn decode<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> Result<T, ReconcileError> {
    if v.is_object() {
        if let Ok(decoded) = <T as serde::Deserialize>::deserialize(v) {
            return Ok(decoded);
        }
    }
    flotilla_api::admission::decode(v).map_err(|e| ReconcileError::Decode {
        what: format!("binding {key}"),
        message: e.to_string(),
    })
}

/// Writes the placement of `spec` (`spec.clusters` and `spec.gracefulEvictionTasks`) into
/// `binding`: what an eviction, a failback or its undoing changes.
pub fn set_placement(binding: &mut Value, spec: &flotilla_api::binding::ResourceBindingSpec) {
    crate::controllers::shared::json_edit::set_path(
        binding,
        &["spec", "clusters"],
        serde_json::to_value(&spec.clusters).unwrap_or_default(),
    );
    crate::controllers::shared::json_edit::set_path(
        binding,
        &["spec", "gracefulEvictionTasks"],
        serde_json::to_value(&spec.graceful_eviction_tasks).unwrap_or_default(),
    );
}

/// A binding's status for a controller that only reads it: a missing or undecodable status
/// reads as empty (the scheduler, which owns it, rebuilds it and says so).
pub fn status_or_default(
    binding: &Value,
    key: &str,
) -> flotilla_api::binding::ResourceBindingStatus {
    binding
        .get("status")
        .filter(|s| !s.is_null())
        .and_then(|s| decode(s, key).ok())
        .unwrap_or_default()
}

/// The Works a binding owns, in every execution namespace (from the store's owner index).
pub async fn owned_works(
    store: &dyn Store,
    binding: &Value,
) -> Result<Vec<std::sync::Arc<Value>>, StoreError> {
    let uid = binding
        .lookup("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    if uid.is_empty() {
        return Ok(Vec::new());
    }
    store
        .list_dependents_shared(&well_known::works(), uid)
        .await
}
