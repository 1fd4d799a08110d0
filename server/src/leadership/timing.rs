//! The leader election's timing, with Kubernetes' flag names, defaults and rules
//! (`--leader-elect-lease-duration` 15 s, `--leader-elect-renew-deadline` 10 s,
//! `--leader-elect-retry-period` 2 s; lease duration > renew deadline > 1.2 × retry period),
//! and the one decision it drives: has a leader gone too long without renewing?

use std::time::{Duration, Instant};

/// client-go's `JitterFactor`: the renew deadline must exceed the retry period by this much.
const JITTER_FACTOR: f64 = 1.2;

/// etcd's smallest lease TTL with its default election timeout (1.5 × 1 s, ceiled).
pub const MIN_LEASE_SECONDS: i64 = 2;

/// How long a term lasts unrenewed, when a leader gives up, and how often it renews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderElectionTiming {
    /// The etcd lease's TTL: a dead leader's term ends this long after its last renewal, and
    /// another server leads.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops its controllers (before its lease
    /// can run out, so two leaders never act at once).
    pub renew_deadline: Duration,
    /// How often a leader renews and a candidate retries.
    pub retry_period: Duration,
}

impl Default for LeaderElectionTiming {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderElectionTiming {
    /// Kubernetes' rules: lease duration > renew deadline > 1.2 × retry period, and a lease
    /// etcd can grant. The error names the flag at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be greater than zero".to_string());
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(format!(
                "--leader-elect-renew-deadline ({}) must be greater than {JITTER_FACTOR} × --leader-elect-retry-period ({})",
                humantime::format_duration(self.renew_deadline),
                humantime::format_duration(self.retry_period)
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "--leader-elect-lease-duration ({}) must be greater than --leader-elect-renew-deadline ({})",
                humantime::format_duration(self.lease_duration),
                humantime::format_duration(self.renew_deadline)
            ));
        }
        if self.lease_seconds() < MIN_LEASE_SECONDS
            || self.lease_duration < Duration::from_secs(MIN_LEASE_SECONDS as u64)
        {
            return Err(format!(
                "--leader-elect-lease-duration ({}) must be at least {MIN_LEASE_SECONDS}s, etcd's shortest lease",
                humantime::format_duration(self.lease_duration)
            ));
        }
        Ok(())
    }

    /// The etcd lease TTL in whole seconds (rounded up: a lease never ends early).
    pub fn lease_seconds(&self) -> i64 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }

    /// A timing scaled for a short lease: renew deadline 2/3 and retry period 2/15 of it
    /// (Kubernetes' proportions), for `--leader-elect-lease-duration` alone.
    pub fn for_lease(lease_duration: Duration) -> Self {
        Self {
            lease_duration,
            renew_deadline: lease_duration.mul_f64(2.0 / 3.0),
            retry_period: lease_duration.mul_f64(2.0 / 15.0),
        }
    }

    /// True when a leader whose last successful renewal was *sent* at `last_renewal_sent` has
    /// lapsed at `now`: it must stop acting. Counting from the send (not the answer) keeps the
    /// leader's view of its term no longer than etcd's (TiKV PD's rule).
    pub fn lapsed(&self, last_renewal_sent: Instant, now: Instant) -> bool {
        now.saturating_duration_since(last_renewal_sent) >= self.renew_deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(lease: u64, renew: u64, retry_ms: u64) -> LeaderElectionTiming {
        LeaderElectionTiming {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_millis(retry_ms),
        }
    }

    #[test]
    fn kubernetes_rules() {
        let table = [
            (t(15, 10, 2000), None),
            (t(3, 2, 400), None),
            (t(10, 10, 2000), Some("--leader-elect-lease-duration")),
            (t(15, 2, 2000), Some("--leader-elect-renew-deadline")),
            (t(15, 10, 0), Some("--leader-elect-retry-period")),
            (t(1, 0, 0), Some("--leader-elect-retry-period")),
        ];
        for (timing, want) in table {
            match (timing.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(flag)) => assert!(e.starts_with(flag), "{timing:?}: {e}"),
                (got, want) => panic!("{timing:?}: got {got:?}, want {want:?}"),
            }
        }
        assert!(LeaderElectionTiming::default().validate().is_ok());
        assert!(LeaderElectionTiming::for_lease(Duration::from_secs(3))
            .validate()
            .is_ok());
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(t(15, 10, 2000).lease_seconds(), 15);
        let mut odd = t(3, 2, 400);
        odd.lease_duration = Duration::from_millis(2500);
        assert_eq!(odd.lease_seconds(), 3);
    }

    #[test]
    fn lapses_at_the_renew_deadline() {
        let timing = LeaderElectionTiming::default();
        let sent = Instant::now();
        assert!(!timing.lapsed(sent, sent + Duration::from_secs(9)));
        assert!(timing.lapsed(sent, sent + Duration::from_secs(10)));
    }
}
