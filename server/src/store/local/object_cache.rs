//! The parsed-object cache: the objects the store read or wrote last, already decoded, so
//! that the controllers' many reads of one hot object (a binding, its Works with their
//! manifests) do not parse the same stored bytes again each time.
//!
//! Correctness rests on one rule: the writer ([`super::kv_store::KvStore::commit_locked`])
//! puts every object it writes (and drops every object it deletes) under the cache's lock,
//! after the engine has the batch and before the write is acknowledged. A reader that missed
//! may fill the cache with what it read from the engine only if no write touched the cache
//! since it looked ([`ObjectCache::fill`] compares a sequence number), so a reader can never
//! put back an object older than one a writer put or dropped. A hit is therefore never older
//! than the last acknowledged write of that object.
//!
//! The cache is bounded by the encoded size of what it holds; the oldest entries go first.

use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The default budget: encoded bytes of the objects held.
pub const DEFAULT_BUDGET: usize = 64 * 1024 * 1024;

#[derive(Debug)]
struct Entry {
    object: Arc<Value>,
    size: usize,
    /// Which put this entry came from, so an outdated slot in `order` is recognised.
    stamp: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Keys in the order they were put, with the stamp they were put with.
    order: VecDeque<(String, u64)>,
    bytes: usize,
    /// Bumped by every write (put or drop).
    seq: u64,
    stamps: u64,
}

/// Decoded objects by storage tree and key. See the module.
#[derive(Debug)]
pub struct ObjectCache {
    inner: Mutex<Inner>,
    budget: usize,
}

/// What a reader saw when it missed: hand it back to [`ObjectCache::fill`].
#[derive(Clone, Copy, Debug)]
pub struct Miss(u64);

fn slot(tree: &str, key: &str) -> String {
    let mut s = String::with_capacity(tree.len() + 1 + key.len());
    s.push_str(tree);
    s.push('\0');
    s.push_str(key);
    s
}

impl Default for ObjectCache {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

impl ObjectCache {
    /// A cache holding at most `budget` encoded bytes (0: holds nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            budget,
        }
    }

    /// The cached object, or a [`Miss`] to fill it with after reading the engine.
    pub fn get(&self, tree: &str, key: &str) -> Result<Arc<Value>, Miss> {
        let inner = self.inner.lock();
        match inner.map.get(&slot(tree, key)) {
            Some(e) => Ok(e.object.clone()),
            None => Err(Miss(inner.seq)),
        }
    }

    /// Fills a miss with what the engine held, unless a write came in between.
    pub fn fill(&self, miss: Miss, tree: &str, key: &str, object: Arc<Value>, size: usize) {
        let mut inner = self.inner.lock();
        if inner.seq != miss.0 {
            return;
        }
        self.insert(&mut inner, slot(tree, key), object, size);
    }

    /// A writer's put: `object` is what the store now holds under `tree`/`key`.
    pub fn put(&self, tree: &str, key: &str, object: Arc<Value>, size: usize) {
        let mut inner = self.inner.lock();
        inner.seq += 1;
        self.insert(&mut inner, slot(tree, key), object, size);
    }

    /// A writer's delete.
    pub fn drop_object(&self, tree: &str, key: &str) {
        let mut inner = self.inner.lock();
        inner.seq += 1;
        if let Some(old) = inner.map.remove(&slot(tree, key)) {
            inner.bytes -= old.size;
        }
    }

    fn insert(&self, inner: &mut Inner, slot: String, object: Arc<Value>, size: usize) {
        if size > self.budget {
            if let Some(old) = inner.map.remove(&slot) {
                inner.bytes -= old.size;
            }
            return;
        }
        inner.stamps += 1;
        let stamp = inner.stamps;
        if let Some(old) = inner.map.insert(
            slot.clone(),
            Entry {
                object,
                size,
                stamp,
            },
        ) {
            inner.bytes -= old.size;
        }
        inner.bytes += size;
        inner.order.push_back((slot, stamp));
        while inner.bytes > self.budget {
            let Some((oldest, stamp)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&oldest).is_some_and(|e| e.stamp == stamp) {
                if let Some(e) = inner.map.remove(&oldest) {
                    inner.bytes -= e.size;
                }
            }
        }
        // Outdated slots (objects put again since) pile up in `order`; compact now and then.
        if inner.order.len() > 2 * inner.map.len() + 1024 {
            let map = &inner.map;
            let kept: VecDeque<(String, u64)> = inner
                .order
                .drain(..)
                .filter(|(k, s)| map.get(k).is_some_and(|e| e.stamp == *s))
                .collect();
            inner.order = kept;
        }
    }

    /// Objects held and their encoded bytes.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.map.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(n: i64) -> Arc<Value> {
        Arc::new(json!({ "n": n }))
    }

    #[test]
    fn a_write_between_a_miss_and_its_fill_wins() {
        let cache = ObjectCache::new(1 << 20);
        let miss = cache.get("t", "a").unwrap_err();
        // A writer puts a newer object while the reader decodes the old bytes.
        cache.put("t", "a", obj(2), 10);
        cache.fill(miss, "t", "a", obj(1), 10);
        assert_eq!(*cache.get("t", "a").unwrap(), json!({"n": 2}));

        // A delete in between: the reader must not bring the object back.
        let miss = cache.get("t", "b").unwrap_err();
        cache.drop_object("t", "b");
        cache.fill(miss, "t", "b", obj(1), 10);
        assert!(cache.get("t", "b").is_err());

        // No write in between: the fill holds.
        let miss = cache.get("t", "c").unwrap_err();
        cache.fill(miss, "t", "c", obj(3), 10);
        assert_eq!(*cache.get("t", "c").unwrap(), json!({"n": 3}));
    }

    #[test]
    fn drop_forgets_and_trees_do_not_mix() {
        let cache = ObjectCache::new(1 << 20);
        cache.put("t", "a", obj(1), 10);
        cache.put("u", "a", obj(2), 10);
        cache.drop_object("t", "a");
        assert!(cache.get("t", "a").is_err());
        assert_eq!(*cache.get("u", "a").unwrap(), json!({"n": 2}));
        assert_eq!(cache.usage(), (1, 10));
    }

    #[test]
    fn the_budget_holds_and_the_oldest_go_first() {
        let cache = ObjectCache::new(100);
        for i in 0..10 {
            cache.put("t", &format!("k{i}"), obj(i), 30);
        }
        let (n, bytes) = cache.usage();
        assert!(bytes <= 100, "{bytes}");
        assert_eq!(n, 3);
        assert!(cache.get("t", "k9").is_ok());
        assert!(cache.get("t", "k0").is_err());
        // Putting one key again and again keeps one entry and compacts the order.
        for i in 0..5000 {
            cache.put("t", "hot", obj(i), 1);
        }
        assert_eq!(*cache.get("t", "hot").unwrap(), json!({"n": 4999}));
        assert!(cache.inner.lock().order.len() < 2 * 3 + 1024 + 2);
        // Too big to hold at all: not held, and an older copy goes.
        cache.put("t", "big", obj(0), 10);
        cache.put("t", "big", obj(1), 1000);
        assert!(cache.get("t", "big").is_err());
        assert_eq!(ObjectCache::new(0).usage(), (0, 0));
    }
}
