//! Moving a store from one engine to another (`flotilla-server migrate-store`): every object
//! of every kind the source ever stored is copied as it is (uid, creationTimestamp,
//! generation, finalizers, deletionTimestamp and owner references kept, so ownership and
//! pending deletions carry over), into an etcd prefix that holds no objects yet. Only the
//! resourceVersions change: the target's are its own.
//!
//! The source is opened as the server would open it (its migrations run first) and must not be
//! in use: its data directory is locked by a running server.

use super::etcd::EtcdStore;
use super::{ListOptions, Store, StoreError};
use flotilla_api::kinds::ResourceType;

/// Objects read per page from the source.
const PAGE: usize = 500;

/// What a migration copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Objects copied, by kind (storage name), sorted.
    pub kinds: Vec<(String, u64)>,
    /// Objects copied in all.
    pub objects: u64,
}

/// Why a migration did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The target prefix already holds objects: a migration only fills an empty one.
    #[error("the etcd prefix {prefix} already holds {objects} objects; migrate into an empty prefix (--etcd-prefix)")]
    TargetNotEmpty { prefix: String, objects: u64 },
    /// Reading the source or writing the target failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Copies every object of `kinds` from `source` into `target`.
pub async fn migrate(
    source: &dyn Store,
    kinds: &[ResourceType],
    target: &EtcdStore,
) -> Result<Migrated, MigrateError> {
    let present: u64 = target.object_counts().await?.iter().map(|(_, n)| n).sum();
    if present > 0 {
        return Err(MigrateError::TargetNotEmpty {
            prefix: target.keys().prefix().to_string(),
            objects: present,
        });
    }
    let mut migrated = Migrated::default();
    for res in kinds {
        let mut copied = 0u64;
        let mut token = None;
        loop {
            let page = source
                .list(
                    res,
                    None,
                    &ListOptions {
                        limit: Some(PAGE),
                        continue_token: token.take(),
                        ..ListOptions::default()
                    },
                )
                .await?;
            for object in &page.items {
                target.import(res, object).await?;
                copied += 1;
            }
            match page.continue_token {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        if copied > 0 {
            tracing::info!(kind = %res.storage_name(), objects = copied, "copied");
            migrated.kinds.push((res.storage_name(), copied));
            migrated.objects += copied;
        }
    }
    migrated.kinds.sort();
    Ok(migrated)
}
