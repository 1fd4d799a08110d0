//! Native replica rules (Karmada's `native/replica.go`, `revisereplica.go` and the Job
//! completions split of `ensureWork`, §10.3): how many replicas a workload asks for, what each
//! replica needs (its pod's effective request, from `flotilla_api::pod_requests`, node
//! constraints, priority class), how a manifest is revised to one cluster's share, and how a
//! Job's completions are divided.
//!
//! Templates that leave `spec.replicas` / `spec.parallelism` unset read as 1, the value the
//! Kubernetes API server would have defaulted (Karmada only ever sees defaulted objects).

use std::collections::BTreeMap;

use flotilla_api::binding::{NodeClaim, ReplicaRequirements, TargetCluster};
use flotilla_api::pod_requests::pod_requests;
use flotilla_api::policy::Toleration;
use flotilla_api::quantity::ResourceList;
use serde_json::Value;

use super::{lookup, namespace, object, opt_i32, set, string, FieldError, WellKnownKind};

/// Replicas and per-replica requirements of a workload; `Ok(None)` for kinds that are not.
pub fn replicas(
    kind: WellKnownKind,
    object: &Value,
) -> Result<Option<(i32, Option<ReplicaRequirements>)>, FieldError> {
    let replicas = match kind {
        WellKnownKind::Deployment | WellKnownKind::StatefulSet | WellKnownKind::ReplicaSet => {
            opt_i32(object, &["spec", "replicas"])?.unwrap_or(1)
        }
        WellKnownKind::Job => {
            // A fixed-completion Job never runs more pods at once than it has completions.
            let parallelism = opt_i32(object, &["spec", "parallelism"])?.unwrap_or(1);
            match opt_i32(object, &["spec", "completions"])? {
                Some(completions) => parallelism.min(completions),
                None => parallelism,
            }
        }
        WellKnownKind::Pod => 1,
        _ => return Ok(None),
    };
    let Some(spec_path) = kind.pod_spec_path() else {
        return Ok(None);
    };
    let pod_spec = lookup(object, spec_path)?.unwrap_or(&Value::Null);
    let requirements = pod_spec_requirements(pod_spec, namespace(object)?, spec_path)?;
    Ok(Some((replicas.max(0), requirements)))
}

/// Requirements of one pod of a pod template (`{metadata, spec}`), as Karmada's
/// `GenerateReplicaRequirements` (and the Lua `kube.accuratePodRequirements`).
pub fn pod_template_requirements(
    template: &Value,
) -> Result<Option<ReplicaRequirements>, FieldError> {
    let spec = lookup(template, &["spec"])?.unwrap_or(&Value::Null);
    pod_spec_requirements(spec, namespace(template)?, &["spec"])
}

/// Requirements of one pod with `pod_spec`: `None` when it requests nothing and has no node
/// constraints and no priority class.
pub fn pod_spec_requirements(
    pod_spec: &Value,
    namespace: &str,
    at: &[&str],
) -> Result<Option<ReplicaRequirements>, FieldError> {
    let resource_request = pod_request(pod_spec, at)?;
    let node_claim = node_claim(pod_spec, at)?;
    let priority_class_name = string(pod_spec, &["priorityClassName"])
        .map_err(|e| prefixed(at, e))?
        .to_string();
    if resource_request.is_empty() && node_claim.is_none() && priority_class_name.is_empty() {
        return Ok(None);
    }
    Ok(Some(ReplicaRequirements {
        node_claim,
        resource_request,
        namespace: namespace.to_string(),
        priority_class_name,
    }))
}

fn prefixed(at: &[&str], e: FieldError) -> FieldError {
    let prefix = at.join(".");
    FieldError {
        path: if prefix.is_empty() {
            e.path
        } else {
            format!("{prefix}.{}", e.path)
        },
        problem: e.problem,
    }
}

/// The pod's effective request ([`flotilla_api::pod_requests`]: containers, init and sidecar
/// containers, overhead), an unreadable field named from `at`.
fn pod_request(pod_spec: &Value, at: &[&str]) -> Result<ResourceList, FieldError> {
    pod_requests(pod_spec).map_err(|e| {
        prefixed(
            at,
            FieldError {
                path: e.path,
                problem: e.problem,
            },
        )
    })
}

/// Node constraints of a pod: node selector, tolerations and required node affinity.
fn node_claim(pod_spec: &Value, at: &[&str]) -> Result<Option<NodeClaim>, FieldError> {
    let wrap = |e| prefixed(at, e);
    let mut node_selector = BTreeMap::new();
    if let Some(map) = object(pod_spec, &["nodeSelector"]).map_err(wrap)? {
        for (k, v) in map {
            let value = v.as_str().ok_or_else(|| {
                prefixed(
                    at,
                    FieldError::new(&["nodeSelector", k], "expected a string"),
                )
            })?;
            node_selector.insert(k.clone(), value.to_string());
        }
    }
    let tolerations = match lookup(pod_spec, &["tolerations"]).map_err(wrap)? {
        None => Vec::new(),
        Some(list) => serde_json::from_value::<Vec<Toleration>>(list.clone())
            .map_err(|e| prefixed(at, FieldError::new(&["tolerations"], e.to_string())))?,
    };
    let hard_node_affinity = lookup(
        pod_spec,
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        ],
    )
    .map_err(wrap)?
    .cloned();
    if node_selector.is_empty() && tolerations.is_empty() && hard_node_affinity.is_none() {
        return Ok(None);
    }
    Ok(Some(NodeClaim {
        hard_node_affinity,
        node_selector,
        tolerations,
    }))
}

/// Revises `manifest` in place to `replicas`: `spec.replicas` of Deployment, StatefulSet and
/// ReplicaSet, `spec.parallelism` of Job. Other kinds are left alone.
pub fn revise(kind: WellKnownKind, manifest: &mut Value, replicas: i32) -> Result<(), FieldError> {
    let field = match kind {
        WellKnownKind::Deployment | WellKnownKind::StatefulSet | WellKnownKind::ReplicaSet => {
            "replicas"
        }
        WellKnownKind::Job => "parallelism",
        _ => return Ok(()),
    };
    set(manifest, &["spec", field], Value::from(replicas))
}

/// Sets a Job manifest's `spec.completions`, only when the template sets it (a work-queue Job
/// leaves it unset, and so does every cluster's copy).
pub fn set_job_completions(manifest: &mut Value, completions: i32) -> Result<(), FieldError> {
    if opt_i32(manifest, &["spec", "completions"])?.is_none() {
        return Ok(());
    }
    set(manifest, &["spec", "completions"], Value::from(completions))
}

/// A Job's `spec.completions` divided among `targets` in proportion to their replicas
/// (Webster/Sainte-Laguë apportionment, as Flotilla divides replicas; ties go to the larger
/// weight, then the smaller cluster name). `None` when the Job does not set completions.
/// When every target has 0 replicas the completions are divided evenly.
pub fn divide_job_completions(
    template: &Value,
    targets: &[TargetCluster],
) -> Result<Option<Vec<TargetCluster>>, FieldError> {
    let Some(completions) = opt_i32(template, &["spec", "completions"])? else {
        return Ok(None);
    };
    if targets.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let all_zero = targets.iter().all(|t| t.replicas <= 0);
    let weights: Vec<(&str, i64)> = targets
        .iter()
        .map(|t| {
            let w = if all_zero {
                1
            } else {
                i64::from(t.replicas.max(0))
            };
            (t.name.as_str(), w)
        })
        .collect();
    let seats = webster(i64::from(completions.max(0)), &weights);
    Ok(Some(
        targets
            .iter()
            .zip(seats)
            .map(|(t, n)| TargetCluster::new(&t.name, i32::try_from(n).unwrap_or(i32::MAX)))
            .collect(),
    ))
}

/// Webster (Sainte-Laguë) apportionment of `total` seats by `weights`: the `total` largest
/// quotients `w / (2k + 1)`, found from a divisor estimate and corrected seat by seat.
pub(crate) fn webster(total: i64, weights: &[(&str, i64)]) -> Vec<i64> {
    let sum: i64 = weights.iter().map(|(_, w)| *w).sum();
    if total <= 0 || sum <= 0 {
        return vec![0; weights.len()];
    }
    // Seat k (0-based) of party i ranks before seat m of party j.
    let before = |i: usize, k: i64, j: usize, m: i64| -> bool {
        let (name_i, w_i) = weights[i];
        let (name_j, w_j) = weights[j];
        let lhs = i128::from(w_i) * i128::from(2 * m + 1);
        let rhs = i128::from(w_j) * i128::from(2 * k + 1);
        if lhs != rhs {
            return lhs > rhs;
        }
        if w_i != w_j {
            return w_i > w_j;
        }
        if name_i != name_j {
            return name_i < name_j;
        }
        k < m
    };
    let mut seats: Vec<i64> = weights
        .iter()
        .map(|(_, w)| {
            let estimate = (*w as f64) * (total as f64) / (sum as f64) + 0.5;
            (estimate.floor() as i64).clamp(0, total)
        })
        .collect();
    loop {
        let held: i64 = seats.iter().sum();
        // The best seat not yet given, and the worst seat given.
        let mut best: Option<usize> = None;
        let mut worst: Option<usize> = None;
        for i in 0..weights.len() {
            if weights[i].1 > 0 && best.is_none_or(|b| before(i, seats[i], b, seats[b])) {
                best = Some(i);
            }
            if seats[i] > 0 && worst.is_none_or(|w| before(w, seats[w] - 1, i, seats[i] - 1)) {
                worst = Some(i);
            }
        }
        match (held.cmp(&total), best, worst) {
            (std::cmp::Ordering::Less, Some(b), _) => seats[b] += 1,
            (std::cmp::Ordering::Greater, _, Some(w)) => seats[w] -= 1,
            (std::cmp::Ordering::Equal, Some(b), Some(w))
                if b != w && before(b, seats[b], w, seats[w] - 1) =>
            {
                seats[b] += 1;
                seats[w] -= 1;
            }
            _ => return seats,
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::policy::TolerationOperator;
    use serde_json::json;

    use super::*;
    use flotilla_api::quantity::Quantity;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect("quantity")
    }

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
    }

    fn workload(kind: &str, api_version: &str, spec: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "ns"}, "spec": spec})
    }

    fn pod_template(pod_spec: Value) -> Value {
        json!({"metadata": {"labels": {"app": "x"}}, "spec": pod_spec})
    }

    struct Row {
        name: &'static str,
        kind: WellKnownKind,
        object: Value,
        replicas: Option<i32>,
        request: ResourceList,
    }

    #[test]
    fn replica_table() {
        use WellKnownKind as K;
        let containers = json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi", "cpu": "1"}}}
        ]});
        let summed = list(&[("cpu", "350m"), ("memory", "192Mi")]);
        let rows = vec![
            Row {
                name: "deployment",
                kind: K::Deployment,
                object: workload(
                    "Deployment",
                    "apps/v1",
                    json!({"replicas": 3, "template": pod_template(containers.clone())}),
                ),
                replicas: Some(3),
                request: summed.clone(),
            },
            Row {
                name: "deployment without replicas defaults to 1",
                kind: K::Deployment,
                object: workload(
                    "Deployment",
                    "apps/v1",
                    json!({"template": pod_template(containers.clone())}),
                ),
                replicas: Some(1),
                request: summed.clone(),
            },
            Row {
                name: "deployment scaled to 0",
                kind: K::Deployment,
                object: workload("Deployment", "apps/v1", json!({"replicas": 0})),
                replicas: Some(0),
                request: ResourceList::new(),
            },
            Row {
                name: "statefulset",
                kind: K::StatefulSet,
                object: workload(
                    "StatefulSet",
                    "apps/v1",
                    json!({"replicas": 5, "template": pod_template(containers.clone())}),
                ),
                replicas: Some(5),
                request: summed.clone(),
            },
            Row {
                name: "replicaset",
                kind: K::ReplicaSet,
                object: workload(
                    "ReplicaSet",
                    "apps/v1",
                    json!({"replicas": 2, "template": pod_template(containers.clone())}),
                ),
                replicas: Some(2),
                request: summed.clone(),
            },
            Row {
                name: "job parallelism",
                kind: K::Job,
                object: workload(
                    "Job",
                    "batch/v1",
                    json!({"parallelism": 4, "template": pod_template(containers.clone())}),
                ),
                replicas: Some(4),
                request: summed.clone(),
            },
            Row {
                name: "job parallelism capped by completions",
                kind: K::Job,
                object: workload(
                    "Job",
                    "batch/v1",
                    json!({"parallelism": 4, "completions": 2}),
                ),
                replicas: Some(2),
                request: ResourceList::new(),
            },
            Row {
                name: "job completions above parallelism",
                kind: K::Job,
                object: workload(
                    "Job",
                    "batch/v1",
                    json!({"parallelism": 3, "completions": 10}),
                ),
                replicas: Some(3),
                request: ResourceList::new(),
            },
            Row {
                name: "job defaults",
                kind: K::Job,
                object: workload("Job", "batch/v1", json!({})),
                replicas: Some(1),
                request: ResourceList::new(),
            },
            Row {
                name: "pod is one replica",
                kind: K::Pod,
                object: workload("Pod", "v1", containers.clone()),
                replicas: Some(1),
                request: summed.clone(),
            },
            Row {
                name: "daemonset is not divided",
                kind: K::DaemonSet,
                object: workload("DaemonSet", "apps/v1", json!({})),
                replicas: None,
                request: ResourceList::new(),
            },
            Row {
                name: "service is no workload",
                kind: K::Service,
                object: workload("Service", "v1", json!({})),
                replicas: None,
                request: ResourceList::new(),
            },
        ];
        for r in rows {
            let got = replicas(r.kind, &r.object).unwrap_or_else(|e| panic!("{}: {e}", r.name));
            assert_eq!(got.as_ref().map(|g| g.0), r.replicas, "{}", r.name);
            let request = got
                .and_then(|g| g.1)
                .map(|req| req.resource_request)
                .unwrap_or_default();
            assert_eq!(request, r.request, "{}", r.name);
        }
    }

    #[test]
    fn requests_table() {
        let rows: Vec<(&str, Value, ResourceList)> = vec![
            (
                "limits stand in for missing requests",
                json!({"containers": [{"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}),
                list(&[("cpu", "2"), ("memory", "1Gi")]),
            ),
            (
                "requests win over limits",
                json!({"containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}]}),
                list(&[("cpu", "500m")]),
            ),
            (
                "init container larger than the sum",
                json!({"containers": [{"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}], "initContainers": [{"resources": {"requests": {"cpu": "1"}}}]}),
                list(&[("cpu", "1"), ("memory", "64Mi")]),
            ),
            (
                "init container smaller than the sum",
                json!({"containers": [{"resources": {"requests": {"cpu": "2"}}}, {"resources": {"requests": {"cpu": "1"}}}], "initContainers": [{"resources": {"requests": {"cpu": "2500m", "nvidia.com/gpu": "1"}}}]}),
                list(&[("cpu", "3"), ("nvidia.com/gpu", "1")]),
            ),
            (
                "largest init container counts, not their sum",
                json!({"initContainers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"requests": {"cpu": "2"}}}]}),
                list(&[("cpu", "2")]),
            ),
            (
                "overhead added",
                json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}], "overhead": {"cpu": "250m"}}),
                list(&[("cpu", "1250m")]),
            ),
            (
                "zero requests dropped",
                json!({"containers": [{"resources": {"requests": {"cpu": "0", "memory": "10Mi"}}}]}),
                list(&[("memory", "10Mi")]),
            ),
            (
                "numeric quantities",
                json!({"containers": [{"resources": {"requests": {"cpu": 2}}}]}),
                list(&[("cpu", "2")]),
            ),
            ("no containers", json!({}), ResourceList::new()),
        ];
        for (name, spec, want) in rows {
            let got = pod_request(&spec, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn node_claim_and_priority() {
        let object = workload(
            "Deployment",
            "apps/v1",
            json!({"replicas": 2, "template": pod_template(json!({
                "priorityClassName": "high",
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
                "containers": [{"resources": {"requests": {"cpu": "1"}}}]
            }))}),
        );
        let (n, req) = replicas(WellKnownKind::Deployment, &object)
            .expect("ok")
            .expect("workload");
        assert_eq!(n, 2);
        let req = req.expect("requirements");
        assert_eq!(req.priority_class_name, "high");
        assert_eq!(req.namespace, "ns");
        let claim = req.node_claim.expect("node claim");
        assert_eq!(
            claim.node_selector.get("disk").map(String::as_str),
            Some("ssd")
        );
        assert_eq!(claim.tolerations.len(), 1);
        assert_eq!(
            claim.tolerations[0].operator,
            Some(TolerationOperator::Exists)
        );
        assert!(claim.hard_node_affinity.is_some());

        // Nothing asked: no requirements at all.
        let bare = workload(
            "Deployment",
            "apps/v1",
            json!({"replicas": 1, "template": pod_template(json!({"containers": [{"name": "x"}]}))}),
        );
        assert_eq!(
            replicas(WellKnownKind::Deployment, &bare),
            Ok(Some((1, None)))
        );
    }

    #[test]
    fn malformed_templates_are_errors() {
        let cases = [
            (json!({"replicas": "three"}), "spec.replicas"),
            (json!({"replicas": 3_000_000_000_i64}), "spec.replicas"),
            (
                json!({"template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}}),
                "spec.template.spec.containers.0.resources.requests.cpu",
            ),
            (
                json!({"template": {"spec": {"containers": "none"}}}),
                "spec.template.spec.containers",
            ),
            (
                json!({"template": {"spec": {"tolerations": [{"operator": "Maybe"}]}}}),
                "spec.template.spec.tolerations",
            ),
        ];
        for (spec, path) in cases {
            let err = replicas(
                WellKnownKind::Deployment,
                &workload("Deployment", "apps/v1", spec),
            )
            .expect_err(path);
            assert_eq!(err.path, path);
        }
    }

    #[test]
    fn revise_table() {
        use WellKnownKind as K;
        let rows = vec![
            (
                K::Deployment,
                json!({"spec": {"replicas": 6}}),
                json!({"spec": {"replicas": 2}}),
            ),
            (
                K::Deployment,
                json!({"metadata": {}}),
                json!({"metadata": {}, "spec": {"replicas": 2}}),
            ),
            (
                K::StatefulSet,
                json!({"spec": {"replicas": 6}}),
                json!({"spec": {"replicas": 2}}),
            ),
            (
                K::ReplicaSet,
                json!({"spec": {"replicas": 6}}),
                json!({"spec": {"replicas": 2}}),
            ),
            (
                K::Job,
                json!({"spec": {"parallelism": 6, "completions": 12}}),
                json!({"spec": {"parallelism": 2, "completions": 12}}),
            ),
            (K::Pod, json!({"spec": {}}), json!({"spec": {}})),
        ];
        for (kind, mut manifest, want) in rows {
            revise(kind, &mut manifest, 2).expect("revise");
            assert_eq!(manifest, want, "{kind:?}");
        }
        let mut bad = json!({"spec": "x"});
        assert!(revise(K::Deployment, &mut bad, 1).is_err());
    }

    #[test]
    fn job_completions_table() {
        let t = |pairs: &[(&str, i32)]| -> Vec<TargetCluster> {
            pairs
                .iter()
                .map(|(n, r)| TargetCluster::new(n, *r))
                .collect()
        };
        type Pairs<'a> = &'a [(&'a str, i32)];
        let rows: Vec<(&str, Value, Pairs, Option<Pairs>)> = vec![
            (
                "even split",
                json!({"spec": {"completions": 10}}),
                &[("a", 2), ("b", 2)],
                Some(&[("a", 5), ("b", 5)]),
            ),
            (
                "proportional",
                json!({"spec": {"completions": 10}}),
                &[("a", 3), ("b", 2)],
                Some(&[("a", 6), ("b", 4)]),
            ),
            (
                "webster 14 at 3:2:1",
                json!({"spec": {"completions": 14}}),
                &[("a", 3), ("b", 2), ("c", 1)],
                Some(&[("a", 7), ("b", 5), ("c", 2)]),
            ),
            (
                "tie to the smaller name",
                json!({"spec": {"completions": 3}}),
                &[("b", 1), ("a", 1)],
                Some(&[("b", 1), ("a", 2)]),
            ),
            (
                "one cluster takes all",
                json!({"spec": {"completions": 7}}),
                &[("a", 4)],
                Some(&[("a", 7)]),
            ),
            (
                "zero-replica cluster gets none",
                json!({"spec": {"completions": 5}}),
                &[("a", 2), ("b", 0)],
                Some(&[("a", 5), ("b", 0)]),
            ),
            (
                "all zero: even",
                json!({"spec": {"completions": 4}}),
                &[("a", 0), ("b", 0)],
                Some(&[("a", 2), ("b", 2)]),
            ),
            (
                "work queue job: no completions",
                json!({"spec": {"parallelism": 3}}),
                &[("a", 2), ("b", 1)],
                None,
            ),
            (
                "huge completions",
                json!({"spec": {"completions": 2_000_000_000}}),
                &[("a", 1), ("b", 1), ("c", 1)],
                Some(&[("a", 666_666_667), ("b", 666_666_667), ("c", 666_666_666)]),
            ),
        ];
        for (name, template, targets, want) in rows {
            let got = divide_job_completions(&template, &t(targets)).expect(name);
            assert_eq!(got, want.map(t), "{name}");
        }
    }

    #[test]
    fn webster_matches_sequential_assignment() {
        // The divisor shortcut must give what awarding seats one by one gives.
        let weights = [("a", 7), ("b", 5), ("c", 3), ("d", 1), ("e", 0)];
        for total in 0..60 {
            let mut seq = vec![0i64; weights.len()];
            for _ in 0..total {
                let mut best = 0;
                for i in 1..weights.len() {
                    let (wi, wb) = (weights[i].1 as i128, weights[best].1 as i128);
                    let lhs = wi * (2 * seq[best] as i128 + 1);
                    let rhs = wb * (2 * seq[i] as i128 + 1);
                    if lhs > rhs
                        || (lhs == rhs && (wi > wb || (wi == wb && weights[i].0 < weights[best].0)))
                    {
                        best = i;
                    }
                }
                seq[best] += 1;
            }
            assert_eq!(webster(total, &weights), seq, "total {total}");
        }
    }

    #[test]
    fn completions_set_only_when_present() {
        let mut with = json!({"spec": {"completions": 10}});
        set_job_completions(&mut with, 4).expect("set");
        assert_eq!(with, json!({"spec": {"completions": 4}}));
        let mut without = json!({"spec": {"parallelism": 2}});
        set_job_completions(&mut without, 4).expect("set");
        assert_eq!(without, json!({"spec": {"parallelism": 2}}));
    }
}
