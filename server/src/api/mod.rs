//! The Kubernetes-style HTTP API (axum): discovery and OpenAPI for kubectl, CRUD, patch, watch
//! and tables for every kind, `Status` errors, bearer-token auth, health and metrics.
//! [`router`] builds it over an [`ApiState`]; the server binary and the tests serve it.

pub mod admission;
pub mod auth;
pub mod authz;
pub mod body;
pub mod computed;
pub mod credential_feed;
pub mod discovery;
pub mod error;
pub mod events_v1;
pub mod eviction_brakes;

/// Where the API finds the brake of the controllers running on this server, if any.
pub type BrakeSlot =
    std::sync::Arc<parking_lot::RwLock<Option<crate::controllers::failover::brake::EvictionBrake>>>;
pub mod explain;
pub mod failovers;
pub mod limits;
pub mod metrics;
pub mod nesting;
pub mod off_thread;
pub mod openapi;
pub mod options;
pub mod patch;
pub mod path;
pub mod registration;
pub mod resources;
pub mod scale;
pub mod simulation;
pub mod table;
pub mod target;
pub mod ui;
pub mod update;
pub mod views;
pub mod watch;

use crate::kinds::KindRegistry;
use crate::store::Store;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_support::clock::SharedClock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Limits that protect the server from one request.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body (413 above it).
    pub max_body_bytes: usize,
    /// Deadline of a non-watch request (504 after it).
    pub request_timeout: Duration,
    /// How often a watch with `allowWatchBookmarks` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Time a client has to send a request's headers (the connection is closed after it).
    pub header_read_timeout: Duration,
    /// Time a request body has to arrive, from the first read of it (408 after it).
    pub body_read_timeout: Duration,
    /// Client connections served at once (more are closed at accept).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 3 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            bookmark_interval: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// Everything a request handler needs.
#[derive(Clone)]
pub struct ApiState {
    /// The object store.
    pub store: Arc<dyn Store>,
    /// Served kinds.
    pub registry: Arc<KindRegistry>,
    /// Token checks.
    pub auth: auth::Authenticator,
    /// Metrics registry.
    pub metrics: Arc<metrics::Metrics>,
    /// Defaulting parameters from the server's flags.
    pub defaulting: DefaultingConfig,
    /// Time source.
    pub clock: SharedClock,
    /// Request limits.
    pub limits: Limits,
    /// Set once the store is open, migrations ran and controllers started.
    pub ready: Arc<AtomicBool>,
    /// The flags the failover dry-run reads (the controllers' timings and switches).
    pub simulation: crate::simulation::SimulationSettings,
    /// What computes the failover dry-run's answer (on a blocking thread).
    pub dry_run: simulation::DryRun,
    /// Turns true when the server shuts down; open watches end then.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The controllers' partition brake, read by `evictionbrakes` and `/metrics`: set while
    /// this server's controllers run (always on one server; during its terms as leader when
    /// several share an etcd store), empty otherwise.
    pub eviction_brake: BrakeSlot,
    /// The periods pull agents are asked to keep, sent on every answer in the
    /// `Flotilla-Member-Timing` header (`None` when no controllers watch the members).
    pub member_timing: Option<flotilla_api::member_timing::MemberTiming>,
}

impl ApiState {
    /// The brake of the controllers running on this server, if any.
    pub fn brake(&self) -> Option<crate::controllers::failover::brake::EvictionBrake> {
        self.eviction_brake.read().clone()
    }
}

/// Builds the API router.
pub fn router(state: ApiState) -> Router {
    let auth = state.auth.clone();
    let record = metrics::RecordState {
        metrics: state.metrics.clone(),
        registry: state.registry.clone(),
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
            axum::routing::post(registration::register),
        )
        .route("/openapi/v3", get(resources::openapi_index))
        .route("/openapi/v3/{*gv}", get(resources::openapi_group_version))
        .route("/api", any(resources::dispatch_core_root))
        .route("/api/{*rest}", any(resources::dispatch_core))
        .route("/apis", any(resources::dispatch_apis_root))
        .route("/apis/{*rest}", any(resources::dispatch_apis))
        .fallback(|uri: axum::http::Uri| async move { error::ApiError::no_route(uri.path()) })
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            body_limits,
            limits::guard_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            auth,
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
            brake.view(&clusters, state.clock.now());
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
