//! The failure-detection timings the server's flags default to: Karmada's (the standard
//! profile, for production) and `--fast-failover`'s, second-scale detection for demos and tests.
//! A flag given explicitly wins over either profile; [`Detection::with`] applies them.

use std::time::Duration;

/// When a failed member is noticed, tainted and evicted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detection {
    /// `--cluster-status-update-frequency`: how often push members are probed.
    pub probe_period: Duration,
    /// `--cluster-failure-threshold`: a not-True probe lasts this long before Ready turns
    /// False.
    pub failure_threshold: Duration,
    /// `--cluster-success-threshold`: a True probe lasts this long before Ready turns True.
    pub success_threshold: Duration,
    /// `--cluster-monitor-period`: how often pull members' leases are checked.
    pub monitor_period: Duration,
    /// `--cluster-monitor-grace-period`: a pull member silent this long turns Ready Unknown
    /// (also the default startup wait of the eviction brake, and what agents are told to
    /// renew their lease within a quarter of).
    pub monitor_grace: Duration,
    /// `--cluster-startup-grace-period`: the same for members that never posted a status.
    pub startup_grace: Duration,
    /// `--failover-eviction-timeout`: a member not Ready this long gets the NoExecute taint.
    pub eviction_timeout: Duration,
    /// `--default-not-ready-toleration-seconds`.
    pub not_ready_toleration_seconds: i64,
    /// `--default-unreachable-toleration-seconds`.
    pub unreachable_toleration_seconds: i64,
}

impl Detection {
    /// Karmada's defaults: a member silent for 40 s turns Unknown, 5 minutes later it is
    /// tainted, and policies tolerate the taint for 300 s — about ten minutes from a
    /// member's death to its workloads' eviction, which rides out restarts and short network
    /// trouble.
    pub const STANDARD: Detection = Detection {
        probe_period: Duration::from_secs(10),
        failure_threshold: Duration::from_secs(30),
        success_threshold: Duration::from_secs(30),
        monitor_period: Duration::from_secs(5),
        monitor_grace: Duration::from_secs(40),
        startup_grace: Duration::from_secs(60),
        eviction_timeout: Duration::from_secs(5 * 60),
        not_ready_toleration_seconds: 300,
        unreachable_toleration_seconds: 300,
    };

    /// `--fast-failover`: a pull member silent for 2 s turns Unknown (a push member failing
    /// its probes for 2 s, False), it is tainted 4 s after its last lease renewal (4 s after
    /// a push member turned False), and default tolerations of 0 s evict at once — a failover
    /// within seconds, for demos and tests. Not for production: a member that misses two
    /// seconds of lease renewals (a GC pause, a slow network) is failed over.
    ///
    /// The taint waits 2 s past the grace period so that a partition is read as one: members
    /// cut off at the same moment renewed their leases up to one renewal period apart (0.5 s)
    /// and are seen Unknown up to one monitor period later (0.3 s), so all of them are Unknown
    /// before the first is tainted, and the eviction brake sees the whole disruption instead
    /// of letting the first one out as a single failed cluster.
    pub const FAST_FAILOVER: Detection = Detection {
        probe_period: Duration::from_millis(500),
        failure_threshold: Duration::from_secs(2),
        success_threshold: Duration::from_secs(1),
        monitor_period: Duration::from_millis(300),
        monitor_grace: Duration::from_secs(2),
        startup_grace: Duration::from_secs(5),
        eviction_timeout: Duration::from_secs(4),
        not_ready_toleration_seconds: 0,
        unreachable_toleration_seconds: 0,
    };

    /// The profile `fast` selects.
    pub fn profile(fast: bool) -> Detection {
        if fast {
            Self::FAST_FAILOVER
        } else {
            Self::STANDARD
        }
    }

    /// This profile with the flags given explicitly (`Some`) in its place.
    pub fn with(self, given: DetectionFlags) -> Detection {
        Detection {
            probe_period: given.probe_period.unwrap_or(self.probe_period),
            failure_threshold: given.failure_threshold.unwrap_or(self.failure_threshold),
            success_threshold: given.success_threshold.unwrap_or(self.success_threshold),
            monitor_period: given.monitor_period.unwrap_or(self.monitor_period),
            monitor_grace: given.monitor_grace.unwrap_or(self.monitor_grace),
            startup_grace: given.startup_grace.unwrap_or(self.startup_grace),
            eviction_timeout: given.eviction_timeout.unwrap_or(self.eviction_timeout),
            not_ready_toleration_seconds: given
                .not_ready_toleration_seconds
                .unwrap_or(self.not_ready_toleration_seconds),
            unreachable_toleration_seconds: given
                .unreachable_toleration_seconds
                .unwrap_or(self.unreachable_toleration_seconds),
        }
    }
}

/// The detection flags as given on the command line (`None`: not given).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectionFlags {
    /// `--cluster-status-update-frequency`.
    pub probe_period: Option<Duration>,
    /// `--cluster-failure-threshold`.
    pub failure_threshold: Option<Duration>,
    /// `--cluster-success-threshold`.
    pub success_threshold: Option<Duration>,
    /// `--cluster-monitor-period`.
    pub monitor_period: Option<Duration>,
    /// `--cluster-monitor-grace-period`.
    pub monitor_grace: Option<Duration>,
    /// `--cluster-startup-grace-period`.
    pub startup_grace: Option<Duration>,
    /// `--failover-eviction-timeout`.
    pub eviction_timeout: Option<Duration>,
    /// `--default-not-ready-toleration-seconds`.
    pub not_ready_toleration_seconds: Option<i64>,
    /// `--default-unreachable-toleration-seconds`.
    pub unreachable_toleration_seconds: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_flags_win_over_either_profile() {
        let given = DetectionFlags {
            monitor_grace: Some(Duration::from_secs(3)),
            not_ready_toleration_seconds: Some(30),
            ..Default::default()
        };
        // (case, fast, flags, want)
        let table = [
            (
                "standard",
                false,
                DetectionFlags::default(),
                Detection::STANDARD,
            ),
            (
                "fast",
                true,
                DetectionFlags::default(),
                Detection::FAST_FAILOVER,
            ),
            (
                "standard with two flags",
                false,
                given,
                Detection {
                    monitor_grace: Duration::from_secs(3),
                    not_ready_toleration_seconds: 30,
                    ..Detection::STANDARD
                },
            ),
            (
                "fast with two flags",
                true,
                given,
                Detection {
                    monitor_grace: Duration::from_secs(3),
                    not_ready_toleration_seconds: 30,
                    ..Detection::FAST_FAILOVER
                },
            ),
        ];
        for (case, fast, flags, want) in table {
            assert_eq!(Detection::profile(fast).with(flags), want, "{case}");
        }
    }

    #[test]
    fn the_fast_profile_detects_within_seconds() {
        let f = Detection::FAST_FAILOVER;
        // The taint is due eviction_timeout after the last lease renewal, and never before
        // the member is seen Unknown.
        let to_eviction = f.monitor_grace.max(f.eviction_timeout)
            + f.monitor_period
            + Duration::from_secs(f.unreachable_toleration_seconds.unsigned_abs());
        assert!(to_eviction < Duration::from_secs(5), "{to_eviction:?}");
        assert!(f.monitor_period * 4 <= f.monitor_grace);
        // Members cut off together are all Unknown before the first is tainted: their last
        // renewals lie within one renewal period (a quarter of the grace), each is seen one
        // monitor period late at most, and a second more covers a loaded machine.
        let spread = f.monitor_grace / 4 + f.monitor_period + Duration::from_secs(1);
        assert!(f.eviction_timeout >= f.monitor_grace + spread, "{f:?}");
    }
}
