//! `flotilla-agent`: a member cluster's side of Flotilla, the process that drives a member
//! runtime ([`flotilla_member`]: the runtime trait, the simulated and the kube runtimes).
//!
//! - [`member_api`]: the member's HTTP surface (readyz/healthz, apply/get/delete objects,
//!   cluster summary, fault API), which is what a push-mode member is to the server.
//! - [`pull`]: pull mode: register with the server, renew the lease, report cluster status,
//!   watch and apply Works, report their status.
//! - [`member`]: one member as the agent holds it: a named runtime, its member-level faults
//!   and its pull counters.
//! - [`app`]: [`app::run`] starts one or many members from an [`app::AgentConfig`] and hands back
//!   an [`app::AgentHandle`] (bound address, members, shutdown).

pub mod app;
pub mod member;
pub mod member_api;
pub mod pull;

pub use app::{run, AgentConfig, AgentHandle, Mode, RuntimeKind};
pub use member::Member;
