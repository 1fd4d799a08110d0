//! What every controller is built from: one [`ControllerContext`] (store, kind registry, event
//! recorder, metrics registry, clock, member client, interpreter, settings) made once by the
//! server. Each controller module exports `pub fn controller(ctx) -> Result<Controller, _>`
//! owning its reconciler, its sources (what wakes it) and its run settings; the server keeps a
//! list of those functions and starts them through [`ControllerContext::start`], the one spawn
//! path.

use crate::clock::SharedClock;
use crate::controllers::failover::application_failover::ApplicationFailoverSettings;
use crate::controllers::failover::brake::{BrakeSettings, EvictionBrake};
use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::failover::taint_manager::TaintManagerSettings;
use crate::controllers::members::cluster_status::HealthConfig;
use crate::controllers::members::cluster_taints::TaintConfig;
use crate::controllers::runtime::controller::{
    spawn, Controller, ControllerHandle, ControllerMetrics,
};
use crate::events::EventRecorder;
use crate::interpreter::Interpreter;
use crate::kinds::KindRegistry;
use crate::probes::MemberClient;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Settings of the controllers (flags of the server).
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// Cluster health timings.
    pub health: HealthConfig,
    /// Taint decisions.
    pub taints: TaintConfig,
    /// Timeout of one probe of a push member.
    pub probe_timeout: Duration,
    /// How often every controller relists everything.
    pub resync: Duration,
    /// How often the scheduler looks at every binding again (new clusters reach bindings that
    /// could not be placed this way; changes of a cluster reach its bindings at once).
    pub scheduler_resync: Duration,
    /// How often the status of Works on push members is read back.
    pub push_status_period: Duration,
    /// Concurrent reconciles of each propagation controller (detector, dependencies
    /// distributor, scheduler, binding, binding status). Never two for one key; most of a
    /// reconcile is waiting for its writes to be durable, and concurrent writers share fsyncs.
    pub propagation_workers: usize,
    /// The binding status controller aggregates a binding this long after the first change
    /// it saw, so a binding's Works created and reporting one after another cost one status
    /// write instead of one each.
    pub status_coalesce: Duration,
    /// Cluster failover: the taint manager's switches and purge mode.
    pub taint_manager: TaintManagerSettings,
    /// `--graceful-eviction-timeout`: how long an eviction task keeps the old copy when its
    /// policy sets no grace period.
    pub graceful_eviction_timeout: Duration,
    /// Application failover: block period, back-off and the bound on moves.
    pub application_failover: ApplicationFailoverSettings,
    /// The partition brake every eviction passes: rates, thresholds, startup grace.
    pub eviction_brake: BrakeSettings,
    /// `--member-fence-after`: an exactly-once binding's replacement waits until the old
    /// member's last lease renewal plus this long (at least the agents' `--fence-after`).
    pub member_fence_after: Duration,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            health: HealthConfig::default(),
            taints: TaintConfig {
                eviction_timeout: chrono::Duration::minutes(5),
                automatic_no_execute: true,
            },
            probe_timeout: Duration::from_secs(5),
            resync: Duration::from_secs(300),
            scheduler_resync: Duration::from_secs(15),
            push_status_period: Duration::from_secs(5),
            propagation_workers: 16,
            status_coalesce: Duration::from_millis(100),
            taint_manager: TaintManagerSettings::default(),
            graceful_eviction_timeout: Duration::from_secs(600),
            application_failover: ApplicationFailoverSettings::default(),
            eviction_brake: BrakeSettings::default(),
            member_fence_after: crate::controllers::failover::fencing::DEFAULT_MEMBER_FENCE_AFTER,
        }
    }
}

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
        list: &[ControllerFn],
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<ControllerHandle>, WiringError> {
        let built = list
            .iter()
            .map(|build| build(self))
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
