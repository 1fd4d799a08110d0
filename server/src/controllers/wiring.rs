//! How each controller is put together from the [`ControllerContext`]: its reconciler, what
//! wakes it (its sources and their fingerprints), its workers, resync and limiter. One function
//! per controller, named as it is and grouped by wing; [`super::CONTROLLERS`] lists them.

use crate::controllers::context::{ControllerContext, WiringError};
use crate::controllers::runtime::controller::{
    generation_fingerprint, Controller, ControllerConfig, Source,
};
use flotilla_api::kinds::well_known;
use std::sync::Arc;

// Members

/// The cluster status controller as the server runs it: one key per Cluster, four workers.
pub fn cluster_status(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::members::cluster_status::ClusterStatusController;
    let reconciler = ClusterStatusController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.member.clone(),
        ctx.settings.health,
        ctx.events.for_component("cluster-status-controller"),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("cluster-status"))?;
    let sources = vec![Source::primary(well_known::clusters())];
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(4)
            .resync(ctx.settings.resync),
    ))
}

/// The cluster (taint) controller as the server runs it: one key per Cluster, woken by the Cluster
/// and by its lease renewals, two workers.
pub fn cluster_taints(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::members::cluster_taints::{lease_cluster, ClusterTaintsController};
    let reconciler = ClusterTaintsController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.settings.taints,
        ctx.events.for_component("cluster-controller"),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("cluster-taints"))?;
    let sources = vec![
        Source::primary(well_known::clusters()),
        Source::mapped(well_known::leases(), lease_cluster),
    ];
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(2)
            .resync(ctx.settings.resync),
    ))
}

/// The cluster taint policy controller, on a queue it also holds (a policy change queues every
/// cluster).
pub fn cluster_taint_policy(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::members::cluster_taint_policy::ClusterTaintPolicyController;
    use crate::controllers::runtime::queue::WorkQueue;
    let config =
        ControllerConfig::new(ClusterTaintPolicyController::sources()).resync(ctx.settings.resync);
    let queue = WorkQueue::new(config.backoff);
    let reconciler = ClusterTaintPolicyController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.for_component("cluster-taint-policy-controller"),
        queue.clone(),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("cluster-taint-policy"))?;
    Ok(
        crate::controllers::runtime::controller::Controller::with_queue(
            Arc::new(reconciler),
            config,
            queue,
        ),
    )
}

/// The cluster removal controller as the server runs it: one key per Cluster, woken when a
/// Cluster is created, deleted or its finalizers change; a deleted one requeues itself while
/// it waits.
pub fn cluster_removal(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::members::cluster_removal::ClusterRemovalController;
    let reconciler = ClusterRemovalController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.settings.member_fence_after,
        ctx.events.for_component("cluster-controller"),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("cluster-removal"))?;
    let sources =
        vec![Source::primary(well_known::clusters()).on_change_of(generation_fingerprint)];
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources).resync(ctx.settings.resync),
    ))
}

/// The push execution controller as the server runs it: one key per Work, four workers.
pub fn push_execution(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::members::push_execution::PushExecutionController;
    let reconciler = PushExecutionController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.member.clone(),
        ctx.settings.push_status_period,
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        // Its own status writes and the agents' (pull Works) are not news to it.
        ControllerConfig::new(vec![
            Source::primary(well_known::works()).on_change_of(generation_fingerprint)
        ])
        .workers(4)
        .resync(ctx.settings.resync),
    ))
}

// Propagation

/// The customizations controller as the server runs it: one key per
/// ResourceInterpreterCustomization, one worker.
pub fn customizations(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::customizations::CustomizationsController;
    use flotilla_api::kinds::builtin_by_plural;
    let rt = builtin_by_plural(
        flotilla_api::kinds::CONFIG_GROUP,
        "resourceinterpretercustomizations",
    )
    .ok_or(WiringError::MissingKind {
        controller: "customizations",
        kind: "resourceinterpretercustomizations",
    })?;
    let reconciler = CustomizationsController::new(
        ctx.store.clone(),
        ctx.interpreter.clone(),
        ctx.events.for_component("interpreter"),
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(vec![Source::primary(rt)]).resync(ctx.settings.resync),
    ))
}

/// The resource detector as the server runs it: policies and (as they are selected) template kinds,
/// queued on its own queue too.
pub fn detector(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::detector::Detector;
    use crate::controllers::runtime::queue::WorkQueue;
    let queue = WorkQueue::default();
    let reconciler = Detector::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.registry.clone(),
        ctx.interpreter.clone(),
        ctx.events.for_component("resource-detector"),
        queue.clone(),
    );
    Ok(Controller::with_queue(
        Arc::new(reconciler),
        ControllerConfig::new(Detector::sources())
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
        queue,
    ))
}

/// The dependencies distributor as the server runs it: bindings and dependency kinds, queued on its
/// own queue too.
pub fn dependencies_distributor(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::dependencies_distributor::DependenciesDistributor;
    use crate::controllers::runtime::queue::WorkQueue;
    let queue = WorkQueue::default();
    let reconciler = DependenciesDistributor::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.registry.clone(),
        ctx.interpreter.clone(),
        ctx.events.for_component("dependencies-distributor"),
        queue.clone(),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("dependencies-distributor"))?;
    let sources = reconciler.sources();
    Ok(Controller::with_queue(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
        queue,
    ))
}

/// The scheduler as the server runs it: bindings (their spec), and the bindings of a Cluster when
/// the Cluster changes, through the cluster → bindings index, plus the bindings open to a
/// Cluster that can take new work (a join, a lost taint: `propagation/cluster_joins.rs`); a resync
/// as a safety net.
pub fn scheduler(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::scheduler::SchedulerController;
    let reconciler = SchedulerController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.for_component("default-scheduler"),
        &ctx.metrics,
    )
    .map_err(WiringError::metrics("scheduler"))?;
    let sources =
        crate::controllers::propagation::cluster_joins::scheduler_sources(reconciler.own_writes());
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.scheduler_resync),
    ))
}

/// The binding-works controller as the server runs it: bindings and their Works, by spec
/// (generation) only: Work status is none of its business.
pub fn binding_works(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::binding_works::{binding_sources, BindingWorksController};
    let reconciler = BindingWorksController::new(
        ctx.store.clone(),
        ctx.registry.clone(),
        ctx.interpreter.clone(),
        ctx.events.clone(),
    )
    .with_fencing(ctx.clock.clone(), ctx.settings.member_fence_after);
    let mut sources = binding_sources();
    // Its own Work writes (creations, updates, deletion marks) do not wake it again.
    let own_writes = reconciler.own_writes();
    sources.push(
        Source::mapped(well_known::works(), BindingWorksController::work_key)
            .on_change_of(generation_fingerprint)
            .skipping_own(own_writes),
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

/// The binding status controller as the server runs it: bindings and every status change of their
/// Works, a burst at a time (`status_coalesce`).
pub fn binding_status(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::propagation::binding_status::BindingStatusController;
    use crate::controllers::propagation::binding_works::BindingWorksController;
    let reconciler = BindingStatusController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.registry.clone(),
        ctx.interpreter.clone(),
    )
    .with_events(ctx.events.clone());
    let mut sources = crate::controllers::propagation::binding_works::binding_sources();
    sources.push(Source::mapped(
        well_known::works(),
        BindingWorksController::work_key,
    ));
    // A member turning (not) Ready changes the health of every binding it runs.
    sources.push(BindingStatusController::cluster_source());
    let sources = sources
        .into_iter()
        .map(|s| s.coalesced(ctx.settings.status_coalesce))
        .collect();
    let queue = reconciler.queue();
    Ok(Controller::with_queue(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
        queue,
    ))
}

// Failover

/// The taint manager as the server runs it: woken by a binding's spec changes and by changes of the
/// `NoExecute` taints of the clusters it targets, through the cluster-to-bindings index.
pub fn taint_manager(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::failover::taint_manager::{
        no_execute_fingerprint, TaintManagerController,
    };
    let reconciler = TaintManagerController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.clone(),
        ctx.failover_metrics.clone(),
        ctx.settings.taint_manager.clone(),
    )
    .with_brake(ctx.brake.clone());
    // A held eviction is looked at again after the brake's wait (at most STOPPED_RETRY), so
    // Ready changes of other clusters, which move the brake, need not wake every binding.
    let (_, sources) = crate::controllers::shared::fan_out::binding_sources_judging(
        generation_fingerprint,
        no_execute_fingerprint,
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

/// Application failover as the server runs it: woken by a binding's spec and by the health it
/// judges (the binding's aggregated status).
pub fn application_failover(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::failover::application_failover::{
        judged_fingerprint, ApplicationFailoverController,
    };
    let reconciler = ApplicationFailoverController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.clone(),
        ctx.failover_metrics.clone(),
        ctx.settings.application_failover.clone(),
        ctx.interpreter.clone(),
    )
    .with_brake(ctx.brake.clone());
    let (_, sources) =
        crate::controllers::shared::fan_out::binding_sources_on_change_of(judged_fingerprint);
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

/// The graceful eviction controller as the server runs it: woken by its bindings' tasks, placement
/// and status, and by readiness changes of the clusters they name.
pub fn graceful_eviction(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::failover::graceful_eviction::{
        judged_fingerprint, GracefulEvictionController,
    };
    let reconciler = GracefulEvictionController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.clone(),
        ctx.failover_metrics.clone(),
        ctx.interpreter.clone(),
        ctx.settings.graceful_eviction_timeout,
    );
    let (_, sources) = crate::controllers::shared::fan_out::binding_sources_judging(
        judged_fingerprint,
        crate::controllers::shared::fan_out::cluster_ready_fingerprint,
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources)
            .workers(ctx.propagation_workers())
            .resync(ctx.settings.resync),
    ))
}

/// The failback controller as the server runs it: woken by a binding's spec, history and scheduling
/// progress, and by changes of the clusters it runs on or waits on.
pub fn failback(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::failover::failback::{
        binding_fingerprint, clusters_to_watch, FailbackController,
    };
    let reconciler = FailbackController::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.events.clone(),
        ctx.failover_metrics.clone(),
    )
    .with_eviction_settings(&ctx.settings.taint_manager);
    let (_, sources) = crate::controllers::shared::fan_out::binding_sources_naming(
        binding_fingerprint,
        crate::controllers::shared::fan_out::cluster_fingerprint,
        clusters_to_watch,
    );
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources).resync(ctx.settings.resync),
    ))
}

/// The brake publisher: one key, woken by the clusters' Ready and spec, and once a second while
/// it publishes (writes only when the store is shared: `settings.shared_store`).
pub fn brake_publisher(ctx: &ControllerContext) -> Result<Controller, WiringError> {
    use crate::controllers::failover::brake_publisher::{BrakePublisher, KEY};
    use crate::controllers::shared::fan_out::cluster_fingerprint;
    let reconciler = BrakePublisher::new(
        ctx.store.clone(),
        ctx.clock.clone(),
        ctx.brake.clone(),
        ctx.settings.shared_store,
    );
    let sources = vec![
        Source::mapped(well_known::clusters(), |_| vec![KEY.to_string()])
            .on_change_of(cluster_fingerprint),
    ];
    Ok(Controller::new(
        Arc::new(reconciler),
        ControllerConfig::new(sources).resync(ctx.settings.resync),
    ))
}
