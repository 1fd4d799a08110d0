//! `POST /flotilla/v1/register`: a pull member joins with the join token. The registration is
//! read and checked, the member's Cluster created (or, where an admin allowed it, taken over)
//! through the same admission as any write, and the member handed a fresh credential
//! ([`crate::api::access::registration`] says what a credential is, how long it lives and
//! who may register what).

use crate::api::access::auth::{bearer, drain};
use crate::api::access::registration::{
    exists, issue_credential, new_cluster, reregistration, Registration,
};
use crate::api::error::{ApiError, ApiResult, Cause};
use crate::api::wire::body;
use crate::api::write::admission;
use crate::api::ApiState;
use crate::store::StoreError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use flotilla_api::kinds::well_known;
use serde_json::{json, Value};

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
        drain(req.into_body()).await;
        return Err(ApiError::Unauthorized);
    }
    let bytes = body::read(req.into_body(), state.limits.max_body_bytes).await?;
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
    let store_err = |e| ApiError::from_store(e, "cluster.karmada.io", "clusters");
    match state.store.get(&clusters, None, &name).await {
        Err(StoreError::NotFound { .. }) => {
            let mut cluster = new_cluster(&reg);
            admission::admit(state, &clusters, &mut cluster, None)?;
            match state.store.create(&clusters, cluster).await {
                Ok(_) => {}
                Err(StoreError::AlreadyExists { .. }) => return Err(exists(&name)),
                Err(e) => return Err(store_err(e)),
            }
        }
        Ok(existing) => {
            let mut updated = reregistration(&existing, &name, &reg)?;
            admission::admit(state, &clusters, &mut updated, Some(&existing))?;
            // The stored resourceVersion makes this a compare-and-swap: of two registrations
            // racing for one annotation, one gets the 409.
            state
                .store
                .update(&clusters, updated)
                .await
                .map_err(store_err)?;
            tracing::info!(cluster = %name, "re-registration allowed by annotation; the former credential is revoked");
        }
        Err(e) => return Err(store_err(e)),
    }
    let token = issue_credential(state, &name).await?;
    tracing::info!(cluster = %name, "member registered");
    Ok(json!({"clusterName": name, "token": token}))
}
