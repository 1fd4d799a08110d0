//! How a member's `Ready` condition is decided (docs/semantics.md §3), as pure functions of
//! (what was observed, what is stored, now):
//! - push members: a probe result becomes an observed condition ([`observed_ready`]), which
//!   [`threshold_adjusted`] holds back until a True↔not-True flip has lasted the success or
//!   failure threshold;
//! - pull members: [`monitor`] turns Ready to Unknown when neither the lease nor the posted
//!   condition changed for the monitor grace period (the startup grace period when the member
//!   never posted one).

use chrono::{DateTime, Utc};
use flotilla_api::cluster::CONDITION_READY;
use flotilla_api::meta::{Condition, ConditionStatus, Time};

use crate::controllers::settings::{GracePeriods, Thresholds};
use crate::probes::ProbeResult;

/// A setting's period (`std::time::Duration`, as the flags give it) as a span of time to add
/// to a point in time; a period too long for chrono is as good as forever.
pub fn span(period: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(period).unwrap_or(chrono::Duration::MAX)
}

/// The Ready condition a probe result stands for (§3.1 table).
pub fn observed_ready(probe: &ProbeResult) -> Condition {
    let (status, reason, message) = match (probe.online, probe.healthy) {
        (false, _) => (
            ConditionStatus::False,
            "ClusterNotReachable",
            "cluster is not reachable",
        ),
        (true, false) => (
            ConditionStatus::False,
            "ClusterNotReady",
            "cluster is reachable but health endpoint responded without ok",
        ),
        (true, true) => (
            ConditionStatus::True,
            "ClusterReady",
            "cluster is healthy and ready to accept workloads",
        ),
    };
    let message = match &probe.problem {
        Some(problem) if status != ConditionStatus::True => problem.as_str(),
        _ => message,
    };
    Condition::new(CONDITION_READY, status, reason, message)
}

/// Per-member memory of the last observed status and when it started.
#[derive(Clone, Debug, PartialEq)]
pub struct ThresholdEntry {
    /// Status last observed.
    pub observed: ConditionStatus,
    /// When that status was first observed.
    pub since: DateTime<Utc>,
}

/// Applies the success/failure thresholds: returns the condition to store and the new entry.
pub fn threshold_adjusted(
    entry: Option<&ThresholdEntry>,
    current: Option<&Condition>,
    observed: Condition,
    now: DateTime<Utc>,
    thresholds: Thresholds,
) -> (Condition, ThresholdEntry) {
    let fresh = ThresholdEntry {
        observed: observed.status,
        since: now,
    };
    let Some(entry) = entry else {
        return (observed, fresh);
    };
    let Some(current) = current else {
        let entry = if entry.observed == observed.status {
            entry.clone()
        } else {
            fresh
        };
        return (observed, entry);
    };
    let entry = if entry.observed == observed.status {
        entry.clone()
    } else {
        fresh
    };
    let is_true = |s: ConditionStatus| s == ConditionStatus::True;
    let threshold = if is_true(observed.status) {
        thresholds.success
    } else {
        thresholds.failure
    };
    let flips = is_true(observed.status) != is_true(current.status);
    if flips && now < entry.since + threshold {
        return (current.clone(), entry);
    }
    (observed, entry)
}

/// Per-member memory of the lease monitor.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitorEntry {
    /// Last time the member showed a sign of life.
    pub probe_timestamp: DateTime<Utc>,
    /// The Ready condition seen last time.
    pub ready: Option<Condition>,
    /// The lease renewTime seen last time.
    pub lease_renewed: Option<DateTime<Utc>>,
}

/// One monitor pass over a pull member: returns the new entry and, when Ready must change, the
/// condition to store.
pub fn monitor(
    entry: Option<&MonitorEntry>,
    current: Option<&Condition>,
    created: DateTime<Utc>,
    lease_renewed: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    grace: GracePeriods,
) -> (MonitorEntry, Option<Condition>) {
    let (mut entry, grace_period) = match current {
        None => (
            entry.cloned().unwrap_or(MonitorEntry {
                probe_timestamp: created,
                ready: None,
                lease_renewed: None,
            }),
            grace.startup,
        ),
        Some(cond) => {
            let reset = entry.is_none_or(|e| e.ready.as_ref() != Some(cond));
            let e = if reset {
                MonitorEntry {
                    probe_timestamp: now,
                    ready: Some(cond.clone()),
                    lease_renewed: entry.and_then(|e| e.lease_renewed),
                }
            } else {
                entry.cloned().unwrap_or(MonitorEntry {
                    probe_timestamp: now,
                    ready: Some(cond.clone()),
                    lease_renewed: None,
                })
            };
            (e, grace.monitor)
        }
    };
    if let Some(renewed) = lease_renewed {
        if entry.lease_renewed.is_none_or(|seen| renewed > seen) {
            entry.probe_timestamp = now;
            entry.lease_renewed = Some(renewed);
        }
    }
    if now <= entry.probe_timestamp + grace_period {
        return (entry, None);
    }
    let unknown = |reason: &str, message: &str| {
        let mut c = Condition::new(CONDITION_READY, ConditionStatus::Unknown, reason, message);
        c.last_transition_time = Some(Time::new(now));
        c
    };
    match current {
        None => (
            entry,
            Some(unknown(
                "ClusterStatusNeverUpdated",
                "Cluster status controller never posted cluster status.",
            )),
        ),
        Some(c) if c.status != ConditionStatus::Unknown => (
            entry,
            Some(unknown(
                "ClusterStatusUnknown",
                "Cluster status controller stopped posting cluster status.",
            )),
        ),
        Some(_) => (entry, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).single().unwrap()
    }

    fn cond(status: ConditionStatus) -> Condition {
        Condition::new(CONDITION_READY, status, "r", "m")
    }

    const TH: Thresholds = Thresholds {
        success: std::time::Duration::from_secs(30),
        failure: std::time::Duration::from_secs(30),
    };

    #[test]
    fn probe_results_map_to_conditions() {
        let table = [
            (false, false, ConditionStatus::False, "ClusterNotReachable"),
            (false, true, ConditionStatus::False, "ClusterNotReachable"),
            (true, false, ConditionStatus::False, "ClusterNotReady"),
            (true, true, ConditionStatus::True, "ClusterReady"),
        ];
        for (online, healthy, status, reason) in table {
            let c = observed_ready(&ProbeResult {
                online,
                healthy,
                problem: None,
            });
            assert_eq!((c.status, c.reason.as_str()), (status, reason));
        }
    }

    #[test]
    fn a_probes_problem_is_the_message_of_a_not_ready_condition() {
        let refused = "the member's API server refused the credential of spec.secretRef";
        let table = [
            (true, false, Some(refused), refused),
            (
                false,
                false,
                Some("cluster is not reachable: tls"),
                "cluster is not reachable: tls",
            ),
            (
                true,
                false,
                None,
                "cluster is reachable but health endpoint responded without ok",
            ),
            (
                true,
                true,
                Some("ignored when Ready"),
                "cluster is healthy and ready to accept workloads",
            ),
        ];
        for (online, healthy, problem, message) in table {
            let c = observed_ready(&ProbeResult {
                online,
                healthy,
                problem: problem.map(str::to_string),
            });
            assert_eq!(c.message, message);
        }
    }

    /// (entry, current, observed, now, want status, want entry since)
    type ThresholdRow = (
        Option<ThresholdEntry>,
        Option<ConditionStatus>,
        ConditionStatus,
        i64,
        ConditionStatus,
        i64,
    );

    #[test]
    fn thresholds_delay_flips_but_not_first_observations() {
        use ConditionStatus::{False, True, Unknown};
        // (entry, current, observed, now, want status, want entry since)
        let e = |s, since| {
            Some(ThresholdEntry {
                observed: s,
                since: t(since),
            })
        };
        let table: Vec<ThresholdRow> = vec![
            // first probe since start: observed at once
            (None, Some(True), False, 0, False, 0),
            // no condition stored yet: observed at once
            (e(False, 0), None, True, 5, True, 5),
            // True -> False flip starts the failure threshold; held back inside it
            (e(True, 0), Some(True), False, 10, True, 10),
            (e(False, 10), Some(True), False, 39, True, 10),
            // ...and lets it through once the threshold has passed
            (e(False, 10), Some(True), False, 40, False, 10),
            // False -> True flip waits the success threshold
            (e(False, 0), Some(False), True, 100, False, 100),
            (e(True, 100), Some(False), True, 129, False, 100),
            (e(True, 100), Some(False), True, 130, True, 100),
            // a blip resets the start
            (e(False, 10), Some(True), True, 20, True, 20),
            (e(True, 20), Some(True), False, 25, True, 25),
            // False <-> Unknown is not a flip: immediate
            (e(Unknown, 0), Some(Unknown), False, 1, False, 1),
            // steady state
            (e(True, 0), Some(True), True, 500, True, 0),
        ];
        for (i, (entry, current, observed, now, want, since)) in table.into_iter().enumerate() {
            let current = current.map(cond);
            let (got, entry) =
                threshold_adjusted(entry.as_ref(), current.as_ref(), cond(observed), t(now), TH);
            assert_eq!(got.status, want, "row {i}");
            assert_eq!(entry.since, t(since), "row {i}");
            assert_eq!(entry.observed, observed, "row {i}");
        }
    }

    const GRACE: GracePeriods = GracePeriods {
        monitor: std::time::Duration::from_secs(40),
        startup: std::time::Duration::from_secs(60),
    };

    #[test]
    fn a_member_that_never_posts_turns_unknown_after_the_startup_grace() {
        let (e, c) = monitor(None, None, t(0), None, t(60), GRACE);
        assert!(c.is_none());
        let (_, c) = monitor(Some(&e), None, t(0), None, t(61), GRACE);
        let c = c.unwrap();
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::Unknown, "ClusterStatusNeverUpdated")
        );
        assert_eq!(c.last_transition_time, Some(Time::new(t(61))));
    }

    #[test]
    fn lease_renewals_keep_a_member_alive_and_silence_turns_it_unknown() {
        let ready = cond(ConditionStatus::True);
        let (e, c) = monitor(None, Some(&ready), t(0), Some(t(0)), t(0), GRACE);
        assert!(c.is_none());
        // Renewals every 10 s: never Unknown.
        let mut entry = e;
        for s in (10..200).step_by(10) {
            let (e, c) = monitor(
                Some(&entry),
                Some(&ready),
                t(0),
                Some(t(s)),
                t(s + 1),
                GRACE,
            );
            assert!(c.is_none(), "at {s}");
            entry = e;
        }
        // The lease stops at 190: Unknown once 40 s have passed since it was last seen renewed.
        let (e, c) = monitor(
            Some(&entry),
            Some(&ready),
            t(0),
            Some(t(190)),
            t(231),
            GRACE,
        );
        assert!(c.is_none());
        let (_, c) = monitor(Some(&e), Some(&ready), t(0), Some(t(190)), t(232), GRACE);
        let c = c.unwrap();
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::Unknown, "ClusterStatusUnknown")
        );
    }

    #[test]
    fn a_changed_condition_counts_as_a_sign_of_life_and_unknown_stays_unknown() {
        let ready = cond(ConditionStatus::True);
        let (e, _) = monitor(None, Some(&ready), t(0), None, t(0), GRACE);
        let not_ready = cond(ConditionStatus::False);
        let (e, c) = monitor(Some(&e), Some(&not_ready), t(0), None, t(100), GRACE);
        assert!(
            c.is_none(),
            "a newly posted condition resets the probe time"
        );
        assert_eq!(e.probe_timestamp, t(100));
        let unknown = cond(ConditionStatus::Unknown);
        let (e, _) = monitor(Some(&e), Some(&unknown), t(0), None, t(200), GRACE);
        let (_, c) = monitor(Some(&e), Some(&unknown), t(0), None, t(400), GRACE);
        assert!(c.is_none(), "already Unknown: nothing to write");
    }
}
