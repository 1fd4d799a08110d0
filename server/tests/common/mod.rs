//! Shared set-up for API tests: a router over an in-memory store, called without a socket.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use flotilla_server::api;
use flotilla_server::app::{self, ServerConfig, StoreBackend};
use flotilla_server::kinds::CrdFeed;
use flotilla_server::store::Store;
use flotilla_support::clock::{SharedClock, SystemClock};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tower::ServiceExt;

pub const TOKEN: &str = "test-admin-token";
pub const JOIN_TOKEN: &str = "test-join-token";

pub struct TestApi {
    pub router: Router,
    pub store: Arc<dyn Store>,
    /// Keeps the kind registry in step with the store's CRDs, as in the server.
    pub crd_feed: CrdFeed,
}

impl TestApi {
    pub async fn new() -> Self {
        Self::with_config(|_| {}).await
    }

    pub async fn with_config(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        Self::with_parts(tweak, |store| store, |_| {}).await
    }

    /// A router over the store `wrap` makes of the in-memory one, with the API state as
    /// `tweak_state` leaves it.
    pub async fn with_parts(
        tweak: impl FnOnce(&mut ServerConfig),
        wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
        tweak_state: impl FnOnce(&mut api::ApiState),
    ) -> Self {
        let mut config = ServerConfig::new("/nonexistent");
        config.store_backend = StoreBackend::Memory;
        tweak(&mut config);
        let clock: SharedClock = Arc::new(SystemClock);
        let store = wrap(app::open_store(&config, clock.clone()).await.unwrap());
        let (registry, crd_feed) = CrdFeed::start(store.clone()).await.unwrap();
        let mut state = app::api_state(
            &config,
            store.clone(),
            registry,
            (TOKEN, JOIN_TOKEN),
            clock,
            tokio::sync::watch::channel(false).1,
        )
        .unwrap();
        tweak_state(&mut state);
        state.ready.store(true, Ordering::SeqCst);
        TestApi {
            router: api::router(state),
            store,
            crd_feed,
        }
    }

    /// Sends a request with the admin token and returns status, headers' content type and body.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
        extra: &[(&str, &str)],
    ) -> (StatusCode, String) {
        self.send_as(TOKEN, method, path, content_type, body, extra)
            .await
    }

    /// Sends a request with the given bearer token.
    pub async fn send_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
        extra: &[(&str, &str)],
    ) -> (StatusCode, String) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"));
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).to_string())
    }

    /// JSON request, JSON answer.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (ct, b) = match body {
            Some(v) => (Some("application/json"), Body::from(v.to_string())),
            None => (None, Body::empty()),
        };
        let (status, text) = self.send(method, path, ct, b, &[]).await;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn patch(&self, path: &str, ct: &str, body: Value) -> (StatusCode, Value) {
        let (status, text) = self
            .send("PATCH", path, Some(ct), Body::from(body.to_string()), &[])
            .await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// Asserts a Kubernetes Status body with the given code and reason.
pub fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}
