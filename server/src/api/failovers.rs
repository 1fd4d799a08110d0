//! `GET /apis/flotilla.io/v1alpha1/failovers[/<name>]`: the fleet's recent failovers in one
//! call, read-only and computed on read from every ResourceBinding's and
//! ClusterResourceBinding's `status.failoverHistory` (flotilla_api::history) — nothing else is
//! stored. Newest first; `?limit=N` keeps the newest N (no continue token: the list is a
//! window, not a page). One object per history entry, named
//! `[<namespace>.]<binding>.<fromCluster>.<unix seconds of the eviction>`; `kubectl get
//! failovers` prints the binding, the clusters and the steps' times, `-o yaml` every field.
//! Any other verb answers 405.

use super::computed::ComputedKind;
use super::error::{ApiError, ApiResult};
use super::options::Params;
use super::target::Target;
use super::ApiState;
use crate::store::ListOptions;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use flotilla_api::history::{recent, FailoverHistoryItem, FleetEntry};
use flotilla_api::kinds::{well_known, ResourceType, FLOTILLA_GROUP};
use serde_json::{json, Value};

/// The kind's plural.
pub const PLURAL: &str = "failovers";
/// The kind.
pub const KIND: &str = "Failover";
/// What discovery says the kind allows.
pub const VERBS: &[&str] = &["get", "list"];

/// Whether `r` is this kind.
pub fn is_failovers(r: &ResourceType) -> bool {
    r.group == FLOTILLA_GROUP && r.plural == PLURAL
}

/// The entries of one binding's history.
pub fn entries_of(binding: &Value, binding_kind: &str) -> Vec<FleetEntry> {
    let history: Vec<FailoverHistoryItem> = binding
        .pointer("/status/failoverHistory")
        .cloned()
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default();
    let namespace = binding["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = binding["metadata"]["name"].as_str().unwrap_or_default();
    history
        .into_iter()
        .map(|item| FleetEntry {
            binding_kind: binding_kind.to_string(),
            namespace: namespace.to_string(),
            binding: name.to_string(),
            item,
        })
        .collect()
}

/// The object for one entry: the binding it belongs to and the entry's fields in `status`.
pub fn object(e: &FleetEntry) -> Value {
    let mut status = serde_json::to_value(&e.item).unwrap_or_else(|_| json!({}));
    let mut binding = json!({"kind": e.binding_kind, "name": e.binding});
    if !e.namespace.is_empty() {
        binding["namespace"] = json!(e.namespace);
    }
    status["binding"] = binding;
    let mut metadata = json!({"name": e.name()});
    if let Some(t) = &e.item.failover_time {
        metadata["creationTimestamp"] = json!(t);
    }
    json!({
        "apiVersion": format!("{FLOTILLA_GROUP}/v1alpha1"),
        "kind": KIND,
        "metadata": metadata,
        "status": status,
    })
}

/// Every binding's entries, newest first, at most `limit`.
pub async fn objects(state: &ApiState, limit: Option<usize>) -> ApiResult<Vec<Value>> {
    let mut entries = Vec::new();
    for (rt, kind) in [
        (well_known::resource_bindings(), "ResourceBinding"),
        (
            well_known::cluster_resource_bindings(),
            "ClusterResourceBinding",
        ),
    ] {
        let list = state
            .store
            .list(&rt, None, &ListOptions::default())
            .await
            .map_err(|e| ApiError::from_store(e, FLOTILLA_GROUP, PLURAL))?;
        for b in &list.items {
            entries.extend(entries_of(b, kind));
        }
    }
    Ok(recent(entries, limit).iter().map(object).collect())
}

/// The kind, as the computed kinds are served.
const COMPUTED: ComputedKind = ComputedKind {
    kind: KIND,
    plural: PLURAL,
    read_only_because: "are computed on read from the bindings' failover history",
};

/// Serves the kind: get and list (JSON, YAML or a kubectl Table); anything else is 405.
pub async fn serve(
    state: &ApiState,
    method: &Method,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    COMPUTED.check_read(method, target, params)?;
    let limit = match params.get("limit") {
        None => None,
        Some(l) => match l.parse::<usize>() {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(_) => {
                return Err(ApiError::BadRequest(format!(
                    "limit must be a whole number, not {l:?}"
                )))
            }
        },
    };
    // A get looks among every entry, a list keeps the newest `limit`.
    let name = target.name.as_deref();
    let items = objects(state, if name.is_some() { None } else { limit }).await?;
    COMPUTED.respond(name, items, headers, state.clock.now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::table;
    use chrono::{TimeZone, Utc};

    #[test]
    fn an_object_per_entry_names_its_binding_and_the_table_shows_the_steps() {
        let b = json!({"metadata": {"name": "nginx-deployment", "namespace": "default"},
            "status": {"failoverHistory": [{"reason": "ClusterFailover",
                "failoverTime": "2026-01-01T00:00:00Z", "fromCluster": "member1",
                "originalCluster": ["member1", "member2"], "targetCluster": ["member2", "member3"],
                "evictionReason": "TaintUntolerated", "producer": "TaintManager",
                "healthyTime": "2026-01-01T00:00:30Z", "oldCopyGoneTime": "2026-01-01T00:00:30Z",
                "oldCopyGoneReason": "EvictionTaskDoneHealthy"}]}});
        let entries = entries_of(&b, "ResourceBinding");
        assert_eq!(entries.len(), 1);
        let o = object(&entries[0]);
        assert_eq!(o["kind"], "Failover");
        assert_eq!(
            o["metadata"]["name"],
            "default.nginx-deployment.member1.1767225600"
        );
        assert_eq!(o["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(
            o["status"]["binding"],
            json!({"kind": "ResourceBinding", "namespace": "default", "name": "nginx-deployment"})
        );
        assert_eq!(o["status"]["oldCopyGoneReason"], "EvictionTaskDoneHealthy");
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 0).single().unwrap();
        let t = table::table(FLOTILLA_GROUP, KIND, &[o], 0, None, now);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Binding",
                "From",
                "To",
                "Reason",
                "Healthy",
                "Old-Copy-Gone",
                "Age",
                "Producer",
                "Message"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "default.nginx-deployment.member1.1767225600",
                "ResourceBinding default/nginx-deployment",
                "member1",
                "member2,member3",
                "TaintUntolerated",
                "2026-01-01T00:00:30Z",
                "EvictionTaskDoneHealthy",
                "60s",
                "TaintManager",
                ""
            ])
        );
        // A binding without history lists nothing.
        assert!(entries_of(&json!({"metadata": {"name": "x"}}), "ResourceBinding").is_empty());
    }
}
