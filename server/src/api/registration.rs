//! Pull members join here: `POST /flotilla/v1/register` with the join token creates (or
//! updates) the member's Cluster with syncMode Pull and hands back a fresh credential scoped to
//! that cluster. Only the credential's SHA-256 is stored (a Secret in `karmada-cluster`), so a
//! restarted server still knows every member; registering again replaces the credential.

use super::admission;
use super::auth::{bearer, generate_token, token_hash};
use super::error::{ApiError, ApiResult, Cause};
use super::ApiState;
use crate::store::{ListOptions, StoreError};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
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
    format!("flotilla-agent-{cluster}")
}

fn secrets() -> flotilla_api::kinds::ResourceType {
    builtin_by_plural("", "secrets").unwrap_or_else(well_known::events)
}

/// Loads every stored member credential into the authenticator (at start-up).
pub async fn load_credentials(state: &ApiState) -> Result<usize, StoreError> {
    let page = state
        .store
        .list(&secrets(), Some(CLUSTER_NAMESPACE), &ListOptions::default())
        .await?;
    let mut n = 0;
    for secret in page.items {
        let cluster = secret
            .pointer(&format!(
                "/metadata/labels/{}",
                CREDENTIAL_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        let hash = secret
            .pointer(&format!(
                "/metadata/annotations/{}",
                TOKEN_HASH_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        if let (Some(cluster), Some(hash)) = (cluster, hash) {
            state.auth.set_agent_credential(cluster, hash);
            n += 1;
        }
    }
    Ok(n)
}

fn invalid(field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "Registration",
        "flotilla.io",
        "",
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.into(),
        }],
    )
}

/// `POST /flotilla/v1/register`.
pub async fn register(State(state): State<ApiState>, req: Request<Body>) -> Response {
    match register_inner(&state, req).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn register_inner(state: &ApiState, req: Request<Body>) -> ApiResult<Value> {
    let authorized = bearer(&req).is_some_and(|t| state.auth.is_join_token(t));
    if !authorized {
        return Err(ApiError::Unauthorized);
    }
    let bytes = super::body::read(req.into_body(), state.limits.max_body_bytes).await?;
    let reg: Registration = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the registration is malformed: {e}")))?;
    let name_errors = flotilla_api::names::dns1123_label(&reg.cluster_name);
    if let Some(e) = name_errors.first() {
        return Err(invalid(
            "clusterName",
            format!("Invalid value: {:?}: {e}", reg.cluster_name),
        ));
    }
    let name = reg.cluster_name.clone();
    let clusters = well_known::clusters();
    match state.store.get(&clusters, None, &name).await {
        Err(StoreError::NotFound { .. }) => {
            let mut cluster = json!({
                "apiVersion": "cluster.karmada.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": name, "labels": reg.labels},
                "spec": {"syncMode": "Pull"},
            });
            set_location(&mut cluster, &reg);
            admission::admit(state, &clusters, &mut cluster, None)?;
            match state.store.create(&clusters, cluster).await {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(ApiError::from_store(e, "cluster.karmada.io", "clusters")),
            }
        }
        Ok(existing) => {
            if existing.pointer("/spec/syncMode").and_then(Value::as_str) == Some("Push") {
                return Err(ApiError::Conflict {
                    message: format!(
                        "cluster {name:?} is a Push member; a pull agent cannot register it"
                    ),
                    name,
                    group: "cluster.karmada.io".into(),
                    kind: "clusters".into(),
                });
            }
            let mut updated = existing.clone();
            for (k, v) in &reg.labels {
                updated["metadata"]["labels"][k] = json!(v);
            }
            set_location(&mut updated, &reg);
            if updated != existing {
                admission::admit(state, &clusters, &mut updated, Some(&existing))?;
                state
                    .store
                    .update(&clusters, updated)
                    .await
                    .map_err(|e| ApiError::from_store(e, "cluster.karmada.io", "clusters"))?;
            }
        }
        Err(e) => return Err(ApiError::from_store(e, "cluster.karmada.io", "clusters")),
    }
    let token = generate_token();
    let hash = token_hash(&token);
    store_credential(state, &name, &hash).await?;
    state.auth.set_agent_credential(&name, &hash);
    tracing::info!(cluster = %name, "member registered");
    Ok(json!({"clusterName": name, "token": token}))
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

async fn store_credential(state: &ApiState, cluster: &str, hash: &str) -> ApiResult<()> {
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
        Ok(_) => Ok(()),
        Err(StoreError::AlreadyExists { .. }) => {
            // Replace unconditionally: the newest registration wins.
            state
                .store
                .update(&rt, secret)
                .await
                .map(|_| ())
                .map_err(map)
        }
        Err(e) => Err(map(e)),
    }
}
