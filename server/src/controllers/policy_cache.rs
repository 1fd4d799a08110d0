//! The policies the detector matches templates against, decoded once per change instead of on
//! every template reconcile (an informer cache in small). It is filled by one list at first use
//! and then kept current by the detector's policy reconciles: each reads the changed policy
//! from the store and replaces (or drops) its entry here. A template reconcile therefore costs
//! the matching, not a list and decode of every policy in its namespace.
//!
//! Like Karmada's informers this view may trail the store by one reconcile: a template read
//! before its new policy's reconcile finds no policy, and that reconcile queues it again.

use super::policy_matching::{Candidate, PolicyScope};
use super::runtime::ReconcileError;
use crate::store::{ListOptions, Store, StoreError};
use flotilla_api::kinds::well_known;
use flotilla_api::meta::ObjectMeta;
use flotilla_api::policy::{PropagationSpec, CPP_PERMANENT_ID_LABEL, PP_PERMANENT_ID_LABEL};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::Mutex;

/// A policy entry before and after a refresh.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// What the cache held before.
    pub before: Option<Arc<Candidate>>,
    /// What it holds now (`None`: the policy is gone or being deleted).
    pub after: Option<Arc<Candidate>>,
}

#[derive(Default)]
struct Entries {
    loaded: bool,
    /// PropagationPolicies by namespace, then name.
    namespaced: HashMap<String, BTreeMap<String, Arc<Candidate>>>,
    /// ClusterPropagationPolicies by name.
    cluster: BTreeMap<String, Arc<Candidate>>,
}

/// The cache.
pub struct PolicyCache {
    store: Arc<dyn Store>,
    entries: Mutex<Entries>,
}

/// The parts of a PropagationPolicy or ClusterPropagationPolicy the matcher needs (both
/// kinds share them).
#[derive(serde::Deserialize)]
struct StoredPolicy {
    metadata: ObjectMeta,
    spec: PropagationSpec,
}

/// The candidate of a stored policy; `None` when it is being deleted.
fn candidate_of(scope: PolicyScope, raw: &Value) -> Result<Option<Candidate>, ReconcileError> {
    let (kind, id_label) = match scope {
        PolicyScope::Namespaced => ("PropagationPolicy", PP_PERMANENT_ID_LABEL),
        PolicyScope::Cluster => ("ClusterPropagationPolicy", CPP_PERMANENT_ID_LABEL),
    };
    let p: StoredPolicy =
        serde_json::from_value(raw.clone()).map_err(|e| ReconcileError::Decode {
            what: format!(
                "{kind} {}",
                raw.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ),
            message: e.to_string(),
        })?;
    if p.metadata.is_deleting() {
        return Ok(None);
    }
    let id = p
        .metadata
        .label(id_label)
        .unwrap_or(&p.metadata.uid)
        .to_string();
    let namespace = match scope {
        PolicyScope::Namespaced => p.metadata.namespace.as_str(),
        PolicyScope::Cluster => "",
    };
    Ok(Some(Candidate::new(
        scope,
        namespace,
        &p.metadata.name,
        &id,
        p.spec,
    )))
}

impl Entries {
    fn slot(&mut self, scope: PolicyScope, ns: &str) -> &mut BTreeMap<String, Arc<Candidate>> {
        match scope {
            PolicyScope::Namespaced => self.namespaced.entry(ns.to_string()).or_default(),
            PolicyScope::Cluster => &mut self.cluster,
        }
    }
}

impl PolicyCache {
    /// An empty cache over `store` (filled at first use).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            entries: Mutex::new(Entries::default()),
        }
    }

    async fn load(&self, entries: &mut Entries) -> Result<(), ReconcileError> {
        if entries.loaded {
            return Ok(());
        }
        let all = ListOptions::default();
        for (scope, rt) in [
            (PolicyScope::Namespaced, well_known::propagation_policies()),
            (
                PolicyScope::Cluster,
                well_known::cluster_propagation_policies(),
            ),
        ] {
            for raw in self.store.list(&rt, None, &all).await?.items {
                if let Some(c) = candidate_of(scope, &raw)? {
                    let ns = c.namespace.clone();
                    entries.slot(scope, &ns).insert(c.name.clone(), Arc::new(c));
                }
            }
        }
        entries.loaded = true;
        Ok(())
    }

    /// The policies that may select a template of `namespace`: that namespace's
    /// PropagationPolicies (none for cluster-scoped templates) and every
    /// ClusterPropagationPolicy.
    pub async fn candidates(&self, namespace: &str) -> Result<Vec<Arc<Candidate>>, ReconcileError> {
        let mut entries = self.entries.lock().await;
        self.load(&mut entries).await?;
        let mut out = Vec::new();
        if !namespace.is_empty() {
            if let Some(pps) = entries.namespaced.get(namespace) {
                out.extend(pps.values().cloned());
            }
        }
        out.extend(entries.cluster.values().cloned());
        Ok(out)
    }

    /// Reads one policy from the store again and records it (or its absence).
    pub async fn refresh(
        &self,
        scope: PolicyScope,
        ns: &str,
        name: &str,
    ) -> Result<Refreshed, ReconcileError> {
        let mut entries = self.entries.lock().await;
        self.load(&mut entries).await?;
        let (rt, namespace) = match scope {
            PolicyScope::Namespaced => (well_known::propagation_policies(), Some(ns)),
            PolicyScope::Cluster => (well_known::cluster_propagation_policies(), None),
        };
        let after = match self.store.get(&rt, namespace, name).await {
            Ok(raw) => candidate_of(scope, &raw)?.map(Arc::new),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let slot = entries.slot(scope, ns);
        let before = match &after {
            Some(c) => slot.insert(name.to_string(), c.clone()),
            None => slot.remove(name),
        };
        if scope == PolicyScope::Namespaced && slot.is_empty() {
            entries.namespaced.remove(ns);
        }
        Ok(Refreshed { before, after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DeleteOptions, KvStore, StoreConfig};
    use serde_json::json;

    fn pp(ns: &str, name: &str, kind: &str) -> Value {
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": kind}]}})
    }

    fn names(cands: &[Arc<Candidate>]) -> Vec<String> {
        cands
            .iter()
            .map(|c| format!("{}/{}", c.namespace, c.name))
            .collect()
    }

    #[tokio::test]
    async fn loads_once_then_follows_refreshes() {
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::default());
        let pps = well_known::propagation_policies();
        store
            .create(&pps, pp("a", "one", "Deployment"))
            .await
            .unwrap();
        store
            .create(
                &well_known::cluster_propagation_policies(),
                json!({"metadata": {"name": "everywhere"},
                       "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
            )
            .await
            .unwrap();
        let cache = PolicyCache::new(store.clone());
        assert_eq!(
            names(&cache.candidates("a").await.unwrap()),
            ["a/one", "/everywhere"]
        );
        assert_eq!(names(&cache.candidates("").await.unwrap()), ["/everywhere"]);

        // A new policy is seen once refreshed (the detector refreshes on its watch event).
        store
            .create(&pps, pp("a", "two", "StatefulSet"))
            .await
            .unwrap();
        assert_eq!(
            cache.candidates("a").await.unwrap().len(),
            2,
            "not yet refreshed"
        );
        let r = cache
            .refresh(PolicyScope::Namespaced, "a", "two")
            .await
            .unwrap();
        assert!(r.before.is_none());
        assert_eq!(r.after.as_ref().map(|c| c.name.as_str()), Some("two"));
        assert_eq!(
            names(&cache.candidates("a").await.unwrap()),
            ["a/one", "a/two", "/everywhere"]
        );

        // An update replaces the entry; the old one is handed back.
        let mut two = store.get(&pps, Some("a"), "two").await.unwrap();
        two["spec"]["resourceSelectors"][0]["kind"] = json!("DaemonSet");
        store.update(&pps, two).await.unwrap();
        let r = cache
            .refresh(PolicyScope::Namespaced, "a", "two")
            .await
            .unwrap();
        assert_eq!(
            r.before.unwrap().spec.resource_selectors[0].kind,
            "StatefulSet"
        );
        assert_eq!(
            r.after.unwrap().spec.resource_selectors[0].kind,
            "DaemonSet"
        );

        // A deleted policy leaves; its last entry is handed back.
        store
            .delete(&pps, Some("a"), "one", &DeleteOptions::default())
            .await
            .unwrap();
        let r = cache
            .refresh(PolicyScope::Namespaced, "a", "one")
            .await
            .unwrap();
        assert!(r.before.is_some() && r.after.is_none());
        assert_eq!(
            names(&cache.candidates("a").await.unwrap()),
            ["a/two", "/everywhere"]
        );
    }
}
