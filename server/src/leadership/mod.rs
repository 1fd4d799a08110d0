//! Which server runs the controllers when several share one etcd store: one leader at a time,
//! elected through an etcd lease ([`elector`]), with Kubernetes' flags and defaults
//! ([`timing`]), and a fence on every controller write so a deposed leader commits nothing.
//! The API is served by every server; only the controllers wait for leadership.

pub mod elector;
pub mod timing;

pub use elector::{election_prefix, ElectionError, Elector, Term, TermEnd};
pub use timing::LeaderElectionTiming;
