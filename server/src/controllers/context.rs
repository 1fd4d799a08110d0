//! What every controller is built from: one [`ControllerContext`] (store, kind registry, event
//! recorder, metrics registry, clock, member client, interpreter, settings) made once by the
//! server. Each controller module exports `pub fn controller(ctx) -> Result<Controller, _>`
//! owning its reconciler, its sources (what wakes it) and its run settings; the server keeps a
//! list of those functions and starts them through [`ControllerContext::start`], the one spawn
//! path.

use crate::controllers::failover::brake::EvictionBrake;
use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::runtime::controller::{
    spawn, Controller, ControllerHandle, ControllerMetrics,
};
use crate::controllers::settings::ControllerSettings;
use crate::controllers::ControllerEntry;
use crate::events::EventRecorder;
use crate::interpreter::Interpreter;
use crate::kinds::KindRegistry;
use crate::probes::MemberClient;
use crate::store::Store;
use flotilla_support::clock::SharedClock;
use std::sync::Arc;
use tokio::sync::watch;

/// Why a controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    /// A metric of the controller could not be registered (e.g. registered twice).
    #[error("cannot register the metrics of {controller}")]
    Metrics {
        controller: &'static str,
        #[source]
        source: prometheus::Error,
    },
    /// A built-in kind the controller watches is unknown.
    #[error("{controller} watches {kind}, which is not a built-in kind")]
    MissingKind {
        controller: &'static str,
        kind: &'static str,
    },
}

impl WiringError {
    /// A closure mapping a registration error of `controller`.
    pub fn metrics(controller: &'static str) -> impl FnOnce(prometheus::Error) -> Self {
        move |source| Self::Metrics { controller, source }
    }
}

/// Builds one controller from the context.
pub type ControllerFn = fn(&ControllerContext) -> Result<Controller, WiringError>;

/// Everything controllers are built from, made once per server.
#[derive(Clone)]
pub struct ControllerContext {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Known kinds (built-in and CRDs).
    pub registry: Arc<KindRegistry>,
    /// Event recorder (use [`EventRecorder::for_component`]).
    pub events: EventRecorder,
    /// Where controllers register their metrics.
    pub metrics: prometheus::Registry,
    /// Queue depth, reconcile counts and latency of every controller.
    pub controller_metrics: ControllerMetrics,
    /// The server's clock.
    pub clock: SharedClock,
    /// The client for push members (one connection pool for all).
    pub member: Arc<dyn MemberClient>,
    /// The resource interpreter (built-in rules plus customizations).
    pub interpreter: Arc<Interpreter>,
    /// The flags.
    pub settings: ControllerSettings,
    /// What failover decisions count, shared by the controllers that evict and release.
    pub failover_metrics: FailoverMetrics,
    /// The partition brake both eviction producers ask (one set of buckets per server; its
    /// startup grace counts from the context's creation).
    pub brake: EvictionBrake,
}

impl ControllerContext {
    /// A context whose events and controller metrics are registered in `metrics`.
    pub fn new(
        store: Arc<dyn Store>,
        registry: Arc<KindRegistry>,
        clock: SharedClock,
        member: Arc<dyn MemberClient>,
        metrics: &prometheus::Registry,
        settings: ControllerSettings,
    ) -> Result<Self, WiringError> {
        let controller_metrics =
            ControllerMetrics::register(metrics).map_err(WiringError::metrics("runtime"))?;
        let events = EventRecorder::new(store.clone(), clock.clone(), "flotilla-server", metrics)
            .map_err(WiringError::metrics("events"))?;
        let failover_metrics =
            FailoverMetrics::register(metrics).map_err(WiringError::metrics("failover"))?;
        let brake = EvictionBrake::new(
            settings.eviction_brake.clone(),
            clock.now(),
            Some(failover_metrics.clone()),
        );
        Ok(Self {
            brake,
            store,
            registry,
            events,
            metrics: metrics.clone(),
            controller_metrics,
            clock,
            member,
            interpreter: Arc::new(Interpreter::new()),
            settings,
            failover_metrics,
        })
    }

    /// Concurrent reconciles of each propagation controller.
    pub fn propagation_workers(&self) -> usize {
        self.settings.propagation_workers.max(1)
    }

    /// Builds every controller of `list`, then starts them all (nothing starts if one fails
    /// to build). They stop when `stop` turns true or through their handles.
    pub fn start(
        &self,
        list: &[ControllerEntry],
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<ControllerHandle>, WiringError> {
        let built = list
            .iter()
            .map(|entry| (entry.build)(self))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(built
            .into_iter()
            .map(|c| {
                tracing::debug!(
                    controller = c.name(),
                    workers = c.config.workers,
                    "starting controller"
                );
                spawn(
                    self.store.clone(),
                    c,
                    Some(self.controller_metrics.clone()),
                    stop.clone(),
                )
            })
            .collect())
    }
}
