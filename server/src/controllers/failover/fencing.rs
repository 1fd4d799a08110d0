//! The server's half of self-fencing (docs/failover.md, "Safety: self-fencing"): for
//! a binding that asks for exactly-once placement (`spec.failover.cluster.fencing.exactlyOnce`),
//! the binding controller dispatches no Work while an old copy may still run on a member that
//! is not Ready and has not yet fenced itself. A pull agent fences `--fence-after` after its
//! last accepted lease renewal; the server waits until that renewal's `renewTime` plus
//! `--member-fence-after` (at least the agents' `--fence-after`, plus the clock offset allowed
//! between them). Members without a lease (push mode) have no agent to fence and are not waited
//! for. Both decisions here are pure; the controller reads the leases and records the Event.

use flotilla_api::json_pointer::JsonPointer;
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::cluster::cluster_of_execution_namespace;
use serde_json::Value;

/// The old copies of an exactly-once binding that may still run where nobody can stop them:
/// the clusters of its Works (deleting or not) that are no longer targets and are not Ready.
/// Empty when the binding does not ask for exactly-once.
pub fn unfenced_candidates(
    spec: &ResourceBindingSpec,
    existing: &[impl Borrow<Value>],
    ready: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    if !spec.failover.as_ref().is_some_and(|f| f.exactly_once()) {
        return Vec::new();
    }
    let targets: BTreeSet<&str> = spec
        .clusters
        .iter()
        .map(|c| c.name.as_str())
        .chain(
            spec.required_by
                .iter()
                .flat_map(|r| r.clusters.iter().map(|c| c.name.as_str())),
        )
        .collect();
    let mut out = BTreeSet::new();
    for w in existing {
        let ns = w
            .borrow()
            .lookup("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(cluster) = cluster_of_execution_namespace(ns) {
            if !targets.contains(cluster) && !ready(cluster) {
                out.insert(cluster.to_string());
            }
        }
    }
    out.into_iter().collect()
}

/// The dispatch must wait for `cluster` to fence itself, until `until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceWait {
    /// The member whose fence time is latest.
    pub cluster: String,
    /// Its fence time: last lease renewal + `--member-fence-after`.
    pub until: DateTime<Utc>,
    /// Its last lease renewal.
    pub renewed: DateTime<Utc>,
}

impl FenceWait {
    /// How long from `now` until the fence time (zero when passed).
    pub fn remaining(&self, now: DateTime<Utc>) -> Duration {
        (self.until - now).to_std().unwrap_or(Duration::ZERO)
    }
}

/// The fence gate: given the candidates' last lease renewals (`None`: no lease, nothing to wait
/// for), the latest fence time still ahead of `now`, or `None` when the dispatch may go.
pub fn fence_wait(
    renewals: &[(String, Option<DateTime<Utc>>)],
    now: DateTime<Utc>,
    member_fence_after: Duration,
) -> Option<FenceWait> {
    let after = chrono::Duration::from_std(member_fence_after).unwrap_or(chrono::Duration::MAX);
    renewals
        .iter()
        .filter_map(|(cluster, renewed)| {
            let renewed = (*renewed)?;
            let until = renewed
                .checked_add_signed(after)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            (now < until).then(|| FenceWait {
                cluster: cluster.clone(),
                until,
                renewed,
            })
        })
        .max_by_key(|w| w.until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn spec(v: Value) -> ResourceBindingSpec {
        serde_json::from_value(v).unwrap()
    }

    fn work(cluster: &str, deleting: bool) -> Value {
        let mut w =
            json!({"metadata": {"namespace": format!("karmada-es-{cluster}"), "name": "w"}});
        if deleting {
            w["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        w
    }

    const EXACTLY_ONCE: &str =
        r#"{"cluster": {"purgeMode": "Immediately", "fencing": {"exactlyOnce": true}}}"#;

    #[test]
    fn candidates_table() {
        let exactly_once: Value = serde_json::from_str(EXACTLY_ONCE).unwrap();
        let resource = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"});
        // m1 is not Ready; every other member is.
        let ready = |c: &str| c != "m1";
        let table = [
            (
                "not exactly-once: never gated",
                json!({"resource": resource, "clusters": [{"name": "m2", "replicas": 1}]}),
                vec![work("m1", false)],
                vec![],
            ),
            (
                "old copy on a not-Ready member",
                json!({"resource": resource, "clusters": [{"name": "m2", "replicas": 1}], "failover": exactly_once}),
                vec![work("m1", false)],
                vec!["m1"],
            ),
            (
                "old copy being deleted still counts",
                json!({"resource": resource, "clusters": [{"name": "m2", "replicas": 1}], "failover": exactly_once}),
                vec![work("m1", true), work("m2", false)],
                vec!["m1"],
            ),
            (
                "still a target: no replacement to hold",
                json!({"resource": resource, "clusters": [{"name": "m1", "replicas": 1}], "failover": exactly_once}),
                vec![work("m1", false)],
                vec![],
            ),
            (
                "old copy on a Ready member: the purge rules decide",
                json!({"resource": resource, "clusters": [{"name": "m3", "replicas": 1}], "failover": exactly_once}),
                vec![work("m2", false)],
                vec![],
            ),
        ];
        for (name, s, existing, want) in table {
            let got = unfenced_candidates(&spec(s), &existing, &ready);
            assert_eq!(got, want, "{name}");
        }
    }

    /// (case, (cluster, last renewal) per candidate, now, expected (cluster, fence time)).
    type Row = (
        &'static str,
        Vec<(String, Option<DateTime<Utc>>)>,
        DateTime<Utc>,
        Option<(&'static str, i64)>,
    );

    #[test]
    fn fence_wait_table() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let after = Duration::from_secs(45);
        let table: Vec<Row> = vec![
            ("no candidates", vec![], at(100), None),
            (
                "no lease (push member)",
                vec![("m1".into(), None)],
                at(0),
                None,
            ),
            (
                "fence time ahead",
                vec![("m1".into(), Some(at(0)))],
                at(10),
                Some(("m1", 45)),
            ),
            (
                "fence time exactly now: go",
                vec![("m1".into(), Some(at(0)))],
                at(45),
                None,
            ),
            (
                "fence time passed",
                vec![("m1".into(), Some(at(0)))],
                at(60),
                None,
            ),
            (
                "the latest of several",
                vec![
                    ("m1".into(), Some(at(0))),
                    ("m2".into(), Some(at(20))),
                    ("m3".into(), None),
                ],
                at(30),
                Some(("m2", 65)),
            ),
        ];
        for (name, renewals, now, want) in table {
            let got = fence_wait(&renewals, now, after).map(|w| (w.cluster.clone(), w.until));
            let want = want.map(|(c, s)| (c.to_string(), at(s)));
            assert_eq!(got, want, "{name}");
        }
    }
}
