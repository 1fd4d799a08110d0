//! Native status aggregation (Karmada's `native/aggregatestatus.go`): the template's new
//! `status` folded from the per-cluster reflected statuses of its binding. Items without a
//! status (not collected yet) are skipped, except where a kind says otherwise (a Pod or PV
//! not yet reported counts as Pending).
//!
//! Replica workloads sum their counters; their `observedGeneration` becomes the template's
//! `metadata.generation` only once every member has a status, was made from that template
//! generation (`resourceTemplateGeneration`) and has itself observed its own generation;
//! otherwise the template keeps the `observedGeneration` it had.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use flotilla_api::binding::AggregatedStatusItem;
use flotilla_api::meta::Time;
use serde_json::{json, Map, Value};

use super::{
    array, int, lookup, object, opt_int, status_map, string, FieldError, WellKnownKind,
    DAEMON_SET_COUNTERS,
};

/// The template's new status. Kinds without a native aggregation get their status unchanged.
pub fn aggregate(
    kind: WellKnownKind,
    template: &Value,
    items: &[AggregatedStatusItem],
) -> Result<Value, FieldError> {
    let status = match kind {
        WellKnownKind::Deployment => replica_workload(
            template,
            items,
            &[
                "replicas",
                "readyReplicas",
                "updatedReplicas",
                "availableReplicas",
                "unavailableReplicas",
            ],
        )?,
        WellKnownKind::StatefulSet => replica_workload(
            template,
            items,
            &[
                "availableReplicas",
                "currentReplicas",
                "readyReplicas",
                "replicas",
                "updatedReplicas",
            ],
        )?,
        WellKnownKind::ReplicaSet => replica_workload(
            template,
            items,
            &[
                "replicas",
                "fullyLabeledReplicas",
                "readyReplicas",
                "availableReplicas",
            ],
        )?,
        WellKnownKind::DaemonSet => replica_workload(template, items, DAEMON_SET_COUNTERS)?,
        WellKnownKind::Job => job(template, items)?,
        WellKnownKind::CronJob => cron_job(template, items)?,
        WellKnownKind::Pod => pod(template, items)?,
        WellKnownKind::Service => {
            if string(template, &["spec", "type"])? != "LoadBalancer" {
                status_map(template)?
            } else {
                load_balancer(items)?
            }
        }
        WellKnownKind::Ingress => load_balancer(items)?,
        WellKnownKind::PersistentVolumeClaim => pvc(items)?,
        WellKnownKind::PersistentVolume => pv(items)?,
        WellKnownKind::PodDisruptionBudget => pdb(items)?,
        WellKnownKind::HorizontalPodAutoscaler | WellKnownKind::ServiceImport => {
            status_map(template)?
        }
    };
    Ok(Value::Object(status))
}

/// Reported statuses, in item order (items are sorted by cluster name).
fn reported(items: &[AggregatedStatusItem]) -> impl Iterator<Item = (&str, &Value)> {
    items
        .iter()
        .filter_map(|i| i.status.as_ref().map(|s| (i.cluster_name.as_str(), s)))
}

fn at(cluster: &str, e: FieldError) -> FieldError {
    FieldError {
        path: format!("aggregatedStatus[{cluster}].status.{}", e.path),
        problem: e.problem,
    }
}

fn replica_workload(
    template: &Value,
    items: &[AggregatedStatusItem],
    counters: &[&str],
) -> Result<Map<String, Value>, FieldError> {
    let generation = int(template, &["metadata", "generation"])?;
    let mut out = status_map(template)?;
    let mut sums = vec![0i64; counters.len()];
    let mut all_caught_up = !items.is_empty();
    for item in items {
        let Some(status) = &item.status else {
            all_caught_up = false;
            continue;
        };
        let cluster = item.cluster_name.as_str();
        for (sum, name) in sums.iter_mut().zip(counters) {
            *sum = sum.saturating_add(int(status, &[name]).map_err(|e| at(cluster, e))?);
        }
        let template_generation =
            opt_int(status, &["resourceTemplateGeneration"]).map_err(|e| at(cluster, e))?;
        let member_generation = int(status, &["generation"]).map_err(|e| at(cluster, e))?;
        let member_observed = int(status, &["observedGeneration"]).map_err(|e| at(cluster, e))?;
        if template_generation != Some(generation) || member_generation != member_observed {
            all_caught_up = false;
        }
    }
    for (sum, name) in sums.into_iter().zip(counters) {
        out.insert(name.to_string(), Value::from(sum));
    }
    if all_caught_up {
        out.insert("observedGeneration".to_string(), Value::from(generation));
    }
    Ok(out)
}

fn time(v: &Value, path: &[&str]) -> Result<Option<DateTime<Utc>>, FieldError> {
    let s = string(v, path)?;
    if s.is_empty() {
        return Ok(None);
    }
    Time::parse(s)
        .map(|t| Some(t.as_datetime()))
        .map_err(|e| FieldError::new(path, e.to_string()))
}

fn fmt_time(t: DateTime<Utc>) -> Value {
    Value::String(Time::from(t).to_string())
}

/// The `type` condition of a Job status when its status is `True`.
fn finished_condition(status: &Value) -> Result<Option<(&str, &Value)>, FieldError> {
    for condition in array(status, &["conditions"])? {
        let kind = string(condition, &["type"])?;
        if (kind == "Complete" || kind == "Failed") && string(condition, &["status"])? == "True" {
            return Ok(Some((kind, condition)));
        }
    }
    Ok(None)
}

fn later(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Job: counters summed; `Failed` when any member failed, `Complete` when every member
/// completed; earliest start, and the latest completion once every member completed. A Job
/// the template already records as finished is never changed again. Condition times are the
/// members' (the latest of them), so the result depends on the inputs only.
fn job(template: &Value, items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    let current = lookup(template, &["status"])?
        .cloned()
        .unwrap_or(Value::Null);
    if finished_condition(&current)?.is_some() {
        return status_map(template);
    }
    let (mut active, mut succeeded, mut failed) = (0i64, 0i64, 0i64);
    let mut failed_clusters = Vec::new();
    let mut failed_at = None;
    let mut completed = 0usize;
    let mut completed_at = None;
    let mut start = None;
    let mut with_completion_time = 0usize;
    let mut completion = None;
    for (cluster, status) in reported(items) {
        let wrap = |e| at(cluster, e);
        active += int(status, &["active"]).map_err(wrap)?;
        succeeded += int(status, &["succeeded"]).map_err(wrap)?;
        failed += int(status, &["failed"]).map_err(wrap)?;
        match finished_condition(status).map_err(wrap)? {
            Some(("Complete", c)) => {
                completed += 1;
                completed_at = later(
                    completed_at,
                    time(c, &["lastTransitionTime"]).map_err(wrap)?,
                );
            }
            Some((_, c)) => {
                failed_clusters.push(cluster.to_string());
                failed_at = later(failed_at, time(c, &["lastTransitionTime"]).map_err(wrap)?);
            }
            None => {}
        }
        if let Some(t) = time(status, &["startTime"]).map_err(wrap)? {
            start = Some(start.map_or(t, |s: DateTime<Utc>| s.min(t)));
        }
        if let Some(t) = time(status, &["completionTime"]).map_err(wrap)? {
            with_completion_time += 1;
            completion = later(completion, Some(t));
        }
    }
    let mut out = Map::new();
    for (name, n) in [
        ("active", active),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if n != 0 {
            out.insert(name.to_string(), Value::from(n));
        }
    }
    let mut conditions = Vec::new();
    let condition = |kind: &str, reason: &str, message: String, at: Option<DateTime<Utc>>| {
        let mut c = json!({"type": kind, "status": "True", "reason": reason, "message": message});
        if let (Some(t), Value::Object(map)) = (at, &mut c) {
            map.insert("lastProbeTime".to_string(), fmt_time(t));
            map.insert("lastTransitionTime".to_string(), fmt_time(t));
        }
        c
    };
    if !failed_clusters.is_empty() {
        conditions.push(condition(
            "Failed",
            "JobFailed",
            format!(
                "Job executed failed in member clusters {}",
                failed_clusters.join(",")
            ),
            failed_at,
        ));
    }
    if completed > 0 && completed == items.len() {
        conditions.push(condition(
            "Complete",
            "Completed",
            "Job completed".to_string(),
            completed_at,
        ));
    }
    if !conditions.is_empty() {
        out.insert("conditions".to_string(), Value::Array(conditions));
    }
    if let Some(t) = start {
        out.insert("startTime".to_string(), fmt_time(t));
    }
    if let Some(t) = completion.filter(|_| with_completion_time == items.len()) {
        out.insert("completionTime".to_string(), fmt_time(t));
    }
    Ok(out)
}

/// CronJob: active jobs of every member, and the latest schedule and success times.
fn cron_job(
    template: &Value,
    items: &[AggregatedStatusItem],
) -> Result<Map<String, Value>, FieldError> {
    let mut out = status_map(template)?;
    let mut active = Vec::new();
    let (mut scheduled, mut succeeded) = (None, None);
    for (cluster, status) in reported(items) {
        let wrap = |e| at(cluster, e);
        active.extend(array(status, &["active"]).map_err(wrap)?.iter().cloned());
        scheduled = later(
            scheduled,
            time(status, &["lastScheduleTime"]).map_err(wrap)?,
        );
        succeeded = later(
            succeeded,
            time(status, &["lastSuccessfulTime"]).map_err(wrap)?,
        );
    }
    for (name, value) in [
        ("active", (!active.is_empty()).then(|| Value::Array(active))),
        ("lastScheduleTime", scheduled.map(fmt_time)),
        ("lastSuccessfulTime", succeeded.map(fmt_time)),
    ] {
        match value {
            Some(v) => out.insert(name.to_string(), v),
            None => out.remove(name),
        };
    }
    Ok(out)
}

/// Pod: the worst phase (Failed, Pending, Running, Succeeded; a member without a status is
/// Pending) and every member's container readiness and state.
fn pod(template: &Value, items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    if items.is_empty() {
        return status_map(template);
    }
    let mut phases = BTreeSet::new();
    let mut containers = Vec::new();
    for item in items {
        let Some(status) = &item.status else {
            phases.insert("Pending".to_string());
            continue;
        };
        let wrap = |e| at(&item.cluster_name, e);
        phases.insert(string(status, &["phase"]).map_err(wrap)?.to_string());
        for container in array(status, &["containerStatuses"]).map_err(wrap)? {
            let mut c = Map::new();
            if let Some(ready) = lookup(container, &["ready"]).map_err(wrap)? {
                c.insert("ready".to_string(), ready.clone());
            }
            if let Some(state) = object(container, &["state"]).map_err(wrap)? {
                c.insert("state".to_string(), Value::Object(state.clone()));
            }
            containers.push(Value::Object(c));
        }
    }
    let mut out = Map::new();
    if let Some(phase) = ["Failed", "Pending", "Running", "Succeeded"]
        .into_iter()
        .find(|p| phases.contains(*p))
    {
        out.insert("phase".to_string(), Value::from(phase));
    }
    if !containers.is_empty() {
        out.insert("containerStatuses".to_string(), Value::Array(containers));
    }
    Ok(out)
}

/// Service (LoadBalancer) and Ingress: every member's load-balancer ingress entries, an
/// entry without a hostname taking the cluster's name as hostname.
fn load_balancer(items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    let mut ingress = Vec::new();
    for (cluster, status) in reported(items) {
        for entry in array(status, &["loadBalancer", "ingress"]).map_err(|e| at(cluster, e))? {
            let mut entry = entry.clone();
            let hostname = string(&entry, &["hostname"]).map_err(|e| at(cluster, e))?;
            if hostname.is_empty() {
                if let Value::Object(map) = &mut entry {
                    map.insert("hostname".to_string(), Value::from(cluster));
                }
            }
            ingress.push(entry);
        }
    }
    let load_balancer = if ingress.is_empty() {
        json!({})
    } else {
        json!({"ingress": ingress})
    };
    let mut out = Map::new();
    out.insert("loadBalancer".to_string(), load_balancer);
    Ok(out)
}

/// PVC: Bound unless a member is Lost (which wins) or in another phase (the last one seen).
fn pvc(items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    let mut phase = "Bound".to_string();
    for (cluster, status) in reported(items) {
        let p = string(status, &["phase"]).map_err(|e| at(cluster, e))?;
        if p == "Lost" {
            phase = p.to_string();
            break;
        }
        if p != "Bound" {
            phase = p.to_string();
        }
    }
    let mut out = Map::new();
    out.insert("phase".to_string(), Value::from(phase));
    Ok(out)
}

/// PV: the first of Failed, Pending (also a member without status), Available, Bound,
/// Released that some member is in.
fn pv(items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    let mut phases = BTreeSet::new();
    for item in items {
        match &item.status {
            None => {
                phases.insert("Pending".to_string());
            }
            Some(status) => {
                let p = string(status, &["phase"]).map_err(|e| at(&item.cluster_name, e))?;
                phases.insert(p.to_string());
            }
        }
    }
    let mut out = Map::new();
    if let Some(phase) = ["Failed", "Pending", "Available", "Bound", "Released"]
        .into_iter()
        .find(|p| phases.contains(*p))
    {
        out.insert("phase".to_string(), Value::from(phase));
    }
    Ok(out)
}

/// PDB: counters summed; disrupted pods keyed `cluster/pod`.
fn pdb(items: &[AggregatedStatusItem]) -> Result<Map<String, Value>, FieldError> {
    let names = [
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
        "disruptionsAllowed",
    ];
    let mut sums = [0i64; 4];
    let mut disrupted = Map::new();
    for (cluster, status) in reported(items) {
        for (sum, name) in sums.iter_mut().zip(names) {
            *sum += int(status, &[name]).map_err(|e| at(cluster, e))?;
        }
        if let Some(pods) = object(status, &["disruptedPods"]).map_err(|e| at(cluster, e))? {
            for (pod, when) in pods {
                disrupted.insert(format!("{cluster}/{pod}"), when.clone());
            }
        }
    }
    let mut out = Map::new();
    for (sum, name) in sums.into_iter().zip(names) {
        out.insert(name.to_string(), Value::from(sum));
    }
    if !disrupted.is_empty() {
        out.insert("disruptedPods".to_string(), Value::Object(disrupted));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(cluster: &str, status: Option<Value>) -> AggregatedStatusItem {
        AggregatedStatusItem {
            cluster_name: cluster.to_string(),
            status,
            applied: true,
            ..Default::default()
        }
    }

    fn deploy(generation: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "generation": generation}, "status": status})
    }

    #[test]
    fn deployment_sums_and_observed_generation_table() {
        let caught_up = |n: i64| json!({"replicas": n, "readyReplicas": n, "updatedReplicas": n, "availableReplicas": n, "generation": 2, "observedGeneration": 2, "resourceTemplateGeneration": 5});
        struct Row {
            name: &'static str,
            items: Vec<AggregatedStatusItem>,
            observed: Option<i64>,
            replicas: i64,
        }
        let rows = vec![
            Row {
                name: "every member caught up",
                items: vec![item("a", Some(caught_up(2))), item("b", Some(caught_up(1)))],
                observed: Some(5),
                replicas: 3,
            },
            Row {
                name: "a member made from an older template",
                items: vec![
                    item("a", Some(caught_up(2))),
                    item(
                        "b",
                        Some(
                            json!({"replicas": 1, "generation": 2, "observedGeneration": 2, "resourceTemplateGeneration": 4}),
                        ),
                    ),
                ],
                observed: Some(1),
                replicas: 3,
            },
            Row {
                name: "a member controller behind",
                items: vec![
                    item("a", Some(caught_up(2))),
                    item(
                        "b",
                        Some(
                            json!({"replicas": 1, "generation": 3, "observedGeneration": 2, "resourceTemplateGeneration": 5}),
                        ),
                    ),
                ],
                observed: Some(1),
                replicas: 3,
            },
            Row {
                name: "a member not reported yet",
                items: vec![item("a", Some(caught_up(2))), item("b", None)],
                observed: Some(1),
                replicas: 2,
            },
            Row {
                name: "no members",
                items: vec![],
                observed: Some(1),
                replicas: 0,
            },
            Row {
                name: "missing generation fields read as 0",
                items: vec![item("a", Some(json!({"replicas": 4})))],
                observed: Some(1),
                replicas: 4,
            },
        ];
        for r in rows {
            let template = deploy(
                5,
                json!({"observedGeneration": 1, "conditions": [{"type": "Available"}]}),
            );
            let got = aggregate(WellKnownKind::Deployment, &template, &r.items).expect(r.name);
            assert_eq!(got["observedGeneration"].as_i64(), r.observed, "{}", r.name);
            assert_eq!(got["replicas"].as_i64(), Some(r.replicas), "{}", r.name);
            assert_eq!(
                got["conditions"],
                json!([{"type": "Available"}]),
                "{}: other fields kept",
                r.name
            );
        }
        let sums = aggregate(
            WellKnownKind::Deployment,
            &deploy(1, json!(null)),
            &[
                item("a", Some(json!({"replicas": 2, "readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1, "unavailableReplicas": 1}))),
                item("b", Some(json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1, "availableReplicas": 3}))),
            ],
        )
        .expect("sums");
        assert_eq!(
            sums,
            json!({"replicas": 5, "readyReplicas": 4, "updatedReplicas": 3, "availableReplicas": 4, "unavailableReplicas": 1})
        );
    }

    #[test]
    fn statefulset_daemonset_replicaset_sums() {
        let sts = aggregate(
            WellKnownKind::StatefulSet,
            &json!({"metadata": {"generation": 1}}),
            &[
                item("a", Some(json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "generation": 1, "observedGeneration": 1, "resourceTemplateGeneration": 1}))),
                item("b", Some(json!({"replicas": 1, "readyReplicas": 0, "currentReplicas": 1, "updatedReplicas": 1, "availableReplicas": 0, "generation": 1, "observedGeneration": 1, "resourceTemplateGeneration": 1}))),
            ],
        )
        .expect("sts");
        assert_eq!(
            sts,
            json!({"availableReplicas": 2, "currentReplicas": 3, "readyReplicas": 2, "replicas": 3, "updatedReplicas": 3, "observedGeneration": 1})
        );

        let ds = aggregate(
            WellKnownKind::DaemonSet,
            &json!({"metadata": {"generation": 2}}),
            &[
                item("a", Some(json!({"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberAvailable": 3, "numberReady": 3, "updatedNumberScheduled": 3}))),
                item("b", Some(json!({"currentNumberScheduled": 2, "desiredNumberScheduled": 2, "numberAvailable": 1, "numberReady": 1, "updatedNumberScheduled": 2, "numberUnavailable": 1, "numberMisscheduled": 1}))),
            ],
        )
        .expect("ds");
        assert_eq!(
            ds,
            json!({"currentNumberScheduled": 5, "desiredNumberScheduled": 5, "numberAvailable": 4, "numberMisscheduled": 1, "numberReady": 4, "updatedNumberScheduled": 5, "numberUnavailable": 1})
        );

        let rs = aggregate(
            WellKnownKind::ReplicaSet,
            &json!({"metadata": {"generation": 1}}),
            &[
                item("a", Some(json!({"replicas": 2, "availableReplicas": 2}))),
                item("b", Some(json!({"replicas": 1}))),
            ],
        )
        .expect("rs");
        assert_eq!(
            rs,
            json!({"replicas": 3, "fullyLabeledReplicas": 0, "readyReplicas": 0, "availableReplicas": 2})
        );
    }

    #[test]
    fn job_table() {
        let complete =
            |t: &str| json!({"type": "Complete", "status": "True", "lastTransitionTime": t});
        let failed = json!({"type": "Failed", "status": "True", "lastTransitionTime": "2024-01-01T00:05:00Z"});
        let template = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}});

        // Running in two clusters.
        let running = aggregate(
            WellKnownKind::Job,
            &template,
            &[
                item(
                    "a",
                    Some(json!({"active": 2, "succeeded": 1, "startTime": "2024-01-01T00:01:00Z"})),
                ),
                item(
                    "b",
                    Some(json!({"active": 1, "failed": 1, "startTime": "2024-01-01T00:00:30Z"})),
                ),
            ],
        )
        .expect("running");
        assert_eq!(
            running,
            json!({"active": 3, "succeeded": 1, "failed": 1, "startTime": "2024-01-01T00:00:30Z"})
        );

        // Complete only when every cluster completed; completion time the latest.
        let done = aggregate(
            WellKnownKind::Job,
            &template,
            &[
                item("a", Some(json!({"succeeded": 2, "conditions": [complete("2024-01-01T00:02:00Z")], "completionTime": "2024-01-01T00:02:00Z"}))),
                item("b", Some(json!({"succeeded": 3, "conditions": [complete("2024-01-01T00:03:00Z")], "completionTime": "2024-01-01T00:03:00Z"}))),
            ],
        )
        .expect("done");
        assert_eq!(done["succeeded"], json!(5));
        assert_eq!(done["completionTime"], json!("2024-01-01T00:03:00Z"));
        assert_eq!(
            done["conditions"],
            json!([{"type": "Complete", "status": "True", "reason": "Completed", "message": "Job completed", "lastProbeTime": "2024-01-01T00:03:00Z", "lastTransitionTime": "2024-01-01T00:03:00Z"}])
        );

        let half = aggregate(
            WellKnownKind::Job,
            &template,
            &[
                item("a", Some(json!({"succeeded": 2, "conditions": [complete("2024-01-01T00:02:00Z")], "completionTime": "2024-01-01T00:02:00Z"}))),
                item("b", None),
            ],
        )
        .expect("half");
        assert!(
            half.get("conditions").is_none(),
            "not every cluster completed"
        );
        assert!(half.get("completionTime").is_none());

        let one_failed = aggregate(
            WellKnownKind::Job,
            &template,
            &[
                item(
                    "a",
                    Some(json!({"failed": 6, "conditions": [failed.clone()]})),
                ),
                item("b", Some(json!({"active": 1}))),
            ],
        )
        .expect("failed");
        assert_eq!(one_failed["conditions"][0]["type"], json!("Failed"));
        assert_eq!(
            one_failed["conditions"][0]["message"],
            json!("Job executed failed in member clusters a")
        );
        assert_eq!(
            one_failed["conditions"][0]["lastTransitionTime"],
            json!("2024-01-01T00:05:00Z")
        );

        // A finished template is never changed again.
        let finished = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"succeeded": 9, "conditions": [{"type": "Complete", "status": "True"}]}});
        let kept = aggregate(
            WellKnownKind::Job,
            &finished,
            &[item("a", Some(json!({"active": 1})))],
        )
        .expect("kept");
        assert_eq!(kept, finished["status"]);
    }

    #[test]
    fn cron_job_latest_times() {
        let got = aggregate(
            WellKnownKind::CronJob,
            &json!({"status": {}}),
            &[
                item("a", Some(json!({"active": [{"name": "j1"}], "lastScheduleTime": "2024-01-01T00:00:00Z", "lastSuccessfulTime": "2024-01-01T00:00:10Z"}))),
                item("b", Some(json!({"active": [{"name": "j2"}], "lastScheduleTime": "2024-01-02T00:00:00Z"}))),
            ],
        )
        .expect("cron");
        assert_eq!(
            got,
            json!({"active": [{"name": "j1"}, {"name": "j2"}], "lastScheduleTime": "2024-01-02T00:00:00Z", "lastSuccessfulTime": "2024-01-01T00:00:10Z"})
        );
    }

    #[test]
    fn pod_phase_table() {
        let rows: Vec<(&str, Vec<AggregatedStatusItem>, Value)> = vec![
            (
                "all running",
                vec![
                    item("a", Some(json!({"phase": "Running"}))),
                    item("b", Some(json!({"phase": "Running"}))),
                ],
                json!("Running"),
            ),
            (
                "failed wins",
                vec![
                    item("a", Some(json!({"phase": "Succeeded"}))),
                    item("b", Some(json!({"phase": "Failed"}))),
                ],
                json!("Failed"),
            ),
            (
                "not reported is pending",
                vec![
                    item("a", Some(json!({"phase": "Running"}))),
                    item("b", None),
                ],
                json!("Pending"),
            ),
            (
                "pending over running",
                vec![
                    item("a", Some(json!({"phase": "Pending"}))),
                    item("b", Some(json!({"phase": "Running"}))),
                ],
                json!("Pending"),
            ),
            (
                "running over succeeded",
                vec![
                    item("a", Some(json!({"phase": "Succeeded"}))),
                    item("b", Some(json!({"phase": "Running"}))),
                ],
                json!("Running"),
            ),
            (
                "all succeeded",
                vec![item("a", Some(json!({"phase": "Succeeded"})))],
                json!("Succeeded"),
            ),
        ];
        for (name, items, phase) in rows {
            let got = aggregate(WellKnownKind::Pod, &json!({}), &items).expect(name);
            assert_eq!(got["phase"], phase, "{name}");
        }
        let containers = aggregate(
            WellKnownKind::Pod,
            &json!({}),
            &[item("a", Some(json!({"phase": "Running", "containerStatuses": [{"name": "c", "ready": true, "state": {"running": {}}, "restartCount": 3}]})))],
        )
        .expect("containers");
        assert_eq!(
            containers["containerStatuses"],
            json!([{"ready": true, "state": {"running": {}}}])
        );
        let untouched = aggregate(
            WellKnownKind::Pod,
            &json!({"status": {"phase": "Running"}}),
            &[],
        )
        .expect("empty");
        assert_eq!(untouched, json!({"phase": "Running"}));
    }

    #[test]
    fn load_balancers_table() {
        let items = vec![
            item(
                "member1",
                Some(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}})),
            ),
            item(
                "member2",
                Some(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2", "hostname": "lb2"}]}})),
            ),
            item("member3", None),
        ];
        let want = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "hostname": "member1"}, {"ip": "10.0.0.2", "hostname": "lb2"}]}});
        let svc = json!({"spec": {"type": "LoadBalancer"}});
        assert_eq!(
            aggregate(WellKnownKind::Service, &svc, &items),
            Ok(want.clone())
        );
        assert_eq!(
            aggregate(WellKnownKind::Ingress, &json!({}), &items),
            Ok(want)
        );
        let cluster_ip = json!({"spec": {"type": "ClusterIP"}, "status": {"x": 1}});
        assert_eq!(
            aggregate(WellKnownKind::Service, &cluster_ip, &items),
            Ok(json!({"x": 1}))
        );
        assert_eq!(
            aggregate(WellKnownKind::Ingress, &json!({}), &[]),
            Ok(json!({"loadBalancer": {}}))
        );
    }

    #[test]
    fn volume_phases_table() {
        let rows: Vec<(&str, Vec<AggregatedStatusItem>, &str)> = vec![
            (
                "all bound",
                vec![
                    item("a", Some(json!({"phase": "Bound"}))),
                    item("b", Some(json!({"phase": "Bound"}))),
                ],
                "Bound",
            ),
            (
                "one pending",
                vec![
                    item("a", Some(json!({"phase": "Pending"}))),
                    item("b", Some(json!({"phase": "Bound"}))),
                ],
                "Pending",
            ),
            (
                "lost wins",
                vec![
                    item("a", Some(json!({"phase": "Lost"}))),
                    item("b", Some(json!({"phase": "Pending"}))),
                ],
                "Lost",
            ),
            ("not reported ignored", vec![item("a", None)], "Bound"),
        ];
        for (name, items, phase) in rows {
            assert_eq!(
                aggregate(WellKnownKind::PersistentVolumeClaim, &json!({}), &items),
                Ok(json!({"phase": phase})),
                "{name}"
            );
        }
        let pv = aggregate(
            WellKnownKind::PersistentVolume,
            &json!({}),
            &[
                item("a", Some(json!({"phase": "Bound"}))),
                item("b", Some(json!({"phase": "Available"}))),
            ],
        );
        assert_eq!(pv, Ok(json!({"phase": "Available"})));
        let pv_pending = aggregate(
            WellKnownKind::PersistentVolume,
            &json!({}),
            &[item("a", Some(json!({"phase": "Bound"}))), item("b", None)],
        );
        assert_eq!(pv_pending, Ok(json!({"phase": "Pending"})));
    }

    #[test]
    fn pdb_sums() {
        let got = aggregate(
            WellKnownKind::PodDisruptionBudget,
            &json!({}),
            &[
                item(
                    "a",
                    Some(
                        json!({"currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2, "disruptionsAllowed": 1, "disruptedPods": {"p1": "2024-01-01T00:00:00Z"}}),
                    ),
                ),
                item(
                    "b",
                    Some(json!({"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1})),
                ),
            ],
        );
        assert_eq!(
            got,
            Ok(
                json!({"currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 1, "disruptedPods": {"a/p1": "2024-01-01T00:00:00Z"}})
            )
        );
    }

    #[test]
    fn malformed_member_status_names_the_cluster() {
        let err = aggregate(
            WellKnownKind::Deployment,
            &deploy(1, json!({})),
            &[item("member2", Some(json!({"replicas": "many"})))],
        )
        .expect_err("bad replicas");
        assert_eq!(err.path, "aggregatedStatus[member2].status.replicas");
    }
}
