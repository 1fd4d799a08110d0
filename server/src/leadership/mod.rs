//! Which server runs the controllers when several share one etcd store: one leader at a time,
//! elected through an etcd lease ([`elector`]), with Kubernetes' flags and defaults
//! ([`timing`]), and a fence on every controller write so a deposed leader commits nothing.
//! The API is served by every server; only the controllers wait for leadership.

pub mod elector;
pub mod leader_loop;
pub mod timing;

pub use elector::{election_holder, election_prefix, ElectionError, Elector, Term, TermEnd};
pub use leader_loop::{LeaderLoop, LeaderMetrics};
pub use timing::LeaderElectionTiming;

/// `--leader-elect` and its timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    /// Elect one leader among the servers that share the store (etcd only: the local engines
    /// lock their data directory to one server, which always leads). Off, every server with
    /// controllers runs them: only for a fleet of exactly one server.
    pub enabled: bool,
    /// Lease duration, renew deadline, retry period.
    pub timing: LeaderElectionTiming,
    /// Who this server is, in the election key (default: host name, listen address, pid).
    pub identity: Option<String>,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            enabled: true,
            timing: LeaderElectionTiming::default(),
            identity: None,
        }
    }
}
