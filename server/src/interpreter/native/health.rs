//! Native health rules (docs/semantics.md §12, Karmada's `native/healthy.go`): whether a
//! member object is healthy, read from its `metadata`, `spec` and `status`. Missing numbers read
//! as 0. Kinds not listed here (Job, ConfigMap, ...) have no health rule.

use serde_json::Value;

use super::{array, int, opt_int, string, FieldError, WellKnownKind};

/// Whether `kind` has a native health rule.
pub fn has_rule(kind: WellKnownKind) -> bool {
    matches!(
        kind,
        WellKnownKind::Deployment
            | WellKnownKind::StatefulSet
            | WellKnownKind::ReplicaSet
            | WellKnownKind::DaemonSet
            | WellKnownKind::Service
            | WellKnownKind::Ingress
            | WellKnownKind::PersistentVolumeClaim
            | WellKnownKind::Pod
            | WellKnownKind::PodDisruptionBudget
    )
}

/// The verdict of `kind`'s rule on `object`. Callers check [`has_rule`] first; a kind without a
/// rule reads as healthy here.
pub fn interpret(kind: WellKnownKind, object: &Value) -> Result<bool, FieldError> {
    match kind {
        WellKnownKind::Deployment | WellKnownKind::StatefulSet => rolled_out(object),
        WellKnownKind::ReplicaSet => replica_set(object),
        WellKnownKind::DaemonSet => daemon_set(object),
        WellKnownKind::Service => service(object),
        WellKnownKind::Ingress => has_load_balancer_ingress(object),
        WellKnownKind::PersistentVolumeClaim => {
            Ok(string(object, &["status", "phase"])? == "Bound")
        }
        WellKnownKind::Pod => pod(object),
        WellKnownKind::PodDisruptionBudget => Ok(int(object, &["status", "currentHealthy"])?
            >= int(object, &["status", "desiredHealthy"])?),
        _ => Ok(true),
    }
}

fn generation_observed(object: &Value) -> Result<bool, FieldError> {
    Ok(
        int(object, &["status", "observedGeneration"])?
            == int(object, &["metadata", "generation"])?,
    )
}

/// Deployment and StatefulSet: the controller saw the latest spec, every wanted replica is
/// updated, and every updated replica is available.
fn rolled_out(object: &Value) -> Result<bool, FieldError> {
    if !generation_observed(object)? {
        return Ok(false);
    }
    let updated = int(object, &["status", "updatedReplicas"])?;
    if let Some(wanted) = opt_int(object, &["spec", "replicas"])? {
        if updated < wanted {
            return Ok(false);
        }
    }
    Ok(int(object, &["status", "availableReplicas"])? >= updated)
}

fn replica_set(object: &Value) -> Result<bool, FieldError> {
    if !generation_observed(object)? {
        return Ok(false);
    }
    match opt_int(object, &["spec", "replicas"])? {
        Some(wanted) => Ok(int(object, &["status", "availableReplicas"])? >= wanted),
        None => Ok(true),
    }
}

fn daemon_set(object: &Value) -> Result<bool, FieldError> {
    if !generation_observed(object)? {
        return Ok(false);
    }
    let updated = int(object, &["status", "updatedNumberScheduled"])?;
    Ok(
        updated >= int(object, &["status", "desiredNumberScheduled"])?
            && int(object, &["status", "numberAvailable"])? >= updated,
    )
}

fn service(object: &Value) -> Result<bool, FieldError> {
    if string(object, &["spec", "type"])? != "LoadBalancer" {
        return Ok(true);
    }
    has_load_balancer_ingress(object)
}

/// Some `status.loadBalancer.ingress` entry has an ip or a hostname.
fn has_load_balancer_ingress(object: &Value) -> Result<bool, FieldError> {
    for entry in array(object, &["status", "loadBalancer", "ingress"])? {
        if !string(entry, &["ip"])?.is_empty() || !string(entry, &["hostname"])?.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn pod(object: &Value) -> Result<bool, FieldError> {
    match string(object, &["status", "phase"])? {
        "Succeeded" => Ok(true),
        "Running" => {
            for condition in array(object, &["status", "conditions"])? {
                if string(condition, &["type"])? == "Ready" {
                    return Ok(string(condition, &["status"])? == "True");
                }
            }
            Ok(false)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Row {
        name: &'static str,
        kind: WellKnownKind,
        object: Value,
        healthy: bool,
    }

    fn row(name: &'static str, kind: WellKnownKind, object: Value, healthy: bool) -> Row {
        Row {
            name,
            kind,
            object,
            healthy,
        }
    }

    /// One row per rule of §12's table (and its edges).
    #[test]
    fn native_health_table() {
        use WellKnownKind as K;
        let rows = vec![
            // Deployment / StatefulSet
            row(
                "deploy all zero (missing fields read as 0)",
                K::Deployment,
                json!({}),
                true,
            ),
            row(
                "deploy rolled out",
                K::Deployment,
                json!({"metadata": {"generation": 3}, "spec": {"replicas": 2}, "status": {"observedGeneration": 3, "updatedReplicas": 2, "availableReplicas": 2}}),
                true,
            ),
            row(
                "deploy stale generation",
                K::Deployment,
                json!({"metadata": {"generation": 3}, "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2}}),
                false,
            ),
            row(
                "deploy not all updated",
                K::Deployment,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}}),
                false,
            ),
            row(
                "deploy updated not available",
                K::Deployment,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 1}}),
                false,
            ),
            row(
                "deploy no spec.replicas: only available ≥ updated",
                K::Deployment,
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "updatedReplicas": 4, "availableReplicas": 4}}),
                true,
            ),
            row(
                "deploy no status at all, 2 wanted",
                K::Deployment,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}}),
                false,
            ),
            row(
                "deploy scaled to zero",
                K::Deployment,
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 0}, "status": {"observedGeneration": 2}}),
                true,
            ),
            row(
                "sts rolled out",
                K::StatefulSet,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1, "updatedReplicas": 3, "availableReplicas": 3}}),
                true,
            ),
            row(
                "sts stale generation",
                K::StatefulSet,
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1, "updatedReplicas": 3, "availableReplicas": 3}}),
                false,
            ),
            row(
                "sts not all updated",
                K::StatefulSet,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 3}}),
                false,
            ),
            // ReplicaSet
            row(
                "rs available",
                K::ReplicaSet,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "availableReplicas": 2}}),
                true,
            ),
            row(
                "rs short",
                K::ReplicaSet,
                json!({"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "availableReplicas": 1}}),
                false,
            ),
            row(
                "rs stale generation",
                K::ReplicaSet,
                json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "availableReplicas": 2}}),
                false,
            ),
            row(
                "rs no spec.replicas",
                K::ReplicaSet,
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1}}),
                true,
            ),
            // DaemonSet
            row(
                "ds rolled out",
                K::DaemonSet,
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}}),
                true,
            ),
            row(
                "ds not updated",
                K::DaemonSet,
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 2, "numberAvailable": 3}}),
                false,
            ),
            row(
                "ds not available",
                K::DaemonSet,
                json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}}),
                false,
            ),
            row(
                "ds stale generation",
                K::DaemonSet,
                json!({"metadata": {"generation": 5}, "status": {"observedGeneration": 4}}),
                false,
            ),
            // Service
            row(
                "svc ClusterIP",
                K::Service,
                json!({"spec": {"type": "ClusterIP"}}),
                true,
            ),
            row("svc no type", K::Service, json!({"spec": {}}), true),
            row(
                "svc LB without ingress",
                K::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}}),
                false,
            ),
            row(
                "svc LB with empty entry",
                K::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{}]}}}),
                false,
            ),
            row(
                "svc LB with ip",
                K::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
                true,
            ),
            row(
                "svc LB with hostname",
                K::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{}, {"hostname": "lb.example"}]}}}),
                true,
            ),
            // Ingress
            row("ing no status", K::Ingress, json!({}), false),
            row(
                "ing with ip",
                K::Ingress,
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
                true,
            ),
            row(
                "ing with hostname",
                K::Ingress,
                json!({"status": {"loadBalancer": {"ingress": [{"hostname": "x"}]}}}),
                true,
            ),
            // PVC
            row(
                "pvc bound",
                K::PersistentVolumeClaim,
                json!({"status": {"phase": "Bound"}}),
                true,
            ),
            row(
                "pvc pending",
                K::PersistentVolumeClaim,
                json!({"status": {"phase": "Pending"}}),
                false,
            ),
            row("pvc no status", K::PersistentVolumeClaim, json!({}), false),
            // Pod
            row(
                "pod succeeded",
                K::Pod,
                json!({"status": {"phase": "Succeeded"}}),
                true,
            ),
            row(
                "pod running ready",
                K::Pod,
                json!({"status": {"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}]}}),
                true,
            ),
            row(
                "pod running not ready",
                K::Pod,
                json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}),
                false,
            ),
            row(
                "pod running no conditions",
                K::Pod,
                json!({"status": {"phase": "Running"}}),
                false,
            ),
            row(
                "pod pending ready",
                K::Pod,
                json!({"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}}),
                false,
            ),
            row(
                "pod failed",
                K::Pod,
                json!({"status": {"phase": "Failed"}}),
                false,
            ),
            // PDB
            row(
                "pdb enough",
                K::PodDisruptionBudget,
                json!({"status": {"currentHealthy": 3, "desiredHealthy": 2}}),
                true,
            ),
            row(
                "pdb equal",
                K::PodDisruptionBudget,
                json!({"status": {"currentHealthy": 2, "desiredHealthy": 2}}),
                true,
            ),
            row(
                "pdb short",
                K::PodDisruptionBudget,
                json!({"status": {"currentHealthy": 1, "desiredHealthy": 2}}),
                false,
            ),
            row("pdb empty status", K::PodDisruptionBudget, json!({}), true),
        ];
        for r in rows {
            assert!(has_rule(r.kind), "{}", r.name);
            assert_eq!(interpret(r.kind, &r.object), Ok(r.healthy), "{}", r.name);
        }
    }

    #[test]
    fn kinds_without_a_health_rule() {
        use WellKnownKind as K;
        for kind in [
            K::Job,
            K::CronJob,
            K::PersistentVolume,
            K::HorizontalPodAutoscaler,
            K::ServiceImport,
        ] {
            assert!(!has_rule(kind), "{kind:?}");
        }
    }

    #[test]
    fn wrong_types_are_errors_not_verdicts() {
        let cases = [
            (
                WellKnownKind::Deployment,
                json!({"status": {"availableReplicas": "two"}}),
                "status.availableReplicas",
            ),
            (
                WellKnownKind::Deployment,
                json!({"status": "Running"}),
                "status",
            ),
            (
                WellKnownKind::Pod,
                json!({"status": {"phase": 3}}),
                "status.phase",
            ),
            (
                WellKnownKind::Service,
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": "x"}}}),
                "status.loadBalancer.ingress",
            ),
        ];
        for (kind, object, path) in cases {
            let err = interpret(kind, &object).expect_err(path);
            assert_eq!(err.path, path);
        }
    }
}
