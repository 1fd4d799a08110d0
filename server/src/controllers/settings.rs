//! Every controller setting, from the server's flags: the one [`ControllerSettings`] the server
//! builds, and the settings of each wing it is made of. A leaf: it imports nothing from the
//! controllers, so every controller and the context can import it. Every period and timeout
//! is a `std::time::Duration`, as the flags give it; the pure functions that add one to a point
//! in time convert it where they do ([`crate::controllers::members::cluster_health::span`]).

use flotilla_api::policy::PurgeMode;
use std::time::Duration;

/// Settings of the controllers (flags of the server).
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// Cluster health timings.
    pub health: HealthConfig,
    /// Taint decisions.
    pub taints: TaintConfig,
    /// Timeout of one probe of a push member.
    pub probe_timeout: Duration,
    /// How often every controller relists everything.
    pub resync: Duration,
    /// How often the scheduler looks at every binding again (new clusters reach bindings that
    /// could not be placed this way; changes of a cluster reach its bindings at once).
    pub scheduler_resync: Duration,
    /// How often the status of Works on push members is read back.
    pub push_status_period: Duration,
    /// Concurrent reconciles of each propagation controller (detector, dependencies
    /// distributor, scheduler, binding, binding status). Never two for one key; most of a
    /// reconcile is waiting for its writes to be durable, and concurrent writers share fsyncs.
    pub propagation_workers: usize,
    /// The binding status controller aggregates a binding this long after the first change
    /// it saw, so a binding's Works created and reporting one after another cost one status
    /// write instead of one each.
    pub status_coalesce: Duration,
    /// Cluster failover: the taint manager's switches and purge mode.
    pub taint_manager: TaintManagerSettings,
    /// `--graceful-eviction-timeout`: how long an eviction task keeps the old copy when its
    /// policy sets no grace period.
    pub graceful_eviction_timeout: Duration,
    /// Application failover: block period, back-off and the bound on moves.
    pub application_failover: ApplicationFailoverSettings,
    /// The partition brake every eviction passes: rates, thresholds, startup grace.
    pub eviction_brake: BrakeSettings,
    /// `--member-fence-after`: an exactly-once binding's replacement waits until the old
    /// member's last lease renewal plus this long (at least the agents' `--fence-after`).
    pub member_fence_after: Duration,
    /// Whether other servers share the store (etcd with leader election): the leader then
    /// publishes what only its controllers know, such as the eviction brake's state.
    pub shared_store: bool,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            health: HealthConfig::default(),
            taints: TaintConfig {
                eviction_timeout: Duration::from_secs(5 * 60),
                automatic_no_execute: true,
            },
            probe_timeout: Duration::from_secs(5),
            resync: Duration::from_secs(300),
            scheduler_resync: Duration::from_secs(300),
            push_status_period: Duration::from_secs(5),
            propagation_workers: 16,
            status_coalesce: Duration::from_millis(100),
            taint_manager: TaintManagerSettings::default(),
            graceful_eviction_timeout: Duration::from_secs(600),
            application_failover: ApplicationFailoverSettings::default(),
            eviction_brake: BrakeSettings::default(),
            member_fence_after: DEFAULT_MEMBER_FENCE_AFTER,
            shared_store: false,
        }
    }
}

/// Timings of cluster health (docs/semantics.md §1 defaults).
#[derive(Clone, Copy, Debug)]
pub struct HealthConfig {
    /// `--cluster-status-update-frequency` (10 s): push probe period.
    pub status_update_frequency: Duration,
    /// `--cluster-success-threshold` / `--cluster-failure-threshold` (30 s each).
    pub thresholds: Thresholds,
    /// `--cluster-monitor-period` (5 s).
    pub monitor_period: Duration,
    /// `--cluster-monitor-grace-period` (40 s) and `--cluster-startup-grace-period` (60 s).
    pub grace: GracePeriods,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            status_update_frequency: Duration::from_secs(10),
            thresholds: Thresholds {
                success: Duration::from_secs(30),
                failure: Duration::from_secs(30),
            },
            monitor_period: Duration::from_secs(5),
            grace: GracePeriods {
                monitor: Duration::from_secs(40),
                startup: Duration::from_secs(60),
            },
        }
    }
}

/// Thresholds of §3.1.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// How long a True observation must last before Ready turns True.
    pub success: Duration,
    /// How long a not-True observation must last before Ready turns False.
    pub failure: Duration,
}

/// Grace periods of §3.2.
#[derive(Clone, Copy, Debug)]
pub struct GracePeriods {
    /// `--cluster-monitor-grace-period` (40 s).
    pub monitor: Duration,
    /// `--cluster-startup-grace-period` (60 s).
    pub startup: Duration,
}

/// Settings of the taint decisions.
#[derive(Clone, Copy, Debug)]
pub struct TaintConfig {
    /// `--failover-eviction-timeout` (5 min).
    pub eviction_timeout: Duration,
    /// `--enable-automatic-no-execute-taints` (true).
    pub automatic_no_execute: bool,
}

/// The taint manager's settings, from the server's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintManagerSettings {
    /// `--enable-taint-manager` and the `Failover` feature gate: off, nothing is evicted.
    pub enabled: bool,
    /// The `GracefulEviction` feature gate: off, an evicted cluster is removed without a task.
    pub graceful_eviction: bool,
    /// Purge mode of bindings whose policy has no `failover.cluster`
    /// (`--no-execute-taint-eviction-purge-mode`, Graciously by default).
    pub default_purge_mode: PurgeMode,
}

impl Default for TaintManagerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            graceful_eviction: true,
            default_purge_mode: PurgeMode::Graciously,
        }
    }
}

/// Default of `--member-fence-after`: the agents' default `--fence-after` (30 s) plus 15 s for
/// the clock offset between server and agent and the agent's own reaction time.
pub const DEFAULT_MEMBER_FENCE_AFTER: Duration = Duration::from_secs(45);

/// Application failover's settings, from the server's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationFailoverSettings {
    /// The `Failover` feature gate: off, nothing is evicted (timers are still kept).
    pub enabled: bool,
    /// `--application-failover-block-period`: how long a cluster the application left stays
    /// out of its placement after its eviction task is gone.
    pub block_period: Duration,
    /// `--application-failover-backoff`: the second failover of a streak waits this long
    /// after the first, the third twice as long, and so on.
    pub backoff: Duration,
    /// `--application-failover-max-backoff`: the cap of that wait.
    pub max_backoff: Duration,
    /// `--application-failover-max-moves`: failovers in one streak (without the workload
    /// turning Healthy in between); past it the workload stays where it is and the binding
    /// says so. 0 = unbounded.
    pub max_moves: u32,
}

impl Default for ApplicationFailoverSettings {
    /// A cluster that failed an application is left alone for half an hour (a node pool or
    /// quota problem is rarely fixed in minutes, and the default failover itself takes 5 min
    /// of toleration plus up to 10 min of grace); a second move in a row waits 5 min more (one
    /// default toleration), doubling up to an hour; three moves in a row without recovery
    /// mean the fault travels with the application, and moving it on does not help.
    fn default() -> Self {
        Self {
            enabled: true,
            block_period: Duration::from_secs(30 * 60),
            backoff: Duration::from_secs(5 * 60),
            max_backoff: Duration::from_secs(60 * 60),
            max_moves: 3,
        }
    }
}

/// The brake's flags (docs/failover.md, "Safety: the eviction brake", gives each default its
/// reason).
#[derive(Clone, Debug, PartialEq)]
pub struct BrakeSettings {
    /// `--enable-eviction-rate-limit`: false turns pacing off (stops stay).
    pub rate_limit: bool,
    /// `--cluster-eviction-rate`: failed clusters let out per second per region when Normal.
    pub cluster_rate: f64,
    /// `--secondary-cluster-eviction-rate`: per second per region when PartialDisruption.
    pub secondary_cluster_rate: f64,
    /// `--resource-eviction-rate` (Karmada's): an optional ceiling, in bindings per second per
    /// region, on the evictions of failed clusters (unset: none).
    pub resource_rate: Option<f64>,
    /// `--secondary-resource-eviction-rate`: the ceiling when PartialDisruption (unset: the
    /// `--resource-eviction-rate` one).
    pub secondary_resource_rate: Option<f64>,
    /// `--unhealthy-cluster-threshold`: the not-Ready share above which a region (or the
    /// fleet) is partially disrupted.
    pub unhealthy_threshold: f64,
    /// `--large-fleet-size`: a fleet of at least this many clusters is large.
    pub large_fleet_size: usize,
    /// `--large-fleet-partition-threshold`: the not-Ready share of a large fleet above which
    /// evictions stop.
    pub large_fleet_threshold: f64,
    /// `--eviction-startup-grace-period` (default: `--cluster-monitor-grace-period`): how long
    /// after the server started nothing is evicted.
    pub startup_grace: Duration,
}

impl Default for BrakeSettings {
    fn default() -> Self {
        Self {
            rate_limit: true,
            cluster_rate: 0.1,
            secondary_cluster_rate: 0.01,
            resource_rate: None,
            secondary_resource_rate: None,
            unhealthy_threshold: 0.55,
            large_fleet_size: 10,
            large_fleet_threshold: 0.7,
            startup_grace: Duration::from_secs(40),
        }
    }
}

impl BrakeSettings {
    /// No pacing, no startup wait (the stop of a fully disrupted fleet stays): for tests and
    /// benchmarks that are not about the brake.
    pub fn unpaced() -> Self {
        Self {
            rate_limit: false,
            startup_grace: Duration::ZERO,
            ..Self::default()
        }
    }
}
