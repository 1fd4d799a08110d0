//! Native status reflection (Karmada's `native/reflectstatus.go`): what of a member object's
//! status goes back into its Work and the binding's `aggregatedStatus`. Replica workloads
//! report their counters plus `generation` (the member object's `metadata.generation`) and
//! `resourceTemplateGeneration` (the template generation the manifest was made from, read
//! from the `resourcetemplate.karmada.io/generation` annotation the work generator sets), so
//! aggregation can tell whether every member has caught up with the template. Kinds without
//! a rule report their whole status.

use serde_json::{Map, Value};

use super::{int, lookup, object, opt_int, string, FieldError, WellKnownKind, DAEMON_SET_COUNTERS};

/// Annotation on member objects: the template generation the manifest was built from.
pub const RESOURCE_TEMPLATE_GENERATION_ANNOTATION: &str = "resourcetemplate.karmada.io/generation";

/// The whole `status`, when there is a non-empty one.
pub fn whole_status(member: &Value) -> Option<Value> {
    match member.get("status") {
        Some(Value::Object(map)) if !map.is_empty() => Some(Value::Object(map.clone())),
        _ => None,
    }
}

/// The reflected status of a member object of `kind`; `Ok(None)` when there is nothing to
/// report (no status yet, or a Service that is not a LoadBalancer).
pub fn reflect(kind: WellKnownKind, member: &Value) -> Result<Option<Value>, FieldError> {
    let Some(status) = object(member, &["status"])? else {
        return Ok(None);
    };
    if status.is_empty() {
        return Ok(None);
    }
    let out = match kind {
        WellKnownKind::Deployment => with_generations(
            member,
            counters(
                member,
                &[
                    "replicas",
                    "updatedReplicas",
                    "readyReplicas",
                    "availableReplicas",
                    "unavailableReplicas",
                    "observedGeneration",
                ],
            )?,
        )?,
        WellKnownKind::StatefulSet => with_generations(
            member,
            counters(
                member,
                &[
                    "replicas",
                    "readyReplicas",
                    "currentReplicas",
                    "updatedReplicas",
                    "availableReplicas",
                    "observedGeneration",
                ],
            )?,
        )?,
        WellKnownKind::ReplicaSet => with_generations(
            member,
            counters(
                member,
                &[
                    "replicas",
                    "fullyLabeledReplicas",
                    "readyReplicas",
                    "availableReplicas",
                    "observedGeneration",
                ],
            )?,
        )?,
        WellKnownKind::DaemonSet => {
            let mut out = counters(member, DAEMON_SET_COUNTERS)?;
            out.extend(counters(member, &["observedGeneration"])?);
            with_generations(member, out)?
        }
        WellKnownKind::Job => copy(
            status,
            &[
                "active",
                "succeeded",
                "failed",
                "conditions",
                "startTime",
                "completionTime",
            ],
        ),
        WellKnownKind::Service => {
            if string(member, &["spec", "type"])? != "LoadBalancer" {
                return Ok(None);
            }
            copy(status, &["loadBalancer"])
        }
        WellKnownKind::PodDisruptionBudget => copy(
            status,
            &[
                "disruptionsAllowed",
                "expectedPods",
                "desiredHealthy",
                "currentHealthy",
                "disruptedPods",
            ],
        ),
        WellKnownKind::HorizontalPodAutoscaler => {
            copy(status, &["currentReplicas", "desiredReplicas"])
        }
        _ => status.clone(),
    };
    Ok(Some(Value::Object(out)))
}

/// The named integer counters of `status`, each present (missing reads as 0).
fn counters(member: &Value, names: &[&str]) -> Result<Map<String, Value>, FieldError> {
    let mut out = Map::new();
    for name in names {
        out.insert(
            name.to_string(),
            Value::from(int(member, &["status", name])?),
        );
    }
    Ok(out)
}

fn with_generations(
    member: &Value,
    mut out: Map<String, Value>,
) -> Result<Map<String, Value>, FieldError> {
    if let Some(generation) = opt_int(member, &["metadata", "generation"])? {
        out.insert("generation".to_string(), Value::from(generation));
    }
    let annotation = lookup(
        member,
        &[
            "metadata",
            "annotations",
            RESOURCE_TEMPLATE_GENERATION_ANNOTATION,
        ],
    )?
    .and_then(Value::as_str)
    .and_then(|s| s.trim().parse::<i64>().ok());
    if let Some(template_generation) = annotation {
        out.insert(
            "resourceTemplateGeneration".to_string(),
            Value::from(template_generation),
        );
    }
    Ok(out)
}

fn copy(status: &Map<String, Value>, names: &[&str]) -> Map<String, Value> {
    names
        .iter()
        .filter_map(|name| {
            status
                .get(*name)
                .filter(|v| !v.is_null())
                .map(|v| (name.to_string(), v.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reflect_table() {
        use WellKnownKind as K;
        let rows: Vec<(&str, K, Value, Option<Value>)> = vec![
            (
                "deployment counters and generations",
                K::Deployment,
                json!({"metadata": {"generation": 4, "annotations": {RESOURCE_TEMPLATE_GENERATION_ANNOTATION: "7"}},
                       "status": {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "observedGeneration": 4, "conditions": [{"type": "Available"}]}}),
                Some(
                    json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 0, "observedGeneration": 4, "generation": 4, "resourceTemplateGeneration": 7}),
                ),
            ),
            (
                "deployment without status",
                K::Deployment,
                json!({"metadata": {"generation": 1}}),
                None,
            ),
            (
                "deployment with empty status",
                K::Deployment,
                json!({"status": {}}),
                None,
            ),
            (
                "statefulset",
                K::StatefulSet,
                json!({"metadata": {"generation": 2}, "status": {"replicas": 3, "currentReplicas": 3, "observedGeneration": 2}}),
                Some(
                    json!({"replicas": 3, "readyReplicas": 0, "currentReplicas": 3, "updatedReplicas": 0, "availableReplicas": 0, "observedGeneration": 2, "generation": 2}),
                ),
            ),
            (
                "daemonset",
                K::DaemonSet,
                json!({"status": {"desiredNumberScheduled": 3, "numberReady": 3}}),
                Some(
                    json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 3, "numberAvailable": 0, "numberMisscheduled": 0, "numberReady": 3, "updatedNumberScheduled": 0, "numberUnavailable": 0, "observedGeneration": 0}),
                ),
            ),
            (
                "job keeps counters, conditions and times",
                K::Job,
                json!({"status": {"active": 1, "succeeded": 2, "startTime": "2024-01-01T00:00:00Z", "uncountedTerminatedPods": {}, "ready": 1}}),
                Some(json!({"active": 1, "succeeded": 2, "startTime": "2024-01-01T00:00:00Z"})),
            ),
            (
                "service ClusterIP reports nothing",
                K::Service,
                json!({"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {}}}),
                None,
            ),
            (
                "service LoadBalancer",
                K::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}]}, "conditions": []}}),
                Some(json!({"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}]}})),
            ),
            (
                "ingress whole status",
                K::Ingress,
                json!({"status": {"loadBalancer": {"ingress": [{"hostname": "h"}]}}}),
                Some(json!({"loadBalancer": {"ingress": [{"hostname": "h"}]}})),
            ),
            (
                "pdb",
                K::PodDisruptionBudget,
                json!({"status": {"currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2, "disruptionsAllowed": 1, "observedGeneration": 3}}),
                Some(
                    json!({"disruptionsAllowed": 1, "expectedPods": 2, "desiredHealthy": 1, "currentHealthy": 2}),
                ),
            ),
            (
                "hpa",
                K::HorizontalPodAutoscaler,
                json!({"status": {"currentReplicas": 2, "desiredReplicas": 4, "conditions": []}}),
                Some(json!({"currentReplicas": 2, "desiredReplicas": 4})),
            ),
            (
                "pod whole status",
                K::Pod,
                json!({"status": {"phase": "Running"}}),
                Some(json!({"phase": "Running"})),
            ),
        ];
        for (name, kind, member, want) in rows {
            assert_eq!(reflect(kind, &member), Ok(want), "{name}");
        }
    }

    #[test]
    fn bad_generation_annotation_is_left_out() {
        let member = json!({"metadata": {"annotations": {RESOURCE_TEMPLATE_GENERATION_ANNOTATION: "x"}}, "status": {"replicas": 1}});
        let got = reflect(WellKnownKind::Deployment, &member)
            .expect("ok")
            .expect("status");
        assert!(got.get("resourceTemplateGeneration").is_none());
    }

    #[test]
    fn whole_status_of_unknown_kinds() {
        assert_eq!(
            whole_status(&json!({"status": {"a": 1}})),
            Some(json!({"a": 1}))
        );
        assert_eq!(whole_status(&json!({"status": {}})), None);
        assert_eq!(whole_status(&json!({})), None);
    }
}
