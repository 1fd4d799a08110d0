//! The version of the etcd key layout a fleet's data is in, kept at `<prefix>/schema_version`
//! and checked before a server opens the store: servers of different versions must not share
//! one fleet. A store without the key is from before it existed (version 0, the same layout as
//! version 1) or empty; a server newer than the store migrates it, one compare-and-swap on the
//! key per step so two servers starting at once migrate it once; a server older than the store
//! refuses to start and says so.
//!
//! The layout's versions: 1, the layout of `keys.rs` (objects, kinds, the compactor's key).

use super::super::StoreError;
use super::commit::etcd_error;
use super::keys::Keys;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

/// The layout this server writes.
pub const ETCD_SCHEMA: u32 = 1;

/// Migrations of the etcd layout: the steps from each older version to the next. Version 0 is
/// version 1 without the key, so there is nothing to move yet.
const STEPS: &[Step] = &[Step {
    to: 1,
    name: "record the schema version",
}];

/// One step of the layout: what the key says once it ran.
struct Step {
    to: u32,
    name: &'static str,
}

/// How the store's layout was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The version found (0: no key).
    pub found: u32,
    /// The version the store is in now.
    pub now: u32,
}

/// Checks the layout of the fleet under `keys` and migrates it to [`ETCD_SCHEMA`]; refuses a
/// store of a newer layout with [`StoreError::Schema`].
pub async fn check(client: &Client, keys: &Keys) -> Result<Checked, StoreError> {
    let key = keys.schema_version();
    let mut kv = client.kv_client();
    let mut first = None;
    loop {
        let response = kv
            .get(key.as_str(), None)
            .await
            .map_err(etcd_error("read the schema version"))?;
        let (found, held) = match response.kvs().first() {
            None => (
                0,
                Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            ),
            Some(stored) => {
                let text = String::from_utf8_lossy(stored.value());
                let found = text.trim().parse::<u32>().map_err(|_| {
                    StoreError::Schema(format!(
                        "the etcd store under {} has schema version {text:?}, which is not a number",
                        keys.prefix()
                    ))
                })?;
                let held =
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, stored.mod_revision());
                (found, held)
            }
        };
        let found_first = *first.get_or_insert(found);
        if found > ETCD_SCHEMA {
            return Err(StoreError::Schema(format!(
                "the etcd store under {} has schema version {found}, but this Flotilla supports \
                 at most {ETCD_SCHEMA}; upgrade this server to the fleet's version",
                keys.prefix()
            )));
        }
        let Some(step) = STEPS.iter().find(|s| s.to == found + 1) else {
            return Ok(Checked {
                found: found_first,
                now: found,
            });
        };
        let txn = Txn::new().when(vec![held]).and_then(vec![TxnOp::put(
            key.as_str(),
            step.to.to_string(),
            None,
        )]);
        let committed = kv
            .txn(txn)
            .await
            .map_err(etcd_error("record the schema version"))?;
        if committed.succeeded() {
            tracing::info!(
                prefix = keys.prefix(),
                from = found,
                to = step.to,
                step = step.name,
                "etcd store migrated"
            );
        }
        // Either way the key is read again: another server may have migrated meanwhile.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::etcd::EtcdCluster;

    #[tokio::test]
    async fn a_store_is_migrated_to_this_layout_and_a_newer_one_refused() {
        let etcd = EtcdCluster::start(1).await.expect("etcd starts");
        let client = etcd.client().await.expect("an etcd client");
        let mut kv = client.kv_client();
        let keys = Keys::new("/schema-test");
        // Empty, or written before the key existed: migrated, once.
        let first = check(&client, &keys).await.unwrap();
        assert_eq!(first, Checked { found: 0, now: 1 });
        let again = check(&client, &keys).await.unwrap();
        assert_eq!(again, Checked { found: 1, now: 1 });
        let stored = kv.get(keys.schema_version(), None).await.unwrap();
        assert_eq!(stored.kvs()[0].value(), b"1");
        // Written by a newer server: refused, by name and version.
        kv.put(keys.schema_version(), "2", None).await.unwrap();
        match check(&client, &keys).await {
            Err(StoreError::Schema(message)) => {
                assert!(message.contains("schema version 2"), "{message}");
                assert!(message.contains("/schema-test"), "{message}");
            }
            other => panic!("a newer layout must be refused, got {other:?}"),
        }
        kv.put(keys.schema_version(), "two", None).await.unwrap();
        assert!(matches!(
            check(&client, &keys).await,
            Err(StoreError::Schema(_))
        ));
    }
}
