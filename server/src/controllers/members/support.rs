//! What the members controllers share: reading a Cluster for a reconcile and writing its
//! taints back.

use crate::controllers::runtime::controller::ReconcileError;
use crate::store::{Store, StoreError};
use flotilla_api::cluster::{Cluster, Taint};
use flotilla_api::kinds::well_known;
use serde_json::Value;

/// Decodes the Cluster `key` as read from the store.
pub fn decode_cluster(raw: &Value, key: &str) -> Result<Cluster, ReconcileError> {
    serde_json::from_value(raw.clone()).map_err(|e| ReconcileError::Decode {
        what: format!("cluster {key}"),
        message: e.to_string(),
    })
}

/// Reads the Cluster `key` as stored and decoded; `None` when it is gone or being deleted
/// (there is nothing to do for it then).
pub async fn live_cluster(
    store: &dyn Store,
    key: &str,
) -> Result<Option<(Value, Cluster)>, ReconcileError> {
    let raw = match store.get(&well_known::clusters(), None, key).await {
        Ok(v) => v,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let cluster = decode_cluster(&raw, key)?;
    if cluster.metadata.is_deleting() {
        return Ok(None);
    }
    Ok(Some((raw, cluster)))
}

/// Writes `taints` as the `spec.taints` of the Cluster `raw` read. The write carries the
/// resourceVersion read: a concurrent write is a conflict and a retry.
pub async fn write_taints(
    store: &dyn Store,
    raw: &Value,
    taints: &[Taint],
) -> Result<(), ReconcileError> {
    let mut updated = raw.clone();
    updated["spec"]["taints"] = serde_json::to_value(taints)
        .map_err(|e| ReconcileError::Other(format!("encoding taints: {e}")))?;
    store.update(&well_known::clusters(), updated).await?;
    Ok(())
}

/// A taint as Events, logs and metrics name it: `key:effect`.
pub fn describe(t: &Taint) -> String {
    format!("{}:{}", t.key, t.effect)
}
