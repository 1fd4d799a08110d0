//! Whether a pull member renews its lease fast enough for this server
//! (docs/semantics.md §3.3, docs/members.md "One timing for server and agents"): its Lease
//! declares in `leaseDurationSeconds` how long it may stay silent; when that is longer than
//! `--cluster-monitor-grace-period`, the member turns Unknown between renewals and back, so
//! its Cluster gets the condition `LeaseRenewalTooSlow` (True) saying so and what to do. Once
//! the lease fits again the condition turns False; a member that always fitted never gets it.
//! Push members are probed by the server and have no lease: this never looks at them.
//!
//! A pure function of (the lease, the condition stored, the grace period); the cluster status
//! controller feeds it, writes the condition with the member's status and records the Event.

use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::member_timing::{lease_fits_grace, MemberTiming, RENEW_FRACTION_DENOMINATOR};
use flotilla_api::meta::{Condition, ConditionStatus};
use serde_json::Value;
use std::time::Duration;

/// The condition type on the Cluster.
pub const CONDITION_LEASE_RENEWAL_TOO_SLOW: &str = "LeaseRenewalTooSlow";
/// Its reason while the lease declares more than the grace period.
pub const REASON_TOO_SLOW: &str = "LeaseDurationExceedsGracePeriod";
/// Its reason once the lease fits again.
pub const REASON_IN_TIME: &str = "LeaseDurationWithinGracePeriod";

/// The `leaseDurationSeconds` a Lease declares (`None` when it declares none).
pub fn declared_duration(lease: &Value) -> Option<i64> {
    lease
        .lookup("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
}

/// The `LeaseRenewalTooSlow` condition the Cluster should carry, or `None` to leave its
/// conditions as they are: no declaration to judge, or a fitting lease on a member that was
/// never too slow.
pub fn renewal_condition(
    declared_seconds: Option<i64>,
    current: Option<&Condition>,
    grace: Duration,
) -> Option<Condition> {
    let declared = declared_seconds?;
    let advertised = MemberTiming::for_grace_period(grace).lease_renew_interval;
    if !lease_fits_grace(declared, grace) {
        let renews_every = declared as f64 / f64::from(RENEW_FRACTION_DENOMINATOR);
        return Some(Condition::new(
            CONDITION_LEASE_RENEWAL_TOO_SLOW,
            ConditionStatus::True,
            REASON_TOO_SLOW,
            &format!(
                "the member's Lease declares leaseDurationSeconds {declared} (a renewal about \
                 every {renews_every}s), but this server turns a silent pull member Unknown after \
                 {}s (--cluster-monitor-grace-period), so Ready flaps between renewals; start \
                 its agent without --lease-renew-interval-ms to follow the server \
                 (every {}ms), or set it to at most that",
                grace.as_secs_f64(),
                advertised.as_millis()
            ),
        ));
    }
    current?;
    Some(Condition::new(
        CONDITION_LEASE_RENEWAL_TOO_SLOW,
        ConditionStatus::False,
        REASON_IN_TIME,
        &format!(
            "the member's Lease declares leaseDurationSeconds {declared}, within the server's \
             --cluster-monitor-grace-period of {}s",
            grace.as_secs_f64()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// (declared leaseDurationSeconds, stored condition, grace, wanted status and reason)
    type Row = (
        Option<i64>,
        Option<ConditionStatus>,
        Duration,
        Option<(ConditionStatus, &'static str)>,
    );

    fn existing(status: ConditionStatus) -> Condition {
        Condition::new(CONDITION_LEASE_RENEWAL_TOO_SLOW, status, "r", "m")
    }

    #[test]
    fn too_slow_when_the_lease_outlasts_the_grace_and_false_once_it_fits_again() {
        use ConditionStatus::{False, True};
        // (declared, stored condition, grace, want status and reason)
        let table: [Row; 9] = [
            // defaults: an agent at 10 s under a 40 s grace fits; nothing is added
            (Some(40), None, s(40), None),
            // the issue: default agents under a 3 s server
            (Some(40), None, s(3), Some((True, REASON_TOO_SLOW))),
            (Some(40), Some(True), s(3), Some((True, REASON_TOO_SLOW))),
            // the agent follows the server now: False, kept so the change is seen
            (Some(2), Some(True), s(2), Some((False, REASON_IN_TIME))),
            (Some(2), Some(False), s(2), Some((False, REASON_IN_TIME))),
            (Some(2), None, s(2), None),
            // a lease that declares nothing is not judged
            (None, None, s(2), None),
            (None, Some(True), s(2), None),
            // exactly the grace fits
            (Some(3), None, Duration::from_millis(2_500), None),
        ];
        for (i, (declared, stored, grace, want)) in table.into_iter().enumerate() {
            let stored = stored.map(existing);
            let got = renewal_condition(declared, stored.as_ref(), grace);
            assert_eq!(
                got.as_ref().map(|c| (c.status, c.reason.as_str())),
                want,
                "row {i}"
            );
            if let Some(c) = got {
                assert_eq!(c.type_, CONDITION_LEASE_RENEWAL_TOO_SLOW, "row {i}");
            }
        }
    }

    #[test]
    fn the_message_says_what_was_declared_and_what_the_server_asks() {
        let c = renewal_condition(Some(40), None, s(2)).unwrap();
        assert!(
            c.message.contains("leaseDurationSeconds 40"),
            "{}",
            c.message
        );
        assert!(c.message.contains("every 10s"), "{}", c.message);
        assert!(c.message.contains("after 2s"), "{}", c.message);
        assert!(c.message.contains("every 500ms"), "{}", c.message);
    }

    #[test]
    fn the_declaration_is_read_from_the_lease_spec() {
        let lease = json!({"spec": {"holderIdentity": "m1", "leaseDurationSeconds": 40}});
        assert_eq!(declared_duration(&lease), Some(40));
        assert_eq!(declared_duration(&json!({"spec": {}})), None);
        assert_eq!(
            declared_duration(&json!({"spec": {"leaseDurationSeconds": "40"}})),
            None
        );
    }
}
