//! The raw key-value engine under the store: named trees of ordered byte keys, point reads,
//! ordered scans, one atomic multi-tree write batch and an explicit durability barrier.
//!
//! The trait is deliberately narrow (the shape of garage's `db` crate): everything with
//! Kubernetes meaning (resourceVersion, events, owners) lives in [`super::kv_store`], so an
//! engine is a few hundred lines and both engines pass one shared test suite.
//! [`RawEngine`] adapts any engine to [`flotilla_migrations::RawStore`].

pub use super::super::engine_error::EngineError;
use flotilla_migrations::{MigrationError, RawStore};

/// One write of a [`WriteBatch`]: a value to put, or `None` to remove the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOp {
    /// The tree, created on first write.
    pub tree: String,
    /// The key.
    pub key: Vec<u8>,
    /// The new value; `None` removes the key.
    pub value: Option<Vec<u8>>,
}

/// Writes applied atomically together, in order, across any number of trees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// The writes, in order; a later write of the same key wins.
    pub ops: Vec<BatchOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(&mut self, tree: &str, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp {
            tree: tree.to_string(),
            key: key.into(),
            value: Some(value.into()),
        });
    }

    /// Adds a removal.
    pub fn remove(&mut self, tree: &str, key: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp {
            tree: tree.to_string(),
            key: key.into(),
            value: None,
        });
    }

    /// True when the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// Where an ordered scan starts and how far it goes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scan<'a> {
    /// Only keys starting with this.
    pub prefix: &'a [u8],
    /// Only keys strictly greater than this.
    pub start_after: Option<&'a [u8]>,
    /// At most this many entries.
    pub limit: Option<usize>,
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

impl Scan<'_> {
    /// The scan over a tree held in memory as an ordered map (the memory and log engines).
    pub fn over<V: AsRef<[u8]>>(
        &self,
        tree: &std::collections::BTreeMap<Vec<u8>, V>,
    ) -> Vec<Entry> {
        use std::ops::Bound;
        let lower = match self.start_after {
            Some(after) if after >= self.prefix => Bound::Excluded(after),
            _ => Bound::Included(self.prefix),
        };
        tree.range::<[u8], _>((lower, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(self.prefix))
            .take(self.limit.unwrap_or(usize::MAX))
            .map(|(k, v)| (k.clone(), v.as_ref().to_vec()))
            .collect()
    }

    /// How many keys of a tree held in memory lie within the scan's bounds (its limit
    /// ignored), without copying any.
    pub fn count_over<V>(&self, tree: &std::collections::BTreeMap<Vec<u8>, V>) -> u64 {
        use std::ops::Bound;
        let lower = match self.start_after {
            Some(after) if after >= self.prefix => Bound::Excluded(after),
            _ => Bound::Included(self.prefix),
        };
        let n = tree
            .range::<[u8], _>((lower, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(self.prefix))
            .count();
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// A raw key-value engine. Reads of a tree that does not exist see an empty tree and do not
/// create it; a tree exists once a batch wrote to it.
pub trait Engine: Send + Sync + 'static {
    /// A short name for logs (`sled`, `memory`).
    fn name(&self) -> &'static str;

    /// True when [`Engine::durable_flush`] does real work, i.e. data survives the process. An
    /// engine is taken as persistent unless it says otherwise (only the memory engine does), so
    /// one that forgets to say is flushed, never trusted to keep what it was not asked to.
    fn is_persistent(&self) -> bool {
        true
    }

    /// Names of every tree that exists, sorted.
    fn tree_names(&self) -> Result<Vec<String>, EngineError>;

    /// One value.
    fn get(&self, tree: &str, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;

    /// Entries in ascending key order within `scan`'s bounds.
    fn scan(&self, tree: &str, scan: Scan<'_>) -> Result<Vec<Entry>, EngineError>;

    /// Number of keys in a tree (O(n) on sled).
    fn len(&self, tree: &str) -> Result<u64, EngineError>;

    /// Number of keys within `scan`'s bounds, its limit ignored (a list's
    /// `remainingItemCount`). This default reads the entries page by page; the engines
    /// count without copying values.
    fn count(&self, tree: &str, scan: Scan<'_>) -> Result<u64, EngineError> {
        count_by_pages(self, tree, scan)
    }

    /// Applies every write of the batch atomically: after a crash, either all of them or none
    /// are there (once flushed). Not durable until [`Engine::durable_flush`] returns.
    fn apply(&self, batch: &WriteBatch) -> Result<(), EngineError>;

    /// Makes every applied batch durable (fsync).
    fn durable_flush(&self) -> Result<(), EngineError>;
}

/// [`Engine::count`] by scanning page after page (values read and dropped).
pub(crate) fn count_by_pages<E: Engine + ?Sized>(
    engine: &E,
    tree: &str,
    scan: Scan<'_>,
) -> Result<u64, EngineError> {
    const PAGE: usize = 1024;
    let mut after = scan.start_after.map(<[u8]>::to_vec);
    let mut n = 0u64;
    loop {
        let page = engine.scan(
            tree,
            Scan {
                prefix: scan.prefix,
                start_after: after.as_deref(),
                limit: Some(PAGE),
            },
        )?;
        n += page.len() as u64;
        match page.into_iter().last() {
            Some((key, _)) => after = Some(key),
            None => return Ok(n),
        }
    }
}

/// A [`RawStore`] view of an engine, for [`flotilla_migrations::run`]. Keys and tree names of
/// the store are UTF-8 by layout; anything else is reported as an engine error.
pub struct RawEngine<'a, E: Engine>(pub &'a E);

fn migration_error(err: EngineError) -> MigrationError {
    MigrationError::Engine(Box::new(err))
}

impl<E: Engine> RawStore for RawEngine<'_, E> {
    fn trees(&self) -> Result<Vec<String>, MigrationError> {
        self.0.tree_names().map_err(migration_error)
    }

    fn scan(&self, tree: &str) -> Result<Vec<(String, Vec<u8>)>, MigrationError> {
        let entries = self
            .0
            .scan(tree, Scan::default())
            .map_err(migration_error)?;
        entries
            .into_iter()
            .map(|(key, value)| match String::from_utf8(key) {
                Ok(key) => Ok((key, value)),
                Err(e) => Err(migration_error(EngineError::Corrupt {
                    tree: tree.to_string(),
                    key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                    message: "key is not UTF-8".to_string(),
                })),
            })
            .collect()
    }

    fn get(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, MigrationError> {
        self.0.get(tree, key.as_bytes()).map_err(migration_error)
    }

    fn put(&mut self, tree: &str, key: &str, value: Vec<u8>) -> Result<(), MigrationError> {
        let mut batch = WriteBatch::new();
        batch.put(tree, key.as_bytes(), value);
        self.0.apply(&batch).map_err(migration_error)
    }

    fn remove(&mut self, tree: &str, key: &str) -> Result<(), MigrationError> {
        let mut batch = WriteBatch::new();
        batch.remove(tree, key.as_bytes());
        self.0.apply(&batch).map_err(migration_error)
    }

    fn flush(&mut self) -> Result<(), MigrationError> {
        self.0.durable_flush().map_err(migration_error)
    }
}

/// The engine conformance suite: every engine must pass it (see the tests of
/// [`super::memory_engine`], [`super::sled_engine`] and [`super::log_engine`]).
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;

    fn put(e: &impl Engine, tree: &str, key: &str, value: &str) {
        let mut b = WriteBatch::new();
        b.put(tree, key, value);
        e.apply(&b).unwrap();
    }

    fn keys(entries: Vec<Entry>) -> Vec<String> {
        entries
            .into_iter()
            .map(|(k, _)| String::from_utf8(k).unwrap())
            .collect()
    }

    pub(crate) fn reads_of_missing_trees_are_empty(e: &impl Engine) {
        assert_eq!(e.get("nope", b"k").unwrap(), None);
        assert!(e.scan("nope", Scan::default()).unwrap().is_empty());
        assert_eq!(e.len("nope").unwrap(), 0);
        assert!(!e.tree_names().unwrap().contains(&"nope".to_string()));
    }

    pub(crate) fn scan_orders_and_bounds(e: &impl Engine) {
        for k in ["b/2", "a/1", "b/1", "c/1", "b/3"] {
            put(e, "t", k, k);
        }
        assert_eq!(
            keys(e.scan("t", Scan::default()).unwrap()),
            ["a/1", "b/1", "b/2", "b/3", "c/1"]
        );
        let b = Scan {
            prefix: b"b/",
            ..Scan::default()
        };
        assert_eq!(keys(e.scan("t", b).unwrap()), ["b/1", "b/2", "b/3"]);
        let after = Scan {
            prefix: b"b/",
            start_after: Some(b"b/1"),
            limit: Some(1),
        };
        assert_eq!(keys(e.scan("t", after).unwrap()), ["b/2"]);
        let before_prefix = Scan {
            prefix: b"b/",
            start_after: Some(b"a"),
            limit: None,
        };
        assert_eq!(keys(e.scan("t", before_prefix).unwrap()).len(), 3);
        assert_eq!(e.len("t").unwrap(), 5);
        assert_eq!(e.get("t", b"b/2").unwrap().as_deref(), Some(&b"b/2"[..]));
        // Counting sees what the scan would, whatever its limit; the paged default agrees.
        for (scan, want) in [
            (Scan::default(), 5),
            (b, 3),
            (after, 2),
            (before_prefix, 3),
            (
                Scan {
                    prefix: b"",
                    start_after: Some(b"b/3"),
                    limit: Some(1),
                },
                1,
            ),
        ] {
            assert_eq!(e.count("t", scan).unwrap(), want, "{scan:?}");
            assert_eq!(count_by_pages(e, "t", scan).unwrap(), want, "{scan:?}");
        }
        assert_eq!(e.count("nope", Scan::default()).unwrap(), 0);
    }

    pub(crate) fn batches_span_trees(e: &impl Engine) {
        let mut b = WriteBatch::new();
        b.put("x", "k1", "v1");
        b.put("y", "k2", "v2");
        b.put("x", "k3", "v3");
        b.remove("x", "k3");
        e.apply(&b).unwrap();
        assert_eq!(e.get("x", b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(e.get("y", b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(e.get("x", b"k3").unwrap(), None);
        let names = e.tree_names().unwrap();
        assert!(names.contains(&"x".to_string()) && names.contains(&"y".to_string()));
        e.durable_flush().unwrap();
    }

    pub(crate) fn raw_store_adapter(e: &impl Engine) {
        let mut raw = RawEngine(e);
        raw.put("meta", "schema_version", b"3".to_vec()).unwrap();
        assert_eq!(flotilla_migrations::schema_version(&raw).unwrap(), 3);
        raw.put("meta", "a", b"1".to_vec()).unwrap();
        raw.remove("meta", "a").unwrap();
        assert_eq!(
            raw.scan("meta").unwrap(),
            vec![("schema_version".to_string(), b"3".to_vec())]
        );
        assert!(raw.trees().unwrap().contains(&"meta".to_string()));
        raw.flush().unwrap();
    }

    /// Runs every conformance check on fresh engines made by `make`.
    pub(crate) fn run<E: Engine>(make: impl Fn() -> E) {
        reads_of_missing_trees_are_empty(&make());
        scan_orders_and_bounds(&make());
        batches_span_trees(&make());
        raw_store_adapter(&make());
    }
}
