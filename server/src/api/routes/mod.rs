//! The paths the API serves, and [`router`], the one place that joins the wings into them:
//! the resource paths `/api/...` and `/apis/...` ([`resources`]: every verb on the stored
//! kinds, handed to [`crate::api::computed`] for the kinds computed instead), the discovery
//! and OpenAPI documents kubectl reads ([`discovery`], [`openapi`]), pull members'
//! registration ([`register`]), the fleet page ([`crate::api::ui`]), health and `/metrics`.
//! The top wing: it may use every other, and none uses it.

pub mod discovery;
pub mod openapi;
pub mod register;
pub mod resources;

use crate::api::access::auth;
use crate::api::computed;
use crate::api::error;
use crate::api::http::limits;
use crate::api::ui;
use crate::api::wire::metrics;
use crate::api::ApiState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use std::sync::atomic::Ordering;

/// Builds the API router.
pub fn router(state: ApiState) -> Router {
    let gate = auth::Gate {
        auth: state.auth.clone(),
        also_public: ui::is_public,
    };
    let record = metrics::RecordState {
        metrics: state.metrics.clone(),
        registry: state.registry.clone(),
        computed_subresource: computed::is_subresource,
    };
    let body_limits = limits::BodyLimits {
        max_body_bytes: state.limits.max_body_bytes,
        body_read_timeout: state.limits.body_read_timeout,
    };
    let timing = state
        .member_timing
        .and_then(|t| axum::http::HeaderValue::from_str(&t.to_header()).ok());
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/version",
            get(|| async { axum::Json(discovery::version()) }),
        )
        .route("/metrics", get(render_metrics))
        .merge(ui::routes())
        .route(
            "/flotilla/v1/register",
            axum::routing::post(register::register),
        )
        .route("/openapi/v3", get(resources::openapi_index))
        .route("/openapi/v3/{*gv}", get(resources::openapi_group_version))
        .route("/api", any(resources::dispatch_core_root))
        .route("/api/{*rest}", any(resources::dispatch))
        .route("/apis", any(resources::dispatch_apis_root))
        .route("/apis/{*rest}", any(resources::dispatch))
        .fallback(|uri: axum::http::Uri| async move { error::ApiError::no_route(uri.path()) })
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            body_limits,
            limits::guard_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            gate,
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn(limits::status_bodies))
        .layer(axum::middleware::from_fn_with_state(
            record,
            metrics::record,
        ))
        .layer(axum::middleware::map_response_with_state(
            timing,
            advertise_member_timing,
        ));
    harden(routes)
}

/// Puts the member timing header on every answer, so an agent learns the server's current
/// periods from whatever it asked last (docs/members.md, "One timing for server and agents").
async fn advertise_member_timing(
    State(timing): State<Option<axum::http::HeaderValue>>,
    mut response: Response,
) -> Response {
    if let Some(value) = timing {
        response.headers_mut().insert(
            axum::http::HeaderName::from_static(flotilla_api::member_timing::MEMBER_TIMING_HEADER),
            value,
        );
    }
    response
}

/// The layer every answer passes through last: a handler that panics is answered with a 500
/// `Status` instead of a dropped connection.
pub fn harden(router: Router) -> Router {
    router.layer(tower_http::catch_panic::CatchPanicLayer::custom(
        error::panic_response,
    ))
}

async fn readyz(State(state): State<ApiState>) -> impl IntoResponse {
    if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn render_metrics(State(state): State<ApiState>) -> impl IntoResponse {
    if let Ok(counts) = state.store.object_counts().await {
        for (resource, n) in counts {
            state
                .metrics
                .objects
                .with_label_values(&[&resource])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
    if let Some(brake) = &state.brake() {
        // The brake's gauges say the state of now, not of the last eviction.
        if let Ok(clusters) =
            crate::controllers::shared::cluster_cache::read(state.store.as_ref()).await
        {
            brake.refresh_gauges(&clusters, state.clock.now());
        }
    }
    let (flushes, writes) = state.store.durability_counts();
    state.metrics.observe_durability(flushes, writes);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(),
    )
}
