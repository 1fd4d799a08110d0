//! The member's HTTP surface: what a push-mode member is to the server, and where tests and
//! users inject faults. Every member of the process is served under `/members/{name}/...`;
//! when the process hosts exactly one member its routes are also served at the root.
//!
//! | path | what |
//! |---|---|
//! | `GET /readyz`, `GET /healthz` | `ok` (200); 500 while the "unhealthy" fault is on |
//! | `POST /apply` | body: one manifest; answers the stored object with its status |
//! | `GET /objects?apiVersion=&kind=&namespace=&name=` | the object (404 if absent); without `name`, `{"items": [...]}` |
//! | `DELETE /objects?apiVersion=&kind=&namespace=&name=` | deletes it; answers it as it was (404 if absent) |
//! | `GET /cluster` | kubernetesVersion, apiEnablements, nodeSummary, resourceSummary, healthy |
//! | `GET /faults` | current faults, `fences` (times the member self-fenced) and `fencedAt` (the last) |
//! | `POST /faults/{unreachable,unhealthy,cordon}` | `{"enabled": bool}` |
//! | `POST /faults/delete-pods` | `{"namespace", "labelSelector"}` (empty: all) |
//! | `POST /faults/capacity` | `{"nodes", "cpu", "memory", "pods"}` (absent: unchanged) |
//! | `POST /faults/status` | `{"apiVersion", "kind", "namespace", "name", "status"}` |
//!
//! While a member is unreachable every non-fault request to it hangs until the fault is lifted
//! (the client times out, as it would on a dead network); the fault API keeps answering.
//! `GET /members` lists the hosted members.

mod error;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

pub use error::ApiError;

use crate::member::Member;
use flotilla_member::{CapacityChange, ListFilter, ObjectRef, RuntimeError, RuntimeFaults};

/// Shared state of the surface.
#[derive(Clone)]
struct ApiState {
    members: Arc<HashMap<String, Arc<Member>>>,
    names: Arc<Vec<String>>,
    shutdown: watch::Receiver<bool>,
}

/// The member the root routes serve when the process hosts exactly one.
#[derive(Clone)]
struct FixedMember(Arc<Member>);

/// The router serving `members` (names must be unique). `shutdown` turning true releases
/// requests held by the "unreachable" fault.
pub fn router(members: &[Arc<Member>], shutdown: watch::Receiver<bool>) -> Router {
    let state = ApiState {
        members: Arc::new(
            members
                .iter()
                .map(|m| (m.name.clone(), m.clone()))
                .collect(),
        ),
        names: Arc::new(members.iter().map(|m| m.name.clone()).collect()),
        shutdown,
    };
    let mut app = Router::new()
        .route("/members", get(list_members))
        .nest("/members/{member}", member_routes());
    if let [only] = members {
        app = app.merge(member_routes().layer(Extension(FixedMember(only.clone()))));
    }
    app.with_state(state)
}

fn member_routes() -> Router<ApiState> {
    Router::new()
        .route("/readyz", get(health))
        .route("/healthz", get(health))
        .route("/apply", post(apply))
        .route("/objects", get(get_objects).delete(delete_object))
        .route("/cluster", get(cluster))
        .route("/faults", get(faults))
        .route("/faults/unreachable", post(fault_unreachable))
        .route("/faults/unhealthy", post(fault_unhealthy))
        .route("/faults/cordon", post(fault_cordon))
        .route("/faults/delete-pods", post(fault_delete_pods))
        .route("/faults/capacity", post(fault_capacity))
        .route("/faults/status", post(fault_status))
}

/// The member a request names, reachable or not (the fault API).
struct AnyMember(Arc<Member>);

impl FromRequestParts<ApiState> for AnyMember {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        if let Some(FixedMember(m)) = parts.extensions.get::<FixedMember>() {
            return Ok(AnyMember(m.clone()));
        }
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let name = params.get("member").cloned().unwrap_or_default();
        state
            .members
            .get(&name)
            .cloned()
            .map(AnyMember)
            .ok_or_else(|| ApiError::NotFound(format!("member {name:?} not found")))
    }
}

/// The member a request names, once it is reachable: requests to an unreachable member wait
/// here until the fault is lifted (or the agent stops).
struct Reachable(Arc<Member>);

impl FromRequestParts<ApiState> for Reachable {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let AnyMember(m) = AnyMember::from_request_parts(parts, state).await?;
        let mut shutdown = state.shutdown.clone();
        tokio::select! {
            _ = m.faults.wait_reachable() => Ok(Reachable(m)),
            _ = flotilla_member::stopped(&mut shutdown) => Err(ApiError::ShuttingDown),
        }
    }
}

fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("request body: {e}")))
}

async fn list_members(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"members": *state.names}))
}

async fn health(Reachable(m): Reachable) -> Response {
    if m.faults.get().unhealthy || !m.summary().await.map(|s| s.healthy).unwrap_or(false) {
        (StatusCode::INTERNAL_SERVER_ERROR, "unhealthy").into_response()
    } else {
        (StatusCode::OK, "ok").into_response()
    }
}

async fn apply(Reachable(m): Reachable, body: Bytes) -> Result<Json<Value>, ApiError> {
    let manifest: Value = parse_body(&body)?;
    Ok(Json(m.runtime.apply(manifest).await?))
}

/// `?apiVersion=&kind=&namespace=&name=`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ObjectQuery {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl ObjectQuery {
    fn object_ref(&self) -> Result<ObjectRef, ApiError> {
        if self.api_version.is_empty() || self.kind.is_empty() || self.name.is_empty() {
            return Err(ApiError::BadRequest(
                "apiVersion, kind and name are required".into(),
            ));
        }
        let namespace = flotilla_member::normalize_namespace(
            flotilla_member::group_of(&self.api_version),
            &self.kind,
            &self.namespace,
        );
        Ok(ObjectRef::new(
            &self.api_version,
            &self.kind,
            &namespace,
            &self.name,
        ))
    }
}

async fn get_objects(
    Reachable(m): Reachable,
    Query(q): Query<ObjectQuery>,
) -> Result<Json<Value>, ApiError> {
    if q.name.is_empty() {
        let items = m
            .runtime
            .list(&ListFilter {
                api_version: q.api_version,
                kind: q.kind,
                namespace: q.namespace,
            })
            .await?;
        return Ok(Json(json!({"items": items})));
    }
    let r = q.object_ref()?;
    match m.runtime.get(&r).await? {
        Some(obj) => Ok(Json(obj)),
        None => Err(ApiError::NotFound(format!("{r} not found"))),
    }
}

async fn delete_object(
    Reachable(m): Reachable,
    Query(q): Query<ObjectQuery>,
) -> Result<Json<Value>, ApiError> {
    let r = q.object_ref()?;
    match m.runtime.delete(&r).await? {
        Some(obj) => Ok(Json(obj)),
        None => Err(ApiError::NotFound(format!("{r} not found"))),
    }
}

async fn cluster(Reachable(m): Reachable) -> Result<Json<Value>, ApiError> {
    let summary = m.summary().await?;
    Ok(Json(serde_json::to_value(summary).unwrap_or(Value::Null)))
}

fn runtime_faults(m: &Member) -> Result<&dyn RuntimeFaults, ApiError> {
    m.runtime
        .faults()
        .ok_or_else(|| ApiError::Runtime(RuntimeError::Unsupported("fault injection".into())))
}

async fn describe(m: &Member) -> Result<Value, ApiError> {
    let flags = m.faults.get();
    let mut out = json!({"unreachable": flags.unreachable, "unhealthy": flags.unhealthy,
        "fences": m.fence.fences()});
    if let (Some(at), Some(obj)) = (m.fence.fenced_at(), out.as_object_mut()) {
        obj.insert("fencedAt".into(), json!(crate::pull::lease::micro_time(at)));
    }
    if let (Some(f), Some(obj)) = (m.runtime.faults(), out.as_object_mut()) {
        if let Value::Object(more) = f.describe().await? {
            obj.extend(more);
        }
    }
    Ok(out)
}

async fn faults(AnyMember(m): AnyMember) -> Result<Json<Value>, ApiError> {
    Ok(Json(describe(&m).await?))
}

#[derive(Debug, Deserialize)]
struct Toggle {
    enabled: bool,
}

async fn fault_unreachable(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let t: Toggle = parse_body(&body)?;
    tracing::info!(cluster = %m.name, enabled = t.enabled, "fault: unreachable");
    m.faults.set_unreachable(t.enabled);
    Ok(Json(describe(&m).await?))
}

async fn fault_unhealthy(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let t: Toggle = parse_body(&body)?;
    tracing::info!(cluster = %m.name, enabled = t.enabled, "fault: unhealthy");
    m.faults.set_unhealthy(t.enabled);
    Ok(Json(describe(&m).await?))
}

async fn fault_cordon(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let t: Toggle = parse_body(&body)?;
    tracing::info!(cluster = %m.name, enabled = t.enabled, "fault: cordon");
    runtime_faults(&m)?.cordon(t.enabled).await?;
    Ok(Json(describe(&m).await?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct DeletePods {
    namespace: String,
    label_selector: String,
}

async fn fault_delete_pods(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let req: DeletePods = if body.is_empty() {
        DeletePods::default()
    } else {
        parse_body(&body)?
    };
    let deleted = runtime_faults(&m)?
        .delete_pods(&req.namespace, &req.label_selector)
        .await?;
    tracing::info!(cluster = %m.name, namespace = %req.namespace,
        label_selector = %req.label_selector, deleted, "fault: delete pods");
    Ok(Json(json!({"deleted": deleted})))
}

async fn fault_capacity(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let change: CapacityChange = parse_body(&body)?;
    tracing::info!(cluster = %m.name, ?change, "fault: capacity");
    runtime_faults(&m)?.set_capacity(change).await?;
    Ok(Json(describe(&m).await?))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetStatus {
    api_version: String,
    kind: String,
    #[serde(default)]
    namespace: String,
    name: String,
    status: Value,
}

async fn fault_status(AnyMember(m): AnyMember, body: Bytes) -> Result<Json<Value>, ApiError> {
    let req: SetStatus = parse_body(&body)?;
    let r = ObjectQuery {
        api_version: req.api_version,
        kind: req.kind,
        namespace: req.namespace,
        name: req.name,
    }
    .object_ref()?;
    tracing::info!(cluster = %m.name, object = %r, "fault: status");
    Ok(Json(runtime_faults(&m)?.set_status(&r, req.status).await?))
}
