//! The heartbeat: `coordination.k8s.io/v1` Lease `karmada-cluster/<cluster>` with
//! `holderIdentity` the cluster name, `leaseDurationSeconds` four renewal periods (40 for the
//! default 10 s: the silence the member declares acceptable, which the server compares with
//! its grace period) and `renewTime` now (RFC 3339 with microseconds), created when missing and
//! renewed every lease renewal period (the flag's, else the server's: [`super::timing`]). The
//! loop is woken when the server advertises another timing. The lease
//! last written is kept so a renewal is one PUT; a conflict or a vanished lease refetches.
//! While the member is unreachable no lease is written: each renewal that falls due is skipped
//! and counted in the member's [`crate::member::PullCounters`]. Each accepted renewal is told
//! to the member's [`super::fence::FenceState`].
//!
//! Each lease request times out after one renewal period ([`renewal_timeout`]), not the
//! agent's 30 s request timeout: a server that stopped answering costs one period before the
//! agent moves to the next server ([`super::endpoints`]) and renews there, well inside the
//! server's grace period (four periods).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::backoff::{jittered, Backoff};
use super::timing::{self, Source};
use super::{nap, ClientError, PullContext, Wake};
use flotilla_api::cluster::CLUSTER_LEASE_NAMESPACE;
use flotilla_api::member_timing::lease_duration_seconds;

/// `renewTime` as Kubernetes writes a MicroTime.
pub fn micro_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn collection_path() -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{CLUSTER_LEASE_NAMESPACE}/leases")
}

/// Sets the lease's spec for a renewal now.
pub fn renewed(
    mut lease: Value,
    cluster: &str,
    duration_seconds: i64,
    now: DateTime<Utc>,
) -> Value {
    lease["apiVersion"] = json!("coordination.k8s.io/v1");
    lease["kind"] = json!("Lease");
    lease["metadata"]["name"] = json!(cluster);
    lease["metadata"]["namespace"] = json!(CLUSTER_LEASE_NAMESPACE);
    if !lease["spec"].is_object() {
        lease["spec"] = json!({});
    }
    lease["spec"]["holderIdentity"] = json!(cluster);
    lease["spec"]["leaseDurationSeconds"] = json!(duration_seconds);
    lease["spec"]["renewTime"] = json!(micro_time(now));
    lease
}

/// The shortest timeout of a lease request, however short the renewal period.
pub const MIN_RENEWAL_TIMEOUT: Duration = Duration::from_secs(1);

/// The timeout of each lease request: one renewal period `interval` (at least
/// [`MIN_RENEWAL_TIMEOUT`], at most the agent's `request_timeout`). A renewal sent to a server
/// that does not answer thus fails within a period, and the next one, sent to the next server
/// after at most 100 ms of back-off, is accepted about two periods after the last accepted
/// one: half the server's grace period of four.
pub fn renewal_timeout(interval: Duration, request_timeout: Duration) -> Duration {
    interval.max(MIN_RENEWAL_TIMEOUT).min(request_timeout)
}

/// Renews one member's lease.
struct LeaseKeeper {
    last: Option<Value>,
}

impl LeaseKeeper {
    async fn renew(&mut self, ctx: &PullContext) -> Result<(), ClientError> {
        let cluster = ctx.cluster();
        let item = format!("{}/{cluster}", collection_path());
        let interval = ctx.lease_renew_interval().0;
        let duration = lease_duration_seconds(interval);
        let client = ctx
            .client
            .with_request_timeout(renewal_timeout(interval, ctx.timing.request_timeout));
        if let Some(last) = self.last.take() {
            let body = renewed(last, cluster, duration, ctx.clock.now());
            match client.put(&item, &body).await {
                Ok(stored) => {
                    self.last = Some(stored);
                    return Ok(());
                }
                Err(e) if e.is_conflict() || e.is_not_found() => {}
                Err(e) => {
                    self.last = Some(body);
                    return Err(e);
                }
            }
        }
        match client.get(&item).await {
            Ok(current) => {
                let body = renewed(current, cluster, duration, ctx.clock.now());
                self.last = Some(client.put(&item, &body).await?);
            }
            Err(e) if e.is_not_found() => {
                let body = renewed(json!({}), cluster, duration, ctx.clock.now());
                self.last = Some(client.post(&collection_path(), &body).await?);
                tracing::info!(cluster = %cluster, "lease created");
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

/// Renews the lease until shutdown; skips the renewals due while the member is unreachable.
pub async fn run(ctx: Arc<PullContext>, mut shutdown: watch::Receiver<bool>) {
    let mut keeper = LeaseKeeper { last: None };
    let mut backoff = Backoff::default();
    let mut faults = ctx.member.faults.subscribe();
    let mut advertised = ctx.client.advertised_timing().subscribe();
    let mut warned_slow = false;
    if super::wait_reachable(&mut faults, &mut shutdown).await == Wake::Stop {
        return;
    }
    loop {
        let attempted = ctx.clock.now();
        let delay = match keeper.renew(&ctx).await {
            Ok(()) => {
                backoff.reset();
                // The fence counts from when the accepted renewal started (never later than
                // the renewTime it wrote).
                ctx.member.fence.renewed(attempted);
                let (interval, source) = ctx.lease_renew_interval();
                tracing::debug!(cluster = %ctx.cluster(), interval_ms = interval.as_millis() as u64,
                    source = ?source, "lease renewed");
                warn_if_slower_than_asked(&ctx, interval, source, &mut warned_slow);
                jittered(interval, 0.04)
            }
            Err(e) => {
                let delay = backoff.next_delay().min(ctx.lease_renew_interval().0);
                super::log_retry(
                    ctx.cluster(),
                    "lease renewal",
                    backoff.attempts(),
                    delay,
                    &e,
                );
                delay
            }
        };
        // Until the next renewal; while unreachable, every renewal due is skipped and counted.
        let mut delay = delay;
        loop {
            // Another advertised timing renews at once, so a shorter period starts now.
            let wake = tokio::select! {
                wake = nap(delay, &mut faults, &mut shutdown) => wake,
                _ = timing::changed(&mut advertised) => Wake::Go,
            };
            if wake == Wake::Stop {
                return;
            }
            if !faults.borrow_and_update().unreachable {
                break;
            }
            ctx.member.pull.lease_renewal_skipped();
            delay = ctx.lease_renew_interval().0;
        }
    }
}

/// Warns once when an explicit `--lease-renew-interval-ms` is slower than the period the
/// server asks for: the server will say so on the Cluster (`LeaseRenewalTooSlow`).
fn warn_if_slower_than_asked(
    ctx: &PullContext,
    interval: Duration,
    source: Source,
    warned: &mut bool,
) {
    let Some(asked) = ctx.client.advertised_timing().current() else {
        return;
    };
    if source == Source::Flag && interval > asked.lease_renew_interval && !*warned {
        *warned = true;
        tracing::warn!(cluster = %ctx.cluster(), interval_ms = interval.as_millis() as u64,
            asked_ms = asked.lease_renew_interval.as_millis() as u64,
            "--lease-renew-interval-ms is slower than the server asks; it may turn this member Unknown between renewals");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_lease_request_times_out_within_a_renewal_period() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (renewal period, request timeout, want)
        let table = [
            (s(10), s(30), s(10)),
            (s(2), s(30), s(2)),
            (ms(300), s(30), s(1)),
            (s(10), s(5), s(5)),
            (ms(100), ms(500), ms(500)),
        ];
        for (interval, request, want) in table {
            assert_eq!(
                renewal_timeout(interval, request),
                want,
                "{interval:?} {request:?}"
            );
        }
    }

    #[test]
    fn lease_shape() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
            + chrono::Duration::microseconds(1500);
        let l = renewed(
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"other": 1}}),
            "m1",
            40,
            now,
        );
        assert_eq!(
            l,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"resourceVersion": "7", "name": "m1", "namespace": "karmada-cluster"},
                   "spec": {"other": 1, "holderIdentity": "m1", "leaseDurationSeconds": 40,
                            "renewTime": "2026-01-01T00:00:00.001500Z"}})
        );
        let fresh = renewed(json!({}), "m1", 40, now);
        assert_eq!(fresh["spec"]["renewTime"], "2026-01-01T00:00:00.001500Z");
    }
}
