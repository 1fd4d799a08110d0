//! Controllers: one module per decision, each a level-triggered `reconcile(key)` over a work
//! queue fed by store watches and a periodic resync (see [`runtime`]). Controllers talk to each
//! other only through the store. They live in wings: [`propagation`] (template to Works and
//! back), [`members`] (member health, taints, push delivery) and [`failover`] (evictions and
//! everything that makes them safe), beside the [`runtime`] that runs them and the helpers they
//! [`shared`]. Each controller module exports a `controller` function that builds its
//! [`Controller`] from one [`ControllerContext`]; `app::CONTROLLERS` lists them, and the server
//! starts them all through [`spawn`].

pub mod context;
pub mod failover;
pub mod members;
pub mod propagation;
pub mod runtime;
pub mod settings;
pub mod shared;

pub use context::{ControllerContext, WiringError};
pub use runtime::controller::{
    object_key, spawn, split_key, Action, Controller, ControllerConfig, ControllerHandle,
    ControllerMetrics, ReconcileError, Reconciler, Source,
};
pub use settings::ControllerSettings;
