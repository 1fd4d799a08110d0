//! The sim's workload controllers, as pure functions: which pods a Deployment, ReplicaSet,
//! StatefulSet, DaemonSet or Job wants created or deleted given the pods it owns
//! ([`reconcile_pods`]), and the Kubernetes-shaped status it reports
//! ([`workload_status`]). Zero counters are left out of status as Kubernetes does
//! (`omitempty`), except the ones Kubernetes always writes.

use chrono::{DateTime, Utc};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::Time;
use serde_json::{json, Map, Value};

use super::pods::PodPhase;

/// The kinds whose pods the sim manages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    /// apps/v1 Deployment (pods owned directly; a template change recreates them).
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet (ordinal pods, OrderedReady unless Parallel).
    StatefulSet,
    /// apps/v1 DaemonSet (one pod per node).
    DaemonSet,
    /// batch/v1 Job (pods run to completion).
    Job,
}

impl WorkloadKind {
    /// The workload kind of a group and kind, if the sim manages its pods.
    pub fn of(group: &str, kind: &str) -> Option<Self> {
        match (group, kind) {
            ("apps", "Deployment") => Some(WorkloadKind::Deployment),
            ("apps", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("apps", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            ("apps", "DaemonSet") => Some(WorkloadKind::DaemonSet),
            ("batch", "Job") => Some(WorkloadKind::Job),
            _ => None,
        }
    }
}

/// What a controller sees of one pod it owns.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Template revision it was made from.
    pub revision: String,
    /// StatefulSet ordinal.
    pub ordinal: Option<u32>,
    /// Node the pod is pinned to (DaemonSet).
    pub pinned_node: Option<String>,
    /// Node it runs on, once placed.
    pub node: Option<String>,
    /// Phase.
    pub phase: PodPhase,
    /// Creation order.
    pub seq: u64,
    /// When it finished, for job pods.
    pub finished_at: Option<DateTime<Utc>>,
}

impl PodView {
    fn ready(&self) -> bool {
        self.phase == PodPhase::Running
    }
    fn finished(&self) -> bool {
        self.phase == PodPhase::Succeeded
    }
}

/// How a new pod is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodName {
    /// Exactly this name (StatefulSet pods).
    Fixed(String),
    /// This prefix plus a random suffix.
    Generate(String),
}

/// A pod a controller wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPod {
    /// Its name.
    pub name: PodName,
    /// StatefulSet ordinal.
    pub ordinal: Option<u32>,
    /// Node it must go to (DaemonSet).
    pub pinned_node: Option<String>,
}

/// A controller's decision for one round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodChanges {
    /// Pods to create.
    pub create: Vec<NewPod>,
    /// Names of pods to delete.
    pub delete: Vec<String>,
}

fn int_at(obj: &Value, pointer: &str) -> Option<i64> {
    obj.lookup(pointer).and_then(Value::as_i64)
}

/// `spec.replicas` (default 1, never negative).
pub fn desired_replicas(workload: &Value) -> i64 {
    int_at(workload, "/spec/replicas").unwrap_or(1).max(0)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Surplus pods to delete first: unplaced, then not ready, then the newest.
fn surplus(mut pods: Vec<&PodView>, keep: usize) -> Vec<String> {
    pods.sort_by_key(|p| (p.node.is_some(), p.ready(), std::cmp::Reverse(p.seq)));
    let n = pods.len().saturating_sub(keep);
    pods.iter().take(n).map(|p| p.name.clone()).collect()
}

/// The pods the workload wants created or deleted. `revision` is the hash of the current pod
/// template; `nodes` names every node (DaemonSets place one pod per node).
pub fn reconcile_pods(
    kind: WorkloadKind,
    workload: &Value,
    revision: &str,
    pods: &[PodView],
    nodes: &[String],
) -> PodChanges {
    let name = workload
        .lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("unnamed");
    let mut changes = PodChanges::default();
    match kind {
        WorkloadKind::Deployment | WorkloadKind::ReplicaSet => {
            let want = usize::try_from(desired_replicas(workload)).unwrap_or(0);
            let (current, old): (Vec<&PodView>, Vec<&PodView>) = if kind == WorkloadKind::Deployment
            {
                pods.iter().partition(|p| p.revision == revision)
            } else {
                (pods.iter().collect(), Vec::new())
            };
            changes.delete.extend(old.iter().map(|p| p.name.clone()));
            let prefix = if kind == WorkloadKind::Deployment {
                format!("{name}-{revision}-")
            } else {
                format!("{name}-")
            };
            for _ in current.len()..want {
                changes.create.push(NewPod {
                    name: PodName::Generate(prefix.clone()),
                    ordinal: None,
                    pinned_node: None,
                });
            }
            changes.delete.extend(surplus(current, want));
        }
        WorkloadKind::StatefulSet => {
            let want = u32::try_from(desired_replicas(workload)).unwrap_or(u32::MAX);
            let parallel = workload
                .lookup("/spec/podManagementPolicy")
                .and_then(Value::as_str)
                == Some("Parallel");
            let mut by_ordinal: Vec<&PodView> = pods.iter().collect();
            by_ordinal.sort_by_key(|p| std::cmp::Reverse(p.ordinal));
            // Scale down from the highest ordinal.
            changes.delete.extend(
                by_ordinal
                    .iter()
                    .filter(|p| p.ordinal.is_none_or(|o| o >= want))
                    .map(|p| p.name.clone()),
            );
            let kept: Vec<&PodView> = by_ordinal
                .into_iter()
                .filter(|p| p.ordinal.is_some_and(|o| o < want))
                .collect();
            let have = |i: u32| kept.iter().find(|p| p.ordinal == Some(i));
            let mut all_ready_below = true;
            for i in 0..want {
                match have(i) {
                    Some(p) => all_ready_below &= p.ready(),
                    None => {
                        if parallel || all_ready_below {
                            changes.create.push(NewPod {
                                name: PodName::Fixed(format!("{name}-{i}")),
                                ordinal: Some(i),
                                pinned_node: None,
                            });
                        }
                        all_ready_below = false;
                        if !parallel {
                            break;
                        }
                    }
                }
            }
            // Rolling update: when everything is up, replace the highest outdated pod.
            let complete = kept.len() == usize::try_from(want).unwrap_or(usize::MAX)
                && kept.iter().all(|p| p.ready());
            if complete && changes.create.is_empty() {
                if let Some(p) = kept.iter().find(|p| p.revision != revision) {
                    changes.delete.push(p.name.clone());
                }
            }
        }
        WorkloadKind::DaemonSet => {
            for p in pods {
                let on_known_node = p.pinned_node.as_ref().is_some_and(|n| nodes.contains(n));
                if !on_known_node || p.revision != revision {
                    changes.delete.push(p.name.clone());
                }
            }
            for node in nodes {
                let mine: Vec<&PodView> = pods
                    .iter()
                    .filter(|p| p.pinned_node.as_ref() == Some(node) && p.revision == revision)
                    .collect();
                if mine.is_empty() {
                    changes.create.push(NewPod {
                        name: PodName::Generate(format!("{name}-")),
                        ordinal: None,
                        pinned_node: Some(node.clone()),
                    });
                } else {
                    changes.delete.extend(surplus(mine, 1));
                }
            }
        }
        WorkloadKind::Job => {
            let completions = int_at(workload, "/spec/completions").unwrap_or(1).max(0);
            let parallelism = int_at(workload, "/spec/parallelism").unwrap_or(1).max(0);
            let suspended = workload
                .lookup("/spec/suspend")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let complete = job_complete(workload.get("status").unwrap_or(&Value::Null));
            let succeeded = count(pods.iter().filter(|p| p.finished()).count())
                .max(int_at(workload, "/status/succeeded").unwrap_or(0));
            let active: Vec<&PodView> = pods.iter().filter(|p| !p.finished()).collect();
            if suspended || complete {
                changes.delete.extend(active.iter().map(|p| p.name.clone()));
                return changes;
            }
            let want_active = parallelism.min(completions - succeeded).max(0);
            let have = count(active.len());
            for _ in have..want_active {
                changes.create.push(NewPod {
                    name: PodName::Generate(format!("{name}-")),
                    ordinal: None,
                    pinned_node: None,
                });
            }
            let keep = usize::try_from(want_active).unwrap_or(0);
            changes.delete.extend(surplus(active, keep));
        }
    }
    changes
}

fn job_complete(status: &Value) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
        })
}

fn ts(at: DateTime<Utc>) -> String {
    Time::new(at).to_string()
}

/// Puts `n` under `key` unless it is zero (Kubernetes' `omitempty`).
fn put_nonzero(status: &mut Map<String, Value>, key: &str, n: i64) {
    if n != 0 {
        status.insert(key.into(), json!(n));
    }
}

/// A workload condition (`DeploymentCondition` shape) that keeps the previous transition and
/// update times when nothing about it changed.
fn workload_condition(
    prev: &Value,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Value {
    let status_str = if status { "True" } else { "False" };
    let old = prev
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let now_s = ts(now);
    let (transition, update) = match old {
        Some(o) if o["status"] == status_str => {
            let transition = o["lastTransitionTime"].clone();
            let same = o["reason"] == reason && o["message"] == message;
            let update = if same {
                o["lastUpdateTime"].clone()
            } else {
                json!(now_s)
            };
            (transition, update)
        }
        _ => (json!(now_s), json!(now_s)),
    };
    json!({
        "type": type_,
        "status": status_str,
        "lastUpdateTime": update,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    })
}

/// `maxUnavailable` of a Deployment's rolling update (default 25%, rounded down); 0 for
/// the Recreate strategy.
pub fn max_unavailable(workload: &Value, replicas: i64) -> i64 {
    let strategy = workload
        .lookup("/spec/strategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate");
    if strategy != "RollingUpdate" || replicas == 0 {
        return 0;
    }
    let raw = workload.lookup("/spec/strategy/rollingUpdate/maxUnavailable");
    let value = match raw {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%').map(str::parse::<i64>) {
            Some(Ok(pct)) => replicas * pct / 100,
            _ => s.parse().unwrap_or(0),
        },
        _ => replicas * 25 / 100,
    };
    value.clamp(0, replicas)
}

/// The status a workload reports, computed from its pods. `prev` is its current status (for
/// condition times and revisions), `nodes` names every node.
pub fn workload_status(
    kind: WorkloadKind,
    workload: &Value,
    revision: &str,
    pods: &[PodView],
    nodes: &[String],
    prev: &Value,
    now: DateTime<Utc>,
) -> Value {
    let name = workload
        .lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("unnamed");
    let generation = int_at(workload, "/metadata/generation").unwrap_or(1);
    let live: Vec<&PodView> = pods.iter().filter(|p| !p.finished()).collect();
    let ready = count(live.iter().filter(|p| p.ready()).count());
    let mut s = Map::new();
    match kind {
        WorkloadKind::Deployment => {
            let desired = desired_replicas(workload);
            let updated = count(live.iter().filter(|p| p.revision == revision).count());
            let total = count(live.len());
            let available = ready;
            let unavailable = (desired - available).max(0);
            s.insert("observedGeneration".into(), json!(generation));
            put_nonzero(&mut s, "replicas", total);
            put_nonzero(&mut s, "updatedReplicas", updated);
            put_nonzero(&mut s, "readyReplicas", ready);
            put_nonzero(&mut s, "availableReplicas", available);
            put_nonzero(&mut s, "unavailableReplicas", unavailable);
            let min_available = desired - max_unavailable(workload, desired);
            let available_cond = if available >= min_available {
                workload_condition(
                    prev,
                    "Available",
                    true,
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.",
                    now,
                )
            } else {
                workload_condition(
                    prev,
                    "Available",
                    false,
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.",
                    now,
                )
            };
            let rs = format!("{name}-{revision}");
            let done = updated == desired && total == desired && available >= desired;
            let progressing = if done {
                workload_condition(
                    prev,
                    "Progressing",
                    true,
                    "NewReplicaSetAvailable",
                    &format!("ReplicaSet \"{rs}\" has successfully progressed."),
                    now,
                )
            } else {
                workload_condition(
                    prev,
                    "Progressing",
                    true,
                    "ReplicaSetUpdated",
                    &format!("ReplicaSet \"{rs}\" is progressing."),
                    now,
                )
            };
            s.insert("conditions".into(), json!([available_cond, progressing]));
        }
        WorkloadKind::ReplicaSet => {
            let total = count(live.len());
            s.insert("replicas".into(), json!(total));
            put_nonzero(&mut s, "fullyLabeledReplicas", total);
            put_nonzero(&mut s, "readyReplicas", ready);
            put_nonzero(&mut s, "availableReplicas", ready);
            s.insert("observedGeneration".into(), json!(generation));
        }
        WorkloadKind::StatefulSet => {
            let desired = desired_replicas(workload);
            let update_revision = format!("{name}-{revision}");
            let updated = count(live.iter().filter(|p| p.revision == revision).count());
            let current_revision = if updated >= desired {
                update_revision.clone()
            } else {
                prev.get("currentRevision")
                    .and_then(Value::as_str)
                    .map_or_else(|| update_revision.clone(), str::to_string)
            };
            let current_hash = current_revision
                .strip_prefix(&format!("{name}-"))
                .unwrap_or(revision)
                .to_string();
            let current = count(live.iter().filter(|p| p.revision == current_hash).count());
            s.insert("observedGeneration".into(), json!(generation));
            s.insert("replicas".into(), json!(count(live.len())));
            put_nonzero(&mut s, "readyReplicas", ready);
            put_nonzero(&mut s, "currentReplicas", current);
            put_nonzero(&mut s, "updatedReplicas", updated);
            s.insert("availableReplicas".into(), json!(ready));
            s.insert("currentRevision".into(), json!(current_revision));
            s.insert("updateRevision".into(), json!(update_revision));
            s.insert("collisionCount".into(), json!(0));
        }
        WorkloadKind::DaemonSet => {
            let desired = count(nodes.len());
            let scheduled: Vec<&&PodView> = live.iter().filter(|p| p.node.is_some()).collect();
            let updated = count(scheduled.iter().filter(|p| p.revision == revision).count());
            s.insert(
                "currentNumberScheduled".into(),
                json!(count(scheduled.len())),
            );
            s.insert("numberMisscheduled".into(), json!(0));
            s.insert("desiredNumberScheduled".into(), json!(desired));
            s.insert("numberReady".into(), json!(ready));
            s.insert("observedGeneration".into(), json!(generation));
            put_nonzero(&mut s, "updatedNumberScheduled", updated);
            put_nonzero(&mut s, "numberAvailable", ready);
            put_nonzero(&mut s, "numberUnavailable", (desired - ready).max(0));
        }
        WorkloadKind::Job => {
            let completions = int_at(workload, "/spec/completions").unwrap_or(1).max(0);
            let succeeded = count(pods.iter().filter(|p| p.finished()).count())
                .max(int_at(prev, "/succeeded").unwrap_or(0));
            let start = prev.get("startTime").cloned().unwrap_or(json!(ts(now)));
            s.insert("startTime".into(), start);
            put_nonzero(&mut s, "active", count(live.len()));
            put_nonzero(&mut s, "succeeded", succeeded);
            s.insert("ready".into(), json!(ready));
            if succeeded >= completions {
                let finished = pods.iter().filter_map(|p| p.finished_at).max();
                let completion = prev
                    .get("completionTime")
                    .cloned()
                    .unwrap_or_else(|| json!(ts(finished.unwrap_or(now))));
                let at = completion.clone();
                s.insert("completionTime".into(), completion);
                s.insert(
                    "conditions".into(),
                    json!([{
                        "type": "Complete",
                        "status": "True",
                        "lastProbeTime": at,
                        "lastTransitionTime": at,
                        "reason": "CompletionsReached",
                        "message": "Reached expected number of succeeded pods",
                    }]),
                );
            }
        }
    }
    Value::Object(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    fn pod(name: &str, rev: &str, phase: PodPhase, node: Option<&str>, seq: u64) -> PodView {
        PodView {
            name: name.into(),
            revision: rev.into(),
            ordinal: None,
            pinned_node: None,
            node: node.map(str::to_string),
            phase,
            seq,
            finished_at: None,
        }
    }

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn deployment_status_arithmetic() {
        use PodPhase::*;
        struct Case {
            name: &'static str,
            replicas: i64,
            pods: Vec<PodView>,
            want: Value,
            available: &'static str,
        }
        let d =
            |r: i64| json!({"metadata": {"name": "web", "generation": 2}, "spec": {"replicas": r}});
        let cases = [
            Case {
                name: "nothing ready yet",
                replicas: 3,
                pods: vec![
                    pod("a", "h", Pending, Some("n0"), 1),
                    pod("b", "h", Pending, None, 2),
                    pod("c", "h", Pending, None, 3),
                ],
                want: json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                             "unavailableReplicas": 3}),
                available: "False",
            },
            Case {
                name: "two of three ready (25% rounds down to 0 unavailable allowed)",
                replicas: 3,
                pods: vec![
                    pod("a", "h", Running, Some("n0"), 1),
                    pod("b", "h", Running, Some("n0"), 2),
                    pod("c", "h", Pending, None, 3),
                ],
                want: json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                             "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1}),
                available: "False",
            },
            Case {
                name: "three of four ready meets 25%",
                replicas: 4,
                pods: vec![
                    pod("a", "h", Running, Some("n0"), 1),
                    pod("b", "h", Running, Some("n0"), 2),
                    pod("c", "h", Running, Some("n0"), 3),
                    pod("d", "h", Pending, None, 4),
                ],
                want: json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 4,
                             "readyReplicas": 3, "availableReplicas": 3, "unavailableReplicas": 1}),
                available: "True",
            },
            Case {
                name: "old revision pods are not updated",
                replicas: 2,
                pods: vec![
                    pod("a", "old", Running, Some("n0"), 1),
                    pod("b", "h", Running, Some("n0"), 2),
                ],
                want: json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
                             "readyReplicas": 2, "availableReplicas": 2}),
                available: "True",
            },
            Case {
                name: "scaled to zero",
                replicas: 0,
                pods: vec![],
                want: json!({"observedGeneration": 2}),
                available: "True",
            },
        ];
        for case in cases {
            let s = workload_status(
                WorkloadKind::Deployment,
                &d(case.replicas),
                "h",
                &case.pods,
                &nodes(1),
                &Value::Null,
                t0(),
            );
            let mut counts = s.clone();
            counts.as_object_mut().unwrap().remove("conditions");
            assert_eq!(counts, case.want, "{}", case.name);
            assert_eq!(s["conditions"][0]["type"], "Available");
            assert_eq!(
                s["conditions"][0]["status"], case.available,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn deployment_conditions_keep_their_times() {
        let d = json!({"metadata": {"name": "web", "generation": 1}, "spec": {"replicas": 1}});
        let running = [pod("a", "h", PodPhase::Running, Some("n0"), 1)];
        let first = workload_status(
            WorkloadKind::Deployment,
            &d,
            "h",
            &running,
            &nodes(1),
            &Value::Null,
            t0(),
        );
        let later = t0() + chrono::Duration::seconds(30);
        let again = workload_status(
            WorkloadKind::Deployment,
            &d,
            "h",
            &running,
            &nodes(1),
            &first,
            later,
        );
        assert_eq!(first, again);
        let pending = [pod("a", "h", PodPhase::Pending, None, 1)];
        let down = workload_status(
            WorkloadKind::Deployment,
            &d,
            "h",
            &pending,
            &nodes(1),
            &again,
            later,
        );
        assert_eq!(down["conditions"][0]["status"], "False");
        assert_eq!(
            down["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:30Z"
        );
        assert_eq!(down["conditions"][1]["reason"], "ReplicaSetUpdated");
        assert_eq!(
            down["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn deployment_scales_and_recreates() {
        let d = |r: i64| json!({"metadata": {"name": "web"}, "spec": {"replicas": r}});
        let pods = vec![
            pod("a", "h", PodPhase::Running, Some("n0"), 1),
            pod("b", "h", PodPhase::Pending, None, 2),
            pod("c", "old", PodPhase::Running, Some("n0"), 3),
        ];
        let up = reconcile_pods(WorkloadKind::Deployment, &d(3), "h", &pods, &nodes(1));
        assert_eq!(up.delete, vec!["c"]);
        assert_eq!(up.create.len(), 1);
        assert_eq!(up.create[0].name, PodName::Generate("web-h-".into()));
        let down = reconcile_pods(WorkloadKind::Deployment, &d(1), "h", &pods, &nodes(1));
        assert_eq!(down.delete, vec!["c", "b"], "unplaced pods go first");
        assert!(down.create.is_empty());
        // A deleted pod is simply missing next round, and is recreated.
        let missing = reconcile_pods(WorkloadKind::Deployment, &d(2), "h", &pods[..1], &nodes(1));
        assert_eq!(missing.create.len(), 1);
    }

    #[test]
    fn statefulset_is_ordered() {
        let s = |r: i64, policy: &str| {
            json!({"metadata": {"name": "db"},
            "spec": {"replicas": r, "podManagementPolicy": policy}})
        };
        let mut p0 = pod("db-0", "h", PodPhase::Pending, Some("n0"), 1);
        p0.ordinal = Some(0);
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(3, "OrderedReady"),
            "h",
            &[],
            &nodes(1),
        );
        assert_eq!(
            c.create.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
            vec![PodName::Fixed("db-0".into())]
        );
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(3, "OrderedReady"),
            "h",
            &[p0.clone()],
            &nodes(1),
        );
        assert!(c.create.is_empty(), "waits for db-0 to be ready");
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(3, "Parallel"),
            "h",
            &[p0.clone()],
            &nodes(1),
        );
        assert_eq!(c.create.len(), 2);
        p0.phase = PodPhase::Running;
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(3, "OrderedReady"),
            "h",
            &[p0.clone()],
            &nodes(1),
        );
        assert_eq!(c.create[0].name, PodName::Fixed("db-1".into()));
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(0, "OrderedReady"),
            "h",
            &[p0.clone()],
            &nodes(1),
        );
        assert_eq!(c.delete, vec!["db-0"]);
        // Rolling update replaces an outdated pod once all are ready.
        let c = reconcile_pods(
            WorkloadKind::StatefulSet,
            &s(1, "OrderedReady"),
            "new",
            &[p0.clone()],
            &nodes(1),
        );
        assert_eq!(c.delete, vec!["db-0"]);

        let mut p1 = pod("db-1", "h", PodPhase::Pending, None, 2);
        p1.ordinal = Some(1);
        let st = workload_status(
            WorkloadKind::StatefulSet,
            &s(2, "OrderedReady"),
            "h",
            &[p0, p1],
            &nodes(1),
            &Value::Null,
            t0(),
        );
        assert_eq!(
            st,
            json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 1,
            "currentReplicas": 2, "updatedReplicas": 2, "availableReplicas": 1,
            "currentRevision": "db-h", "updateRevision": "db-h", "collisionCount": 0})
        );
    }

    #[test]
    fn daemonset_one_pod_per_node() {
        let ds = json!({"metadata": {"name": "agent", "generation": 1}, "spec": {}});
        let c = reconcile_pods(WorkloadKind::DaemonSet, &ds, "h", &[], &nodes(3));
        let pinned: Vec<_> = c
            .create
            .iter()
            .map(|p| p.pinned_node.clone().unwrap())
            .collect();
        assert_eq!(pinned, nodes(3));
        let mut a = pod("agent-a", "h", PodPhase::Running, Some("n0"), 1);
        a.pinned_node = Some("n0".into());
        let mut gone = pod("agent-b", "h", PodPhase::Running, Some("n9"), 2);
        gone.pinned_node = Some("n9".into());
        let c = reconcile_pods(
            WorkloadKind::DaemonSet,
            &ds,
            "h",
            &[a.clone(), gone],
            &nodes(2),
        );
        assert_eq!(c.delete, vec!["agent-b"]);
        assert_eq!(c.create.len(), 1);
        assert_eq!(c.create[0].pinned_node.as_deref(), Some("n1"));
        let st = workload_status(
            WorkloadKind::DaemonSet,
            &ds,
            "h",
            &[a],
            &nodes(2),
            &Value::Null,
            t0(),
        );
        assert_eq!(
            st,
            json!({"currentNumberScheduled": 1, "numberMisscheduled": 0,
            "desiredNumberScheduled": 2, "numberReady": 1, "observedGeneration": 1,
            "updatedNumberScheduled": 1, "numberAvailable": 1, "numberUnavailable": 1})
        );
    }

    #[test]
    fn job_runs_to_completion() {
        let job = json!({"metadata": {"name": "pi"}, "spec": {"completions": 3, "parallelism": 2}});
        let c = reconcile_pods(WorkloadKind::Job, &job, "h", &[], &nodes(1));
        assert_eq!(c.create.len(), 2);
        let mut done = pod("pi-a", "h", PodPhase::Succeeded, Some("n0"), 1);
        done.finished_at = Some(t0());
        let running = pod("pi-b", "h", PodPhase::Running, Some("n0"), 2);
        let c = reconcile_pods(
            WorkloadKind::Job,
            &job,
            "h",
            &[done.clone(), running.clone()],
            &nodes(1),
        );
        assert_eq!(c.create.len(), 1, "two left to complete, one running");
        let st = workload_status(
            WorkloadKind::Job,
            &job,
            "h",
            &[done.clone(), running],
            &nodes(1),
            &Value::Null,
            t0(),
        );
        assert_eq!(
            st,
            json!({"startTime": "2026-01-01T00:00:00Z", "active": 1, "succeeded": 1, "ready": 1})
        );
        let all: Vec<PodView> = (0..3)
            .map(|i| {
                let mut p = done.clone();
                p.name = format!("pi-{i}");
                p.finished_at = Some(t0() + chrono::Duration::seconds(i));
                p
            })
            .collect();
        let st = workload_status(
            WorkloadKind::Job,
            &job,
            "h",
            &all,
            &nodes(1),
            &Value::Null,
            t0() + chrono::Duration::seconds(10),
        );
        assert_eq!(st["succeeded"], 3);
        assert_eq!(st["completionTime"], "2026-01-01T00:00:02Z");
        assert_eq!(st["conditions"][0]["type"], "Complete");
        let mut finished_job = job.clone();
        finished_job["status"] = st;
        let c = reconcile_pods(WorkloadKind::Job, &finished_job, "h", &[], &nodes(1));
        assert!(c.create.is_empty(), "a complete job makes no more pods");
    }

    #[test]
    fn max_unavailable_rules() {
        let cases = [
            (json!({}), 4, 1),
            (json!({}), 3, 0),
            (json!({"strategy": {"type": "Recreate"}}), 4, 0),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": 2}}}),
                4,
                2,
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": "50%"}}}),
                5,
                2,
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": 9}}}),
                4,
                4,
            ),
        ];
        for (spec, replicas, want) in cases {
            assert_eq!(
                max_unavailable(&json!({"spec": spec}), replicas),
                want,
                "{spec}"
            );
        }
    }
}
