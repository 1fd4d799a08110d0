//! A member: a named runtime plus the faults that belong to the member rather than to its
//! runtime, "unreachable" (its HTTP surface hangs, its pull loops pause) and "unhealthy" (its
//! readyz/healthz answer 500 and a pull agent reports Ready=False). Both the HTTP surface and
//! the pull loops read the same [`MemberFaults`], so one switch fails the member everywhere.
//! [`PullCounters`] make the pull loops' pauses observable (tests prove with them that a loop
//! ran and did nothing, instead of sleeping and hoping).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use flotilla_member::{ClusterSummary, MemberRuntime, RuntimeError};

/// The member-level fault switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultFlags {
    /// The member answers nothing but the fault API and stops heartbeats.
    pub unreachable: bool,
    /// The member's API server reports itself unhealthy.
    pub unhealthy: bool,
}

/// Shared, observable [`FaultFlags`].
#[derive(Debug)]
pub struct MemberFaults {
    flags: watch::Sender<FaultFlags>,
}

impl Default for MemberFaults {
    fn default() -> Self {
        MemberFaults {
            flags: watch::channel(FaultFlags::default()).0,
        }
    }
}

impl MemberFaults {
    /// The current flags.
    pub fn get(&self) -> FaultFlags {
        *self.flags.borrow()
    }

    /// Turns "unreachable" on or off.
    pub fn set_unreachable(&self, on: bool) {
        self.flags.send_if_modified(|f| {
            let changed = f.unreachable != on;
            f.unreachable = on;
            changed
        });
    }

    /// Turns "unhealthy" on or off.
    pub fn set_unhealthy(&self, on: bool) {
        self.flags.send_if_modified(|f| {
            let changed = f.unhealthy != on;
            f.unhealthy = on;
            changed
        });
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<FaultFlags> {
        self.flags.subscribe()
    }

    /// Waits until the member is reachable (at once when it is).
    pub async fn wait_reachable(&self) {
        let mut rx = self.flags.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we wait.
        let _ = rx.wait_for(|f| !f.unreachable).await;
    }
}

/// What the member's pull loops did while they could not act.
#[derive(Debug, Default)]
pub struct PullCounters {
    lease_renewals_skipped: AtomicU64,
}

impl PullCounters {
    /// Lease renewals skipped because the member was unreachable: one each time the lease
    /// loop wakes (a renewal period passed, or the faults changed) and finds it unreachable.
    pub fn lease_renewals_skipped(&self) -> u64 {
        self.lease_renewals_skipped.load(Ordering::SeqCst)
    }

    pub(crate) fn lease_renewal_skipped(&self) {
        self.lease_renewals_skipped.fetch_add(1, Ordering::SeqCst);
    }
}

/// One member cluster hosted by this process.
pub struct Member {
    /// The cluster name.
    pub name: String,
    /// Its runtime.
    pub runtime: Arc<dyn MemberRuntime>,
    /// Its member-level faults.
    pub faults: MemberFaults,
    /// What its pull loops skipped.
    pub pull: PullCounters,
    /// Its self-fencing state (pull mode).
    pub fence: crate::pull::fence::FenceState,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.name)
            .field("faults", &self.faults.get())
            .finish_non_exhaustive()
    }
}

impl Member {
    /// A member with no faults.
    pub fn new(name: &str, runtime: Arc<dyn MemberRuntime>) -> Arc<Self> {
        Arc::new(Member {
            name: name.to_string(),
            runtime,
            faults: MemberFaults::default(),
            pull: PullCounters::default(),
            fence: crate::pull::fence::FenceState::default(),
        })
    }

    /// The runtime's summary, unhealthy while the "unhealthy" fault is on.
    pub async fn summary(&self) -> Result<ClusterSummary, RuntimeError> {
        let mut s = self.runtime.summary().await?;
        s.healthy &= !self.faults.get().unhealthy;
        Ok(s)
    }
}
