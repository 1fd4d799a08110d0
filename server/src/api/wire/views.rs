//! What an answer shows of a stored object, besides the object itself:
//!
//! - **Views**: kinds served at a path of their own but stored as another kind, as
//!   kube-apiserver serves `events.k8s.io/v1` Events from the core/v1 Events it stores. A
//!   [`View`] names both kinds and the pure conversions between them; a request to the view
//!   reads and writes the stored kind, and every object crosses the conversion on its way in
//!   and out (bodies, answers, watch events), so one Event is seen through both APIs.
//! - **Computed fields**: a Namespace's `status.phase` (`Active`, or `Terminating` once it has a
//!   deletionTimestamp), as kube-apiserver's namespace registry writes it. Flotilla computes it
//!   on the way out instead of storing it.
//! - **Metadata only**: a client that asks for `PartialObjectMetadata` or
//!   `PartialObjectMetadataList` (kube-rs `list_metadata`, `metadata_watcher`, client-go's
//!   metadata client) gets the objects' metadata alone.
//!
//! Tables (`kubectl get`) are rendered from the stored form with its computed fields, so a view
//! shows the stored kind's columns.

use super::events_v1;
use crate::api::error::{ApiError, ApiResult, Cause};
use axum::http::{header, HeaderMap};
use flotilla_api::kinds::{well_known, ResourceType};
use serde_json::{json, Map, Value};

/// A kind served at `group/version/plural` and stored as another.
pub struct View {
    /// The served kind (in the kinds table, so discovery lists it).
    pub served: fn() -> ResourceType,
    /// The stored kind.
    pub stored: fn() -> ResourceType,
    /// A stored object as the view shows it.
    pub present: fn(&Value) -> Value,
    /// An object written through the view, as it is stored.
    pub store: fn(&Value) -> Value,
    /// What a create through the view may not hold (given the stored form).
    pub create_causes: fn(&Value) -> Vec<Cause>,
    /// What an update through the view may not do (the new and old stored forms).
    pub update_causes: fn(&Value, &Value) -> Vec<Cause>,
}

/// Every view.
pub static VIEWS: &[View] = &[View {
    served: well_known::events_v1,
    stored: well_known::events,
    present: events_v1::from_core,
    store: events_v1::to_core,
    create_causes: events_v1::create_causes,
    update_causes: events_v1::update_causes,
}];

/// The view served at `group/version/plural`, if any.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static View> {
    VIEWS.iter().find(|v| {
        let served = (v.served)();
        served.group == group && served.version == version && served.plural == plural
    })
}

impl View {
    /// A 422 for a write through the view that Kubernetes refuses (no causes: none).
    pub fn refuse(&self, name: &str, causes: Vec<Cause>) -> ApiResult<()> {
        if causes.is_empty() {
            return Ok(());
        }
        let served = (self.served)();
        Err(ApiError::invalid(&served.kind, &served.group, name, causes))
    }
}

/// Fills in what Flotilla computes instead of storing: a Namespace's phase.
pub fn decorate(rt: &ResourceType, obj: &mut Value) {
    if rt.group.is_empty() && rt.plural == "namespaces" {
        namespace_phase(obj);
    }
}

/// `status.phase` of a Namespace: `Terminating` while it is being deleted, else the stored
/// phase, else `Active`.
fn namespace_phase(obj: &mut Value) {
    let deleting = obj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let status = map
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let stored = status
        .get("phase")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let phase = match (deleting, stored) {
        (true, _) => "Terminating",
        (false, Some(p)) => p,
        (false, None) => "Active",
    }
    .to_string();
    status.insert("phase".into(), Value::String(phase));
}

/// Whether the client asked for metadata only: the first media type of its Accept header that
/// Flotilla can answer with names `as=PartialObjectMetadata` or `as=PartialObjectMetadataList`
/// of `meta.k8s.io`.
pub fn wants_metadata(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let media = params.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(
            media.as_str(),
            "application/json" | "application/yaml" | "*/*" | "application/*"
        ) {
            continue;
        }
        let params: Vec<&str> = params.collect();
        let partial = params.iter().any(|p| {
            matches!(
                *p,
                "as=PartialObjectMetadata" | "as=PartialObjectMetadataList"
            )
        });
        return partial && params.contains(&"g=meta.k8s.io");
    }
    false
}

/// An object as `PartialObjectMetadata`.
pub fn metadata_only(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_active_until_it_is_deleted() {
        let ns = |meta: Value, status: Option<Value>| {
            let mut o = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta});
            if let Some(s) = status {
                o["status"] = s;
            }
            decorate(&well_known_namespaces(), &mut o);
            o["status"]["phase"].as_str().unwrap_or("").to_string()
        };
        assert_eq!(ns(json!({"name": "a"}), None), "Active");
        assert_eq!(ns(json!({"name": "a"}), Some(json!("junk"))), "Active");
        assert_eq!(
            ns(
                json!({"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}),
                None
            ),
            "Terminating"
        );
        assert_eq!(
            ns(json!({"name": "a"}), Some(json!({"phase": "Terminating"}))),
            "Terminating"
        );
        // Other kinds are left alone.
        let mut cm = json!({"metadata": {"name": "c"}});
        decorate(&well_known::events(), &mut cm);
        assert!(cm.get("status").is_none());
    }

    fn well_known_namespaces() -> ResourceType {
        flotilla_api::kinds::builtin_by_plural("", "namespaces").unwrap()
    }

    #[test]
    fn metadata_is_asked_for_in_the_accept_header() {
        let table = [
            ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", true),
            ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", true),
            // client-go's metadata client: protobuf first, then JSON.
            (
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                true,
            ),
            ("application/json", false),
            ("application/json;as=Table;g=meta.k8s.io;v=v1", false),
            ("application/json;as=PartialObjectMetadata;g=example.io;v=v1", false),
            ("", false),
        ];
        for (accept, want) in table {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, accept.parse().unwrap());
            assert_eq!(wants_metadata(&headers), want, "{accept}");
        }
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "7"}, "data": {"k": "v"}});
        assert_eq!(
            metadata_only(&obj),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "c", "resourceVersion": "7"}})
        );
    }

    #[test]
    fn every_view_is_served_and_stored_as_known_kinds() {
        for view in VIEWS {
            let (served, stored) = ((view.served)(), (view.stored)());
            assert!(find(&served.group, &served.version, &served.plural).is_some());
            assert_ne!(served.api_version(), stored.api_version());
            assert_eq!(
                (served.namespaced, served.kind.as_str()),
                (stored.namespaced, stored.kind.as_str())
            );
        }
        assert!(find("", "v1", "events").is_none());
    }
}
