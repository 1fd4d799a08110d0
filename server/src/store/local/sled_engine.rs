//! The sled engine: one sled `Tree` per tree name, batches applied with multi-tree sled
//! transactions (atomic across trees, also after a crash), durability by `Db::flush`.
//!
//! Batches are applied late, many per transaction. sled 0.34 seals its log buffer for every
//! transaction (`pin_log`), and each seal wakes all of sled's I/O threads: one transaction per
//! store write cost a third of the server's CPU under load. So [`Engine::apply`] only queues
//! the batch and records its writes in an overlay that reads consult first; the queue goes to
//! sled in one transaction when the store makes its writes durable ([`Engine::durable_flush`],
//! once per group commit), before a scan, and when the engine is dropped. Nothing is lost by
//! the wait: a write is acknowledged only after the durable flush that applied it.
//!
//! sled 0.34 is kept behind [`Engine`] on purpose: it is embedded and simple, but its disk use
//! grows and its latency is uneven (garage left it for LMDB), so the store must be able to move
//! to another engine without touching Kubernetes semantics. `docs/store.md` has its figures.

use super::engine::{Engine, EngineError, Entry, Scan, WriteBatch};
use parking_lot::{Mutex, RwLock};
use sled::transaction::{TransactionError, TransactionalTree};
use sled::Transactional;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, Instant};

/// sled's own tree, which the store does not use.
const SLED_DEFAULT_TREE: &[u8] = b"__sled__default";

/// Options of [`SledEngine::open`].
#[derive(Clone, Debug, Default)]
pub struct SledOptions {
    /// sled's page cache size in bytes (sled's default, 1 GiB, when `None`).
    pub cache_capacity_bytes: Option<u64>,
}

/// A queued write: the number of the last batch that wrote the key, and its value (`None`:
/// removed).
type QueuedWrite = (u64, Option<Vec<u8>>);

/// Batches applied but not yet in sled, and their writes by tree and key.
#[derive(Default)]
struct Pending {
    /// In apply order.
    batches: Vec<WriteBatch>,
    /// Tree → key → its queued write.
    overlay: HashMap<String, HashMap<Vec<u8>, QueuedWrite>>,
    /// Batches queued so far (the number of the newest).
    seq: u64,
}

/// An engine over a sled database in a directory.
pub struct SledEngine {
    db: sled::Db,
    trees: RwLock<HashMap<String, sled::Tree>>,
    pending: Mutex<Pending>,
    /// Held while queued batches go to sled, so they arrive in order.
    draining: Mutex<()>,
}

impl std::fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledEngine").finish_non_exhaustive()
    }
}

fn sled_err(op: &'static str) -> impl FnOnce(sled::Error) -> EngineError {
    move |source| EngineError::Sled { op, source }
}

/// How long [`SledEngine::open`] waits for the database's file lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Opens the database, waiting up to [`LOCK_WAIT`] for its file lock.
///
/// sled locks its file while any of its handles lives, and its I/O threads let go of theirs a
/// moment after the last `Db` is dropped. A store closed and opened again in one process (a
/// server restarted in place, as the tests do) would otherwise fail at random with "could not
/// acquire lock"; sled's own tests block on the lock for the same reason. Another process that
/// keeps the store open still gets the error, after the wait.
fn open_waiting_for_the_lock(config: &sled::Config) -> Result<sled::Db, EngineError> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match config.open() {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other.map_err(sled_err("open the database")),
        }
    }
}

impl SledEngine {
    /// Opens (or creates) the database in `path`, waiting a moment for its file lock if a
    /// closing handle still holds it.
    pub fn open(path: &Path, options: &SledOptions) -> Result<Self, EngineError> {
        std::fs::create_dir_all(path).map_err(|source| EngineError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = sled::Config::new().path(path);
        if let Some(bytes) = options.cache_capacity_bytes {
            config = config.cache_capacity(bytes);
        }
        let db = open_waiting_for_the_lock(&config)?;
        Ok(Self {
            db,
            trees: RwLock::new(HashMap::new()),
            pending: Mutex::new(Pending::default()),
            draining: Mutex::new(()),
        })
    }

    /// Bytes the database takes on disk.
    pub fn size_on_disk(&self) -> Result<u64, EngineError> {
        self.db.size_on_disk().map_err(sled_err("measure its size"))
    }

    /// The tree if it exists; never creates one.
    fn existing(&self, name: &str) -> Result<Option<sled::Tree>, EngineError> {
        if let Some(tree) = self.trees.read().get(name) {
            return Ok(Some(tree.clone()));
        }
        if !self.db.tree_names().iter().any(|n| n == name.as_bytes()) {
            return Ok(None);
        }
        self.open_tree(name).map(Some)
    }

    /// Applies every queued batch to sled in one transaction, then drops their overlay
    /// entries (readers find a value in the overlay or in sled throughout).
    fn drain(&self) -> Result<(), EngineError> {
        let _order = self.draining.lock();
        let (batches, upto) = {
            let mut p = self.pending.lock();
            (std::mem::take(&mut p.batches), p.seq)
        };
        if batches.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.apply_now(&batches) {
            // Queue them again in front, for the next drain.
            let mut p = self.pending.lock();
            let newer = std::mem::replace(&mut p.batches, batches);
            p.batches.extend(newer);
            return Err(e);
        }
        let mut p = self.pending.lock();
        p.overlay.retain(|_, keys| {
            keys.retain(|_, (seq, _)| *seq > upto);
            !keys.is_empty()
        });
        Ok(())
    }

    /// Writes batches to sled in one multi-tree transaction, in order.
    fn apply_now(&self, batches: &[WriteBatch]) -> Result<(), EngineError> {
        let ops = || batches.iter().flat_map(|b| b.ops.iter());
        // The distinct trees of the batches, and each op's index among them.
        let mut names: Vec<&str> = Vec::new();
        let mut slots = Vec::new();
        for op in ops() {
            let slot = match names.iter().position(|n| *n == op.tree) {
                Some(i) => i,
                None => {
                    names.push(&op.tree);
                    names.len() - 1
                }
            };
            slots.push(slot);
        }
        let trees = names
            .iter()
            .map(|n| self.open_tree(n))
            .collect::<Result<Vec<_>, _>>()?;
        let result = trees
            .as_slice()
            .transaction(|txs: &Vec<TransactionalTree>| {
                for (op, slot) in ops().zip(&slots) {
                    let tx = &txs[*slot];
                    match &op.value {
                        Some(value) => {
                            tx.insert(op.key.as_slice(), value.as_slice())?;
                        }
                        None => {
                            tx.remove(op.key.as_slice())?;
                        }
                    }
                }
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            });
        match result {
            Ok(()) => Ok(()),
            Err(TransactionError::Storage(source)) => Err(EngineError::Sled {
                op: "apply a batch",
                source,
            }),
            // The closure never aborts.
            Err(TransactionError::Abort(())) => Err(EngineError::Sled {
                op: "apply a batch",
                source: sled::Error::Unsupported("transaction aborted".to_string()),
            }),
        }
    }

    /// The tree, created if needed.
    fn open_tree(&self, name: &str) -> Result<sled::Tree, EngineError> {
        if let Some(tree) = self.trees.read().get(name) {
            return Ok(tree.clone());
        }
        let tree = self.db.open_tree(name).map_err(sled_err("open a tree"))?;
        self.trees.write().insert(name.to_string(), tree.clone());
        Ok(tree)
    }
}

impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn tree_names(&self) -> Result<Vec<String>, EngineError> {
        self.drain()?;
        let mut names: Vec<String> = self
            .db
            .tree_names()
            .into_iter()
            .filter(|n| n != SLED_DEFAULT_TREE)
            .map(|n| String::from_utf8_lossy(&n).into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    fn get(&self, tree: &str, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        if let Some((_, value)) = self
            .pending
            .lock()
            .overlay
            .get(tree)
            .and_then(|k| k.get(key))
        {
            return Ok(value.clone());
        }
        let Some(t) = self.existing(tree)? else {
            return Ok(None);
        };
        Ok(t.get(key).map_err(sled_err("read"))?.map(|v| v.to_vec()))
    }

    fn scan(&self, tree: &str, scan: Scan<'_>) -> Result<Vec<Entry>, EngineError> {
        self.drain()?;
        let Some(t) = self.existing(tree)? else {
            return Ok(Vec::new());
        };
        let lower = match scan.start_after {
            Some(after) if after >= scan.prefix => Bound::Excluded(after.to_vec()),
            _ => Bound::Included(scan.prefix.to_vec()),
        };
        let mut out = Vec::new();
        let limit = scan.limit.unwrap_or(usize::MAX);
        for item in t.range::<Vec<u8>, _>((lower, Bound::Unbounded)) {
            if out.len() >= limit {
                break;
            }
            let (k, v) = item.map_err(sled_err("scan"))?;
            if !k.starts_with(scan.prefix) {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn len(&self, tree: &str) -> Result<u64, EngineError> {
        self.drain()?;
        Ok(self.existing(tree)?.map_or(0, |t| t.len() as u64))
    }

    fn count(&self, tree: &str, scan: Scan<'_>) -> Result<u64, EngineError> {
        self.drain()?;
        let Some(t) = self.existing(tree)? else {
            return Ok(0);
        };
        let lower = match scan.start_after {
            Some(after) if after >= scan.prefix => Bound::Excluded(after.to_vec()),
            _ => Bound::Included(scan.prefix.to_vec()),
        };
        let mut n = 0u64;
        // Keys only: sled shares the values' buffers, nothing is copied.
        for item in t.range::<Vec<u8>, _>((lower, Bound::Unbounded)) {
            let (k, _) = item.map_err(sled_err("scan"))?;
            if !k.starts_with(scan.prefix) {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    fn apply(&self, batch: &WriteBatch) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut p = self.pending.lock();
        p.seq += 1;
        let seq = p.seq;
        for op in &batch.ops {
            let keys = match p.overlay.get_mut(op.tree.as_str()) {
                Some(keys) => keys,
                None => p.overlay.entry(op.tree.clone()).or_default(),
            };
            keys.insert(op.key.clone(), (seq, op.value.clone()));
        }
        p.batches.push(batch.clone());
        Ok(())
    }

    fn durable_flush(&self) -> Result<(), EngineError> {
        self.drain()?;
        self.db.flush().map_err(sled_err("flush to disk"))?;
        Ok(())
    }
}

impl Drop for SledEngine {
    fn drop(&mut self) {
        // Batches still queued go to sled, which flushes when the last handle drops.
        if let Err(e) = self.drain() {
            tracing::error!(error = %e, "queued store batches could not be written at close");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sled_engine_conformance() {
        let dirs = parking_lot::Mutex::new(Vec::new());
        crate::store::local::engine::conformance::run(|| {
            let dir = tempfile::tempdir().unwrap();
            let engine = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
            dirs.lock().push(dir);
            engine
        });
    }

    #[test]
    fn queued_batches_are_read_back_and_reach_sled_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let e = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
        let mut b1 = WriteBatch::new();
        b1.put("a", "k", "v1");
        b1.put("b", "k", "w");
        e.apply(&b1).unwrap();
        let mut b2 = WriteBatch::new();
        b2.put("a", "k", "v2");
        b2.remove("b", "k");
        e.apply(&b2).unwrap();
        assert_eq!(e.pending.lock().batches.len(), 2, "queued, not yet in sled");
        assert_eq!(e.get("a", b"k").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(
            e.get("b", b"k").unwrap(),
            None,
            "a queued removal hides the key"
        );
        assert!(e.db.open_tree("a").unwrap().get(b"k").unwrap().is_none());

        // A scan writes the queue first and sees what it wrote.
        let mut b3 = WriteBatch::new();
        b3.put("a", "z", "last");
        e.apply(&b3).unwrap();
        let keys: Vec<Vec<u8>> = e
            .scan("a", Scan::default())
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, [b"k".to_vec(), b"z".to_vec()]);
        let p = e.pending.lock();
        assert!(p.batches.is_empty() && p.overlay.is_empty());
        drop(p);
        assert_eq!(
            e.db.open_tree("a").unwrap().get(b"k").unwrap().as_deref(),
            Some(&b"v2"[..]),
            "the later batch won in sled too"
        );
        assert!(e.db.open_tree("b").unwrap().get(b"k").unwrap().is_none());
    }

    #[test]
    fn dropping_the_engine_writes_its_queue() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
            let mut b = WriteBatch::new();
            b.put("a", "k", "v");
            e.apply(&b).unwrap();
        }
        let e = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
        assert_eq!(e.get("a", b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn opening_waits_for_a_closing_handle_to_let_go_of_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let first = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
        let mut b = WriteBatch::new();
        b.put("a", "k", "v");
        first.apply(&b).unwrap();
        let closing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(first);
        });
        let second = SledEngine::open(dir.path(), &SledOptions::default())
            .expect("opened once the first handle let go");
        assert_eq!(second.get("a", b"k").unwrap().as_deref(), Some(&b"v"[..]));
        closing.join().unwrap();
    }

    #[test]
    fn sled_engine_keeps_flushed_batches_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
            let mut b = WriteBatch::new();
            b.put("a", "k", "v");
            b.put("b", "k", "w");
            e.apply(&b).unwrap();
            e.durable_flush().unwrap();
        }
        let e = SledEngine::open(dir.path(), &SledOptions::default()).unwrap();
        assert_eq!(e.get("a", b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(e.get("b", b"k").unwrap().as_deref(), Some(&b"w"[..]));
        assert_eq!(e.tree_names().unwrap(), ["a", "b"]);
    }
}
