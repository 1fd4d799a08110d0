//! One row per validation rule (docs/semantics.md §6.4, Part 1, cluster §2, bindings and
//! works): each row patches a valid object, admits it, and names the field path, error kind
//! and message it expects.

// Helpers outside #[test] functions unwrap too: this whole crate is a test.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use flotilla_api::policy::{
    ApplicationFailoverBehavior, FailoverBehavior, PropagationPolicy, PropagationSpec, PurgeMode,
    ResourceSelector,
};
use flotilla_api::validation::validate_propagation_policy;
use flotilla_api::{FieldErrorKind, FieldErrorKind::*};
use serde_json::{json, Value};

struct Row {
    rule: &'static str,
    obj: Value,
    path: &'static str,
    kind: FieldErrorKind,
    message: &'static str,
}

fn row(
    rule: &'static str,
    obj: Value,
    path: &'static str,
    kind: FieldErrorKind,
    message: &'static str,
) -> Row {
    Row {
        rule,
        obj,
        path,
        kind,
        message,
    }
}

fn check(rows: Vec<Row>) {
    let mut failures = Vec::new();
    for r in rows {
        let errs = match admit_create(&r.obj) {
            Ok(_) => {
                failures.push(format!("{}: accepted", r.rule));
                continue;
            }
            Err(e) => e.0,
        };
        let hit = errs
            .iter()
            .any(|e| e.path == r.path && e.kind == r.kind && e.message.contains(r.message));
        if !hit {
            failures.push(format!(
                "{}: wanted {} {:?} {:?}, got {:#?}",
                r.rule, r.path, r.kind, r.message, errs
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn accepted(rule: &str, obj: &Value) {
    if let Err(e) = admit_create(obj) {
        panic!("{rule}: rejected: {e}");
    }
}

fn spec(patch: Value) -> Value {
    patched(&pp(), &json!({ "spec": patch }))
}

fn placement(patch: Value) -> Value {
    spec(json!({ "placement": patch }))
}

#[test]
fn policy_rules() {
    let overflow_term = json!([{
        "affinityName": "primary", "clusterNames": ["m1"],
        "overflowAffinities": [{"affinityName": "burst", "clusterNames": ["m2"]}]
    }]);
    check(vec![
        row(
            "clusterAffinity and clusterAffinities together",
            placement(json!({"clusterAffinity": {"clusterNames": ["m1"]},
                             "clusterAffinities": [{"affinityName": "a", "clusterNames": ["m1"]}]})),
            "spec.placement",
            Invalid,
            "clusterAffinities cannot co-exist with clusterAffinity",
        ),
        row(
            "overflow needs dynamic weight or aggregated",
            placement(json!({"clusterAffinities": overflow_term.clone()})),
            "spec.placement.clusterAffinities[0].overflowAffinities",
            Invalid,
            "overflowAffinities can only be used together with dynamic weight or aggregated scheduling",
        ),
        row(
            "overflow with static weights",
            placement(json!({"clusterAffinities": overflow_term.clone(),
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [
                        {"targetCluster": {"clusterNames": ["m1"]}, "weight": 1}]}}})),
            "spec.placement.clusterAffinities[0].overflowAffinities",
            Invalid,
            "dynamic weight or aggregated",
        ),
        row(
            "overflow without inline affinity",
            placement(json!({"clusterAffinities": [{"affinityName": "primary",
                    "overflowAffinities": [{"affinityName": "burst", "clusterNames": ["m2"]}]}],
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Aggregated"}})),
            "spec.placement.clusterAffinities[0].overflowAffinities",
            Invalid,
            "inline cluster affinity",
        ),
        row(
            "overflow name equals the term name",
            placement(json!({"clusterAffinities": [{"affinityName": "primary", "clusterNames": ["m1"],
                    "overflowAffinities": [{"affinityName": "primary", "clusterNames": ["m2"]}]}],
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Aggregated"}})),
            "spec.placement.clusterAffinities[0].overflowAffinities[0].affinityName",
            Invalid,
            "each affinity term in a policy must have a unique name",
        ),
        row(
            "field selector key",
            placement(json!({"clusterAffinity": {"fieldSelector": {"matchExpressions": [
                {"key": "metadata.name", "operator": "In", "values": ["m1"]}]}}})),
            "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].key",
            Invalid,
            "unsupported key \"metadata.name\", must be provider, region, or zone",
        ),
        row(
            "field selector operator",
            placement(json!({"clusterAffinity": {"fieldSelector": {"matchExpressions": [
                {"key": "region", "operator": "Exists"}]}}})),
            "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].operator",
            Invalid,
            "unsupported operator \"Exists\", must be In or NotIn",
        ),
        row(
            "field selector in an affinity term",
            placement(json!({"clusterAffinities": [{"affinityName": "a", "fieldSelector": {
                "matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}}]})),
            "spec.placement.clusterAffinities[0].fieldSelector.matchExpressions[0].operator",
            Invalid,
            "must be In or NotIn",
        ),
        row(
            "field selector in an overflow term",
            placement(json!({"clusterAffinities": [{"affinityName": "a", "clusterNames": ["m1"],
                    "overflowAffinities": [{"affinityName": "b", "fieldSelector": {
                        "matchExpressions": [{"key": "cloud", "operator": "In", "values": ["x"]}]}}]}],
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"dynamicWeight": "AvailableReplicas"}}})),
            "spec.placement.clusterAffinities[0].overflowAffinities[0].fieldSelector.matchExpressions[0].key",
            Invalid,
            "unsupported key \"cloud\"",
        ),
        row(
            "affinityName syntax",
            placement(json!({"clusterAffinities": [{"affinityName": "Bad Name!"}]})),
            "spec.placement.clusterAffinities[0].affinityName",
            Invalid,
            "name part must consist of alphanumeric characters",
        ),
        row(
            "affinityName length",
            placement(json!({"clusterAffinities": [{"affinityName": "a".repeat(33)}]})),
            "spec.placement.clusterAffinities[0].affinityName",
            TooLong,
            "at most 32",
        ),
        row(
            "affinityName required",
            placement(json!({"clusterAffinities": [{"clusterNames": ["m1"]}]})),
            "spec.placement.clusterAffinities[0].affinityName",
            Required,
            "affinityName is required",
        ),
        row(
            "affinityName unique",
            placement(json!({"clusterAffinities": [{"affinityName": "a"}, {"affinityName": "a"}]})),
            "spec.placement.clusterAffinities[1].affinityName",
            Invalid,
            "each affinity term in a policy must have a unique name",
        ),
        row(
            "spreadByField with spreadByLabel",
            placement(json!({"spreadConstraints": [
                {"spreadByField": "cluster", "spreadByLabel": "team", "maxGroups": 2}]})),
            "spec.placement.spreadConstraints[0].spreadByLabel",
            Invalid,
            "spreadByLabel should not co-exist with spreadByField",
        ),
        row(
            "minGroups negative",
            placement(json!({"spreadConstraints": [{"spreadByField": "cluster", "minGroups": -1}]})),
            "spec.placement.spreadConstraints[0].minGroups",
            Invalid,
            "minGroups lower than 0 is not allowed",
        ),
        row(
            "maxGroups negative",
            placement(json!({"spreadConstraints": [{"spreadByField": "cluster", "maxGroups": -1}]})),
            "spec.placement.spreadConstraints[0].maxGroups",
            Invalid,
            "maxGroups lower than 0 is not allowed",
        ),
        row(
            "maxGroups below minGroups",
            placement(json!({"spreadConstraints": [
                {"spreadByField": "cluster", "maxGroups": 1, "minGroups": 2}]})),
            "spec.placement.spreadConstraints[0].maxGroups",
            Invalid,
            "maxGroups lower than minGroups is not allowed",
        ),
        row(
            "the same spreadByField twice",
            placement(json!({"spreadConstraints": [
                {"spreadByField": "cluster"}, {"spreadByField": "region"},
                {"spreadByField": "region"}]})),
            "spec.placement.spreadConstraints[2].spreadByField",
            Invalid,
            "multiple region spread constraints are not allowed",
        ),
        row(
            "spreadByField without cluster",
            placement(json!({"spreadConstraints": [{"spreadByField": "region", "maxGroups": 2}]})),
            "spec.placement.spreadConstraints",
            Invalid,
            "the cluster spread constraint must be enabled in one of the constraints",
        ),
        row(
            "spreadByLabel syntax",
            placement(json!({"spreadConstraints": [{"spreadByLabel": "bad key"}]})),
            "spec.placement.spreadConstraints[0].spreadByLabel",
            Invalid,
            "name part must consist",
        ),
        row(
            "toleration operator Lt",
            placement(json!({"clusterTolerations": [{"key": "k", "operator": "Lt", "value": "1"}]})),
            "spec.placement.clusterTolerations[0].operator",
            NotSupported,
            "Unsupported value: \"Lt\": supported values: \"Equal\", \"Exists\"",
        ),
        row(
            "toleration operator Gt",
            placement(json!({"clusterTolerations": [{"key": "k", "operator": "Gt", "value": "1"}]})),
            "spec.placement.clusterTolerations[0].operator",
            NotSupported,
            "Unsupported value: \"Gt\"",
        ),
        row(
            "toleration Exists with a value",
            placement(json!({"clusterTolerations": [{"key": "k", "operator": "Exists", "value": "v"}]})),
            "spec.placement.clusterTolerations[0].value",
            Invalid,
            "value must be empty when `operator` is 'Exists'",
        ),
        row(
            "toleration without key must be Exists",
            placement(json!({"clusterTolerations": [{"operator": "Equal", "value": "v"}]})),
            "spec.placement.clusterTolerations[0].operator",
            Invalid,
            "operator must be Exists when `key` is empty",
        ),
        row(
            "tolerationSeconds needs NoExecute",
            placement(json!({"clusterTolerations": [{"key": "k", "operator": "Exists",
                "effect": "NoSchedule", "tolerationSeconds": 5}]})),
            "spec.placement.clusterTolerations[0].effect",
            Invalid,
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        row(
            "negative tolerationSeconds",
            placement(json!({"clusterTolerations": [{"key": "k", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": -1}]})),
            "spec.placement.clusterTolerations[0].tolerationSeconds",
            Invalid,
            "must be greater than or equal to 0",
        ),
        row(
            "toleration key syntax",
            placement(json!({"clusterTolerations": [{"key": "-bad", "operator": "Exists"}]})),
            "spec.placement.clusterTolerations[0].key",
            Invalid,
            "name part must consist",
        ),
        row(
            "static weight below 1",
            placement(json!({"replicaScheduling": {"replicaSchedulingType": "Divided",
                "replicaDivisionPreference": "Weighted", "weightPreference": {"staticWeightList": [
                    {"targetCluster": {"clusterNames": ["m1"]}, "weight": 0}]}}})),
            "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
            Invalid,
            "must be greater than or equal to 1",
        ),
        row(
            "workloadAffinity key syntax",
            placement(json!({"workloadAffinity": {"affinity": {"groupByLabelKey": "a b"}}})),
            "spec.placement.workloadAffinity.affinity.groupByLabelKey",
            Invalid,
            "name part must consist",
        ),
        row(
            "workloadAffinity same key twice",
            placement(json!({"workloadAffinity": {"affinity": {"groupByLabelKey": "app.group"},
                "antiAffinity": {"groupByLabelKey": "app.group"}}})),
            "spec.placement.workloadAffinity.antiAffinity.groupByLabelKey",
            Invalid,
            "affinity and antiAffinity cannot use the same groupByLabelKey",
        ),
        row(
            "application failover with propagateDeps false (Part 1)",
            spec(json!({"propagateDeps": false, "failover": {"application": {
                "decisionConditions": {"tolerationSeconds": 60}}}})),
            "spec.propagateDeps",
            Invalid,
            "application failover is set, propagateDeps must be true",
        ),
        row(
            "application tolerationSeconds negative",
            spec(json!({"failover": {"application": {"decisionConditions": {"tolerationSeconds": -1}}}})),
            "spec.failover.application.decisionConditions.tolerationSeconds",
            Invalid,
            "must be greater than or equal to 0",
        ),
        row(
            "application gracePeriodSeconds with Never",
            spec(json!({"failover": {"application": {"purgeMode": "Never", "gracePeriodSeconds": 30}}})),
            "spec.failover.application.gracePeriodSeconds",
            Invalid,
            "only takes effect when purgeMode is Graciously or Gracefully",
        ),
        row(
            "application gracePeriodSeconds with Directly",
            spec(json!({"failover": {"application": {"purgeMode": "Directly", "gracePeriodSeconds": 30}}})),
            "spec.failover.application.gracePeriodSeconds",
            Invalid,
            "only takes effect when purgeMode is Graciously or Gracefully",
        ),
        row(
            "application gracePeriodSeconds zero",
            spec(json!({"failover": {"application": {"purgeMode": "Graciously", "gracePeriodSeconds": 0}}})),
            "spec.failover.application.gracePeriodSeconds",
            Invalid,
            "must be greater than 0",
        ),
        row(
            "application gracePeriodSeconds negative (Gracefully)",
            spec(json!({"failover": {"application": {"purgeMode": "Gracefully", "gracePeriodSeconds": -5}}})),
            "spec.failover.application.gracePeriodSeconds",
            Invalid,
            "must be greater than 0",
        ),
        row(
            "application statePreservation alias label",
            spec(json!({"failover": {"application": {"purgeMode": "Immediately",
                "statePreservation": {"rules": [{"aliasLabelName": "bad/key/x", "jsonPath": "{.a}"}]}}}})),
            "spec.failover.application.statePreservation.rules[0].aliasLabelName",
            Invalid,
            "qualified name",
        ),
        row(
            "statePreservation jsonPath required",
            spec(json!({"failover": {"application": {"purgeMode": "Immediately",
                "statePreservation": {"rules": [{"aliasLabelName": "a.io/x"}]}}}})),
            "spec.failover.application.statePreservation.rules[0].jsonPath",
            Required,
            "jsonPath is required",
        ),
        row(
            "cluster statePreservation alias label",
            spec(json!({"failover": {"cluster": {"statePreservation": {"rules": [
                {"aliasLabelName": "", "jsonPath": "{.a}"}]}}}})),
            "spec.failover.cluster.statePreservation.rules[0].aliasLabelName",
            Required,
            "aliasLabelName is required",
        ),
        row(
            "cluster gracePeriodSeconds must be positive (Part 1)",
            spec(json!({"failover": {"cluster": {"purgeMode": "Graciously", "gracePeriodSeconds": 0}}})),
            "spec.failover.cluster.gracePeriodSeconds",
            Invalid,
            "must be greater than 0",
        ),
        row(
            "cluster gracePeriodSeconds only with a graceful mode (Part 1)",
            spec(json!({"failover": {"cluster": {"purgeMode": "Directly", "gracePeriodSeconds": 100}}})),
            "spec.failover.cluster.gracePeriodSeconds",
            Invalid,
            "only takes effect when purgeMode is Graciously or Gracefully",
        ),
        row(
            "exactlyOnce needs an immediate purge (Flotilla extension)",
            spec(json!({"failover": {"cluster": {"fencing": {"exactlyOnce": true}}}})),
            "spec.failover.cluster.fencing.exactlyOnce",
            Invalid,
            "requires purgeMode Immediately or Directly",
        ),
        row(
            "exactlyOnce must be a boolean",
            spec(json!({"failover": {"cluster": {"purgeMode": "Immediately", "fencing": {"exactlyOnce": "yes"}}}})),
            "spec.failover.cluster.fencing.exactlyOnce",
            Invalid,
            "",
        ),
        row(
            "failback stabilizationSeconds must not be negative (Flotilla extension)",
            spec(json!({"failover": {"cluster": {"failback": {"stabilizationSeconds": -1}}}})),
            "spec.failover.cluster.failback.stabilizationSeconds",
            Invalid,
            "must be greater than or equal to 0",
        ),
        row(
            "failback stabilizationSeconds must be an integer",
            spec(json!({"failover": {"cluster": {"failback": {"stabilizationSeconds": "5m"}}}})),
            "spec.failover.cluster.failback.stabilizationSeconds",
            Invalid,
            "",
        ),
        row(
            "unknown purge mode",
            spec(json!({"failover": {"cluster": {"purgeMode": "Later"}}})),
            "spec.failover.cluster.purgeMode",
            NotSupported,
            "Unsupported value: \"Later\"",
        ),
        row(
            "PP selector in another namespace",
            spec(json!({"resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "other"}]})),
            "spec.resourceSelectors[0].namespace",
            Invalid,
            "must be the policy's namespace (default)",
        ),
        row(
            "preemption Always needs names",
            spec(json!({"preemption": "Always", "resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment"}]})),
            "spec.resourceSelectors[0].name",
            Invalid,
            "name cannot be empty if preemption is Always",
        ),
        row(
            "suspension dispatching with clusterNames",
            spec(json!({"suspension": {"dispatching": true,
                "dispatchingOnClusters": {"clusterNames": ["m1"]}}})),
            "spec.suspension",
            Invalid,
            "suspension dispatching cannot co-exist with dispatchingOnClusters.clusterNames",
        ),
        row(
            "at least one resource selector",
            spec(json!({"resourceSelectors": []})),
            "spec.resourceSelectors",
            Required,
            "at least one resource selector",
        ),
        row(
            "resource selector kind",
            spec(json!({"resourceSelectors": [{"apiVersion": "apps/v1"}]})),
            "spec.resourceSelectors[0].kind",
            Required,
            "kind is required",
        ),
        row(
            "resource selector apiVersion",
            spec(json!({"resourceSelectors": [{"kind": "Deployment"}]})),
            "spec.resourceSelectors[0].apiVersion",
            Required,
            "apiVersion is required",
        ),
        row(
            "resource selector label key",
            spec(json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "labelSelector": {"matchLabels": {"bad key": "x"}}}]})),
            "spec.resourceSelectors[0].labelSelector.matchLabels",
            Invalid,
            "name part must consist",
        ),
        row(
            "label selector In without values",
            placement(json!({"clusterAffinity": {"labelSelector": {"matchExpressions": [
                {"key": "env", "operator": "In"}]}}})),
            "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].values",
            Required,
            "must be specified when `operator` is 'In' or 'NotIn'",
        ),
        row(
            "label selector Exists with values",
            placement(json!({"clusterAffinity": {"labelSelector": {"matchExpressions": [
                {"key": "env", "operator": "Exists", "values": ["x"]}]}}})),
            "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].values",
            Forbidden,
            "may not be specified",
        ),
        row(
            "metadata.name DNS-1123",
            patched(&pp(), &json!({"metadata": {"name": "Nginx_Policy"}})),
            "metadata.name",
            Invalid,
            "RFC 1123 subdomain",
        ),
        row(
            "metadata.name required",
            patched(&pp(), &json!({"metadata": {"name": null}})),
            "metadata.name",
            Required,
            "name or generateName is required",
        ),
        row(
            "PP namespace required",
            patched(&pp(), &json!({"metadata": {"namespace": null}})),
            "metadata.namespace",
            Required,
            "namespace is required",
        ),
        row(
            "metadata label value",
            patched(&pp(), &json!({"metadata": {"labels": {"team": "a b"}}})),
            "metadata.labels[team]",
            Invalid,
            "a valid label must be",
        ),
        row(
            "permanent id required on create",
            patched(&pp(), &json!({"metadata": {"uid": null}})),
            "metadata.labels[propagationpolicy.karmada.io/permanent-id]",
            Required,
            "permanent-id label is required",
        ),
        row(
            "CPP is cluster-scoped",
            patched(&cpp(), &json!({"metadata": {"namespace": "default"}})),
            "metadata.namespace",
            Forbidden,
            "cluster-scoped",
        ),
        row(
            "CPP rules are the same",
            patched(&cpp(), &json!({"spec": {"placement": {"spreadConstraints": [
                {"spreadByField": "zone"}]}}})),
            "spec.placement.spreadConstraints",
            Invalid,
            "the cluster spread constraint must be enabled",
        ),
        row(
            "decode error names the field",
            placement(json!({"spreadConstraints": [{"maxGroups": "two"}]})),
            "spec.placement.spreadConstraints[0].maxGroups",
            Invalid,
            "invalid type: string \"two\"",
        ),
    ]);
}

#[test]
fn policy_update_rules() {
    let old = admit_create(&pp()).unwrap();
    // schedulerName is immutable (a missing one defaults to the old default).
    let new = patched(&old, &json!({"spec": {"schedulerName": "other-scheduler"}}));
    let errs = rejected(&new, Some(&old));
    assert!(
        errs.iter().any(|e| e.path == "spec.schedulerName"
            && e.kind == Forbidden
            && e.message == "the schedulerName should not be updated"),
        "{errs:#?}"
    );
    // The permanent id may not change...
    let new = patched(
        &old,
        &json!({"metadata": {"labels": {"propagationpolicy.karmada.io/permanent-id": "other"}}}),
    );
    let errs = rejected(&new, Some(&old));
    assert!(
        errs.iter().any(
            |e| e.path == "metadata.labels[propagationpolicy.karmada.io/permanent-id]"
                && e.kind == Forbidden
        ),
        "{errs:#?}"
    );
    // ...but a replace that drops it keeps the old one, and an unchanged update passes.
    let new = patched(&pp(), &json!({"metadata": {"uid": "uid-pp"}}));
    let stored = admit_with(&new, Some(&old), &Default::default()).unwrap();
    assert_eq!(stored, old);
    let mut no_uid = pp();
    no_uid["metadata"].as_object_mut().unwrap().remove("uid");
    let stored = admit_with(&no_uid, Some(&old), &Default::default()).unwrap();
    assert_eq!(
        stored["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"],
        "uid-pp"
    );
}

#[test]
fn policy_rows_that_are_allowed() {
    let rows = [
        (
            "cluster failover Never keeps the old copy (Part 1)",
            spec(json!({"failover": {"cluster": {"purgeMode": "Never"}}})),
        ),
        (
            "cluster failover grace period with Graciously (Part 1)",
            spec(
                json!({"failover": {"cluster": {"purgeMode": "Graciously", "gracePeriodSeconds": 100}}}),
            ),
        ),
        (
            "cluster failover grace period with the default purge mode",
            spec(json!({"failover": {"cluster": {"gracePeriodSeconds": 100}}})),
        ),
        (
            "application failover, propagateDeps absent (defaulted true)",
            spec(json!({"failover": {"application": {"purgeMode": "Immediately"}}})),
        ),
        (
            "overflow with aggregated division",
            placement(
                json!({"clusterAffinities": [{"affinityName": "a", "clusterNames": ["m1"],
                    "overflowAffinities": [{"affinityName": "b", "clusterNames": ["m2"]}]}],
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Aggregated"}}),
            ),
        ),
        (
            "spread by label only",
            placement(
                json!({"spreadConstraints": [{"spreadByLabel": "topology/rack", "maxGroups": 2}]}),
            ),
        ),
        (
            "key-less Exists toleration",
            placement(json!({"clusterTolerations": [{"operator": "Exists"}]})),
        ),
        (
            "negative tolerationSeconds elsewhere is fine: zero is allowed",
            placement(
                json!({"clusterTolerations": [{"key": "k", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 0}]}),
            ),
        ),
        (
            "CPP selectors may name any namespace",
            patched(
                &cpp(),
                &json!({"spec": {"resourceSelectors": [
                {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team-a"}]}}),
            ),
        ),
        (
            "generateName instead of name",
            patched(
                &pp(),
                &json!({"metadata": {"name": null, "generateName": "pp-"}}),
            ),
        ),
    ];
    for (rule, obj) in rows {
        accepted(rule, &obj);
    }
}

/// Both purge-mode spellings (Part 1) through admission, for cluster and application failover,
/// in PropagationPolicies and ClusterPropagationPolicies: each is accepted and kept as written,
/// and a graceful application mode gets its 600 s grace period.
#[test]
fn every_purge_mode_spelling_is_admitted_and_kept_for_both_failovers() {
    let modes = [
        "Immediately",
        "Directly",
        "Graciously",
        "Gracefully",
        "Never",
    ];
    for (policy, base) in [
        ("PropagationPolicy", pp()),
        ("ClusterPropagationPolicy", cpp()),
    ] {
        for mode in modes {
            for side in ["cluster", "application"] {
                let obj = patched(
                    &base,
                    &json!({"spec": {"failover": {side: {"purgeMode": mode}}}}),
                );
                let admitted = admit_create(&obj)
                    .unwrap_or_else(|e| panic!("{policy} {side} {mode}: rejected: {e}"));
                let failover = &admitted["spec"]["failover"][side];
                assert_eq!(failover["purgeMode"], mode, "{policy} {side} {mode}");
                if side == "application" {
                    let graceful = matches!(mode, "Graciously" | "Gracefully");
                    assert_eq!(
                        failover.get("gracePeriodSeconds"),
                        graceful.then(|| json!(600)).as_ref(),
                        "{policy} {side} {mode}"
                    );
                    assert_eq!(
                        admitted["spec"]["propagateDeps"], true,
                        "{policy} {side} {mode}: propagateDeps defaulted"
                    );
                }
            }
        }
        // An explicit false is refused, naming the field.
        let obj = patched(
            &base,
            &json!({"spec": {"propagateDeps": false, "failover": {"application": {"purgeMode": "Directly"}}}}),
        );
        let errs = admit_create(&obj).expect_err("propagateDeps false").0;
        assert!(
            errs.iter().any(|e| e.path == "spec.propagateDeps"
                && e.message == "application failover is set, propagateDeps must be true"),
            "{policy}: {errs:#?}"
        );
    }
}

#[test]
fn graceful_purge_mode_without_grace_period_is_rejected_by_validation() {
    // Defaulting always fills the grace period, so this is reachable only by calling
    // validation directly.
    let mut pp = PropagationPolicy::new(
        "default",
        "p",
        PropagationSpec {
            resource_selectors: vec![ResourceSelector {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                ..Default::default()
            }],
            failover: Some(FailoverBehavior {
                application: Some(ApplicationFailoverBehavior {
                    purge_mode: Some(PurgeMode::Gracefully),
                    ..Default::default()
                }),
                cluster: None,
            }),
            ..Default::default()
        },
    );
    pp.metadata.labels.insert(
        "propagationpolicy.karmada.io/permanent-id".into(),
        "x".into(),
    );
    let errs = validate_propagation_policy(&pp, None);
    assert!(
        errs.iter()
            .any(|e| e.path == "spec.failover.application.gracePeriodSeconds"
                && e.kind == Required
                && e.message == "should not be empty when purgeMode is Graciously or Gracefully"),
        "{errs:#?}"
    );
}

#[test]
fn cluster_rules() {
    let c = |patch: Value| patched(&cluster(), &patch);
    check(vec![
        row(
            "syncMode required",
            c(json!({"spec": {"syncMode": null}})),
            "spec.syncMode",
            Required,
            "syncMode is required",
        ),
        row(
            "syncMode enum",
            c(json!({"spec": {"syncMode": "Sideways"}})),
            "spec.syncMode",
            NotSupported,
            "supported values: \"Push\", \"Pull\"",
        ),
        row(
            "push needs an endpoint",
            c(json!({"spec": {"apiEndpoint": null}})),
            "spec.apiEndpoint",
            Required,
            "apiEndpoint is required when syncMode is Push",
        ),
        row(
            "endpoint without user info",
            c(json!({"spec": {"apiEndpoint": "https://admin:pw@10.0.0.1"}})),
            "spec.apiEndpoint",
            Invalid,
            "must not contain user information",
        ),
        row(
            "endpoint without query",
            c(json!({"spec": {"apiEndpoint": "https://10.0.0.1?a=b"}})),
            "spec.apiEndpoint",
            Invalid,
            "must not contain a query",
        ),
        row(
            "endpoint without fragment",
            c(json!({"spec": {"apiEndpoint": "https://10.0.0.1#x"}})),
            "spec.apiEndpoint",
            Invalid,
            "must not contain a fragment",
        ),
        row(
            "endpoint with a host",
            c(json!({"spec": {"apiEndpoint": "https://:6443"}})),
            "spec.apiEndpoint",
            Invalid,
            "must have a host",
        ),
        row(
            "endpoint scheme",
            c(json!({"spec": {"apiEndpoint": "ftp://10.0.0.1"}})),
            "spec.apiEndpoint",
            Invalid,
            "unsupported scheme",
        ),
        row(
            "proxy URL",
            c(json!({"spec": {"proxyURL": "proxy:3128"}})),
            "spec.proxyURL",
            Invalid,
            "must be a URL",
        ),
        row(
            "taint effect enum",
            c(json!({"spec": {"taints": [{"key": "k", "effect": "NoWay"}]}})),
            "spec.taints[0].effect",
            NotSupported,
            "\"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
        ),
        row(
            "taint effect required",
            c(json!({"spec": {"taints": [{"key": "k"}]}})),
            "spec.taints[0].effect",
            Required,
            "Required value",
        ),
        row(
            "taint key syntax",
            c(json!({"spec": {"taints": [{"key": "a b", "effect": "NoSchedule"}]}})),
            "spec.taints[0].key",
            Invalid,
            "name part must consist",
        ),
        row(
            "taint key required",
            c(json!({"spec": {"taints": [{"key": "", "effect": "NoSchedule"}]}})),
            "spec.taints[0].key",
            Required,
            "taint key is required",
        ),
        row(
            "duplicate taint key and effect",
            c(json!({"spec": {"taints": [
                {"key": "k", "value": "a", "effect": "NoSchedule"},
                {"key": "k", "effect": "NoExecute"},
                {"key": "k", "value": "b", "effect": "NoSchedule"}]}})),
            "spec.taints[2]",
            Duplicate,
            "Duplicate value: \"k:NoSchedule\"",
        ),
        row(
            "cluster name is a DNS-1123 label",
            c(json!({"metadata": {"name": "member.1"}})),
            "metadata.name",
            Invalid,
            "RFC 1123 label",
        ),
        row(
            "cluster name length",
            c(json!({"metadata": {"name": "m".repeat(49)}})),
            "metadata.name",
            Invalid,
            "no more than 48 characters",
        ),
        row(
            "cluster is cluster-scoped",
            c(json!({"metadata": {"namespace": "default"}})),
            "metadata.namespace",
            Forbidden,
            "cluster-scoped",
        ),
        row(
            "secretRef needs a name",
            c(json!({"spec": {"secretRef": {"namespace": "karmada-cluster"}}})),
            "spec.secretRef.name",
            Required,
            "name is required",
        ),
    ]);
    accepted(
        "pull cluster without endpoint",
        &c(json!({"spec": {"syncMode": "Pull", "apiEndpoint": null}})),
    );
    accepted(
        "host:port endpoint",
        &c(json!({"spec": {"apiEndpoint": "member1.example.com:6443",
                          "proxyURL": "socks5://proxy:1080"}})),
    );
}

#[test]
fn binding_work_and_event_rules() {
    let b = |patch: Value| patched(&rb(), &patch);
    let task = |patch: Value| {
        let mut t = json!({"fromCluster": "member3", "reason": "TaintUntolerated",
                           "producer": "TaintManager"});
        merge_patch(&mut t, &patch);
        b(json!({"spec": {"gracefulEvictionTasks": [t]}}))
    };
    check(vec![
        row(
            "resource kind required",
            b(json!({"spec": {"resource": {"kind": null}}})),
            "spec.resource.kind",
            Required,
            "kind is required",
        ),
        row(
            "resource name required",
            b(json!({"spec": {"resource": {"name": ""}}})),
            "spec.resource.name",
            Required,
            "name is required",
        ),
        row(
            "duplicate target cluster",
            b(json!({"spec": {"clusters": [{"name": "m1"}, {"name": "m1"}]}})),
            "spec.clusters[1].name",
            Duplicate,
            "Duplicate value",
        ),
        row(
            "target cluster name required",
            b(json!({"spec": {"clusters": [{"replicas": 1}]}})),
            "spec.clusters[0].name",
            Required,
            "name is required",
        ),
        row(
            "negative replicas",
            b(json!({"spec": {"replicas": -1}})),
            "spec.replicas",
            Invalid,
            "must be greater than or equal to 0",
        ),
        row(
            "task fromCluster required",
            task(json!({"fromCluster": null})),
            "spec.gracefulEvictionTasks[0].fromCluster",
            Required,
            "fromCluster is required",
        ),
        row(
            "task producer required",
            task(json!({"producer": null})),
            "spec.gracefulEvictionTasks[0].producer",
            Required,
            "producer is required",
        ),
        row(
            "task reason required",
            task(json!({"reason": null})),
            "spec.gracefulEvictionTasks[0].reason",
            Required,
            "reason is required",
        ),
        row(
            "task reason CamelCase",
            task(json!({"reason": "taint untolerated"})),
            "spec.gracefulEvictionTasks[0].reason",
            Invalid,
            "must match",
        ),
        row(
            "task reason length",
            task(json!({"reason": "A".repeat(33)})),
            "spec.gracefulEvictionTasks[0].reason",
            TooLong,
            "at most 32",
        ),
        row(
            "task grace period positive",
            task(json!({"gracePeriodSeconds": 0})),
            "spec.gracefulEvictionTasks[0].gracePeriodSeconds",
            Invalid,
            "must be greater than 0",
        ),
        row(
            "binding namespace required",
            b(json!({"metadata": {"namespace": null}})),
            "metadata.namespace",
            Required,
            "namespace is required",
        ),
        row(
            "manifest must be an object",
            patched(
                &work(),
                &json!({"spec": {"workload": {"manifests": ["x"]}}}),
            ),
            "spec.workload.manifests[0]",
            Invalid,
            "a manifest must be an object",
        ),
        row(
            "manifest kind required",
            patched(
                &work(),
                &json!({"spec": {"workload": {"manifests": [
                {"apiVersion": "v1", "metadata": {"name": "a"}}]}}}),
            ),
            "spec.workload.manifests[0].kind",
            Required,
            "kind is required",
        ),
        row(
            "manifest name required",
            patched(
                &work(),
                &json!({"spec": {"workload": {"manifests": [
                {"apiVersion": "v1", "kind": "ConfigMap"}]}}}),
            ),
            "spec.workload.manifests[0].metadata.name",
            Required,
            "metadata.name is required",
        ),
        row(
            "event involvedObject name",
            patched(&event(), &json!({"involvedObject": {"name": null}})),
            "involvedObject.name",
            Required,
            "name is required",
        ),
        row(
            "event type enum",
            patched(&event(), &json!({"type": "Info"})),
            "type",
            NotSupported,
            "\"Normal\", \"Warning\"",
        ),
    ]);
    accepted("a valid binding", &rb());
    accepted(
        "a valid task",
        &task(json!({"purgeMode": "Never", "suppressDeletion": true})),
    );
    accepted("a valid work", &work());
    accepted("a valid event", &event());
}

#[test]
fn errors_display_as_path_and_message() {
    let obj = placement(json!({"spreadConstraints": [
        {"spreadByField": "cluster", "maxGroups": 1, "minGroups": 2},
        {"spreadByField": "cluster"}]}));
    let err = admit_create(&obj).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.placement.spreadConstraints[0].maxGroups: maxGroups lower than minGroups is not \
         allowed; spec.placement.spreadConstraints[1].spreadByField: multiple cluster spread \
         constraints are not allowed"
    );
}
