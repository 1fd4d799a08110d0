//! `flotilla-migrations`: the store's on-disk layout, versioned. The store records its schema
//! version; at start-up [`run`] applies every numbered migration above it, in order, before the
//! server serves. A store written by a newer Flotilla is refused.
//!
//! Migrations see the store through [`RawStore`], a key-value view of its trees (below), so
//! they are independent of the engine and testable on [`MemoryRawStore`].
//!
//! Layout (schema version [`LATEST`]):
//! - tree `meta`: `schema_version` (decimal), `resource_version` (decimal, the last one handed
//!   out), `resource_types/<storage name>` (the kind's `ResourceType` as JSON);
//! - tree `events`: key = resourceVersion as 20 zero-padded decimal digits, value = the watch
//!   event as JSON `{"type", "resource", "key", "object"}`;
//! - one tree per kind, named by its storage name (`<group or core>/<plural>`, e.g.
//!   `apps/deployments`), key `namespace/name` (or `name` for cluster-scoped kinds), value the
//!   object's JSON.

use std::collections::BTreeMap;

mod steps;

pub use steps::MIGRATIONS;

/// Name of the tree holding store metadata.
pub const META_TREE: &str = "meta";
/// Name of the tree holding the watch event log.
pub const EVENTS_TREE: &str = "events";
/// Key of the schema version in [`META_TREE`].
pub const SCHEMA_VERSION_KEY: &str = "schema_version";
/// Key of the last resourceVersion handed out in [`META_TREE`].
pub const RESOURCE_VERSION_KEY: &str = "resource_version";
/// Prefix of the keys in [`META_TREE`] that record each stored kind.
pub const RESOURCE_TYPE_PREFIX: &str = "resource_types/";

/// Errors of migrations.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The store was written by a newer Flotilla.
    #[error(
        "the store has schema version {found}, but this Flotilla supports at most {supported}; \
         upgrade Flotilla or point it at another data directory"
    )]
    NewerSchema { found: u32, supported: u32 },
    /// The recorded schema version is unreadable.
    #[error("the store's schema version {0:?} is not a number")]
    BadVersion(String),
    /// A migration step failed.
    #[error("migration {number} ({name}) failed: {message}")]
    Step {
        number: u32,
        name: &'static str,
        message: String,
    },
    /// The engine failed.
    #[error("store engine failure during migration")]
    Engine(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A key-value view of the store's trees, enough for migrations.
pub trait RawStore {
    /// Names of every tree that exists.
    fn trees(&self) -> Result<Vec<String>, MigrationError>;
    /// Every key and value of a tree, keys ascending (empty if the tree does not exist).
    fn scan(&self, tree: &str) -> Result<Vec<(String, Vec<u8>)>, MigrationError>;
    /// One value.
    fn get(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, MigrationError>;
    /// Writes one value (creating the tree if needed).
    fn put(&mut self, tree: &str, key: &str, value: Vec<u8>) -> Result<(), MigrationError>;
    /// Removes one key.
    fn remove(&mut self, tree: &str, key: &str) -> Result<(), MigrationError>;
    /// Makes every write so far durable.
    fn flush(&mut self) -> Result<(), MigrationError>;
}

/// One numbered step. Steps are never edited once released; each must be idempotent, because
/// a crash between its writes and the version record makes it run again.
pub struct Migration {
    /// Its number; the schema version after it ran.
    pub number: u32,
    /// A short name.
    pub name: &'static str,
    /// The change.
    pub apply: fn(&mut dyn RawStore) -> Result<(), String>,
}

/// The schema version a store has after every migration.
pub const LATEST: u32 = MIGRATIONS.len() as u32;

/// Reads the recorded schema version (0 for a store that never recorded one).
pub fn schema_version(store: &dyn RawStore) -> Result<u32, MigrationError> {
    match store.get(META_TREE, SCHEMA_VERSION_KEY)? {
        None => Ok(0),
        Some(bytes) => {
            let text = String::from_utf8_lossy(&bytes).to_string();
            text.trim()
                .parse()
                .map_err(|_| MigrationError::BadVersion(text))
        }
    }
}

/// What [`run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Schema version found.
    pub from: u32,
    /// Schema version now.
    pub to: u32,
}

/// Applies every migration above the store's schema version, in order, recording the version
/// after each step and flushing. Refuses a store newer than [`LATEST`].
pub fn run(store: &mut dyn RawStore) -> Result<Outcome, MigrationError> {
    let from = schema_version(store)?;
    if from > LATEST {
        return Err(MigrationError::NewerSchema {
            found: from,
            supported: LATEST,
        });
    }
    for step in MIGRATIONS.iter().filter(|m| m.number > from) {
        tracing::info!(
            number = step.number,
            name = step.name,
            "applying store migration"
        );
        (step.apply)(store).map_err(|message| MigrationError::Step {
            number: step.number,
            name: step.name,
            message,
        })?;
        store.put(
            META_TREE,
            SCHEMA_VERSION_KEY,
            step.number.to_string().into_bytes(),
        )?;
        store.flush()?;
    }
    Ok(Outcome { from, to: LATEST })
}

/// A [`RawStore`] in memory: for tests and for dumping a store's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryRawStore {
    /// tree -> key -> value.
    pub trees: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl RawStore for MemoryRawStore {
    fn trees(&self) -> Result<Vec<String>, MigrationError> {
        Ok(self.trees.keys().cloned().collect())
    }
    fn scan(&self, tree: &str) -> Result<Vec<(String, Vec<u8>)>, MigrationError> {
        Ok(self
            .trees
            .get(tree)
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }
    fn get(&self, tree: &str, key: &str) -> Result<Option<Vec<u8>>, MigrationError> {
        Ok(self.trees.get(tree).and_then(|t| t.get(key)).cloned())
    }
    fn put(&mut self, tree: &str, key: &str, value: Vec<u8>) -> Result<(), MigrationError> {
        self.trees
            .entry(tree.to_string())
            .or_default()
            .insert(key.to_string(), value);
        Ok(())
    }
    fn remove(&mut self, tree: &str, key: &str) -> Result<(), MigrationError> {
        if let Some(t) = self.trees.get_mut(tree) {
            t.remove(key);
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), MigrationError> {
        Ok(())
    }
}
