//! Reports the member's Cluster status every status period (the flag's, else the server's:
//! [`super::timing`]; at once when the member's faults change or the server advertises
//! another timing): the Ready condition from the runtime's health and, while
//! healthy, kubernetesVersion, apiEnablements, nodeSummary and resourceSummary. As in Karmada,
//! an unhealthy member only changes its Ready condition (the other fields keep their last
//! values), and the status is written only when it changed, with the resourceVersion just
//! read (a conflict reads again). Conditions other writers put there (a third party's, which
//! ClusterTaintPolicies read) are kept.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flotilla_api::cluster::{ClusterStatus, CONDITION_READY};
use flotilla_api::meta::{set_condition, Condition, ConditionStatus};
use serde_json::Value;
use tokio::sync::watch;

use super::backoff::{jittered, Backoff};
use super::{nap, ClientError, PullContext, Wake};
use flotilla_member::ClusterSummary;

/// Ready reason and message when healthy.
pub const READY_MESSAGE: &str = "cluster is healthy and ready to accept workloads";
/// Ready message when the member's health endpoint fails.
pub const NOT_READY_MESSAGE: &str = "cluster is reachable but health endpoint responded without ok";

/// The status to report given the current one and the runtime's summary.
pub fn next_status(
    current: &ClusterStatus,
    summary: &ClusterSummary,
    now: DateTime<Utc>,
) -> ClusterStatus {
    let mut next = current.clone();
    let ready = if summary.healthy {
        next.kubernetes_version = summary.kubernetes_version.clone();
        next.api_enablements = summary.api_enablements.clone();
        next.node_summary = Some(summary.node_summary.clone());
        next.resource_summary = Some(summary.resource_summary.clone());
        Condition::new(
            CONDITION_READY,
            ConditionStatus::True,
            "ClusterReady",
            READY_MESSAGE,
        )
    } else {
        Condition::new(
            CONDITION_READY,
            ConditionStatus::False,
            "ClusterNotReady",
            NOT_READY_MESSAGE,
        )
    };
    set_condition(&mut next.conditions, ready, now);
    next
}

fn cluster_path(cluster: &str) -> String {
    format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}")
}

/// Reads the Cluster, computes its status, writes it if it changed. Answers whether it wrote.
pub async fn report_once(ctx: &PullContext) -> Result<bool, ClientError> {
    let path = cluster_path(ctx.cluster());
    let summary = ctx.member.summary().await.unwrap_or_else(|e| {
        tracing::warn!(cluster = %ctx.cluster(), error = %flotilla_support::error_chain(&e),
            "runtime summary failed; reporting unhealthy");
        ClusterSummary::default()
    });
    for _ in 0..5 {
        let mut cluster = ctx.client.get(&path).await?;
        let current: ClusterStatus = cluster
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        let next = next_status(&current, &summary, ctx.clock.now());
        if next == current {
            return Ok(false);
        }
        cluster["status"] = serde_json::to_value(&next).unwrap_or(Value::Null);
        match ctx.client.put(&format!("{path}/status"), &cluster).await {
            Ok(_) => return Ok(true),
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Reports until shutdown; pauses while the member is unreachable.
pub async fn run(ctx: Arc<PullContext>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Backoff::default();
    let mut faults = ctx.member.faults.subscribe();
    let mut advertised = ctx.client.advertised_timing().subscribe();
    if super::wait_reachable(&mut faults, &mut shutdown).await == Wake::Stop {
        return;
    }
    loop {
        let (period, _) = ctx.cluster_status_update_frequency();
        let delay = match report_once(&ctx).await {
            Ok(wrote) => {
                backoff.reset();
                if wrote {
                    tracing::debug!(cluster = %ctx.cluster(), "cluster status reported");
                }
                jittered(ctx.cluster_status_update_frequency().0, 0.04)
            }
            Err(e) => {
                let delay = backoff.next_delay().min(period);
                super::log_retry(
                    ctx.cluster(),
                    "cluster status report",
                    backoff.attempts(),
                    delay,
                    &e,
                );
                delay
            }
        };
        let wake = tokio::select! {
            wake = nap(delay, &mut faults, &mut shutdown) => wake,
            _ = super::timing::changed(&mut advertised) => Wake::Go,
        };
        if wake == Wake::Stop
            || super::wait_reachable(&mut faults, &mut shutdown).await == Wake::Stop
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use flotilla_api::cluster::NodeSummary;

    #[test]
    fn ready_follows_health_and_keeps_transition_time() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = t0 + chrono::Duration::seconds(10);
        let t2 = t0 + chrono::Duration::seconds(20);
        let healthy = ClusterSummary {
            kubernetes_version: "v1.32.0-sim".into(),
            node_summary: NodeSummary {
                total_num: 3,
                ready_num: 3,
            },
            healthy: true,
            ..ClusterSummary::default()
        };
        let s0 = next_status(&ClusterStatus::default(), &healthy, t0);
        let ready = s0.conditions[0].clone();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "ClusterReady")
        );
        assert_eq!(ready.message, READY_MESSAGE);
        assert_eq!(s0.kubernetes_version, "v1.32.0-sim");
        assert_eq!(s0.node_summary.as_ref().unwrap().total_num, 3);
        assert_eq!(
            next_status(&s0, &healthy, t1),
            s0,
            "nothing changed, nothing to write"
        );

        let sick = ClusterSummary {
            kubernetes_version: "other".into(),
            healthy: false,
            ..ClusterSummary::default()
        };
        let s1 = next_status(&s0, &sick, t1);
        let c = &s1.conditions[0];
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "ClusterNotReady")
        );
        assert_eq!(
            c.last_transition_time.unwrap().to_string(),
            "2026-01-01T00:00:10Z"
        );
        assert_eq!(
            s1.kubernetes_version, "v1.32.0-sim",
            "unhealthy keeps the last values"
        );
        let s2 = next_status(&s1, &healthy, t2);
        assert_eq!(
            s2.conditions[0].last_transition_time.unwrap().to_string(),
            "2026-01-01T00:00:20Z"
        );
    }

    #[test]
    fn conditions_written_by_others_are_kept() {
        // A third party (e.g. a network prober feeding a ClusterTaintPolicy) writes its own
        // condition into the Cluster's status; the agent's reports must not drop it.
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut current = ClusterStatus::default();
        current.conditions.push(Condition::new(
            "NetworkOK",
            ConditionStatus::False,
            "ProbeFailed",
            "the network probe failed",
        ));
        for healthy in [true, false] {
            let summary = ClusterSummary {
                healthy,
                ..ClusterSummary::default()
            };
            let next = next_status(&current, &summary, t0);
            let foreign = next.conditions.iter().find(|c| c.type_ == "NetworkOK");
            assert_eq!(
                foreign.map(|c| (c.status, c.reason.as_str())),
                Some((ConditionStatus::False, "ProbeFailed")),
                "healthy={healthy}"
            );
            assert!(next.conditions.iter().any(|c| c.type_ == CONDITION_READY));
        }
    }
}
