//! The policies the detector matches templates against, decoded once per change instead of on
//! every template reconcile (an informer cache in small). It is filled by one list at first use
//! and then kept current by the detector's policy reconciles: each reads the changed policy
//! from the store and replaces (or drops) its entry here. A template reconcile therefore costs
//! the matching, not a list and decode of every policy in its namespace.
//!
//! Like Karmada's informers this view may trail the store by one reconcile: a template read
//! before its new policy's reconcile finds no policy, and that reconcile queues it again.
//!
//! The policies of a scope are indexed by the template names their selectors name, so a
//! template is matched against the policies that name it plus those with a selector that
//! names nothing (by kind or labels), not against every policy of its namespace.
//!
//! A stored policy that cannot be decoded (older data, a bug) is left out of the matching and
//! remembered by its permanent id, so that one bad policy never fails the load (and with it
//! every template reconcile): [`PolicyCache::refresh`] reports it once per resourceVersion and
//! [`PolicyCache::holds_undecodable`] tells the detector to leave the templates it claimed as
//! they are until it is fixed.

use crate::controllers::propagation::policy_matching::{Candidate, PolicyScope};
use crate::controllers::runtime::controller::ReconcileError;
use crate::store::{ListOptions, Store, StoreError};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::ObjectMeta;
use flotilla_api::policy::{PropagationSpec, CPP_PERMANENT_ID_LABEL, PP_PERMANENT_ID_LABEL};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::Mutex;

/// A policy entry before and after a refresh.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// What the cache held before.
    pub before: Option<Arc<Candidate>>,
    /// What it holds now (`None`: the policy is gone, being deleted or undecodable).
    pub after: Option<Arc<Candidate>>,
    /// The stored policy and why it cannot be decoded, the first time this version is seen.
    pub undecodable: Option<(Value, String)>,
}

/// A stored policy that cannot be decoded.
#[derive(Debug)]
struct Undecodable {
    /// Its permanent id (from the raw label, or the uid).
    id: String,
    /// The resourceVersion last reported by [`PolicyCache::refresh`].
    reported_rv: Option<String>,
}

/// The policies of one scope (a namespace's PropagationPolicies, or every
/// ClusterPropagationPolicy) and their index by selected name.
#[derive(Default)]
struct Policies {
    /// By policy name.
    by_name: BTreeMap<String, Arc<Candidate>>,
    /// Template name → policies with a selector naming it.
    naming: HashMap<String, BTreeSet<String>>,
    /// Policies with a selector that names no template.
    unnamed: BTreeSet<String>,
}

impl Policies {
    fn insert(&mut self, c: Arc<Candidate>) -> Option<Arc<Candidate>> {
        let before = self.remove(&c.name);
        for s in &c.spec.resource_selectors {
            if s.name.is_empty() {
                self.unnamed.insert(c.name.clone());
            } else {
                self.naming
                    .entry(s.name.clone())
                    .or_default()
                    .insert(c.name.clone());
            }
        }
        self.by_name.insert(c.name.clone(), c);
        before
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Candidate>> {
        let before = self.by_name.remove(name)?;
        self.unnamed.remove(name);
        for s in &before.spec.resource_selectors {
            if let Some(set) = self.naming.get_mut(&s.name) {
                set.remove(name);
                if set.is_empty() {
                    self.naming.remove(&s.name);
                }
            }
        }
        Some(before)
    }

    /// The policies that may select a template named `template`.
    fn for_template(&self, template: &str, out: &mut Vec<Arc<Candidate>>) {
        let named = self.naming.get(template).into_iter().flatten();
        let names: BTreeSet<&String> = named.chain(self.unnamed.iter()).collect();
        out.extend(
            names
                .into_iter()
                .filter_map(|n| self.by_name.get(n).cloned()),
        );
    }
}

#[derive(Default)]
struct Entries {
    loaded: bool,
    /// PropagationPolicies by namespace.
    namespaced: HashMap<String, Policies>,
    /// ClusterPropagationPolicies.
    cluster: Policies,
    /// Policies that cannot be decoded, by `(scope, namespace, name)`.
    undecodable: BTreeMap<(PolicyScope, String, String), Undecodable>,
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

fn id_label(scope: PolicyScope) -> &'static str {
    match scope {
        PolicyScope::Namespaced => PP_PERMANENT_ID_LABEL,
        PolicyScope::Cluster => CPP_PERMANENT_ID_LABEL,
    }
}

fn str_at<'a>(raw: &'a Value, pointer: &str) -> &'a str {
    raw.lookup(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Where a raw policy is kept: `(scope, namespace, name)`.
fn slot_key(scope: PolicyScope, raw: &Value) -> (PolicyScope, String, String) {
    let ns = match scope {
        PolicyScope::Namespaced => str_at(raw, "/metadata/namespace"),
        PolicyScope::Cluster => "",
    };
    (
        scope,
        ns.to_string(),
        str_at(raw, "/metadata/name").to_string(),
    )
}

/// The permanent id of a policy that does not decode, read from its raw JSON.
fn raw_id(scope: PolicyScope, raw: &Value) -> String {
    raw.lookup("/metadata/labels")
        .and_then(|l| l.get(id_label(scope)))
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(raw, "/metadata/uid"))
        .to_string()
}

/// The candidate of a stored policy; `None` when it is being deleted; an error (the decode
/// error, naming the field) when it cannot be decoded by the API's rules.
fn candidate_of(scope: PolicyScope, raw: &Value) -> Result<Option<Candidate>, String> {
    let p: StoredPolicy = flotilla_api::admission::decode(raw).map_err(|e| e.to_string())?;
    if p.metadata.is_deleting() {
        return Ok(None);
    }
    let id = p
        .metadata
        .label(id_label(scope))
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
    fn slot(&mut self, scope: PolicyScope, ns: &str) -> &mut Policies {
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
                match candidate_of(scope, &raw) {
                    Ok(Some(c)) => {
                        let ns = c.namespace.clone();
                        entries.slot(scope, &ns).insert(Arc::new(c));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        let key = slot_key(scope, &raw);
                        tracing::warn!(kind = %rt.kind, namespace = %key.1, policy = %key.2, %error,
                            "stored policy cannot be decoded; matching goes on without it");
                        let id = raw_id(scope, &raw);
                        entries.undecodable.insert(
                            key,
                            Undecodable {
                                id,
                                reported_rv: None,
                            },
                        );
                    }
                }
            }
        }
        entries.loaded = true;
        Ok(())
    }

    /// The policies that may select the template `name` of `namespace`: those of that
    /// namespace's PropagationPolicies (none for cluster-scoped templates) and of the
    /// ClusterPropagationPolicies that name it or have a selector naming no template.
    pub async fn candidates(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<Arc<Candidate>>, ReconcileError> {
        let mut entries = self.entries.lock().await;
        self.load(&mut entries).await?;
        let mut out = Vec::new();
        if !namespace.is_empty() {
            if let Some(pps) = entries.namespaced.get(namespace) {
                pps.for_template(name, &mut out);
            }
        }
        entries.cluster.for_template(name, &mut out);
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
        let key = (scope, ns.to_string(), name.to_string());
        let mut undecodable = None;
        let after = match self.store.get(&rt, namespace, name).await {
            Ok(raw) => match candidate_of(scope, &raw) {
                Ok(c) => {
                    entries.undecodable.remove(&key);
                    c.map(Arc::new)
                }
                Err(error) => {
                    let rv = str_at(&raw, "/metadata/resourceVersion").to_string();
                    let id = raw_id(scope, &raw);
                    let entry = entries.undecodable.entry(key).or_insert(Undecodable {
                        id: String::new(),
                        reported_rv: None,
                    });
                    entry.id = id;
                    if entry.reported_rv.as_deref() != Some(rv.as_str()) {
                        entry.reported_rv = Some(rv);
                        undecodable = Some((raw, error));
                    }
                    None
                }
            },
            Err(StoreError::NotFound { .. }) => {
                entries.undecodable.remove(&key);
                None
            }
            Err(e) => return Err(e.into()),
        };
        let slot = entries.slot(scope, ns);
        let before = match &after {
            Some(c) => slot.insert(c.clone()),
            None => slot.remove(name),
        };
        if scope == PolicyScope::Namespaced && slot.by_name.is_empty() {
            entries.namespaced.remove(ns);
        }
        Ok(Refreshed {
            before,
            after,
            undecodable,
        })
    }

    /// True when the policy with permanent id `id` is stored but cannot be decoded: what it
    /// claimed is left as it is until it is fixed or deleted.
    pub async fn holds_undecodable(&self, id: &str) -> Result<bool, ReconcileError> {
        let mut entries = self.entries.lock().await;
        self.load(&mut entries).await?;
        Ok(entries.undecodable.values().any(|u| u.id == id))
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

    /// The candidates of template `template` in namespace `ns`, as `namespace/name`.
    async fn candidate_names(cache: &PolicyCache, ns: &str, template: &str) -> Vec<String> {
        cache
            .candidates(ns, template)
            .await
            .unwrap()
            .iter()
            .map(|c| format!("{}/{}", c.namespace, c.name))
            .collect()
    }

    /// Refreshes the cache's entry of PropagationPolicy `a/<name>`.
    async fn refresh_in_a(cache: &PolicyCache, name: &str) -> Refreshed {
        cache
            .refresh(PolicyScope::Namespaced, "a", name)
            .await
            .unwrap()
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
            candidate_names(&cache, "a", "web").await,
            ["a/one", "/everywhere"]
        );
        assert_eq!(candidate_names(&cache, "", "web").await, ["/everywhere"]);

        // A new policy is seen once refreshed (the detector refreshes on its watch event).
        store
            .create(&pps, pp("a", "two", "StatefulSet"))
            .await
            .unwrap();
        assert_eq!(
            cache.candidates("a", "web").await.unwrap().len(),
            2,
            "not yet refreshed"
        );
        let r = refresh_in_a(&cache, "two").await;
        assert!(r.before.is_none());
        assert_eq!(r.after.as_ref().map(|c| c.name.as_str()), Some("two"));
        assert_eq!(
            candidate_names(&cache, "a", "web").await,
            ["a/one", "a/two", "/everywhere"]
        );

        // An update replaces the entry; the old one is handed back.
        let mut two = store.get(&pps, Some("a"), "two").await.unwrap();
        two["spec"]["resourceSelectors"][0]["kind"] = json!("DaemonSet");
        store.update(&pps, two).await.unwrap();
        let r = refresh_in_a(&cache, "two").await;
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
        let r = refresh_in_a(&cache, "one").await;
        assert!(r.before.is_some() && r.after.is_none());
        assert_eq!(
            candidate_names(&cache, "a", "web").await,
            ["a/two", "/everywhere"]
        );
    }

    #[tokio::test]
    async fn a_template_meets_the_policies_naming_it_and_those_naming_none() {
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::default());
        let pps = well_known::propagation_policies();
        let naming = |name: &str, targets: &[&str]| {
            let selectors: Vec<Value> = targets
                .iter()
                .map(|t| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": t}))
                .collect();
            json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
                   "metadata": {"name": name, "namespace": "a"},
                   "spec": {"resourceSelectors": selectors}})
        };
        for p in [
            naming("for-web", &["web"]),
            naming("for-both", &["web", "db"]),
            pp("a", "all-deployments", "Deployment"),
        ] {
            store.create(&pps, p).await.unwrap();
        }
        let cache = PolicyCache::new(store.clone());
        let table = [
            ("web", vec!["a/all-deployments", "a/for-both", "a/for-web"]),
            ("db", vec!["a/all-deployments", "a/for-both"]),
            ("cache", vec!["a/all-deployments"]),
        ];
        for (template, want) in table {
            assert_eq!(
                candidate_names(&cache, "a", template).await,
                want,
                "{template}"
            );
        }

        // A policy that stops naming a template leaves its index entry.
        let mut both = store.get(&pps, Some("a"), "for-both").await.unwrap();
        both["spec"]["resourceSelectors"] =
            naming("x", &["db"])["spec"]["resourceSelectors"].clone();
        store.update(&pps, both).await.unwrap();
        refresh_in_a(&cache, "for-both").await;
        assert_eq!(
            candidate_names(&cache, "a", "web").await,
            ["a/all-deployments", "a/for-web"]
        );
        store
            .delete(
                &pps,
                Some("a"),
                "all-deployments",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        refresh_in_a(&cache, "all-deployments").await;
        assert_eq!(candidate_names(&cache, "a", "db").await, ["a/for-both"]);
        assert!(cache.candidates("a", "cache").await.unwrap().is_empty());
    }
}
