//! The resource template a binding propagates, as an object an Event can be recorded on.
//! Karmada records some of a binding's Events on its template too (an `ObjectReference` built
//! from `spec.resource`): the scheduler's `ScheduleBindingSucceed`/`ScheduleBindingFailed`, the
//! binding controller's `SyncWorkFailed` and the evictions' `EvictWorkloadFromClusterSucceed`;
//! Flotilla's controllers that record those build the reference here, so that
//! `kubectl get events --field-selector involvedObject.name=<template>` shows them.
//! [`read_template`] reads that template from the store, for the controllers that fold it or
//! interpret it.

use crate::kinds::KindRegistry;
use crate::store::{Store, StoreError};
use flotilla_api::binding::ObjectReference;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use serde_json::Value;
use std::sync::Arc;

/// The resource template a binding propagates (its `spec.resource`: apiVersion, kind, name,
/// namespace and uid, as Karmada's `ObjectReference`), as an object an Event can be recorded
/// on. `None` when the binding names no template.
pub fn template_ref(binding: &Value) -> Option<Value> {
    let r = binding.lookup("/spec/resource")?;
    let field = |name: &str| r.get(name).and_then(Value::as_str).unwrap_or_default();
    if field("kind").is_empty() || field("name").is_empty() {
        return None;
    }
    let mut metadata = serde_json::Map::new();
    for name in ["name", "namespace", "uid"] {
        if !field(name).is_empty() {
            metadata.insert(name.into(), Value::from(field(name)));
        }
    }
    Some(serde_json::json!({
        "apiVersion": field("apiVersion"),
        "kind": field("kind"),
        "metadata": metadata,
    }))
}

/// Reads the resource template `r` names (a binding's `spec.resource`), shared: its resource
/// type, and the object, `None` when it does not exist.
pub async fn read_template(
    store: &dyn Store,
    registry: &KindRegistry,
    r: &ObjectReference,
) -> Result<(ResourceType, Option<Arc<Value>>), StoreError> {
    let rt = registry.resolve_kind(&r.api_version, &r.kind);
    let namespace = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
    match store.get_shared(&rt, namespace, &r.name).await {
        Ok(template) => Ok((rt, Some(template))),
        Err(StoreError::NotFound { .. }) => Ok((rt, None)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_template_of_a_binding_is_its_spec_resource() {
        // (what, spec.resource, the object the template's Events are recorded on)
        let cases = [
            (
                "namespaced, with uid",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default",
                       "name": "web", "uid": "u1", "resourceVersion": "7"}),
                Some(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web", "namespace": "default", "uid": "u1"}})),
            ),
            (
                "cluster-scoped, no uid",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "name": "reader"}),
                Some(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                            "metadata": {"name": "reader"}}),
                ),
            ),
            (
                "no name",
                json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                None,
            ),
            ("no kind", json!({"apiVersion": "v1", "name": "x"}), None),
        ];
        for (what, resource, want) in cases {
            let binding = json!({"spec": {"resource": resource}});
            assert_eq!(template_ref(&binding), want, "{what}");
        }
        assert_eq!(template_ref(&json!({"spec": {}})), None, "no spec.resource");
    }
}
