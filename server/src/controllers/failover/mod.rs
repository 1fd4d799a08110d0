//! Failover: moving a workload off a failed cluster or a failed application, and what makes
//! that safe.

pub mod application_failover;
pub mod brake;
pub mod effects;
pub mod failback;
pub mod fencing;
pub mod graceful_eviction;
pub mod history;
pub mod metrics;
pub mod preconditions;
pub mod state_preservation;
pub mod taint_manager;
