//! Controllers: one module per decision, each a level-triggered `reconcile(key)` over a work
//! queue fed by store watches and a periodic resync (see [`runtime`]). Controllers talk to each
//! other only through the store. Each controller module exports a `controller` function that
//! builds its [`Controller`] from one [`ControllerContext`]; `app::CONTROLLERS` lists them, and
//! the server starts them all through [`spawn`].

pub mod application_failover;
pub mod binding_keys;
pub mod binding_status;
pub mod binding_works;
pub mod cluster_cache;
pub mod cluster_health;
pub mod cluster_status;
pub mod cluster_taint_policy;
pub mod cluster_taints;
pub mod context;
pub mod customizations;
pub mod dependencies_distributor;
pub mod detector;
pub mod eviction_brake;
pub mod failback;
pub mod failover_history;
pub mod failover_metrics;
pub mod failover_preconditions;
pub mod failover_simulation;
pub mod fan_out;
pub mod fencing;
pub mod graceful_eviction;
pub mod interpretation;
pub mod json_edit;
pub mod limiter;
pub mod own_writes;
pub mod policy_cache;
pub mod policy_matching;
pub mod push_execution;
pub mod queue;
pub mod runtime;
pub mod scheduling;
pub mod state_preservation;
pub mod taint_manager;
#[cfg(test)]
pub(crate) mod testing;

pub use context::{ControllerContext, ControllerSettings, WiringError};
pub use runtime::{
    object_key, spawn, split_key, Action, Controller, ControllerConfig, ControllerHandle,
    ControllerMetrics, ReconcileError, Reconciler, Source,
};
