//! Simulated pods: the sim's bookkeeping for each pod ([`PodSim`]: requests, node, when it
//! was scheduled, started and finished), the lifecycle that moves a pod from Pending to
//! Running+Ready after the startup delay (and to Succeeded after the run time for job pods),
//! and the Kubernetes-shaped `status` of a pod in each phase. All pure.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flotilla_api::quantity::ResourceList;
use flotilla_api::Time;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::ObjectKey;

/// What the sim keeps about one pod besides the pod object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSim {
    /// Creation order, oldest first (placement order, eviction picks the newest).
    pub seq: u64,
    /// Resource requests (without the pod count).
    pub requests: ResourceList,
    /// When the pod was created.
    pub created_at: DateTime<Utc>,
    /// Node the pod runs on, once placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The only node the pod may go to (DaemonSet pods, pods naming `spec.nodeName`); such
    /// pods ignore cordons, as in Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_node: Option<String>,
    /// When it was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<DateTime<Utc>>,
    /// When it became Running and Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it Succeeded (job pods only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Job pods run for the configured run time and then succeed.
    #[serde(default)]
    pub runs_to_completion: bool,
    /// Why the last placement attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<String>,
    /// The workload that owns the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjectKey>,
    /// The owner's template revision the pod was made from.
    #[serde(default)]
    pub revision: String,
    /// StatefulSet ordinal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
}

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Not placed yet, or placed and starting.
    Pending,
    /// Started (and Ready).
    Running,
    /// Ran to completion.
    Succeeded,
}

impl PodSim {
    /// A new, unplaced pod.
    pub fn new(seq: u64, requests: ResourceList, created_at: DateTime<Utc>) -> Self {
        PodSim {
            seq,
            requests,
            created_at,
            node: None,
            pinned_node: None,
            scheduled_at: None,
            started_at: None,
            finished_at: None,
            runs_to_completion: false,
            unschedulable: None,
            owner: None,
            revision: String::new(),
            ordinal: None,
        }
    }

    /// The phase.
    pub fn phase(&self) -> PodPhase {
        if self.finished_at.is_some() {
            PodPhase::Succeeded
        } else if self.started_at.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        }
    }

    /// Running and Ready.
    pub fn ready(&self) -> bool {
        self.phase() == PodPhase::Running
    }

    /// Succeeded (no longer uses resources).
    pub fn finished(&self) -> bool {
        self.finished_at.is_some()
    }

    /// Moves the pod to where it is at `now`: a placed pod starts `startup` after it was
    /// placed; a job pod finishes `run` after it started. True when anything changed.
    pub fn advance(&mut self, now: DateTime<Utc>, startup: Duration, run: Duration) -> bool {
        let mut changed = false;
        if let (Some(at), None) = (self.scheduled_at, self.started_at) {
            let ready_at = add(at, startup);
            if now >= ready_at {
                self.started_at = Some(ready_at);
                changed = true;
            }
        }
        if let (true, Some(at), None) = (self.runs_to_completion, self.started_at, self.finished_at)
        {
            let done_at = add(at, run);
            if now >= done_at {
                self.finished_at = Some(done_at);
                changed = true;
            }
        }
        changed
    }

    /// When [`PodSim::advance`] will next change something by itself.
    pub fn next_due(&self, startup: Duration, run: Duration) -> Option<DateTime<Utc>> {
        match (self.scheduled_at, self.started_at, self.finished_at) {
            (Some(at), None, _) => Some(add(at, startup)),
            (_, Some(at), None) if self.runs_to_completion => Some(add(at, run)),
            _ => None,
        }
    }
}

fn add(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn ts(at: DateTime<Utc>) -> String {
    Time::new(at).to_string()
}

fn condition(type_: &str, status: bool, at: DateTime<Utc>, reason: Option<&str>) -> Value {
    let mut c = Map::new();
    c.insert("type".into(), json!(type_));
    c.insert(
        "status".into(),
        json!(if status { "True" } else { "False" }),
    );
    c.insert("lastProbeTime".into(), Value::Null);
    c.insert("lastTransitionTime".into(), json!(ts(at)));
    if let Some(r) = reason {
        c.insert("reason".into(), json!(r));
    }
    Value::Object(c)
}

/// The `status` of a pod: phase, conditions (PodScheduled, Initialized, ContainersReady,
/// Ready), hostIP, startTime and one containerStatus per container of `pod_spec`.
pub fn pod_status(pod: &PodSim, pod_spec: &Value, host_ip: Option<&str>) -> Value {
    let containers = pod_spec
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let (Some(scheduled_at), Some(_)) = (pod.scheduled_at, pod.node.as_deref()) else {
        let mut scheduled = condition("PodScheduled", false, pod.created_at, Some("Unschedulable"));
        if let (Some(msg), Some(c)) = (&pod.unschedulable, scheduled.as_object_mut()) {
            c.insert("message".into(), json!(msg));
        }
        return json!({"phase": "Pending", "conditions": [scheduled], "qosClass": qos(pod)});
    };
    let phase = pod.phase();
    let (ready, ready_at, ready_reason) = match (phase, pod.started_at, pod.finished_at) {
        (PodPhase::Running, Some(at), _) => (true, at, None),
        (PodPhase::Succeeded, _, Some(at)) => (false, at, Some("PodCompleted")),
        _ => (false, scheduled_at, Some("ContainersNotReady")),
    };
    let container_statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let state = match (phase, pod.started_at, pod.finished_at) {
                (PodPhase::Running, Some(at), _) => json!({"running": {"startedAt": ts(at)}}),
                (PodPhase::Succeeded, Some(start), Some(end)) => json!({"terminated": {
                    "exitCode": 0, "reason": "Completed",
                    "startedAt": ts(start), "finishedAt": ts(end)}}),
                _ => json!({"waiting": {"reason": "ContainerCreating"}}),
            };
            json!({
                "name": c.get("name").cloned().unwrap_or(Value::Null),
                "image": c.get("image").cloned().unwrap_or(Value::Null),
                "imageID": "",
                "ready": ready,
                "started": phase == PodPhase::Running,
                "restartCount": 0,
                "state": state,
            })
        })
        .collect();
    let mut status = json!({
        "phase": match phase {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
        },
        "conditions": [
            condition("PodScheduled", true, scheduled_at, None),
            condition("Initialized", true, scheduled_at, None),
            condition("ContainersReady", ready, ready_at, ready_reason),
            condition("Ready", ready, ready_at, ready_reason),
        ],
        "startTime": ts(scheduled_at),
        "containerStatuses": container_statuses,
        "qosClass": qos(pod),
    });
    if let (Some(ip), Some(s)) = (host_ip, status.as_object_mut()) {
        s.insert("hostIP".into(), json!(ip));
    }
    status
}

fn qos(pod: &PodSim) -> &'static str {
    if pod.requests.is_empty() {
        "BestEffort"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn lifecycle_follows_the_clock() {
        let startup = Duration::from_millis(1500);
        let run = Duration::from_secs(2);
        let mut pod = PodSim::new(1, ResourceList::new(), t0());
        pod.runs_to_completion = true;
        assert!(!pod.advance(t0() + chrono::Duration::seconds(60), startup, run));
        assert_eq!(pod.phase(), PodPhase::Pending);
        assert_eq!(pod.next_due(startup, run), None);
        pod.node = Some("n0".into());
        pod.scheduled_at = Some(t0());
        let steps = [
            (1000, PodPhase::Pending, false),
            (1500, PodPhase::Running, true),
            (3000, PodPhase::Running, true),
            (3500, PodPhase::Succeeded, false),
        ];
        for (ms, phase, ready) in steps {
            pod.advance(t0() + chrono::Duration::milliseconds(ms), startup, run);
            assert_eq!((pod.phase(), pod.ready()), (phase, ready), "at {ms} ms");
        }
        assert_eq!(
            pod.started_at,
            Some(t0() + chrono::Duration::milliseconds(1500))
        );
        assert_eq!(
            pod.finished_at,
            Some(t0() + chrono::Duration::milliseconds(3500))
        );
    }

    #[test]
    fn status_by_phase() {
        let spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        let mut pod = PodSim::new(1, ResourceList::new(), t0());
        pod.unschedulable = Some("0/1 nodes are available: 1 node(s) were unschedulable.".into());
        let s = pod_status(&pod, &spec, None);
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["conditions"][0]["reason"], "Unschedulable");
        assert!(s["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unschedulable"));

        pod.node = Some("n0".into());
        pod.scheduled_at = Some(t0());
        let s = pod_status(&pod, &spec, Some("10.0.0.1"));
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["hostIP"], "10.0.0.1");
        assert_eq!(s["conditions"][3]["type"], "Ready");
        assert_eq!(s["conditions"][3]["status"], "False");
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ContainerCreating"
        );

        pod.advance(
            t0() + chrono::Duration::seconds(1),
            Duration::ZERO,
            Duration::ZERO,
        );
        let s = pod_status(&pod, &spec, None);
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["conditions"][3]["status"], "True");
        assert_eq!(s["containerStatuses"][0]["ready"], true);
    }
}
