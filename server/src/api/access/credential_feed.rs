//! Keeps this server's member credentials in step with the store: [`CredentialFeed::start`]
//! loads the credential Secrets of `karmada-cluster` into the [`Authenticator`] before the API
//! serves ([`registration::load_credentials`]), then a task follows their watch from the
//! list's resourceVersion. A Secret created or changed makes its hash the cluster's credential
//! (a changed hash revokes the former one); a deleted Secret, one being deleted, or one whose
//! hash is gone revokes it, and the credential's open watches on this server end with it. A
//! watch that fails or ends is opened again from the last event it delivered, after a pause
//! that grows (200 ms to 5 s) while nothing arrives; one that expired (410) is replaced by a
//! fresh list, which replaces what the feed knew. The feed stops with the server.
//!
//! With several servers on one etcd store this is how a credential issued or revoked through
//! one server reaches the others. On a single server it sees that server's own writes, which
//! the [`Authenticator`] has applied already: their revision tells it so, and nothing changes.
//! Like the CRD feed, it is a plain store watch started by the app, not a controller: every
//! server needs it, leader or not, and with or without controllers.

use super::auth::{Authenticator, CredentialChange};
use super::registration::{self, CLUSTER_NAMESPACE};
use crate::api::ApiState;
use crate::store::{EventType, ListOptions, Store, StoreError, WatchEvent, WatchOptions};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// First pause after a failed list or watch; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The running feed; stopping or dropping it ends the task.
#[derive(Debug)]
pub struct CredentialFeed {
    task: JoinHandle<()>,
}

impl CredentialFeed {
    /// Loads every stored credential of a live member (see
    /// [`registration::load_credentials`]), then follows the credential Secrets from there.
    pub async fn start(state: &ApiState) -> Result<Self, StoreError> {
        let (loaded, revision) = registration::load_credentials_at(state).await?;
        tracing::debug!(credentials = loaded, revision, "member credentials loaded");
        let task = tokio::spawn(follow(state.store.clone(), state.auth.clone(), revision));
        Ok(Self { task })
    }

    /// Stops the feed and waits for its task to end.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for CredentialFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one credential Secret says: whose credential it is, and its hash when it grants one
/// (`None`: the Secret is being deleted, holds no hash or lost its label, so the cluster has no
/// credential).
pub fn credential_of(secret: &serde_json::Value) -> Option<(String, Option<String>)> {
    let cluster = registration::credential_cluster(secret)?;
    let deleting = secret
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let labelled = registration::credential_label(secret).is_some();
    let hash = registration::credential_hash(secret).filter(|_| !deleting && labelled);
    Some((cluster, hash))
}

/// Applies one watch event of a credential Secret to the authenticator.
pub fn apply(auth: &Authenticator, event: &WatchEvent) {
    let Some((cluster, hash)) = credential_of(&event.object) else {
        return;
    };
    let revision = event.resource_version;
    let change = match (event.event_type, hash) {
        (EventType::Added | EventType::Modified, Some(hash)) => {
            auth.apply_agent_credential(&cluster, &hash, revision)
        }
        (EventType::Added | EventType::Modified, None) | (EventType::Deleted, _) => {
            auth.apply_agent_removal(&cluster, revision, true)
        }
    };
    log_change(&cluster, revision, change);
}

fn log_change(cluster: &str, revision: u64, change: CredentialChange) {
    match change {
        CredentialChange::Accepted => {
            tracing::info!(%cluster, revision, "member credential accepted from the store")
        }
        CredentialChange::Revoked => {
            tracing::info!(%cluster, revision, "member credential revoked from the store")
        }
        CredentialChange::Unchanged | CredentialChange::Stale => {
            tracing::trace!(%cluster, revision, ?change, "member credential event applied")
        }
    }
}

/// Lists the credential Secrets into the authenticator; answers the list's revision.
async fn relist(store: &dyn Store, auth: &Authenticator) -> Result<u64, StoreError> {
    let page = store
        .list(
            &registration::secrets(),
            Some(CLUSTER_NAMESPACE),
            &ListOptions::default(),
        )
        .await?;
    let credentials: HashMap<String, String> = page
        .items
        .iter()
        .filter_map(credential_of)
        .filter_map(|(cluster, hash)| hash.map(|h| (cluster, h)))
        .collect();
    for (cluster, change) in auth.replace_agent_credentials(&credentials, page.resource_version) {
        log_change(&cluster, page.resource_version, change);
    }
    Ok(page.resource_version)
}

/// The pause after `failures` failed attempts in a row.
fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(8)))
        .min(MAX_BACKOFF)
}

/// Watches from `from`. A watch that fails or ends is opened again from the last event it
/// delivered, after a pause that grows while nothing arrives; one that expired (410) is
/// replaced by a fresh list. Runs until aborted.
async fn follow(store: Arc<dyn Store>, auth: Authenticator, mut from: u64) {
    let secrets = registration::secrets();
    let mut failures = 0u32;
    loop {
        let opts = WatchOptions {
            namespace: Some(CLUSTER_NAMESPACE.to_string()),
            from: Some(from),
            ..WatchOptions::default()
        };
        let mut expired = false;
        match store.watch(&secrets, opts).await {
            Ok(mut events) => {
                let mut delivered = false;
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => {
                            delivered = true;
                            from = from.max(event.resource_version);
                            apply(&auth, &event);
                        }
                        Err(StoreError::Expired { requested, oldest }) => {
                            tracing::debug!(
                                requested,
                                oldest,
                                "credential watch expired; listing again"
                            );
                            expired = true;
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, from, "credential watch failed; watching again");
                            break;
                        }
                    }
                }
                failures = if delivered { 1 } else { failures + 1 };
            }
            Err(StoreError::Expired { requested, oldest }) => {
                tracing::debug!(requested, oldest, "credential watch expired; listing again");
                expired = true;
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, from, "opening the credential watch failed; retrying");
            }
        }
        if expired {
            from = relist_until_done(store.as_ref(), &auth).await;
            failures = 0;
        } else {
            tokio::time::sleep(backoff(failures)).await;
        }
    }
}

/// Lists until a list succeeds, pausing longer after each failure; answers its revision.
async fn relist_until_done(store: &dyn Store, auth: &Authenticator) -> u64 {
    let mut failures = 0u32;
    loop {
        match relist(store, auth).await {
            Ok(revision) => return revision,
            Err(e) => {
                failures += 1;
                let pause = backoff(failures);
                tracing::warn!(error = %e, retry_ms = pause.as_millis() as u64, "listing the member credentials failed; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::auth::{generate_token, token_hash};
    use crate::store::{DeleteOptions, MemoryStore, StoreConfig};
    use crate::testing::eventually;
    use serde_json::{json, Value};

    fn secret(cluster: &str, hash: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": format!("flotilla-agent-{cluster}"),
                "namespace": CLUSTER_NAMESPACE,
                "labels": {registration::CREDENTIAL_LABEL: cluster},
                "annotations": {registration::TOKEN_HASH_ANNOTATION: hash},
            },
            "type": "flotilla.io/agent-credential",
        })
    }

    #[test]
    fn the_backoff_grows_to_its_ceiling() {
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(2), FIRST_BACKOFF * 2);
        assert_eq!(backoff(100), MAX_BACKOFF);
    }

    #[test]
    fn a_secret_being_deleted_or_without_a_hash_or_label_grants_nothing() {
        let mut s = secret("m1", "abc");
        assert_eq!(
            credential_of(&s),
            Some(("m1".to_string(), Some("abc".to_string())))
        );
        s["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
        assert_eq!(credential_of(&s), Some(("m1".to_string(), None)));
        let mut s = secret("m1", "abc");
        s["metadata"]["annotations"] = json!({});
        assert_eq!(credential_of(&s), Some(("m1".to_string(), None)));
        let mut s = secret("m1", "abc");
        s["metadata"]["labels"] = json!({});
        assert_eq!(credential_of(&s), Some(("m1".to_string(), None)));
        let other = json!({"metadata": {"name": "db", "namespace": CLUSTER_NAMESPACE}});
        assert_eq!(credential_of(&other), None);
    }

    /// A watch from a revision the store no longer holds (410) is replaced by a list.
    #[tokio::test]
    async fn an_expired_watch_is_replaced_by_a_list() {
        let store: Arc<dyn Store> = MemoryStore::memory(StoreConfig {
            event_log_capacity: 2,
            ..StoreConfig::default()
        });
        let rt = registration::secrets();
        let token = generate_token();
        store
            .create(&rt, secret("m1", &token_hash(&token)))
            .await
            .unwrap();
        for i in 0..5 {
            store
                .create(
                    &rt,
                    secret(&format!("other{i}"), &token_hash(&generate_token())),
                )
                .await
                .unwrap();
        }
        let auth = Authenticator::new(generate_token(), generate_token());
        let task = tokio::spawn(follow(store.clone(), auth.clone(), 1));
        eventually("the listed credential", Duration::from_secs(10), || async {
            auth.authenticate(&token)
        })
        .await;
        assert_eq!(auth.agent_clusters().len(), 6);
        task.abort();
    }

    /// Waits until `auth` accepts `token`.
    async fn accepted(auth: &Authenticator, token: &str, what: &str) {
        eventually(what, Duration::from_secs(10), || async {
            auth.authenticate(token)
        })
        .await;
    }

    /// Writes past the API (as another server's would reach this one) are followed: a new
    /// Secret is accepted, a changed hash replaces the former credential, a deletion revokes.
    #[tokio::test]
    async fn the_feed_follows_credentials_written_by_another_server() {
        let store: Arc<dyn Store> = MemoryStore::memory(StoreConfig::default());
        let auth = Authenticator::new(generate_token(), generate_token());
        let task = tokio::spawn(follow(store.clone(), auth.clone(), 0));
        let rt = registration::secrets();
        let (first, second) = (generate_token(), generate_token());
        store
            .create(&rt, secret("m1", &token_hash(&first)))
            .await
            .unwrap();
        accepted(&auth, &first, "the first credential").await;
        let revocation = auth.credential(&first).unwrap().revocation.unwrap();
        store
            .update(&rt, secret("m1", &token_hash(&second)))
            .await
            .unwrap();
        accepted(&auth, &second, "the second credential").await;
        assert!(auth.authenticate(&first).is_none());
        assert!(
            revocation.is_revoked(),
            "the former credential's watches end"
        );
        store
            .delete(
                &rt,
                Some(CLUSTER_NAMESPACE),
                "flotilla-agent-m1",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        eventually("the revocation", Duration::from_secs(10), || async {
            auth.authenticate(&second).is_none().then_some(())
        })
        .await;
        task.abort();
    }
}
