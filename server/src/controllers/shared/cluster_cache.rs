//! The member clusters as the scheduler and the binding controller read them on every
//! reconcile: decoded once per change of any Cluster (the store's per-kind revision says when),
//! with the scheduler's digest built beside them. Cluster objects are large (resource
//! summaries, API lists) and change every few seconds at most, while bindings are reconciled
//! hundreds of times a second; without this every reconcile listed and decoded them all.

use crate::scheduler::ClusterSnapshot;
use crate::store::{ListOptions, Store, StoreError};
use flotilla_api::cluster::Cluster;
use flotilla_api::kinds::well_known;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every cluster at one revision of the Cluster kind.
#[derive(Debug, Default)]
pub struct Clusters {
    /// The decoded clusters, by name.
    pub by_name: BTreeMap<String, Cluster>,
    /// The scheduler's digest of them.
    pub snapshot: ClusterSnapshot,
}

impl Clusters {
    /// Whether the named cluster is Ready (false when unknown).
    pub fn is_ready(&self, name: &str) -> bool {
        self.by_name.get(name).is_some_and(Cluster::is_ready)
    }

    /// Whether the named cluster is being deleted (false when unknown).
    pub fn is_deleting(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|c| c.metadata.is_deleting())
    }
}

/// Reads and digests every cluster now (the cache does this once per change; the explain
/// subresource, which runs rarely, every time).
pub async fn read(store: &dyn Store) -> Result<Clusters, StoreError> {
    let list = store
        .list(&well_known::clusters(), None, &ListOptions::default())
        .await?;
    let by_name: BTreeMap<String, Cluster> = list
        .items
        .into_iter()
        .filter_map(|c| serde_json::from_value::<Cluster>(c).ok())
        .map(|c| (c.metadata.name.clone(), c))
        .collect();
    let snapshot = ClusterSnapshot::new(by_name.values());
    Ok(Clusters { by_name, snapshot })
}

/// The cache.
pub struct ClusterCache {
    store: Arc<dyn Store>,
    current: Mutex<Option<(u64, Arc<Clusters>)>>,
}

impl ClusterCache {
    /// An empty cache over `store` (filled at first use).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            current: Mutex::new(None),
        }
    }

    /// The clusters as of now: the cached set unless a Cluster changed since it was read.
    pub async fn get(&self) -> Result<Arc<Clusters>, StoreError> {
        let revision = self.store.kind_revision(&well_known::clusters()).await?;
        if let Some((r, c)) = &*self.current.lock() {
            if *r == revision {
                return Ok(c.clone());
            }
        }
        // Read after the revision: the list holds at least that change.
        let clusters = Arc::new(read(self.store.as_ref()).await?);
        *self.current.lock() = Some((revision, clusters.clone()));
        Ok(clusters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{KvStore, StoreConfig};
    use serde_json::json;

    fn cluster(name: &str) -> serde_json::Value {
        json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
               "metadata": {"name": name}, "spec": {"syncMode": "Pull"}})
    }

    #[tokio::test]
    async fn reads_again_only_after_a_cluster_changed() {
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::default());
        let rt = well_known::clusters();
        store.create(&rt, cluster("m1")).await.unwrap();
        let cache = ClusterCache::new(store.clone());
        let first = cache.get().await.unwrap();
        assert_eq!(first.snapshot.len(), 1);
        assert!(!first.is_ready("m1"));
        let again = cache.get().await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "nothing changed: the same set");

        // Another kind's write leaves the cache alone; a Cluster write refreshes it.
        store
            .create(
                &well_known::propagation_policies(),
                json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {}}),
            )
            .await
            .unwrap();
        assert!(Arc::ptr_eq(&first, &cache.get().await.unwrap()));
        let mut m1 = store.get(&rt, None, "m1").await.unwrap();
        m1["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "ClusterReady", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        store.update_status(&rt, m1).await.unwrap();
        store.create(&rt, cluster("m2")).await.unwrap();
        let now = cache.get().await.unwrap();
        assert_eq!(now.snapshot.len(), 2);
        assert!(now.is_ready("m1") && !now.is_ready("m2"));
        store
            .delete(&rt, None, "m2", &Default::default())
            .await
            .unwrap();
        assert_eq!(cache.get().await.unwrap().snapshot.len(), 1);
    }
}
