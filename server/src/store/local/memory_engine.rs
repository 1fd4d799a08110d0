//! The in-memory engine: one `BTreeMap` per tree behind one lock. Batches are atomic because
//! they are applied under the write lock; nothing is persistent, so writes are acknowledged at
//! once. For tests and tools, never for a server that must survive a restart.

use super::engine::{Engine, EngineError, Entry, Scan, WriteBatch};
use parking_lot::RwLock;
use std::collections::BTreeMap;

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// An engine that keeps every tree in memory.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    trees: RwLock<BTreeMap<String, Tree>>,
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Engine for MemoryEngine {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn is_persistent(&self) -> bool {
        false
    }

    fn tree_names(&self) -> Result<Vec<String>, EngineError> {
        Ok(self.trees.read().keys().cloned().collect())
    }

    fn get(&self, tree: &str, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self
            .trees
            .read()
            .get(tree)
            .and_then(|t| t.get(key))
            .cloned())
    }

    fn scan(&self, tree: &str, scan: Scan<'_>) -> Result<Vec<Entry>, EngineError> {
        Ok(self
            .trees
            .read()
            .get(tree)
            .map(|t| scan.over(t))
            .unwrap_or_default())
    }

    fn len(&self, tree: &str) -> Result<u64, EngineError> {
        Ok(self.trees.read().get(tree).map_or(0, |t| t.len() as u64))
    }

    fn count(&self, tree: &str, scan: Scan<'_>) -> Result<u64, EngineError> {
        Ok(self
            .trees
            .read()
            .get(tree)
            .map_or(0, |t| scan.count_over(t)))
    }

    fn apply(&self, batch: &WriteBatch) -> Result<(), EngineError> {
        let mut trees = self.trees.write();
        for op in &batch.ops {
            let tree = trees.entry(op.tree.clone()).or_default();
            match &op.value {
                Some(value) => {
                    tree.insert(op.key.clone(), value.clone());
                }
                None => {
                    tree.remove(&op.key);
                }
            }
        }
        Ok(())
    }

    fn durable_flush(&self) -> Result<(), EngineError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_engine_conformance() {
        crate::store::local::engine::conformance::run(MemoryEngine::new);
    }
}
