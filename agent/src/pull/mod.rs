//! Pull mode: the agent side of a `syncMode: Pull` cluster. For each hosted member it
//! registers (or reuses the stored credential), then runs three loops side by side:
//!
//! - [`lease`]: renews `coordination.k8s.io/v1` Lease `karmada-cluster/<name>`;
//! - [`fence`]: deletes the exactly-once Works' objects when the lease has not renewed for
//!   `--fence-after` (self-fencing);
//! - [`cluster_status`]: reports the Cluster's status (Ready, version, APIs, nodes, resources);
//!   the lease and status periods are the explicit flags', else the server's ([`timing`]);
//! - [`works`]: lists and watches the Works of `karmada-es-<name>`, applies them to the
//!   member runtime, reports their status (through its `outbox`, so the next Works are applied
//!   while earlier status writes travel), removes their objects and finalizer on deletion, and
//!   keeps the local [`record`] of what it applied.
//!
//! Every call that fails is retried with [`backoff`]. With several servers (`--server
//! URL,URL,...`) the calls go to one at a time and move to the next when it fails
//! ([`endpoints`]); the lease's requests time out within a renewal period, so a dead server
//! costs at most one renewal, and the works loop lists again on the server it moved to.
//! While the member's "unreachable" fault is on, every loop pauses; on shutdown every loop
//! stops.

pub mod backoff;
pub mod client;
pub mod cluster_status;
pub mod endpoints;
pub mod fence;
pub mod health;
pub mod lease;
mod outbox;
pub mod record;
pub mod timing;
pub mod works;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::member::{FaultFlags, Member};
pub use client::{ClientError, ClusterClient, Credentials, Registration, ServerClient};
pub use endpoints::ServerEndpoints;
use flotilla_support::clock::Clock;

/// Periods of the pull loops.
#[derive(Clone, Debug, PartialEq)]
pub struct PullTiming {
    /// `--lease-renew-interval-ms`: how often the lease is renewed. `None` follows the server
    /// ([`timing`]: what it advertises, else [`timing::DEFAULT_LEASE_RENEW_INTERVAL`]). The
    /// lease's `leaseDurationSeconds` is four times the period in use.
    pub lease_renew_interval: Option<Duration>,
    /// `--cluster-status-update-frequency-ms`: how often the cluster status is reported;
    /// `None` follows the server likewise.
    pub cluster_status_update_frequency: Option<Duration>,
    /// How often changed Work statuses are written (at most).
    pub work_status_period: Duration,
    /// How often every known Work is synced again from the local cache.
    pub resync_period: Duration,
    /// A watch with no data (bookmarks included) for this long is reopened.
    pub watch_idle_timeout: Duration,
    /// Timeout of one non-watch request.
    pub request_timeout: Duration,
    /// `--fence-after`: a member whose lease has not been renewed for this long deletes the
    /// objects of its exactly-once Works ([`fence`]); `None` never fences.
    pub fence_after: Option<Duration>,
}

impl Default for PullTiming {
    fn default() -> Self {
        PullTiming {
            lease_renew_interval: None,
            cluster_status_update_frequency: None,
            work_status_period: Duration::from_secs(1),
            resync_period: Duration::from_secs(30),
            watch_idle_timeout: Duration::from_secs(90),
            request_timeout: Duration::from_secs(30),
            fence_after: Some(fence::DEFAULT_FENCE_AFTER),
        }
    }
}

/// How long the pull loops get to stop after shutdown is signalled.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// What each loop of one member needs.
pub struct PullContext {
    /// The member.
    pub member: Arc<Member>,
    /// Its client.
    pub client: ClusterClient,
    /// Periods.
    pub timing: PullTiming,
    /// Time source for renewTime and condition times.
    pub clock: Arc<dyn Clock>,
}

impl PullContext {
    /// The member's cluster name.
    pub fn cluster(&self) -> &str {
        &self.member.name
    }

    /// The lease renewal period in use now, and where it came from.
    pub fn lease_renew_interval(&self) -> (Duration, timing::Source) {
        timing::effective(
            self.timing.lease_renew_interval,
            self.client
                .advertised_timing()
                .current()
                .map(|t| t.lease_renew_interval),
            timing::DEFAULT_LEASE_RENEW_INTERVAL,
        )
    }

    /// The cluster status period in use now, and where it came from.
    pub fn cluster_status_update_frequency(&self) -> (Duration, timing::Source) {
        timing::effective(
            self.timing.cluster_status_update_frequency,
            self.client
                .advertised_timing()
                .current()
                .map(|t| t.cluster_status_update_frequency),
            timing::DEFAULT_CLUSTER_STATUS_UPDATE_FREQUENCY,
        )
    }
}

/// Why a pause ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The time passed (or the faults changed).
    Go,
    /// The agent is stopping.
    Stop,
}

/// Sleeps `d`, waking early when the member's faults change or the agent stops; then, while
/// the member is unreachable, waits for it to come back.
pub(crate) async fn pause(
    d: Duration,
    faults: &mut watch::Receiver<FaultFlags>,
    shutdown: &mut watch::Receiver<bool>,
) -> Wake {
    if nap(d, faults, shutdown).await == Wake::Stop {
        return Wake::Stop;
    }
    wait_reachable(faults, shutdown).await
}

/// Sleeps `d`, waking early when the member's faults change or the agent stops.
pub(crate) async fn nap(
    d: Duration,
    faults: &mut watch::Receiver<FaultFlags>,
    shutdown: &mut watch::Receiver<bool>,
) -> Wake {
    tokio::select! {
        _ = tokio::time::sleep(d) => Wake::Go,
        _ = faults.changed() => Wake::Go,
        _ = flotilla_member::stopped(shutdown) => Wake::Stop,
    }
}

/// Waits while the member is unreachable.
pub(crate) async fn wait_reachable(
    faults: &mut watch::Receiver<FaultFlags>,
    shutdown: &mut watch::Receiver<bool>,
) -> Wake {
    if *shutdown.borrow() {
        return Wake::Stop;
    }
    tokio::select! {
        _ = async { let _ = faults.wait_for(|f| !f.unreachable).await; } => Wake::Go,
        _ = flotilla_member::stopped(shutdown) => Wake::Stop,
    }
}

/// Logs a failed attempt of a retried call: the first failure and every tenth at WARN, the
/// others at DEBUG, so that an outage of the server does not flood the log.
pub(crate) fn log_retry(
    cluster: &str,
    what: &str,
    attempt: u32,
    delay: Duration,
    error: &(dyn std::error::Error + 'static),
) {
    let error = flotilla_support::error_chain(error);
    let retry_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    if attempt <= 1 || attempt.is_multiple_of(10) {
        tracing::warn!(cluster, attempt, retry_ms, error = %error, "{what} failed; retrying");
    } else {
        tracing::debug!(cluster, attempt, retry_ms, error = %error, "{what} failed; retrying");
    }
}

/// Where one member's pull state lives and how it registers.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// The process-wide server client.
    pub server: ServerClient,
    /// The join token file.
    pub join_token_file: Option<PathBuf>,
    /// Registration details.
    pub registration: Registration,
    /// Periods.
    pub timing: PullTiming,
}

/// Starts the pull loops of one member whose state lives in `data_dir` (`credential`,
/// `applied.json`): registration first, then lease, fence, cluster status and works side by side in
/// one task, which ends when `shutdown` turns true.
pub fn spawn(
    member: Arc<Member>,
    data_dir: PathBuf,
    options: &PullOptions,
    clock: Arc<dyn Clock>,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, SpawnError> {
    let creds = Credentials::load(
        &member.name,
        options.join_token_file.clone(),
        data_dir.join("credential"),
        options.registration.clone(),
    )?;
    let record = record::RecordFile::load(&data_dir.join("applied.json"))?;
    let ctx = Arc::new(PullContext {
        member,
        client: ClusterClient::new(options.server.clone(), Arc::new(creds)),
        timing: options.timing.clone(),
        clock,
    });
    let works = works::WorksController::new(ctx.clone(), record);
    let task = tokio::spawn(async move {
        if register(&ctx, shutdown.clone()).await == Wake::Stop {
            return;
        }
        let mut stop = shutdown.clone();
        let loops = async {
            tokio::join!(
                lease::run(ctx.clone(), shutdown.clone()),
                fence::run(ctx.clone(), shutdown.clone()),
                cluster_status::run(ctx.clone(), shutdown.clone()),
                works.run(shutdown),
            )
        };
        // The loops stop at their next step; one stuck in a request is dropped after a grace
        // period (every write of local state is complete before any await, so none is torn).
        tokio::select! {
            _ = loops => {}
            _ = async {
                flotilla_member::stopped(&mut stop).await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => {
                tracing::warn!(cluster = %ctx.cluster(), "pull loops did not stop in time; dropped");
            }
        }
    });
    Ok(task)
}

/// Registers (unless a credential is stored), retrying with backoff.
async fn register(ctx: &PullContext, mut shutdown: watch::Receiver<bool>) -> Wake {
    let mut faults = ctx.member.faults.subscribe();
    let mut backoff = backoff::Backoff::default();
    loop {
        if wait_reachable(&mut faults, &mut shutdown).await == Wake::Stop {
            return Wake::Stop;
        }
        match ctx.client.ensure_registered().await {
            Ok(()) => return Wake::Go,
            Err(e) => {
                let delay = backoff.next_delay();
                log_retry(ctx.cluster(), "registration", backoff.attempts(), delay, &e);
                if pause(delay, &mut faults, &mut shutdown).await == Wake::Stop {
                    return Wake::Stop;
                }
            }
        }
    }
}

/// Why a member's pull loops could not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The credential could not be read.
    #[error("loading the credential")]
    Credential(#[from] ClientError),
    /// The applied-objects record could not be read.
    #[error("loading the applied-objects record")]
    Record(#[from] record::RecordError),
}
