//! The watch cache: every object of the fleet, decoded, as of one etcd revision. It owns the
//! objects (keyed by their etcd keys, in etcd's byte order, so a list by prefix is a range)
//! and the revision they are at; the [`super::mirror::Mirror`] fills it from the one etcd
//! watch it follows (a list at open and after a compaction, then each event) and moves the
//! revision only after the changes up to it are in. Each object carries its mod revision as
//! `metadata.resourceVersion`, as a read from etcd does (`commit::decode`).
//!
//! The cache says nothing about freshness: whoever reads it first waits until the mirror's
//! position reaches the revision the read needs (`EtcdStore`'s read modes).

use parking_lot::RwLock;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Stored objects by etcd key.
pub type Objects = BTreeMap<String, Arc<Value>>;

/// One change of an object: its etcd key and its new state (`None`: deleted).
pub type Change = (String, Option<Arc<Value>>);

/// A predicate over objects (the list's filter).
pub type Filter<'a> = Option<&'a (dyn Fn(&Value) -> bool + Send + Sync)>;

#[derive(Default)]
struct CacheState {
    objects: Objects,
    /// Every change up to this revision is in `objects`, none after it.
    revision: u64,
}

/// The decoded objects and their revision. See the module.
#[derive(Default)]
pub struct WatchCache {
    state: RwLock<CacheState>,
}

/// The first page of a list, read at one revision.
#[derive(Debug, Default)]
pub struct CachedPage {
    /// The objects, in key order.
    pub items: Vec<Arc<Value>>,
    /// The revision the page was read at.
    pub revision: u64,
    /// The etcd key of the last item when more keys follow it (the page was cut by its limit).
    pub more_after: Option<String>,
    /// The keys after `more_after` under the prefix, counted when there is no filter.
    pub remaining: Option<u64>,
}

impl WatchCache {
    /// Replaces every object with `objects`, as of `revision` (a list of the whole store).
    pub fn replace(&self, objects: Objects, revision: u64) {
        let mut state = self.state.write();
        state.objects = objects;
        state.revision = revision;
    }

    /// Applies the changes of the revisions up to `revision`, in order; the revision never
    /// goes back.
    pub fn apply(&self, changes: Vec<Change>, revision: u64) {
        let mut state = self.state.write();
        for (key, object) in changes {
            match object {
                Some(object) => {
                    state.objects.insert(key, object);
                }
                None => {
                    state.objects.remove(&key);
                }
            }
        }
        state.revision = state.revision.max(revision);
    }

    /// The revision the cache is at.
    #[cfg(test)]
    pub fn revision(&self) -> u64 {
        self.state.read().revision
    }

    /// The object at etcd key `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.state.read().objects.get(key).cloned()
    }

    /// The objects under `prefix` that `filter` accepts, at most `limit` of them, as etcd's
    /// paged list answers its first page: `more_after` is set when any key (matching or not)
    /// follows the last item, and `remaining` counts those keys when there is no filter.
    pub fn list(&self, prefix: &str, limit: Option<usize>, filter: Filter<'_>) -> CachedPage {
        let state = self.state.read();
        let mut page = CachedPage {
            revision: state.revision,
            ..CachedPage::default()
        };
        let mut last: Option<&str> = None;
        for (key, object) in under(&state.objects, prefix) {
            if limit.is_some_and(|l| page.items.len() >= l) {
                page.more_after = last.map(str::to_string);
                break;
            }
            last = Some(key);
            if filter.is_none_or(|f| f(object)) {
                page.items.push(object.clone());
            }
        }
        if let (Some(after), None) = (&page.more_after, filter) {
            let start = (Bound::Excluded(after.as_str()), Bound::Unbounded);
            let rest = state
                .objects
                .range::<str, _>(start)
                .take_while(|(k, _)| k.starts_with(prefix))
                .count();
            page.remaining = Some(u64::try_from(rest).unwrap_or(u64::MAX));
        }
        page
    }

    /// The objects at `keys` that exist, in the order given.
    pub fn get_many(&self, keys: &[String]) -> Vec<Arc<Value>> {
        let state = self.state.read();
        keys.iter()
            .filter_map(|key| state.objects.get(key).cloned())
            .collect()
    }
}

/// The objects whose key starts with `prefix`, in key order.
fn under<'a>(
    objects: &'a Objects,
    prefix: &'a str,
) -> impl Iterator<Item = (&'a str, &'a Arc<Value>)> + 'a {
    objects
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.as_str(), v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str, app: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": {"app": app}}}))
    }

    fn names(items: &[Arc<Value>]) -> Vec<&str> {
        items
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect()
    }

    fn filled() -> WatchCache {
        let cache = WatchCache::default();
        let objects: Objects = [
            ("/f/objects/core/configmaps/a/x", object("x", "web")),
            ("/f/objects/core/configmaps/b/p", object("p", "db")),
            ("/f/objects/core/configmaps/b/q", object("q", "web")),
            ("/f/objects/core/configmaps/b/r", object("r", "web")),
            ("/f/objects/core/configmaps/ba/s", object("s", "web")),
            ("/f/objects/core/secrets/b/t", object("t", "web")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        cache.replace(objects, 10);
        cache
    }

    #[test]
    fn puts_and_deletes_move_the_objects_and_never_the_revision_back() {
        let cache = filled();
        cache.apply(
            vec![
                ("/f/objects/core/configmaps/b/p".to_string(), None),
                (
                    "/f/objects/core/configmaps/b/q".to_string(),
                    Some(object("q2", "web")),
                ),
                (
                    "/f/objects/core/configmaps/c/new".to_string(),
                    Some(object("new", "web")),
                ),
            ],
            12,
        );
        assert_eq!(cache.revision(), 12);
        assert!(cache.get("/f/objects/core/configmaps/b/p").is_none());
        assert_eq!(
            cache
                .get("/f/objects/core/configmaps/b/q")
                .map(|o| o["metadata"]["name"].clone()),
            Some(json!("q2"))
        );
        assert!(cache.get("/f/objects/core/configmaps/c/new").is_some());
        cache.apply(Vec::new(), 11);
        assert_eq!(cache.revision(), 12, "the revision never goes back");
        // A relist replaces everything.
        cache.replace(Objects::new(), 20);
        assert_eq!(cache.revision(), 20);
        assert!(cache.get("/f/objects/core/configmaps/a/x").is_none());
    }

    #[test]
    fn lists_by_prefix_with_limits_and_filters_as_etcd_pages() {
        let cache = filled();
        let ns_b = "/f/objects/core/configmaps/b/";
        let all = cache.list(ns_b, None, None);
        assert_eq!(names(&all.items), ["p", "q", "r"], "ba/ is not b/");
        assert_eq!(
            (all.more_after, all.remaining, all.revision),
            (None, None, 10)
        );

        let first = cache.list(ns_b, Some(2), None);
        assert_eq!(names(&first.items), ["p", "q"]);
        assert_eq!(
            first.more_after.as_deref(),
            Some("/f/objects/core/configmaps/b/q")
        );
        assert_eq!(first.remaining, Some(1));

        let exact = cache.list(ns_b, Some(3), None);
        assert_eq!(names(&exact.items), ["p", "q", "r"]);
        assert_eq!(exact.more_after, None, "nothing follows the last item");

        let web = |o: &Value| o["metadata"]["labels"]["app"] == "web";
        let filtered = cache.list("/f/objects/core/configmaps/", Some(2), Some(&web));
        assert_eq!(names(&filtered.items), ["x", "q"]);
        assert_eq!(
            filtered.more_after.as_deref(),
            Some("/f/objects/core/configmaps/b/q")
        );
        assert_eq!(filtered.remaining, None, "not counted under a filter");

        let kind = cache.list("/f/objects/core/secrets/", None, None);
        assert_eq!(names(&kind.items), ["t"]);
        assert!(cache.list("/f/objects/apps/", None, None).items.is_empty());
    }
}
