//! `GET /apis/flotilla.io/v1alpha1/failovers[/<name>]`: the fleet's recent failovers in one
//! call, read-only and computed on read from every ResourceBinding's and
//! ClusterResourceBinding's `status.failoverHistory` (flotilla_api::history) — nothing else is
//! stored. Newest first; `?limit=N` keeps the newest N (no continue token: the list is a
//! window, not a page). One object per history entry, named
//! `[<namespace>.]<binding>.<fromCluster>.<unix seconds of the eviction>`; `kubectl get
//! failovers` prints the binding, the clusters and the steps' times, `-o yaml` every field.
//! Any other verb answers 405 (the registry of computed kinds, [`super`], serves it).

use crate::api::error::{ApiError, ApiResult};
use crate::api::http::options::Params;
use crate::api::wire::table::{age_column, name_column, text, Column};
use crate::api::ApiState;
use flotilla_api::history::{recent, FailoverHistoryItem, FleetEntry};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::FLOTILLA_GROUP;
use serde_json::{json, Value};

/// The kind's plural.
pub const PLURAL: &str = "failovers";
/// The kind.
pub const KIND: &str = "Failover";

/// The entries of one binding's history.
pub fn entries_of(binding: &Value, binding_kind: &str) -> Vec<FleetEntry> {
    let history: Vec<FailoverHistoryItem> = binding
        .lookup("/status/failoverHistory")
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
    let bindings = super::every_binding(state, |e, _| {
        ApiError::from_store(e, FLOTILLA_GROUP, PLURAL)
    })
    .await?;
    let mut entries = Vec::new();
    for (kind, b) in &bindings {
        entries.extend(entries_of(b, kind));
    }
    Ok(recent(entries, limit).iter().map(object).collect())
}

/// The objects a get or list reads (the registry of computed kinds, [`super`],
/// answers with them): every entry for a get of `name`, the newest `?limit=N` for a list.
pub async fn read(state: &ApiState, name: Option<&str>, params: &Params) -> ApiResult<Vec<Value>> {
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
    objects(state, if name.is_some() { None } else { limit }).await
}

/// The columns of `kubectl get failovers`: the binding, the clusters left and chosen, why,
/// and when the new copy turned Healthy and how the old one went.
pub fn columns() -> Vec<Column> {
    fn join(o: &Value, pointer: &str) -> Value {
        let names: Vec<&str> = o
            .lookup(pointer)
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |v| v.iter().filter_map(Value::as_str).collect());
        json!(names.join(","))
    }
    let mut out = vec![name_column()];
    out.push(Column {
        name: "Binding",
        kind: "string",
        priority: 0,
        description: "The binding that failed over: kind and namespace/name.",
        cell: |o, _| {
            let b = &o["status"]["binding"];
            let ns = b["namespace"]
                .as_str()
                .map_or(String::new(), |n| format!("{n}/"));
            json!(format!(
                "{} {ns}{}",
                b["kind"].as_str().unwrap_or(""),
                b["name"].as_str().unwrap_or("")
            ))
        },
    });
    out.push(Column {
        name: "From",
        kind: "string",
        priority: 0,
        description: "The evicted cluster.",
        cell: |o, _| text(o, "/status/fromCluster"),
    });
    out.push(Column {
        name: "To",
        kind: "string",
        priority: 0,
        description: "The placement the scheduler chose after the eviction.",
        cell: |o, _| join(o, "/status/targetCluster"),
    });
    out.push(Column {
        name: "Reason",
        kind: "string",
        priority: 0,
        description: "Why the cluster was evicted (TaintUntolerated, ApplicationFailure).",
        cell: |o, _| text(o, "/status/evictionReason"),
    });
    out.push(Column {
        name: "Healthy",
        kind: "string",
        priority: 0,
        description: "When the new placement ran Healthy.",
        cell: |o, _| text(o, "/status/healthyTime"),
    });
    out.push(Column {
        name: "Old-Copy-Gone",
        kind: "string",
        priority: 0,
        description: "How the eviction task ended (and the old copy with it).",
        cell: |o, _| text(o, "/status/oldCopyGoneReason"),
    });
    out.push(age_column());
    out.push(Column {
        name: "Producer",
        kind: "string",
        priority: 1,
        description: "The controller that evicted.",
        cell: |o, _| text(o, "/status/producer"),
    });
    out.push(Column {
        name: "Message",
        kind: "string",
        priority: 1,
        description: "The eviction's message.",
        cell: |o, _| text(o, "/status/message"),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::wire::table;
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
        let t = table::render(&columns(), &[o], 0, None, now);
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
