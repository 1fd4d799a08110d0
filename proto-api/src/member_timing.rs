//! One timing for server and agents (docs/members.md, "One timing for server and agents"):
//! how often a pull agent renews its lease and reports its Cluster status follows from the
//! server's `--cluster-monitor-grace-period`. The server advertises the periods on every answer
//! in the [`MEMBER_TIMING_HEADER`] header; an agent takes them unless an explicit flag says
//! otherwise (explicit flag > advertised > built-in default). The Lease an agent writes
//! declares, in `leaseDurationSeconds`, how long it may stay silent; the server compares that
//! with its grace period. Pure arithmetic and text: no clock, no I/O.

use std::time::Duration;

/// The response header carrying [`MemberTiming`] (HTTP header names are case-insensitive).
pub const MEMBER_TIMING_HEADER: &str = "flotilla-member-timing";

/// The part of the grace period an agent waits between two lease renewals (and two status
/// reports): a quarter, as Kubernetes' kubelet (`nodeLeaseRenewIntervalFraction`) and Karmada's
/// agent (`--cluster-lease-renew-interval-fraction`) do, so three renewals can be lost or late
/// before the member turns Unknown.
pub const RENEW_FRACTION_DENOMINATOR: u32 = 4;

/// The longest period advertised: Karmada's default renew interval and status period (a quarter
/// of its 40 s grace). A longer grace does not make the agents slower than that, so resource
/// summaries stay as fresh as they are by default.
pub const MAX_PERIOD: Duration = Duration::from_secs(10);

/// The shortest period advertised, whatever the grace period.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The periods a server asks its pull agents to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberTiming {
    /// How often the agent renews its lease.
    pub lease_renew_interval: Duration,
    /// How often the agent reports its Cluster status.
    pub cluster_status_update_frequency: Duration,
}

impl MemberTiming {
    /// What a server with this `--cluster-monitor-grace-period` advertises: a quarter of it,
    /// at most [`MAX_PERIOD`] and at least [`MIN_PERIOD`], for both periods.
    pub fn for_grace_period(grace: Duration) -> Self {
        let period = (grace / RENEW_FRACTION_DENOMINATOR).clamp(MIN_PERIOD, MAX_PERIOD);
        // Whole milliseconds, the unit of the header and of the agent's flags.
        let period = Duration::from_millis(u64::try_from(period.as_millis()).unwrap_or(u64::MAX))
            .max(MIN_PERIOD);
        MemberTiming {
            lease_renew_interval: period,
            cluster_status_update_frequency: period,
        }
    }

    /// The header value: `leaseRenewIntervalMs=500, clusterStatusUpdateFrequencyMs=500`.
    pub fn to_header(&self) -> String {
        format!(
            "leaseRenewIntervalMs={}, clusterStatusUpdateFrequencyMs={}",
            self.lease_renew_interval.as_millis(),
            self.cluster_status_update_frequency.as_millis()
        )
    }

    /// Reads a header value written by [`MemberTiming::to_header`]. Keys it does not know are
    /// skipped (a newer server may advertise more); `None` when a period is missing, zero or
    /// not a number.
    pub fn parse_header(value: &str) -> Option<Self> {
        let (mut lease, mut status) = (None, None);
        for item in value.split(',') {
            let Some((key, ms)) = item.trim().split_once('=') else {
                continue;
            };
            let ms = ms.trim().parse::<u64>().ok().filter(|ms| *ms > 0);
            match key.trim() {
                "leaseRenewIntervalMs" => lease = Some(ms?),
                "clusterStatusUpdateFrequencyMs" => status = Some(ms?),
                _ => {}
            }
        }
        Some(MemberTiming {
            lease_renew_interval: Duration::from_millis(lease?),
            cluster_status_update_frequency: Duration::from_millis(status?),
        })
    }
}

/// The `leaseDurationSeconds` an agent renewing every `renew_interval` writes into its Lease:
/// the silence it declares acceptable, [`RENEW_FRACTION_DENOMINATOR`] renewals, rounded up to
/// whole seconds (at least 1). A 10 s interval declares Karmada's 40 s.
pub fn lease_duration_seconds(renew_interval: Duration) -> i64 {
    let millis = renew_interval
        .as_millis()
        .saturating_mul(u128::from(RENEW_FRACTION_DENOMINATOR));
    i64::try_from(millis.div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// Whether a lease declaring `lease_duration_seconds` fits a server that turns a silent
/// member Unknown after `grace`: the declared silence is at most the grace period, rounded up
/// to whole seconds as the declaration is. A lease declaring more lets its holder stay silent
/// longer than the server waits, and the member flaps Unknown between renewals.
pub fn lease_fits_grace(lease_duration_seconds: i64, grace: Duration) -> bool {
    let grace_seconds = i64::try_from(grace.as_millis().div_ceil(1000)).unwrap_or(i64::MAX);
    lease_duration_seconds <= grace_seconds
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_server_advertises_a_quarter_of_its_grace_period() {
        // (grace, advertised period)
        let table = [
            (ms(40_000), ms(10_000)), // the defaults: Karmada's 10 s
            (ms(2_000), ms(500)),
            (ms(3_000), ms(750)),
            (ms(2_500), ms(625)),
            (ms(1_001), ms(250)),      // whole milliseconds, rounded down
            (ms(300_000), ms(10_000)), // never slower than the default
            (ms(2), ms(1)),
            (Duration::ZERO, ms(1)), // never zero
        ];
        for (grace, want) in table {
            let t = MemberTiming::for_grace_period(grace);
            assert_eq!(t.lease_renew_interval, want, "grace {grace:?}");
            assert_eq!(t.cluster_status_update_frequency, want, "grace {grace:?}");
        }
    }

    #[test]
    fn the_header_reads_back_and_bad_values_are_refused() {
        let t = MemberTiming::for_grace_period(ms(2_000));
        assert_eq!(
            t.to_header(),
            "leaseRenewIntervalMs=500, clusterStatusUpdateFrequencyMs=500"
        );
        // (value, parsed lease and status periods in ms)
        let table: [(&str, Option<(u64, u64)>); 8] = [
            (
                "leaseRenewIntervalMs=500, clusterStatusUpdateFrequencyMs=500",
                Some((500, 500)),
            ),
            (
                "clusterStatusUpdateFrequencyMs=7,leaseRenewIntervalMs=9",
                Some((9, 7)),
            ),
            (
                "leaseRenewIntervalMs=500, futureKey=x, clusterStatusUpdateFrequencyMs=400",
                Some((500, 400)),
            ),
            ("leaseRenewIntervalMs=500", None),
            (
                "leaseRenewIntervalMs=0, clusterStatusUpdateFrequencyMs=500",
                None,
            ),
            (
                "leaseRenewIntervalMs=-1, clusterStatusUpdateFrequencyMs=500",
                None,
            ),
            (
                "leaseRenewIntervalMs=fast, clusterStatusUpdateFrequencyMs=500",
                None,
            ),
            ("", None),
        ];
        for (value, want) in table {
            let got = MemberTiming::parse_header(value).map(|t| {
                (
                    t.lease_renew_interval.as_millis() as u64,
                    t.cluster_status_update_frequency.as_millis() as u64,
                )
            });
            assert_eq!(got, want, "{value:?}");
        }
    }

    #[test]
    fn a_lease_declares_four_renewals_and_fits_the_grace_it_was_derived_from() {
        // (renew interval, declared leaseDurationSeconds, grace, fits)
        let table = [
            (ms(10_000), 40, ms(40_000), true), // the defaults
            (ms(10_000), 40, ms(3_000), false), // the issue: default agents, a 3 s server
            (ms(10_000), 40, ms(2_000), false),
            (ms(500), 2, ms(2_000), true), // advertised under 2 s
            (ms(750), 3, ms(3_000), true),
            (ms(625), 3, ms(2_500), true),  // rounded up on both sides
            (ms(800), 4, ms(2_000), false), // slower than a quarter
            (ms(510), 3, ms(2_000), false),
            (ms(1), 1, ms(2), true),
        ];
        for (interval, declared, grace, fits) in table {
            assert_eq!(lease_duration_seconds(interval), declared, "{interval:?}");
            assert_eq!(
                lease_fits_grace(declared, grace),
                fits,
                "{interval:?} under {grace:?}"
            );
        }
    }

    proptest! {
        /// An agent that keeps what the server advertises never gets told it is too slow.
        #[test]
        fn advertised_timing_always_fits(grace_ms in 0u64..10_000_000) {
            let grace = ms(grace_ms);
            let t = MemberTiming::for_grace_period(grace);
            prop_assert!(t.lease_renew_interval <= MAX_PERIOD);
            prop_assert!(!t.lease_renew_interval.is_zero());
            if grace_ms >= 4 {
                prop_assert!(t.lease_renew_interval * RENEW_FRACTION_DENOMINATOR <= grace);
            }
            prop_assert!(lease_fits_grace(lease_duration_seconds(t.lease_renew_interval), grace)
                || grace_ms == 0);
            prop_assert_eq!(MemberTiming::parse_header(&t.to_header()), Some(t));
        }
    }
}
