//! Controllers: one module per decision, each a level-triggered `reconcile(key)` over a work
//! queue fed by store watches and a periodic resync (see [`runtime`]). Controllers talk to each
//! other only through the store.

pub mod binding_keys;
pub mod binding_status;
pub mod binding_works;
pub mod cluster_cache;
pub mod cluster_health;
pub mod cluster_status;
pub mod cluster_taint_policy;
pub mod cluster_taints;
pub mod customizations;
pub mod dependencies_distributor;
pub mod detector;
pub mod interpretation;
pub mod json_edit;
pub mod policy_cache;
pub mod policy_matching;
pub mod push_execution;
pub mod queue;
pub mod runtime;
pub mod scheduling;
#[cfg(test)]
pub(crate) mod testing;

pub use runtime::{
    object_key, spawn, split_key, Action, ControllerConfig, ControllerHandle, ControllerMetrics,
    ReconcileError, Reconciler, Source,
};
