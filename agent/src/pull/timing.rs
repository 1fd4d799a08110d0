//! Which lease and status periods a pull member keeps (docs/members.md, "One timing for server
//! and agents"): an explicit flag (`--lease-renew-interval-ms`,
//! `--cluster-status-update-frequency-ms`) wins; without one, the period the server advertises
//! in the `Flotilla-Member-Timing` header of its answers (a quarter of its
//! `--cluster-monitor-grace-period`); before the server has said anything, the built-in
//! default (10 s, Karmada's).
//!
//! [`AdvertisedTiming`] is the process-wide memory of what the server said last: the
//! [`super::client::ServerClient`] updates it from every answer, so an agent restarted with its
//! stored credential (no registration) learns it from its first lease renewal, and an agent
//! whose server restarted with another grace period learns it from the next answer (the watch
//! that resumes after the restart, at the latest). The loops read the periods through
//! [`effective`] on every round and are woken when the advertised timing changes.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::member_timing::MemberTiming;
use tokio::sync::watch;

/// The lease renewal period before the server has advertised one (Karmada's 40 s × 0.25).
pub const DEFAULT_LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// The status report period before the server has advertised one (Karmada's).
pub const DEFAULT_CLUSTER_STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);

/// Where a period came from, for logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// An explicit flag.
    Flag,
    /// The server's `Flotilla-Member-Timing` header.
    Server,
    /// The built-in default.
    Default,
}

/// The period to keep: the explicit one, else the advertised one, else the default.
pub fn effective(
    explicit: Option<Duration>,
    advertised: Option<Duration>,
    default: Duration,
) -> (Duration, Source) {
    match (explicit, advertised) {
        (Some(d), _) => (d, Source::Flag),
        (None, Some(d)) => (d, Source::Server),
        (None, None) => (default, Source::Default),
    }
}

/// What the server advertised last (shared by every member of the process: they talk to one
/// server).
#[derive(Clone, Debug)]
pub struct AdvertisedTiming {
    tx: Arc<watch::Sender<Option<MemberTiming>>>,
}

impl Default for AdvertisedTiming {
    fn default() -> Self {
        AdvertisedTiming {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl AdvertisedTiming {
    /// Takes the header of one answer (absent or unreadable: what was known stays).
    pub fn observe(&self, header: Option<&str>) {
        let Some(timing) = header.and_then(MemberTiming::parse_header) else {
            return;
        };
        let changed = self.tx.send_if_modified(|current| {
            if *current == Some(timing) {
                return false;
            }
            *current = Some(timing);
            true
        });
        if changed {
            tracing::info!(
                lease_renew_interval_ms = timing.lease_renew_interval.as_millis() as u64,
                cluster_status_update_frequency_ms =
                    timing.cluster_status_update_frequency.as_millis() as u64,
                "the server advertises its member timing; members without explicit timing flags follow it"
            );
        }
    }

    /// The timing advertised last, if any.
    pub fn current(&self) -> Option<MemberTiming> {
        *self.tx.borrow()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<Option<MemberTiming>> {
        self.tx.subscribe()
    }
}

/// Resolves when the advertised timing changes (never, once nothing can change it).
pub(crate) async fn changed(rx: &mut watch::Receiver<Option<MemberTiming>>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_explicit_flag_wins_then_the_server_then_the_default() {
        // (explicit, advertised, want)
        let table = [
            (Some(ms(300)), Some(ms(500)), (ms(300), Source::Flag)),
            (Some(ms(10_000)), Some(ms(500)), (ms(10_000), Source::Flag)),
            (None, Some(ms(500)), (ms(500), Source::Server)),
            (None, None, (ms(10_000), Source::Default)),
            (Some(ms(300)), None, (ms(300), Source::Flag)),
        ];
        for (explicit, advertised, want) in table {
            assert_eq!(
                effective(explicit, advertised, DEFAULT_LEASE_RENEW_INTERVAL),
                want,
                "{explicit:?} {advertised:?}"
            );
        }
    }

    #[test]
    fn the_last_readable_header_is_kept_and_only_a_change_wakes() {
        let advertised = AdvertisedTiming::default();
        let mut rx = advertised.subscribe();
        assert_eq!(advertised.current(), None);
        advertised.observe(None);
        advertised.observe(Some("garbage"));
        assert!(
            !rx.has_changed().unwrap(),
            "nothing readable, nothing changed"
        );
        let header = "leaseRenewIntervalMs=500, clusterStatusUpdateFrequencyMs=400";
        advertised.observe(Some(header));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        assert_eq!(
            advertised.current(),
            Some(MemberTiming {
                lease_renew_interval: ms(500),
                cluster_status_update_frequency: ms(400),
            })
        );
        advertised.observe(Some(header));
        assert!(!rx.has_changed().unwrap(), "the same timing again");
        advertised.observe(None);
        assert_eq!(
            advertised.current().map(|t| t.lease_renew_interval),
            Some(ms(500))
        );
        // A server restarted with another grace period.
        advertised.observe(Some(
            "leaseRenewIntervalMs=750, clusterStatusUpdateFrequencyMs=750",
        ));
        assert!(rx.has_changed().unwrap());
    }
}
