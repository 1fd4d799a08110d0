//! The credentials of pull members: a member that joins (`POST /flotilla/v1/register` with the
//! join token, served by [`crate::api::routes::register`]) gets its Cluster with syncMode Pull
//! and a fresh credential scoped to that cluster. Only the credential's SHA-256 is stored (a Secret in `karmada-cluster`), so a
//! restarted server still knows every member.
//!
//! The join token only ever creates: a name whose Cluster exists (registered by an agent or
//! created by an admin) is refused with 409 unless an admin annotated that Cluster with
//! [`ALLOW_REREGISTRATION_ANNOTATION`]` = "true"`; the annotation is consumed by the
//! registration it allows, which replaces (so revokes) the member's former credential.
//!
//! A member's credential lives as long as its Cluster: deleting the Cluster (or the credential
//! Secret) revokes it at once ([`revoke_on_delete`]), and a start-up never loads the
//! credential of a Cluster that is gone ([`load_credentials`]).
//!
//! The server that registers or revokes applies the change to its own [`Authenticator`] at
//! once, with the store revision of its write; every server (that one included) then follows
//! the Secrets through the credential feed ([`super::credential_feed`]), so a credential
//! issued or revoked through one server of a fleet holds on all of them.
//!
//! [`Authenticator`]: super::auth::Authenticator

use super::auth::{generate_token, token_hash};
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::store::{DeleteOptions, Deleted, ListOptions, StoreError};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{builtin_by_plural, well_known};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Namespace of member leases and credentials.
pub const CLUSTER_NAMESPACE: &str = "karmada-cluster";
/// Annotation holding a member credential's SHA-256.
pub const TOKEN_HASH_ANNOTATION: &str = "flotilla.io/token-sha256";
/// Label marking a member credential Secret; its value is the cluster name.
pub const CREDENTIAL_LABEL: &str = "flotilla.io/agent-credential";
/// Annotation by which an admin lets an agent register an existing Cluster once.
pub const ALLOW_REREGISTRATION_ANNOTATION: &str = "flotilla.io/allow-reregistration";
/// Prefix of a member credential Secret's name (the cluster name follows).
const SECRET_PREFIX: &str = "flotilla-agent-";

/// What an agent sends to join.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registration {
    /// The member's name.
    pub cluster_name: String,
    /// Cloud provider.
    #[serde(default)]
    pub provider: String,
    /// Region.
    #[serde(default)]
    pub region: String,
    /// Zones.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Labels of the Cluster object.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn secret_name(cluster: &str) -> String {
    format!("{SECRET_PREFIX}{cluster}")
}

/// The kind of the credential Secrets.
pub fn secrets() -> flotilla_api::kinds::ResourceType {
    builtin_by_plural("", "secrets").unwrap_or_else(well_known::events)
}

/// The cluster a credential Secret's [`CREDENTIAL_LABEL`] names: only a labelled Secret
/// grants a credential.
pub fn credential_label(secret: &Value) -> Option<String> {
    metadata_entry(secret, "labels", CREDENTIAL_LABEL)
}

/// A Secret's non-empty label or annotation (`map`) `key`.
fn metadata_entry(secret: &Value, map: &str, key: &str) -> Option<String> {
    secret
        .lookup(&format!("/metadata/{map}/{}", key.replace('/', "~1")))
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The cluster a credential Secret is for: its [`CREDENTIAL_LABEL`], else the cluster its name
/// ends with (a Secret that lost its label revokes that cluster's credential); `None` for a
/// Secret that is no member credential.
pub fn credential_cluster(secret: &Value) -> Option<String> {
    credential_label(secret).or_else(|| {
        secret
            .lookup("/metadata/name")
            .and_then(Value::as_str)
            .and_then(|n| n.strip_prefix(SECRET_PREFIX))
            .filter(|c| !c.is_empty())
            .map(str::to_string)
    })
}

/// The credential's SHA-256 a credential Secret holds ([`TOKEN_HASH_ANNOTATION`]).
pub fn credential_hash(secret: &Value) -> Option<String> {
    metadata_entry(secret, "annotations", TOKEN_HASH_ANNOTATION)
}

/// The resourceVersion an object was written (or deleted) at.
fn revision_of(object: &Value) -> Option<u64> {
    object
        .lookup("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok())
}

/// Whether `cluster` exists and is not being deleted.
async fn cluster_is_live(state: &ApiState, cluster: &str) -> Result<bool, StoreError> {
    match state
        .store
        .get(&well_known::clusters(), None, cluster)
        .await
    {
        Ok(c) => Ok(c.lookup("/metadata/deletionTimestamp").is_none()),
        Err(StoreError::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Loads the stored credential of every live member into the authenticator (at start-up); the
/// credential Secret of a Cluster that is gone or going is deleted instead (its deletion may
/// have been cut short by a crash).
pub async fn load_credentials(state: &ApiState) -> Result<usize, StoreError> {
    load_credentials_at(state).await.map(|(n, _)| n)
}

/// [`load_credentials`], also answering the store revision the credentials were read at (the
/// credential feed watches from there).
pub async fn load_credentials_at(state: &ApiState) -> Result<(usize, u64), StoreError> {
    let page = state
        .store
        .list(&secrets(), Some(CLUSTER_NAMESPACE), &ListOptions::default())
        .await?;
    let mut n = 0;
    for secret in page.items {
        let (Some(cluster), Some(hash)) = (credential_label(&secret), credential_hash(&secret))
        else {
            continue;
        };
        if cluster_is_live(state, &cluster).await? {
            state
                .auth
                .apply_agent_credential(&cluster, &hash, page.resource_version);
            n += 1;
        } else {
            tracing::info!(cluster = %cluster, "the cluster of a stored credential is gone; deleting the credential");
            delete_credential(state, &cluster).await?;
        }
    }
    Ok((n, page.resource_version))
}

/// What follows a delete request (whether the object is gone or waits for finalizers): a
/// Cluster's credential is revoked and its Secret deleted; a deleted credential Secret revokes
/// its credential. Failures are logged: the revocation in memory has happened by then, and a
/// restart drops a Secret left behind.
pub async fn revoke_on_delete(
    state: &ApiState,
    rt: &flotilla_api::kinds::ResourceType,
    namespace: Option<&str>,
    name: &str,
) {
    let clusters = well_known::clusters();
    if rt.group == clusters.group && rt.plural == clusters.plural {
        let revoked = state.auth.revoke_agent_credential(name);
        withdraw_credential(
            state,
            name,
            "deleting the credential Secret of a deleted cluster failed",
        )
        .await;
        if revoked {
            tracing::info!(cluster = %name, "cluster deleted; its agent credential is revoked");
        }
    } else if rt.group.is_empty() && rt.plural == "secrets" && namespace == Some(CLUSTER_NAMESPACE)
    {
        if let Some(cluster) = name.strip_prefix(SECRET_PREFIX) {
            if state.auth.revoke_agent_credential(cluster) {
                tracing::info!(cluster = %cluster, "credential Secret deleted; the agent credential is revoked");
            }
        }
    }
}

/// Deletes the credential Secret of `cluster`, whose credential this server has revoked, and
/// applies the deletion's revision to the authenticator (so a late feed event cannot bring the
/// credential back). A failure is logged as `failed`: the revocation in memory has happened,
/// and a restart drops a Secret left behind.
async fn withdraw_credential(state: &ApiState, cluster: &str, failed: &str) {
    match delete_credential(state, cluster).await {
        Ok(Some(revision)) => {
            state.auth.apply_agent_removal(cluster, revision, false);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(cluster = %cluster, error = %e, "{failed}"),
    }
}

/// Deletes the credential Secret of `cluster` (absent is fine); answers the store revision of
/// the deletion, when this call deleted it.
async fn delete_credential(state: &ApiState, cluster: &str) -> Result<Option<u64>, StoreError> {
    match state
        .store
        .delete(
            &secrets(),
            Some(CLUSTER_NAMESPACE),
            &secret_name(cluster),
            &DeleteOptions::default(),
        )
        .await
    {
        Ok(Deleted::Gone(last)) => Ok(revision_of(&last)),
        Ok(Deleted::Pending(_)) | Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The refusal of a registration of an existing cluster, saying what an admin can do.
pub fn exists(name: &str) -> ApiError {
    conflict(
        name,
        format!(
            "cluster {name:?} already exists (registered by an agent or created by an admin); \
             the join token only registers new clusters. To let an agent register it (this \
             revokes the credential of the agent that runs it now), an admin annotates it \
             once: kubectl annotate cluster {name} {ALLOW_REREGISTRATION_ANNOTATION}=true"
        ),
    )
}

fn conflict(name: &str, message: String) -> ApiError {
    ApiError::Conflict {
        message,
        name: name.to_string(),
        group: "cluster.karmada.io".into(),
        kind: "clusters".into(),
    }
}

/// The Cluster a first registration creates: a Pull member named and placed as `reg` says.
pub fn new_cluster(reg: &Registration) -> Value {
    let mut cluster = json!({
        "apiVersion": "cluster.karmada.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": reg.cluster_name, "labels": reg.labels},
        "spec": {"syncMode": "Pull"},
    });
    set_location(&mut cluster, reg);
    cluster
}

/// Hands the member `name`, whose Cluster the registration has just written, a fresh
/// credential: its hash stored in the credential Secret and applied to this server's
/// authenticator, the former credential so revoked. A deletion of the Cluster that ran in
/// between revoked nothing, so the credential is taken back and the registration refused.
pub async fn issue_credential(state: &ApiState, name: &str) -> ApiResult<String> {
    let token = generate_token();
    let hash = token_hash(&token);
    match store_credential(state, name, &hash).await? {
        Some(revision) => {
            state.auth.apply_agent_credential(name, &hash, revision);
        }
        None => state.auth.set_agent_credential(name, &hash),
    }
    let live = cluster_is_live(state, name)
        .await
        .map_err(|e| ApiError::from_store(e, "cluster.karmada.io", "clusters"))?;
    if !live {
        state.auth.revoke_agent_credential(name);
        withdraw_credential(
            state,
            name,
            "deleting the credential of a cluster deleted during its registration failed",
        )
        .await;
        return Err(conflict(
            name,
            format!("cluster {name:?} was deleted while it registered"),
        ));
    }
    Ok(token)
}

/// The Cluster a registration of the existing `cluster` leads to (labels and location from
/// the registration, the allowing annotation consumed), or why it is refused: the join token
/// may take over an existing Cluster only when an admin allowed it.
pub fn reregistration(cluster: &Value, name: &str, reg: &Registration) -> ApiResult<Value> {
    if cluster.lookup("/metadata/deletionTimestamp").is_some() {
        return Err(conflict(
            name,
            format!("cluster {name:?} is being deleted; register it once it is gone"),
        ));
    }
    if cluster.lookup("/spec/syncMode").and_then(Value::as_str) == Some("Push") {
        return Err(conflict(
            name,
            format!("cluster {name:?} is a Push member; a pull agent cannot register it"),
        ));
    }
    let pointer = format!(
        "/metadata/annotations/{}",
        ALLOW_REREGISTRATION_ANNOTATION.replace('/', "~1")
    );
    if cluster.lookup(&pointer).and_then(Value::as_str) != Some("true") {
        return Err(exists(name));
    }
    let mut updated = cluster.clone();
    if let Some(annotations) = updated
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(ALLOW_REREGISTRATION_ANNOTATION);
        if annotations.is_empty() {
            if let Some(meta) = updated["metadata"].as_object_mut() {
                meta.remove("annotations");
            }
        }
    }
    for (k, v) in &reg.labels {
        updated["metadata"]["labels"][k] = json!(v);
    }
    set_location(&mut updated, reg);
    Ok(updated)
}

fn set_location(cluster: &mut Value, reg: &Registration) {
    if !reg.provider.is_empty() {
        cluster["spec"]["provider"] = json!(reg.provider);
    }
    if !reg.region.is_empty() {
        cluster["spec"]["region"] = json!(reg.region);
    }
    if !reg.zones.is_empty() {
        cluster["spec"]["zones"] = json!(reg.zones);
    }
}

/// Writes the credential Secret of `cluster`; answers the store revision of the write.
async fn store_credential(state: &ApiState, cluster: &str, hash: &str) -> ApiResult<Option<u64>> {
    let rt = secrets();
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(cluster),
            "namespace": CLUSTER_NAMESPACE,
            "labels": {CREDENTIAL_LABEL: cluster},
            "annotations": {TOKEN_HASH_ANNOTATION: hash},
        },
        "type": "flotilla.io/agent-credential",
    });
    let map = |e| ApiError::from_store(e, "", "secrets");
    match state.store.create(&rt, secret.clone()).await {
        Ok(stored) => Ok(revision_of(&stored)),
        Err(StoreError::AlreadyExists { .. }) => {
            // Replace unconditionally: the newest registration wins.
            state
                .store
                .update(&rt, secret)
                .await
                .map(|stored| revision_of(&stored))
                .map_err(map)
        }
        Err(e) => Err(map(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_allowed_pull_cluster_is_registered_again() {
        let reg = Registration {
            cluster_name: "m1".into(),
            region: "eu".into(),
            labels: BTreeMap::from([("tier".to_string(), "gold".to_string())]),
            ..Registration::default()
        };
        let cluster = |extra: Value| {
            let mut c = json!({"metadata": {"name": "m1", "labels": {"keep": "me"}},
                               "spec": {"syncMode": "Pull"}});
            json_patch::merge(&mut c, &extra);
            c
        };
        let allow = json!({"metadata": {"annotations": {ALLOW_REREGISTRATION_ANNOTATION: "true"}}});
        let table = [
            ("not allowed", json!({}), false),
            (
                "allowed with another word",
                json!({"metadata": {"annotations": {ALLOW_REREGISTRATION_ANNOTATION: "yes"}}}),
                false,
            ),
            ("allowed", allow.clone(), true),
            (
                "allowed but Push",
                json!({"spec": {"syncMode": "Push"},
                       "metadata": {"annotations": {ALLOW_REREGISTRATION_ANNOTATION: "true"}}}),
                false,
            ),
            (
                "allowed but being deleted",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                                    "annotations": {ALLOW_REREGISTRATION_ANNOTATION: "true"}}}),
                false,
            ),
        ];
        for (what, extra, want) in table {
            let got = reregistration(&cluster(extra), "m1", &reg);
            assert_eq!(got.is_ok(), want, "{what}: {got:?}");
            if let Err(e) = got {
                assert!(matches!(e, ApiError::Conflict { .. }), "{what}: {e:?}");
            }
        }
        // The annotation is consumed, the others stay; labels and location come from the
        // registration.
        let mut extra = allow;
        extra["metadata"]["annotations"]["other"] = json!("x");
        let updated = reregistration(&cluster(extra), "m1", &reg).unwrap();
        assert_eq!(updated["metadata"]["annotations"], json!({"other": "x"}));
        assert_eq!(
            updated["metadata"]["labels"],
            json!({"keep": "me", "tier": "gold"})
        );
        assert_eq!(updated["spec"]["region"], "eu");
        let bare = reregistration(
            &cluster(
                json!({"metadata": {"annotations": {ALLOW_REREGISTRATION_ANNOTATION: "true"}}}),
            ),
            "m1",
            &reg,
        )
        .unwrap();
        assert!(bare["metadata"].get("annotations").is_none(), "{bare}");
    }
}
