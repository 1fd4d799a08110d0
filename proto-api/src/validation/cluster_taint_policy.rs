//! Validation of ClusterTaintPolicy (docs/semantics.md §4.2 and Part 1): at least one taint,
//! each with a well-formed key and value and a unique (key, effect) pair; every match
//! condition names a condition type and at least one status; a policy that can neither add nor
//! remove is refused rather than stored as a silent no-op; `targetClusters` is checked as a
//! policy's cluster affinity. Unlike Karmada's webhook (without
//! `--allow-no-execute-taint-policy`), NoExecute taints are accepted: they are how a team
//! declares its own failover rules.

use super::meta::validate_object_meta;
use super::policy::validate_cluster_affinity;
use super::{push_reasons, FieldError, Path};
use crate::names;
use crate::policy::cluster_taint_policy::{ClusterTaintPolicy, MatchCondition};

/// Validates a ClusterTaintPolicy; `old` is the stored object on update (nothing is immutable).
pub fn validate_cluster_taint_policy(
    new: &ClusterTaintPolicy,
    _old: Option<&ClusterTaintPolicy>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, false, names::dns1123_subdomain, &mut errs);
    let spec = &new.spec;
    let path = Path::new("spec");
    if let Some(aff) = &spec.target_clusters {
        validate_cluster_affinity(aff, &path.child("targetClusters"), &mut errs);
    }
    if spec.add_on_conditions.is_empty() && spec.remove_on_conditions.is_empty() {
        errs.push(FieldError::required(
            &path.child("addOnConditions"),
            "addOnConditions or removeOnConditions is required: without either the policy \
             never adds or removes a taint",
        ));
    }
    validate_match_conditions(
        &spec.add_on_conditions,
        &path.child("addOnConditions"),
        &mut errs,
    );
    validate_match_conditions(
        &spec.remove_on_conditions,
        &path.child("removeOnConditions"),
        &mut errs,
    );
    let taints_path = path.child("taints");
    if spec.taints.is_empty() {
        errs.push(FieldError::required(
            &taints_path,
            "at least one taint is required",
        ));
    }
    for (i, t) in spec.taints.iter().enumerate() {
        let p = taints_path.index(i);
        if t.key.is_empty() {
            errs.push(FieldError::required(
                &p.child("key"),
                "taint key is required",
            ));
        } else {
            push_reasons(
                &mut errs,
                &p.child("key"),
                &t.key,
                names::qualified_name(&t.key),
            );
        }
        push_reasons(
            &mut errs,
            &p.child("value"),
            &t.value,
            names::label_value(&t.value),
        );
        // Reported at the first index of each duplicate pair, as Karmada's webhook does.
        if spec.taints[i + 1..]
            .iter()
            .any(|o| o.key == t.key && o.effect == t.effect)
        {
            errs.push(FieldError::duplicate(&p, format!("{}:{}", t.key, t.effect)));
        }
    }
    errs
}

fn validate_match_conditions(list: &[MatchCondition], path: &Path, errs: &mut Vec<FieldError>) {
    for (i, m) in list.iter().enumerate() {
        let p = path.index(i);
        if m.condition_type.is_empty() {
            errs.push(FieldError::required(
                &p.child("conditionType"),
                "conditionType is required",
            ));
        }
        if m.status_values.is_empty() {
            errs.push(FieldError::required(
                &p.child("statusValues"),
                "at least one status (True, False, Unknown) is required",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::decode;
    use crate::validation::FieldErrorKind;
    use serde_json::{json, Value};

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
               "metadata": {"name": "p"}, "spec": spec})
    }

    fn ready_false() -> Value {
        json!([{"conditionType": "Ready", "operator": "In", "statusValues": ["False"]}])
    }

    #[test]
    fn rules_table() {
        let ok_taint = json!([{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"}]);
        // (spec, want: None = valid, Some((path, kind)))
        let table: Vec<(Value, Option<(&str, FieldErrorKind)>)> = vec![
            // NoExecute is accepted (Flotilla's decision), as are the other effects.
            (
                json!({"addOnConditions": ready_false(), "taints": ok_taint}),
                None,
            ),
            (
                json!({"removeOnConditions": ready_false(),
                       "taints": [{"key": "a", "effect": "NoSchedule", "value": "x"},
                                  {"key": "a", "effect": "PreferNoSchedule"},
                                  {"key": "a", "effect": "NoExecute"}]}),
                None,
            ),
            (
                json!({"addOnConditions": ready_false(), "taints": ok_taint,
                       "targetClusters": {"clusterNames": ["m1"],
                                          "labelSelector": {"matchLabels": {"env": "prod"}}}}),
                None,
            ),
            // Duplicate (key, effect): reported at the first index.
            (
                json!({"addOnConditions": ready_false(),
                       "taints": [{"key": "a", "effect": "NoExecute"},
                                  {"key": "b", "effect": "NoExecute"},
                                  {"key": "a", "effect": "NoExecute", "value": "v"}]}),
                Some(("spec.taints[0]", FieldErrorKind::Duplicate)),
            ),
            (
                json!({"addOnConditions": ready_false(), "taints": []}),
                Some(("spec.taints", FieldErrorKind::Required)),
            ),
            (
                json!({"addOnConditions": ready_false()}),
                Some(("spec.taints", FieldErrorKind::Required)),
            ),
            (
                json!({"addOnConditions": ready_false(),
                       "taints": [{"key": "", "effect": "NoExecute"}]}),
                Some(("spec.taints[0].key", FieldErrorKind::Required)),
            ),
            (
                json!({"addOnConditions": ready_false(),
                       "taints": [{"key": "bad key!", "effect": "NoExecute"}]}),
                Some(("spec.taints[0].key", FieldErrorKind::Invalid)),
            ),
            (
                json!({"addOnConditions": ready_false(),
                       "taints": [{"key": "a", "effect": "NoExecute", "value": "no spaces"}]}),
                Some(("spec.taints[0].value", FieldErrorKind::Invalid)),
            ),
            (
                json!({"taints": ok_taint}),
                Some(("spec.addOnConditions", FieldErrorKind::Required)),
            ),
            (
                json!({"addOnConditions": [{"conditionType": "", "operator": "In",
                                            "statusValues": ["False"]}],
                       "taints": ok_taint}),
                Some((
                    "spec.addOnConditions[0].conditionType",
                    FieldErrorKind::Required,
                )),
            ),
            (
                json!({"addOnConditions": ready_false(),
                       "removeOnConditions": [{"conditionType": "Ready", "operator": "In",
                                               "statusValues": []}],
                       "taints": ok_taint}),
                Some((
                    "spec.removeOnConditions[0].statusValues",
                    FieldErrorKind::Required,
                )),
            ),
            (
                json!({"addOnConditions": ready_false(), "taints": ok_taint,
                       "targetClusters": {"fieldSelector": {"matchExpressions":
                           [{"key": "color", "operator": "In", "values": ["x"]}]}}}),
                Some((
                    "spec.targetClusters.fieldSelector.matchExpressions[0].key",
                    FieldErrorKind::Invalid,
                )),
            ),
        ];
        for (i, (spec, want)) in table.into_iter().enumerate() {
            let p: ClusterTaintPolicy = decode(&policy(spec.clone())).expect("decodes");
            let errs = validate_cluster_taint_policy(&p, None);
            match want {
                None => assert!(errs.is_empty(), "row {i} {spec}: {errs:?}"),
                Some((path, kind)) => assert!(
                    errs.iter().any(|e| e.path == path && e.kind == kind),
                    "row {i} {spec}: want {kind:?} at {path}, got {errs:?}"
                ),
            }
        }
    }

    #[test]
    fn bad_operator_effect_and_status_are_decode_errors_naming_the_field() {
        let table = [
            (
                json!({"addOnConditions": [{"conditionType": "Ready", "operator": "Exists",
                                            "statusValues": ["False"]}],
                       "taints": [{"key": "a", "effect": "NoExecute"}]}),
                "spec.addOnConditions[0].operator",
            ),
            (
                json!({"addOnConditions": ready_false(),
                       "taints": [{"key": "a", "effect": "Evict"}]}),
                "spec.taints[0].effect",
            ),
            (
                json!({"addOnConditions": [{"conditionType": "Ready", "operator": "In",
                                            "statusValues": ["false"]}],
                       "taints": [{"key": "a", "effect": "NoExecute"}]}),
                "spec.addOnConditions[0].statusValues[0]",
            ),
        ];
        for (spec, path) in table {
            let err = decode::<ClusterTaintPolicy>(&policy(spec.clone())).expect_err(path);
            assert_eq!(err.path, path, "{spec}: {err:?}");
            assert_eq!(err.kind, FieldErrorKind::NotSupported, "{spec}");
        }
    }
}
