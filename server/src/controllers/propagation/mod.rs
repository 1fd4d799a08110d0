//! Propagation: a template on its way to the members and its status on the way back.
//! [`detector`] (with [`policy_matching`] and [`policy_cache`]) claims a template for a policy
//! and writes its ResourceBinding; [`dependencies_distributor`] adds attached bindings for what
//! the workload uses; [`scheduler`] places the binding, woken also by a Cluster that can take
//! new work through [`cluster_joins`]; [`binding_works`] writes one Work per
//! target cluster; [`binding_status`] aggregates the Works' status back; [`customizations`]
//! loads ResourceInterpreterCustomizations into the interpreter.

pub mod binding_status;
pub mod binding_works;
pub mod cluster_joins;
pub mod customizations;
pub mod dependencies_distributor;
pub mod detector;
pub mod policy_cache;
pub mod policy_matching;
pub mod scheduler;
