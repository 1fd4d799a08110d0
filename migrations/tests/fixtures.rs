//! Migrations against fixtures of earlier layouts: an old store plus every migration equals
//! the same content written at the latest layout, a fresh store gets the latest layout, and a
//! newer store is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_migrations::{
    run, schema_version, MemoryRawStore, MigrationError, Outcome, RawStore, LATEST, META_TREE,
    MIGRATIONS, SCHEMA_VERSION_KEY,
};
use serde_json::{Map, Value};
use std::path::Path;

/// Loads a fixture: `{tree: {key: json-value}}`; meta values are strings stored verbatim.
fn load(name: &str) -> MemoryRawStore {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let dump: Map<String, Value> = serde_json::from_str(&text).expect("fixture json");
    let mut store = MemoryRawStore::default();
    for (tree, entries) in dump {
        for (key, value) in entries.as_object().expect("tree object") {
            let bytes = match value {
                Value::String(s) => s.clone().into_bytes(),
                other => serde_json::to_vec(other).unwrap(),
            };
            store.put(&tree, key, bytes).unwrap();
        }
    }
    store
}

/// The logical content of a store: values parsed as JSON where they are JSON.
fn content(store: &MemoryRawStore) -> Value {
    let mut out = Map::new();
    for (tree, entries) in &store.trees {
        let mut t = Map::new();
        for (k, v) in entries {
            let value = serde_json::from_slice(v)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(v).into()));
            t.insert(k.clone(), value);
        }
        out.insert(tree.clone(), Value::Object(t));
    }
    Value::Object(out)
}

#[test]
fn schema_1_fixture_plus_migrations_equals_latest_layout() {
    let mut old = load("schema-1.json");
    let outcome = run(&mut old).unwrap();
    assert_eq!(
        outcome,
        Outcome {
            from: 1,
            to: LATEST
        }
    );
    let expected = load("schema-latest.json");
    assert_eq!(content(&old), content(&expected));
}

#[test]
fn fresh_store_gets_every_migration_and_matches_migrated_meta() {
    let mut fresh = MemoryRawStore::default();
    assert_eq!(
        run(&mut fresh).unwrap(),
        Outcome {
            from: 0,
            to: LATEST
        }
    );
    assert_eq!(schema_version(&fresh).unwrap(), LATEST);
    assert_eq!(
        fresh.get(META_TREE, "resource_version").unwrap(),
        Some(b"0".to_vec())
    );
    // Same layout as the migrated fixture: the same meta keys, only values of data differ.
    let mut old = load("schema-1.json");
    run(&mut old).unwrap();
    let keys = |s: &MemoryRawStore| s.trees[META_TREE].keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&fresh), keys(&old));
}

#[test]
fn running_again_changes_nothing() {
    let mut store = load("schema-1.json");
    run(&mut store).unwrap();
    let once = store.clone();
    assert_eq!(
        run(&mut store).unwrap(),
        Outcome {
            from: LATEST,
            to: LATEST
        }
    );
    assert_eq!(store, once);
}

#[test]
fn every_step_is_idempotent() {
    for step in MIGRATIONS {
        let mut once = load("schema-1.json");
        (step.apply)(&mut once).unwrap();
        let mut twice = once.clone();
        (step.apply)(&mut twice).unwrap();
        assert_eq!(once, twice, "step {} {}", step.number, step.name);
    }
}

#[test]
fn a_newer_store_is_refused_with_a_clear_message() {
    let mut store = MemoryRawStore::default();
    let newer = (LATEST + 1).to_string();
    store
        .put(META_TREE, SCHEMA_VERSION_KEY, newer.into_bytes())
        .unwrap();
    let before = store.clone();
    let err = run(&mut store).unwrap_err();
    assert!(matches!(err, MigrationError::NewerSchema { .. }));
    let message = err.to_string();
    assert!(
        message.contains(&format!("schema version {}", LATEST + 1)),
        "{message}"
    );
    assert!(message.contains("upgrade Flotilla"), "{message}");
    assert_eq!(store, before, "a refused store is not touched");
}

#[test]
fn an_unreadable_version_is_an_error() {
    let mut store = MemoryRawStore::default();
    store
        .put(META_TREE, SCHEMA_VERSION_KEY, b"two".to_vec())
        .unwrap();
    assert!(matches!(
        run(&mut store),
        Err(MigrationError::BadVersion(_))
    ));
}
