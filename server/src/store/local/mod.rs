//! The local backend (`--store sled|log|memory`): one server's store in its own process.
//! [`KvStore`] implements [`super::Store`] once for every key-value [`Engine`]; resourceVersion
//! is one global counter kept by the store, and watches come from its own event log.
//!
//! - `kv_store.rs`: [`KvStore`], the object rules applied under one write lock, the commit
//!   path, open and recovery;
//! - `gc.rs`: the garbage collector thread, running the jobs of the shared owner index
//!   (`store/owner_index.rs`);
//! - `group_commit.rs`: the committer thread, so concurrent writers share one durable flush;
//! - `watch.rs`: the event log (a bounded ring, persisted in the events tree) and the watch
//!   streams read from it;
//! - `object_cache.rs`: the decoded-object cache that spares reads a JSON parse;
//! - `engine.rs`: the [`Engine`] trait (trees, point reads, ordered scans, one atomic batch,
//!   a durability barrier) and its conformance suite;
//! - the engines: `sled_engine.rs` ([`SledEngine`], the default), `log_engine.rs`
//!   ([`LogEngine`]: every tree in memory, durable through a write-ahead log and snapshots) and
//!   `memory_engine.rs` ([`MemoryEngine`], for tests and tools).

pub mod engine;
mod gc;
mod group_commit;
pub mod kv_store;
pub mod log_engine;
pub mod memory_engine;
pub mod object_cache;
pub mod sled_engine;
mod watch;

pub use engine::Engine;
pub use kv_store::{
    KvStore, MemoryStore, SledStore, StoreConfig, StoreStats, DEFAULT_EVENT_LOG_CAPACITY,
    DEFAULT_EVENT_LOG_MAX_BYTES,
};
pub use log_engine::{LogEngine, LogOptions};
pub use memory_engine::MemoryEngine;
pub use sled_engine::{SledEngine, SledOptions};
