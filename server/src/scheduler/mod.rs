//! The scheduler's algorithms (karmada-semantics.md §8): pure, synchronous functions that
//! decide where a ResourceBinding runs and with how many replicas each cluster.

pub mod context;
pub mod division;
pub mod estimator;
pub mod explain;
pub mod filters;
pub mod scores;
pub mod snapshot;
pub mod spread;
