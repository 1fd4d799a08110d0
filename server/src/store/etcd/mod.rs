//! The etcd engine (`--store etcd`): the store's object rules committed as etcd transactions,
//! so several servers share one store. [`EtcdStore`] implements [`super::Store`];
//! resourceVersion is etcd's mod revision; watches are served from the one etcd watch each
//! server follows.
//!
//! - `etcd_store.rs`: [`EtcdStore`], the rules applied with compare-and-swap commits;
//! - `commit.rs`: reads with their revision, transactions whose every write carries its
//!   precondition, etcd's size limits; `create_batch.rs`: the Events' creates, several to a
//!   transaction;
//! - `mirror.rs`: this server's watch-fed view of the whole store (kinds, owner index,
//!   counts), and `watch_cache.rs`, the objects in it, decoded, that reads are answered from;
//! - `revision_probe.rs`: etcd's current revision for reads that must be fresh;
//! - `collector.rs`: garbage collection on the mirror's jobs, by the leader alone where
//!   servers share the store;
//! - `watch_hub.rs`: watches served from the mirror's changes (kube-apiserver's cacher), and
//!   `watch_stream.rs`, a kind's own etcd watch for one that starts before the hub's ring,
//!   with 410 on compacted revisions;
//! - `compactor.rs`: Kubernetes' compactor, coordinated between servers;
//! - `schema.rs`: the key layout's version, checked and migrated at open;
//! - `connect.rs`: endpoints and TLS; `keys.rs`: the key layout.

mod collector;
pub mod commit;
pub mod compactor;
pub mod connect;
mod create_batch;
pub mod etcd_store;
pub mod keys;
mod mirror;
mod revision_probe;
pub mod schema;
mod watch_cache;
mod watch_hub;
mod watch_stream;

pub use collector::Collection;
pub use commit::Fence;
pub use connect::EtcdConfig;
pub use etcd_store::{EtcdStore, EtcdStoreOptions, ReadMode};
