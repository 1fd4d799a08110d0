//! Feeds the [`KindRegistry`] from the store: [`CrdFeed::start`] lists the stored
//! CustomResourceDefinitions (so a restarted server knows every one before it serves), then a
//! task follows their watch — Added and Modified register the CRD's kinds, Deleted (the real
//! deletion, not the deletionTimestamp of a delete waiting on finalizers) unregisters them —
//! and relists after the watch ends or expires. After each change it records the change's
//! resourceVersion, which is what the API's wait on a CRD write looks for.
//!
//! This is a plain store watch started by the app, not a controller of `app::CONTROLLERS`:
//! the API needs it even when the server runs without controllers, and it keeps a table
//! rather than reconciling keys.

use super::registry::{crd_name, KindRegistry};
use crate::store::{EventType, ListOptions, Store, StoreError, WatchEvent, WatchOptions};
use flotilla_api::kinds::well_known;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Pause before retrying a failed list or watch.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// The running feed; dropping or stopping it ends the task.
#[derive(Debug)]
pub struct CrdFeed {
    task: JoinHandle<()>,
}

impl CrdFeed {
    /// Lists the stored CRDs into a new registry, then starts following their watch.
    pub async fn start(store: Arc<dyn Store>) -> Result<(Arc<KindRegistry>, Self), StoreError> {
        let registry = Arc::new(KindRegistry::new());
        let crds = well_known::custom_resource_definitions();
        let page = store.list(&crds, None, &ListOptions::default()).await?;
        registry.replace_crds(&page.items, page.resource_version);
        tracing::debug!(
            crds = page.items.len(),
            revision = page.resource_version,
            "kind registry loaded"
        );
        let task = tokio::spawn(follow(store, registry.clone(), page.resource_version));
        Ok((registry, Self { task }))
    }

    /// Stops the feed and waits for its task to end.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for CrdFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Applies one watch event of a CRD to the registry.
pub fn apply(registry: &KindRegistry, event: &WatchEvent) {
    let name = crd_name(&event.object);
    match event.event_type {
        EventType::Added | EventType::Modified => {
            if let Err(e) = registry.register_crd(&event.object) {
                // Admission keeps such CRDs out; one stored by an older Flotilla serves nothing.
                registry.unregister_crd(&name);
                tracing::warn!(crd = %name, error = %e, "a stored CRD does not register");
            }
        }
        EventType::Deleted => {
            registry.unregister_crd(&name);
            tracing::debug!(crd = %name, "CRD deleted; its kinds are no longer served");
        }
    }
    registry.mark_applied(event.resource_version);
}

/// Watches from `from`, relisting whenever the watch fails, ends or expires. Runs until
/// aborted.
async fn follow(store: Arc<dyn Store>, registry: Arc<KindRegistry>, mut from: u64) {
    let crds = well_known::custom_resource_definitions();
    loop {
        let opts = WatchOptions {
            from: Some(from),
            ..WatchOptions::default()
        };
        match store.watch(&crds, opts).await {
            Ok(mut events) => {
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => apply(&registry, &event),
                        Err(e) => {
                            tracing::debug!(error = %e, "CRD watch ended; relisting");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "CRD watch failed; relisting");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
        loop {
            match store.list(&crds, None, &ListOptions::default()).await {
                Ok(page) => {
                    registry.replace_crds(&page.items, page.resource_version);
                    from = page.resource_version;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "CRD list failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DeleteOptions, Deleted, MemoryStore, StoreConfig};
    use serde_json::{json, Value};

    fn crd(plural: &str, finalizers: &[&str]) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.io"), "finalizers": finalizers},
            "spec": {
                "group": "example.io",
                "names": {"plural": plural, "kind": "Thing"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true}]
            }
        })
    }

    /// Waits until the registry has applied the store's last CRD change.
    async fn settled(store: &Arc<dyn Store>, registry: &KindRegistry) {
        let revision = store
            .kind_revision(&well_known::custom_resource_definitions())
            .await
            .unwrap();
        assert!(
            registry.caught_up(revision, Duration::from_secs(10)).await,
            "the registry did not apply revision {revision} within 10 s"
        );
    }

    fn serves(registry: &KindRegistry, plural: &str) -> bool {
        registry.serves("example.io", "v1", plural)
    }

    #[tokio::test]
    async fn the_feed_follows_the_store_through_finalizers_and_restarts() {
        let store: Arc<dyn Store> = MemoryStore::memory(StoreConfig::default());
        let crds = well_known::custom_resource_definitions();
        store.create(&crds, crd("early", &[])).await.unwrap();
        let (registry, feed) = CrdFeed::start(store.clone()).await.unwrap();
        assert!(serves(&registry, "early"), "a stored CRD is known at start");

        store
            .create(&crds, crd("gadgets", &["example.io/cleanup"]))
            .await
            .unwrap();
        settled(&store, &registry).await;
        assert!(serves(&registry, "gadgets"));

        let pending = store
            .delete(&crds, None, "gadgets.example.io", &DeleteOptions::default())
            .await
            .unwrap();
        let Deleted::Pending(mut obj) = pending else {
            panic!("a CRD with a finalizer waits: {pending:?}");
        };
        settled(&store, &registry).await;
        assert!(serves(&registry, "gadgets"), "served while terminating");

        obj["metadata"]["finalizers"] = json!([]);
        store.update(&crds, obj).await.unwrap();
        settled(&store, &registry).await;
        assert!(!serves(&registry, "gadgets"), "gone at the real deletion");

        store
            .delete(&crds, None, "early.example.io", &DeleteOptions::default())
            .await
            .unwrap();
        settled(&store, &registry).await;
        assert!(!serves(&registry, "early"));
        feed.stop().await;

        store.create(&crds, crd("late", &[])).await.unwrap();
        let (restarted, _feed) = CrdFeed::start(store.clone()).await.unwrap();
        assert!(serves(&restarted, "late"));
        assert!(!serves(&restarted, "gadgets") && !serves(&restarted, "early"));
    }
}
