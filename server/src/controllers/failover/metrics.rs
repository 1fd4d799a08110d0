//! The metrics every failover decision leaves, shared by the controllers that evict (taint
//! manager, application failover) and the graceful eviction controller, so that
//! "why did my app move, and how long did it take" can be read from `/metrics`; and the
//! eviction brake's (controllers/failover/brake.rs): its state and rate per region and the
//! evictions it held; and failback's (controllers/failover/failback.rs). The evictions',
//! their latencies, application failover's holds and the failbacks are counted by the one
//! effect path those controllers share (controllers/failover/effects.rs).

use chrono::{DateTime, Utc};
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Failover metrics, registered once per server.
#[derive(Clone, Debug)]
pub struct FailoverMetrics {
    /// `flotilla_evictions_total{producer,reason}`: clusters evicted from bindings.
    pub evictions: IntCounterVec,
    /// `flotilla_eviction_tasks_dropped_total{reason}`: tasks ended (and old copies released).
    pub tasks_dropped: IntCounterVec,
    /// `flotilla_eviction_tasks_pending`: tasks that exist now, as of the last assessment pass
    /// of each binding.
    pub tasks_pending: IntGauge,
    /// `flotilla_taint_to_eviction_seconds`: from a NoExecute taint's timeAdded to the eviction.
    pub taint_to_eviction: HistogramVec,
    /// `flotilla_eviction_to_healthy_seconds`: from an eviction to its new placement Healthy.
    pub eviction_to_healthy: HistogramVec,
    /// `flotilla_unhealthy_to_eviction_seconds{producer}`: from the first Unhealthy report of
    /// a workload on a cluster to its application failover.
    pub unhealthy_to_eviction: HistogramVec,
    /// `flotilla_application_failovers_held_total{reason}`: due application failovers held back
    /// (`Backoff`: repeated moves wait; `FailoverLimitReached`: the workload stays;
    /// `NoTarget`: an Immediately eviction with no other cluster to go to; `NewerReport`: the
    /// member's Work, read again from the store, no longer reports Unhealthy).
    pub application_failovers_held: IntCounterVec,
    /// `flotilla_eviction_brake_state{region,state}`: 1 for the state each region is in, 0
    /// for the others (Normal, PartialDisruption, FullDisruption, StartupGrace).
    pub brake_state: IntGaugeVec,
    /// `flotilla_eviction_brake_rate{region}`: failed clusters per second the brake lets out
    /// in each region now (0: stopped; +Inf: pacing off).
    pub brake_rate: GaugeVec,
    /// `flotilla_eviction_brake_clusters_released_total{region}`: failed clusters that took
    /// their region's token, after which all their bindings may go.
    pub clusters_released: IntCounterVec,
    /// `flotilla_eviction_brake_clusters_queued{region}`: failed clusters waiting for their
    /// region's token now.
    pub clusters_queued: IntGaugeVec,
    /// `flotilla_evictions_held_total{region,reason}`: evictions the brake made wait
    /// (`RateLimited`: the cluster waits its turn; `ResourceRateLimited`: the
    /// `--resource-eviction-rate` ceiling; `StartupGrace`, `FullDisruption`, `RateZero`),
    /// counted per attempt.
    pub evictions_held: IntCounterVec,
    /// `flotilla_failbacks_total{cluster}`: workloads moved back to a recovered cluster
    /// (controllers/failover/failback.rs).
    pub failbacks: IntCounterVec,
}

impl FailoverMetrics {
    /// Creates and registers the metrics.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let buckets = vec![
            0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ];
        let evictions = IntCounterVec::new(
            Opts::new(
                "flotilla_evictions_total",
                "Clusters evicted from bindings, by producer and reason.",
            ),
            &["producer", "reason"],
        )?;
        let tasks_dropped = IntCounterVec::new(
            Opts::new(
                "flotilla_eviction_tasks_dropped_total",
                "Graceful eviction tasks ended, by why (the old copy goes then).",
            ),
            &["reason"],
        )?;
        let tasks_pending = IntGauge::new(
            "flotilla_eviction_tasks_pending",
            "Graceful eviction tasks that exist now.",
        )?;
        // The latencies: seconds in `buckets`, by producer.
        let seconds_by_producer = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.clone()),
                &["producer"],
            )
        };
        let taint_to_eviction = seconds_by_producer(
            "flotilla_taint_to_eviction_seconds",
            "Seconds from a NoExecute taint's timeAdded to the eviction it caused.",
        )?;
        let eviction_to_healthy = seconds_by_producer(
            "flotilla_eviction_to_healthy_seconds",
            "Seconds from an eviction to every cluster of the new placement Healthy.",
        )?;
        let unhealthy_to_eviction = seconds_by_producer(
            "flotilla_unhealthy_to_eviction_seconds",
            "Seconds from a workload's first Unhealthy report on a cluster to its application failover.",
        )?;
        let application_failovers_held = IntCounterVec::new(
            Opts::new(
                "flotilla_application_failovers_held_total",
                "Due application failovers held back, by why (Backoff, FailoverLimitReached, NoTarget, NewerReport).",
            ),
            &["reason"],
        )?;
        let brake_state = IntGaugeVec::new(
            Opts::new(
                "flotilla_eviction_brake_state",
                "1 for the eviction brake state each region is in (Normal, PartialDisruption, FullDisruption, StartupGrace), 0 for the others.",
            ),
            &["region", "state"],
        )?;
        let brake_rate = GaugeVec::new(
            Opts::new(
                "flotilla_eviction_brake_rate",
                "Failed clusters per second the eviction brake lets out in each region (0: stopped, +Inf: pacing off); once let out, all of a cluster's bindings may go.",
            ),
            &["region"],
        )?;
        let clusters_released = IntCounterVec::new(
            Opts::new(
                "flotilla_eviction_brake_clusters_released_total",
                "Failed clusters that took their region's eviction token, after which all their bindings may be evicted.",
            ),
            &["region"],
        )?;
        let clusters_queued = IntGaugeVec::new(
            Opts::new(
                "flotilla_eviction_brake_clusters_queued",
                "Failed clusters waiting for their region's eviction token.",
            ),
            &["region"],
        )?;
        let evictions_held = IntCounterVec::new(
            Opts::new(
                "flotilla_evictions_held_total",
                "Evictions the eviction brake made wait, by region and why (RateLimited: the cluster waits its turn, ResourceRateLimited, StartupGrace, FullDisruption, RateZero).",
            ),
            &["region", "reason"],
        )?;
        let failbacks = IntCounterVec::new(
            Opts::new(
                "flotilla_failbacks_total",
                "Workloads moved back to a cluster they were failed over from, once it stayed Ready for the stabilization window, by that cluster.",
            ),
            &["cluster"],
        )?;
        registry.register(Box::new(failbacks.clone()))?;
        registry.register(Box::new(evictions.clone()))?;
        registry.register(Box::new(brake_state.clone()))?;
        registry.register(Box::new(brake_rate.clone()))?;
        registry.register(Box::new(evictions_held.clone()))?;
        registry.register(Box::new(clusters_released.clone()))?;
        registry.register(Box::new(clusters_queued.clone()))?;
        registry.register(Box::new(tasks_dropped.clone()))?;
        registry.register(Box::new(tasks_pending.clone()))?;
        registry.register(Box::new(taint_to_eviction.clone()))?;
        registry.register(Box::new(eviction_to_healthy.clone()))?;
        registry.register(Box::new(unhealthy_to_eviction.clone()))?;
        registry.register(Box::new(application_failovers_held.clone()))?;
        Ok(Self {
            evictions,
            tasks_dropped,
            tasks_pending,
            taint_to_eviction,
            eviction_to_healthy,
            unhealthy_to_eviction,
            application_failovers_held,
            brake_state,
            brake_rate,
            clusters_released,
            clusters_queued,
            evictions_held,
            failbacks,
        })
    }
}

/// Seconds from `since` to `now` for a histogram (0 when the clocks disagree).
pub fn seconds_since(since: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    (now - since).num_milliseconds().max(0) as f64 / 1000.0
}
