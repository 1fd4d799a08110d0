//! `flotilla-server`: the control plane. It owns the durable object [`store`], and (in later
//! modules) the Kubernetes-style API, the controllers and the scheduler.

pub mod clock;
pub mod store;
