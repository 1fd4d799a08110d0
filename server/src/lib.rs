//! `flotilla-server`: the control plane. It owns the durable object [`store`], the
//! Kubernetes-style [`api`], and [`app`], which starts and stops them together.

pub mod api;
pub mod app;
pub mod controllers;
pub mod events;
pub mod feature_gates;
pub mod fleet;
pub mod interpreter;
pub mod kinds;
pub mod leadership;
pub mod probes;
pub mod profile;
pub mod scheduler;
pub mod simulation;
pub mod store;
/// Test fixtures (the `testing` feature): not compiled into the server.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
