//! Health of an applied object as Karmada's native interpreter judges it
//! (`docs/semantics.md` §12), written into each Work manifest status as `health`. Kinds
//! with a native rule get Healthy/Unhealthy; other built-in Kubernetes kinds have no rule
//! and are Healthy; custom kinds (e.g. FlinkDeployment) are left without a verdict so the
//! server's interpreter, which knows the customizations, decides.

use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::work::ResourceHealth;
use serde_json::Value;

const BUILTIN_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "coordination.k8s.io",
];

fn int(obj: &Value, pointer: &str) -> i64 {
    obj.lookup(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn opt_int(obj: &Value, pointer: &str) -> Option<i64> {
    obj.lookup(pointer).and_then(Value::as_i64)
}

fn has_ingress_address(obj: &Value) -> bool {
    obj.lookup("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .is_some_and(|items| {
            items.iter().any(|i| {
                ["ip", "hostname"].iter().any(|k| {
                    i.get(*k)
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                })
            })
        })
}

/// The health verdict for an object of `group`/`kind`, or `None` when the agent leaves it
/// to the server.
pub fn interpret(group: &str, kind: &str, obj: &Value) -> Option<ResourceHealth> {
    let generation_observed =
        || int(obj, "/status/observedGeneration") == int(obj, "/metadata/generation");
    let healthy = match (group, kind) {
        ("apps", "Deployment") | ("apps", "StatefulSet") => {
            let updated = int(obj, "/status/updatedReplicas");
            generation_observed()
                && opt_int(obj, "/spec/replicas").is_none_or(|r| updated >= r)
                && int(obj, "/status/availableReplicas") >= updated
        }
        ("apps", "ReplicaSet") => {
            generation_observed()
                && opt_int(obj, "/spec/replicas")
                    .is_none_or(|r| int(obj, "/status/availableReplicas") >= r)
        }
        ("apps", "DaemonSet") => {
            let updated = int(obj, "/status/updatedNumberScheduled");
            generation_observed()
                && updated >= int(obj, "/status/desiredNumberScheduled")
                && int(obj, "/status/numberAvailable") >= updated
        }
        ("", "Service") => {
            obj.lookup("/spec/type").and_then(Value::as_str) != Some("LoadBalancer")
                || has_ingress_address(obj)
        }
        ("networking.k8s.io", "Ingress") => has_ingress_address(obj),
        ("", "PersistentVolumeClaim") => {
            obj.lookup("/status/phase").and_then(Value::as_str) == Some("Bound")
        }
        ("", "Pod") => {
            let phase = obj.lookup("/status/phase").and_then(Value::as_str);
            let ready = obj
                .lookup("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            phase == Some("Succeeded") || (phase == Some("Running") && ready)
        }
        ("policy", "PodDisruptionBudget") => {
            int(obj, "/status/currentHealthy") >= int(obj, "/status/desiredHealthy")
        }
        (g, _) if BUILTIN_GROUPS.contains(&g) => true,
        _ => return None,
    };
    Some(if healthy {
        ResourceHealth::Healthy
    } else {
        ResourceHealth::Unhealthy
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use ResourceHealth::*;

    #[test]
    fn native_rules() {
        let cases = [
            (
                "apps",
                "Deployment",
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
                "status": {"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2}}),
                Some(Healthy),
            ),
            (
                "apps",
                "Deployment",
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}}),
                Some(Unhealthy),
            ),
            (
                "apps",
                "Deployment",
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 1}}),
                Some(Unhealthy),
            ),
            (
                "apps",
                "Deployment",
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 0},
                "status": {"observedGeneration": 1}}),
                Some(Healthy),
            ),
            (
                "apps",
                "ReplicaSet",
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 3},
                "status": {"observedGeneration": 1, "availableReplicas": 2}}),
                Some(Unhealthy),
            ),
            (
                "apps",
                "DaemonSet",
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
                "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}}),
                Some(Healthy),
            ),
            (
                "",
                "Service",
                json!({"spec": {"type": "ClusterIP"}}),
                Some(Healthy),
            ),
            (
                "",
                "Service",
                json!({"spec": {"type": "LoadBalancer"}}),
                Some(Unhealthy),
            ),
            (
                "",
                "Service",
                json!({"spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
                Some(Healthy),
            ),
            (
                "",
                "PersistentVolumeClaim",
                json!({"status": {"phase": "Pending"}}),
                Some(Unhealthy),
            ),
            (
                "",
                "Pod",
                json!({"status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}}),
                Some(Healthy),
            ),
            (
                "",
                "Pod",
                json!({"status": {"phase": "Running"}}),
                Some(Unhealthy),
            ),
            (
                "",
                "Pod",
                json!({"status": {"phase": "Succeeded"}}),
                Some(Healthy),
            ),
            (
                "policy",
                "PodDisruptionBudget",
                json!({"status": {"currentHealthy": 1, "desiredHealthy": 2}}),
                Some(Unhealthy),
            ),
            ("batch", "Job", json!({}), Some(Healthy)),
            ("", "ConfigMap", json!({}), Some(Healthy)),
            ("flink.apache.org", "FlinkDeployment", json!({}), None),
        ];
        for (group, kind, obj, want) in cases {
            assert_eq!(interpret(group, kind, &obj), want, "{group}/{kind} {obj}");
        }
    }
}
