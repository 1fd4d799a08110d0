//! Failover: moving a workload off a failed cluster or a failed application, and what makes
//! that safe. The controllers here only feed pure functions and write back what they decide;
//! the scheduler (`crate::scheduler`, called by the propagation wing's scheduler controller)
//! places the evicted replicas by its ordinary rules, and the binding-works controller deletes an
//! old copy only once its eviction task is gone. The rules are in docs/semantics.md §5, §9, §11
//! and Part 1.
//!
//! The failover chain, in the order a failure travels through it:
//!
//! | step | file | pure function |
//! |---|---|---|
//! | a cluster's NoExecute taint outlasts a binding's toleration: evict it there | [`taint_manager`] | [`taint_manager::verdict`], [`taint_manager::decide`], [`taint_manager::outcome`] |
//! | a workload stays unhealthy on a Ready cluster: evict it there | [`application_failover`] | [`application_failover::decide`], [`application_failover::report`], [`application_failover::outcome`] |
//! | every eviction asks the partition brake of its region first | [`brake`] | [`brake::state_of`], [`brake::pace_of`], [`brake::admit_in`] |
//! | the evicted cluster's state is carried to the new placement | [`state_preservation`] | [`state_preservation::preserve`], [`state_preservation::condition`] |
//! | an exactly-once workload's new copy waits until the old member has fenced itself | [`fencing`] | [`fencing::fence_wait`], [`fencing::unfenced_candidates`] |
//! | an eviction task ends once the new placement is Healthy, or its grace period ran out | [`graceful_eviction`] | [`graceful_eviction::assess`] |
//! | the workload returns to a recovered cluster after its stabilization window (opt-in) | [`failback`] | [`failback::decide`], [`failback::abort`], [`failback::move_back`], [`failback::undo`] |
//! | every step above leaves its mark in the binding's `status.failoverHistory` | [`history`] | [`history::entries_for`], [`history::stage`] |
//! | an outcome of any of the three deciders is written once, then its metrics, Events and state-preservation reports follow | [`effects`] | [`effects::evict`]; the one shell [`effects::Effects::carry_out`] |
//! | application failover can act only where the kind has a health rule | [`preconditions`] | [`preconditions::application_failover_condition`] |
//! | what the deciders count | [`metrics`] | — |
//!
//! Beside the chain, not a step of it: when several servers share the store, the leader's
//! [`brake_publisher`] writes the brake's state ([`brake_publisher::objects_of`],
//! [`brake_publisher::published`]) for the servers that do not lead, so that every server's
//! `evictionbrakes` shows what the leader's brake holds. The API and the dry-run read the brake
//! of this server's controllers only through [`brake_reading`]'s read-only face. The tests
//! share the fixtures of `testing`.

pub mod application_failover;
pub mod brake;
pub mod brake_publisher;
pub mod brake_reading;
pub mod effects;
pub mod failback;
pub mod fencing;
pub mod graceful_eviction;
pub mod history;
pub mod metrics;
pub mod preconditions;
pub mod state_preservation;
pub mod taint_manager;
#[cfg(test)]
pub mod testing;
