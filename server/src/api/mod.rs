//! The Kubernetes-style HTTP API (axum): discovery and OpenAPI for kubectl, CRUD, patch, watch
//! and tables for every kind, `Status` errors, bearer-token auth, health and metrics.
//! [`router`] builds it over an [`ApiState`]; the server binary and the tests serve it.
//!
//! The API is in wings, each a folder whose `mod.rs` says what it owns, listed here from the
//! floor up; a wing imports only wings listed before it (`server/tests/architecture.rs`):
//!
//! | wing | owns |
//! |---|---|
//! | [`access`] | who is asking and what they may do: bearer tokens, the member agents' scope, the credentials registration hands out and the feed that keeps them in step with the store. Imports no other wing. |
//! | [`http`] | the envelope of every request: connection and body limits, deadlines, the blocking pool, raw path segments, query options. Imports no other wing. |
//! | [`wire`] | how objects travel: request and answer bodies (JSON, YAML), what a path addresses ([`wire::target`]) and how a stored object is shown (views, `events.k8s.io`), Tables, watch streams, the metrics exposition |
//! | [`write`] | the path of every write: admission, PATCH bodies, the compare-and-swap update |
//! | [`computed`] | the kinds and subresources computed instead of stored, in one table |
//! | [`ui`] | the fleet page and its files |
//! | [`routes`] | the paths the API serves and the router that joins the wings: resource paths, discovery, OpenAPI, pull members' registration, health, metrics |
//!
//! Beneath them all, here: [`ApiState`], [`Limits`] and [`error`], the one error type.

pub mod access;
pub mod computed;
pub mod error;
pub mod http;
pub mod routes;
pub mod ui;
pub mod wire;
pub mod write;

pub use routes::{harden, router};

use crate::controllers::failover::brake_reading::{BrakeReading, BrakeSlot};
use crate::kinds::KindRegistry;
use crate::store::Store;
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_support::clock::SharedClock;
use std::sync::atomic::AtomicBool;
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
    pub auth: access::auth::Authenticator,
    /// Metrics registry.
    pub metrics: Arc<wire::metrics::Metrics>,
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
    pub dry_run: computed::simulation::DryRun,
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
    pub fn brake(&self) -> Option<Arc<dyn BrakeReading>> {
        self.eviction_brake.current()
    }
}
